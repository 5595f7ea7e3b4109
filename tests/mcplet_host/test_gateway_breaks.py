"""Gateway rules that one-line breaks of the enforcement code used to slip past (issue 14,
"Tests that would notice"): the allowlist's wildcard, the order of the rate limit and the
argument check, and the partner's share of the LLM's tool list. Whether a tool ran is read from
the MCP server's own call log."""

import pytest

from mcplet_host import gateway
from mcplet_host.authority import HOST, Authority

pytestmark = pytest.mark.django_db


def offered(agent, partner=None):
    """The tool names `agent`'s LLM is offered on a task from `partner` (the one place to adapt
    when the gateway takes the provenance as one value)."""
    authority = HOST if partner is None else Authority.of_partner(partner.agent_id)
    return [tool.name for tool in gateway.tools_for(agent, authority)]


def fetch(registry, url):
    return gateway.call_tool(registry["info"], "fetch_web_content", {"url": url})


# --- the domain allowlist's wildcard ----------------------------------------------------------

ALLOWED = [
    "https://api.weather.example/tomorrow",
    "https://API.Weather.Example./x",  # case and the root's trailing dot do not matter
    "https://a.b.weather.example/deep",  # today a wildcard covers any depth of subdomain
]
REFUSED = [
    "https://evilweather.example/steal",  # a suffix of the name, not a whole label
    "https://weather.example/",  # `*.` asks for a subdomain: the bare domain is not covered
    "https://xweather.example/",
    "https://weather.example.evil.example/",
    "https://evil.example/?next=https://api.weather.example/",
]


@pytest.mark.parametrize("url", ALLOWED)
def test_a_wildcard_entry_covers_its_subdomains(registry, calls, url):
    registry["info-pool"].domain_allowlist = ["*.weather.example"]
    registry["info-pool"].save()
    assert registry["info-pool"].disallowed_urls({"url": url}) == []
    assert fetch(registry, url).status == "executed"
    assert [c["arguments"]["url"] for c in calls("fetch_web_content")] == [url]


@pytest.mark.parametrize("url", REFUSED)
def test_a_wildcard_entry_is_whole_labels_only(registry, calls, url):
    registry["info-pool"].domain_allowlist = ["*.weather.example"]
    registry["info-pool"].save()
    assert [u for u, _ in registry["info-pool"].disallowed_urls({"url": url})] == [url]
    outcome = fetch(registry, url)
    assert outcome.status == "refused"
    assert outcome.envelope["error"]["code"] == "X_DOMAIN_NOT_ALLOWED"
    assert calls() == []


# --- the rate limit counts calls that pass every other check ------------------------------------


def test_an_invalid_call_does_not_use_up_the_pools_rate(registry, calls):
    pool = registry["info-pool"]
    pool.rate_limit_per_minute = 1
    pool.save()
    for invalid in ({}, {"url": 3}, ["https://a.example/"]):
        outcome = gateway.call_tool(registry["info"], "fetch_web_content", invalid)
        assert outcome.envelope["error"]["code"] == "VALIDATION_ERROR"
    assert calls() == []
    # The invalid calls took nothing from the pool's minute: the first valid one runs.
    assert fetch(registry, "https://a.example/").status == "executed"
    again = fetch(registry, "https://b.example/")
    assert again.envelope["error"]["code"] == "RATE_LIMITED" and len(calls()) == 1


def test_the_first_valid_call_after_refused_ones_runs(registry, calls):
    pool = registry["media-pool"]
    pool.rate_limit_per_minute = 1
    pool.save()
    registry["planning"].accessible_pools.add(pool)
    # Refused for the surface and for the arguments' shape: neither counts.
    assert gateway.call_tool(registry["planning"], "read_site_stats", {}, "app").status == (
        "refused"
    )
    assert gateway.call_tool(registry["planning"], "read_site_stats", []).status == "refused"
    assert gateway.call_tool(registry["planning"], "read_site_stats", {}).status == "executed"
    assert len(calls("read_site_stats")) == 1


# --- the partner's share of the LLM's tool list -----------------------------------------------


def test_the_llms_tools_on_a_partners_task_are_inside_the_partners_grants(registry):
    partner, info, dispatch = registry["partner"], registry["info"], registry["dispatch"]
    common = ["approve_plan", "broken_stats", "query_crm"]  # pool-less, model-visible
    partner.accessible_pools.set([registry["media-pool"]])
    assert offered(dispatch, partner) == sorted([*common, "read_site_stats"])  # both hold it
    assert offered(info, partner) == common  # info-pool: the agent's, not the partner's
    assert offered(info) == sorted([*common, "fetch_web_content"])
    partner.accessible_pools.set([registry["info-pool"]])
    assert offered(info, partner) == sorted([*common, "fetch_web_content"])
    assert offered(dispatch, partner) == common
