"""RFC 9110's grammar for what the host puts as given into an HTTP header it sends (an MCP
server's or a remote agent's headers, a webhook's scheme): one place for both checks."""

TCHAR = r"[!#$%&'*+.^_`|~0-9A-Za-z-]"  # a token's characters: a header's name, a scheme
