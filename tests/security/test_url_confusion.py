"""The domain allowlist against URL parser confusion: each URL a fetching client (WHATWG URL
rules) would send somewhere else than the allowlist's reading says — or that parsers read
differently — is refused, wherever it sits in the arguments."""

import pytest

from mcplet_host import gateway

pytestmark = pytest.mark.django_db

ALLOWLIST = ["weather.example", "*.weather.example"]
RULES = ["domain_allowlist", "input"]  # a NUL is refused before the allowlist reads the URL
HOSTILE = [
    "https://evil.example/",
    "https://evilweather.example/",
    "https://weather.example.evil.example/",
    "http://evil.example\\@weather.example/",
    "http://evil.example\\.weather.example/",
    "http:\\\\evil.example/",
    "http:evil.example/",
    "http:/evil.example/",
    "http://user@weather.example/",
    "http://weather.example@evil.example/",
    "http://weather.example:x@evil.example/",
    "http://evil.example#@weather.example/",
    "http://evil.example?@weather.example/",
    "http://ev\til.example/",
    "ht\ntp://evil.example/",
    "\x01http://evil.example/",
    " http://evil.example/",
    "http://evil.example\x00.weather.example/",
    "http://weather%2eexample/",
    "http://%65vil.example/",
    "http://w\u0435ather.example/",
    "http://ｗeather.example/",
    "http://WEATHER.EXAMPLE.evil.example/",
    "http://0x7f.1/",
    "http://127.0.0.1/",
    "http://[::1]/",
    "http://weather.example:99999/",
    "wss://evil.example/socket",
    "ftp://evil.example/file",
    "HTTPS://EVIL.EXAMPLE/",
]


@pytest.fixture
def info(world):
    pool = world.pools["info-pool"]
    pool.domain_allowlist = ALLOWLIST
    pool.save()
    return world.info


def test_the_harness_sees_an_allowed_url_fetched(info, mcp):
    before = len(mcp.calls())
    url = {"url": "https://api.weather.example/tokyo"}
    assert gateway.call_tool(info, "fetch_web_content", url).status == "executed"
    assert len(mcp.calls()) == before + 1


def test_confusing_urls_are_refused(info, attempts):
    for url in HOSTILE:
        with attempts.refused(f"url {url!r}", details__rule__in=RULES):
            outcome = gateway.call_tool(info, "fetch_web_content", {"url": url})
            assert outcome.envelope["error"]["code"] in ("X_DOMAIN_NOT_ALLOWED", "VALIDATION_ERROR")


def test_urls_hidden_deeper_in_the_arguments(info, attempts):
    allowed = "https://weather.example/"
    for shape in (
        {"url": allowed, "next": "https://evil.example/"},
        {"url": allowed, "more": ["https://ok.weather.example/", "http://evil.example\\@x/"]},
        {"url": allowed, "deep": {"a": {"b": [{"c": "https://evil.example/"}]}}},
    ):
        with attempts.refused(f"arguments {shape!r}", details__rule="domain_allowlist"):
            assert gateway.call_tool(info, "fetch_web_content", shape).status == "refused"
