"""The pool's domain allowlist reads URLs as the clients that fetch them do (WHATWG URL rules),
and refuses what two parsers could read differently (issue 14, reproduction 4)."""

import pytest

from pools.models import Pool

ALLOWLIST = ["allowed.example", "*.weather.example", "bücher.example"]


def refused(*urls):
    pool = Pool(name="p", domain_allowlist=ALLOWLIST)
    return [url for url, _ in pool.disallowed_urls({"args": [{"url": u} for u in urls]})]


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example/",
        "HTTPS://ALLOWED.EXAMPLE/x?y=1#z",
        "https://allowed.example./",  # the root label
        "http://allowed.example:8080/path",
        "https://api.weather.example/forecast",
        "https://a.b.weather.example/",
        "https://xn--bcher-kva.example/",  # the allowed IDN, as punycode …
        "https://bücher.example/",  # … or as Unicode: both normalise to one host
        "not a url",
        "mailto:someone@evil.example",  # no host a pool's client fetches
    ],
)
def test_what_the_allowlist_lets_through(url):
    assert refused(url) == []


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/",
        "https://evilweather.example/",  # a wildcard matches whole labels only
        "https://weather.example.evil.example/",
        "https://allowed.example.evil.example/",
        "http://evil.example\\@allowed.example/",  # clients connect to evil.example
        "http://evil.example\\.allowed.example/",
        "http:\\\\evil.example/",
        "http:evil.example/",  # WHATWG: http://evil.example/; urlsplit: no host at all
        "http://user@allowed.example/",  # userinfo: never needed, often a disguise
        "http://allowed.example@evil.example/",
        "http://allowed.example:pw@evil.example/",
        "http://evil.example#@allowed.example/",
        "http://evil.example?@allowed.example/",
        "http://ev\til.example/",  # tab and newlines are removed by WHATWG parsers
        "ht\ntp://evil.example/",
        "\x01http://evil.example/",  # leading C0 controls are stripped by them too
        " http://evil.example/",
        "http://evil.example\x00.allowed.example/",
        "http://allowed%2eexample/",  # a percent-encoded host
        "http://%65vil.example/",
        "http://аllowed.example/",  # Cyrillic а: another host
        "http://ａllowed.example/",  # full-width: not what the allowlist names
        "http://0x7f.1/",  # an IPv4 address in disguise
        "http://allowed.example:99999/",  # unparseable: ambiguous
        "wss://evil.example/socket",
        "ftp://evil.example/file",
        "HTTP://EVIL.EXAMPLE/",
    ],
)
def test_what_the_allowlist_refuses(url):
    assert refused(url) == [url]


def test_the_reason_says_why():
    pool = Pool(name="p", domain_allowlist=ALLOWLIST)
    ((_, why),) = pool.disallowed_urls({"url": "http://evil.example\\@allowed.example/"})
    assert "backslash" in why
    ((_, why),) = pool.disallowed_urls({"url": "https://evilweather.example/"})
    assert "points to evilweather.example, which is not on the allowlist" in why


def test_without_an_allowlist_any_url_passes():
    assert Pool(name="p").disallowed_urls({"url": "http://evil.example\\@x.example/"}) == []
