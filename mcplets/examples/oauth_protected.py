"""An MCPlet behind OAuth 2.1: a test server for remote MCP servers that need a token.

    python -m mcplets.examples.oauth_protected [--port 8768] [--token-ttl 300]
        [--calls-log calls.jsonl] [--client ID:SECRET ...] [--jwt-client ID:KEY.pem ...]
        [--scopes "a b"] [--required-scope X] [--wrong-iss] [--testing-routes]
        [--cimd [--cimd-ca CA.pem]]

One streamable-HTTP process is both the resource server and its authorization server, built on
the SDK's server-side auth: `/mcp` (one `whoami` tool) answers 401 with
`WWW-Authenticate: Bearer ..., resource_metadata="..."` without a valid token; the Protected
Resource Metadata (RFC 9728) is at `/.well-known/oauth-protected-resource/mcp`, the
authorization server metadata (RFC 8414) at `/.well-known/oauth-authorization-server`, and
`/register`, `/authorize`, `/token`, `/revoke` are the SDK's routes over an in-memory provider
(`oauth_provider`), some wrapped (`oauth_routes`). `/authorize` approves at once (a test drives
it): it redirects straight back to the client with a code. Access tokens live `--token-ttl`
seconds and are bound to the RFC 8707 resource the client named (only `/mcp` accepts them).

Every authorization response (a code or an error) carries `iss=<issuer>` (RFC 9207), and the
metadata says `authorization_response_iss_parameter_supported: true`. The options:

- `--client ID:SECRET` (repeatable): a pre-registered confidential client that may use
  `grant_type=client_credentials` at `/token`, authenticated by client_secret_basic or
  client_secret_post; its token's subject is its id, its scopes the ones it asked for (else
  the `--scopes`), its resource the one it named (another one: `invalid_target`); no refresh
  token. `client_credentials` is then in `grant_types_supported`.
- `--jwt-client ID:KEY.pem` (repeatable): the same for a client authenticated by
  `private_key_jwt` (RFC 7523 §2.2): an assertion signed (ES256 or RS256) with the private key
  of this public one, `iss` and `sub` its id, `aud` the issuer (or `/token`), used once.
- `--scopes "a b"`: `scopes_supported` of both metadata documents and the scopes a client
  gets when it asks for none. Every client may ask for any scope the server grants (these and
  `--required-scope`); with neither, a registered client may ask for the scopes it registered
  with, a pre-registered one for any.
- `--required-scope X`: a `tools/call` of `whoami` with a token lacking X is answered HTTP 403,
  `WWW-Authenticate: Bearer error="insufficient_scope", scope="X", resource_metadata=...`.
  X is in the authorization server's `scopes_supported`, not the PRM's, so a client that asks
  for the PRM's scopes starts without it and must step up.
- `--wrong-iss`: the authorization responses name another issuer (`<issuer>/another-issuer`),
  which a client must refuse.
- `--testing-routes`: `POST /testing/revoke-all` revokes every code, access and refresh token
  (an operator revoking the grants at the authorization server) and answers 204.
- `--cimd`: `client_id_metadata_document_supported: true`; a client id that is an https URL
  is the client described by the JSON document fetched there (on every use), a public client
  (token_endpoint_auth_method none) if the document's `client_id` is that URL and it asks for
  no secret; the redirect URI must be one the document lists. `--cimd-ca` is a CA bundle to
  trust for that fetch (tests serve the document with a certificate of their own).

`serve` runs it in a child process for tests and yields its base URL; its keyword arguments
are the options above (`clients={"id": "secret"}`, `jwt_clients={"id": Path("key.pem")}`,
`scopes="a b"`, `required_scope`, `wrong_iss`, `testing_routes`, `cimd`, `cimd_ca`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from mcplets import register_model_tool, serving
from mcplets.examples.oauth_provider import MemoryAuthorizationServer, Settings
from mcplets.examples.oauth_routes import auth_settings, install

TOOL = "whoami"


def build(settings: Settings, calls_log: Path | None = None, host: str = "127.0.0.1") -> Starlette:
    """The protected server's app as reached at `settings.issuer` (`/mcp` is the resource);
    `host` is the address it listens on (the SDK's DNS rebinding protection)."""
    provider = MemoryAuthorizationServer(settings)
    server = MCPServer(
        "oauth-protected", auth=auth_settings(settings), auth_server_provider=provider
    )

    def whoami(echo: str = "") -> dict[str, Any]:
        token = get_access_token()  # set by the SDK's bearer middleware for this request
        assert token is not None  # /mcp is not reached without one
        subject = token.subject or token.client_id
        if calls_log is not None:
            with calls_log.open("a", encoding="utf-8") as file:
                entry = {"name": TOOL, "arguments": {"echo": echo}, "subject": subject}
                file.write(json.dumps(entry) + "\n")
        return {"subject": subject, "clientId": token.client_id, "echo": echo}

    register_model_tool(
        server,
        TOOL,
        whoami,
        mcplet_type="read",
        description="Who the caller's access token says it is (and an optional echo)",
    )
    app = server.streamable_http_app(host=host)
    install(app, provider, settings, TOOL)
    return app


def client_pair(text: str) -> tuple[str, str]:
    client_id, colon, secret = text.partition(":")
    if not (client_id and colon and secret):
        raise argparse.ArgumentTypeError(f"not ID:SECRET: {text!r}")
    return client_id, secret


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8768)
    parser.add_argument("--token-ttl", type=int, default=300, help="access token lifetime (s)")
    parser.add_argument("--calls-log", type=Path)
    parser.add_argument("--base-url", help="where clients reach it (default: this host and port)")
    parser.add_argument(
        "--client", type=client_pair, action="append", default=[], metavar="ID:SECRET",
        help="a pre-registered confidential client for the client credentials grant",
    )  # fmt: skip
    parser.add_argument(
        "--jwt-client", type=client_pair, action="append", default=[], metavar="ID:KEY.pem",
        help="the same, authenticated by private_key_jwt with this public key",
    )  # fmt: skip
    parser.add_argument("--scopes", default="", help="the scopes advertised, space-separated")
    parser.add_argument("--required-scope", help="the scope whoami needs (else: 403)")
    parser.add_argument("--wrong-iss", action="store_true", help="redirect with another iss")
    parser.add_argument("--testing-routes", action="store_true", help="POST /testing/revoke-all")
    parser.add_argument("--cimd", action="store_true", help="accept client metadata documents")
    parser.add_argument("--cimd-ca", help="a CA bundle trusted when fetching those documents")
    args = parser.parse_args(argv)
    base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    settings = Settings(
        issuer=base_url,
        resource=f"{base_url}/mcp",
        token_ttl=args.token_ttl,
        clients=dict(args.client),
        jwt_clients=dict(args.jwt_client),
        scopes=tuple(args.scopes.split()),
        required_scope=args.required_scope,
        wrong_iss=args.wrong_iss,
        testing_routes=args.testing_routes,
        cimd=args.cimd,
        cimd_ca=args.cimd_ca,
    )
    app = build(settings, args.calls_log, host=args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


@contextlib.contextmanager
def serve(
    calls_log: Path | None = None,
    token_ttl: int = 300,
    timeout: float = 20,
    *,
    clients: Mapping[str, str] | None = None,
    jwt_clients: Mapping[str, Path] | None = None,
    scopes: str | Sequence[str] = (),
    required_scope: str | None = None,
    wrong_iss: bool = False,
    testing_routes: bool = False,
    cimd: bool = False,
    cimd_ca: Path | None = None,
) -> Iterator[str]:
    """Run the server in a child process on a free port; yield its base URL (`/mcp` is the
    MCP endpoint, and the base URL is the authorization server's issuer). The keyword
    arguments are the command line's options (see the module's docstring)."""
    port = serving.free_port()
    command = [sys.executable, "-m", "mcplets.examples.oauth_protected", "--port", str(port)]
    command += ["--token-ttl", str(token_ttl)]
    if calls_log is not None:
        command += ["--calls-log", str(Path(calls_log).resolve())]
    for client_id, secret in (clients or {}).items():
        command += ["--client", f"{client_id}:{secret}"]
    for client_id, key in (jwt_clients or {}).items():
        command += ["--jwt-client", f"{client_id}:{Path(key).resolve()}"]
    scopes = scopes.split() if isinstance(scopes, str) else list(scopes)
    if scopes:
        command += ["--scopes", " ".join(scopes)]
    if required_scope:
        command += ["--required-scope", required_scope]
    flags = {"--wrong-iss": wrong_iss, "--testing-routes": testing_routes, "--cimd": cimd}
    command += [flag for flag, on in flags.items() if on]
    if cimd_ca is not None:
        command += ["--cimd-ca", str(Path(cimd_ca).resolve())]
    with serving.listening(command, port, timeout):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    main()
