"""The external-web MCPlet: `fetch_web_content` (read, info-pool, model-visible) — one GET of
a web page or JSON document, as text.

    python -m mcplets.restaurant.web [--transport streamable-http --port 9104]

Redirects are not followed (the host's domain allowlist checked the URL the model gave, not
where a redirect would lead); the answer is capped at `max_chars` characters.
"""

import json
import re
import urllib.error
import urllib.request
from html.parser import HTMLParser
from typing import Annotated
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import ErrorCode, MCPletError, register_model_tool
from mcplets.restaurant.common import Tool, main

TOOL = Tool("fetch_web_content", "read", ("model",))
server = MCPServer("restaurant-web")
TIMEOUT = 15.0
MAX_BYTES = 2 * 1024 * 1024
USER_AGENT = "MCPlet-Restaurant-Reference/1.0 (+fetch_web_content)"

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "url": {"type": "string"},
        "status": {"type": "integer"},
        "contentType": {"type": "string"},
        "title": {"type": "string"},
        "content": {"type": "string"},
        "json": {},
        "truncated": {"type": "boolean"},
        "location": {"type": "string"},
    },
    "required": ["url", "status", "contentType", "truncated"],
}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the 3xx comes back as an HTTPError with its Location


_opener = urllib.request.build_opener(_NoRedirects)


class _Text(HTMLParser):
    """Visible text and the title of an HTML page."""

    SKIP = {"script", "style", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        joined = "".join(self.parts)
        lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in joined.split("\n"))
        return "\n".join(line for line in lines if line)


def fetch_web_content(
    url: Annotated[str, Field(description="an http:// or https:// URL")],
    max_chars: Annotated[
        int, Field(ge=100, le=100_000, description="cap on the returned text")
    ] = 20_000,
):
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MCPletError(ErrorCode.VALIDATION_ERROR, "url must be an http:// or https:// URL")
    wanted = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    request = urllib.request.Request(url.strip(), headers=wanted)  # noqa: S310 (checked)
    try:
        with _opener.open(request, timeout=TIMEOUT) as response:
            status, headers, raw = response.status, response.headers, response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        status, headers, raw = exc.code, exc.headers, exc.read(MAX_BYTES + 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise MCPletError(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"{url} could not be fetched: {getattr(exc, 'reason', exc)}",
            retryable=True,
            retry_after_ms=5000,
        ) from None
    content_type = headers.get_content_type() if headers else "application/octet-stream"
    charset = (headers.get_content_charset() if headers else None) or "utf-8"
    text = raw[:MAX_BYTES].decode(charset, errors="replace")
    result = {"url": url, "status": status, "contentType": content_type, "truncated": False}
    if 300 <= status < 400 and headers and headers.get("Location"):
        result["location"] = headers["Location"]
    parsed = None
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
    if parsed is not None and len(text) <= max_chars:
        result["json"] = parsed
        summary = f"GET {url} → {status} JSON ({len(text)} characters)"
    else:
        if content_type in ("text/html", "application/xhtml+xml"):
            page = _Text()
            page.feed(text)
            text = page.text()
            if page.title.strip():
                result["title"] = " ".join(page.title.split())
        result["truncated"] = len(text) > max_chars or len(raw) > MAX_BYTES
        result["content"] = text[:max_chars]
        summary = f"GET {url} → {status} {content_type} ({len(result['content'])} characters)"
    return TOOL.answer(result, summary)


register_model_tool(
    server,
    TOOL.name,
    fetch_web_content,
    mcplet_type="read",
    title="Fetch a web page",
    description="Fetch a web page or JSON document (one HTTP GET, no redirects followed) and "
    "return its status, content type and content: parsed JSON, or the visible text of a page. "
    "Use it for public information such as the weather forecast.",
    pool="info-pool",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9104, __doc__)
