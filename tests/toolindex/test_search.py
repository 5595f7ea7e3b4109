"""The tool index and its keyword search: only what the caller may see, kept current by
discovery, English and Japanese."""

import pytest
from django.db import connection

from agents.models import Agent
from mcplet_host import gateway
from mcplet_host.authority import HOST, Authority
from pools.models import Mcplet
from tests.toolindex.conftest import described, workspace_tools
from toolindex import search, text
from toolindex.models import Posting

pytestmark = pytest.mark.django_db


def names(agent, query, authority=HOST, **options):
    found = search.search(gateway.visible_to(agent, authority), query, **options)
    return [m.name for m, _ in found.tools]


def test_intent_finds_the_tool_first_in_english_and_japanese(workspace):
    assistant = workspace["assistant"]
    assert names(assistant, "look up a customer's record")[0] == "find_customer"
    assert names(assistant, "what meetings are on my calendar this week")[0] == (
        "list_calendar_events"
    )
    assert names(assistant, "明日の予約を確認したい")[0] == "check_reservations"
    assert names(assistant, "weather forecast in Osaka")[0] == "get_weather"


def test_relevance_and_the_figures_of_an_answer(workspace):
    found = search.search(gateway.visible_to(workspace["assistant"]), "customer record", limit=2)
    (best, top), *rest = found.tools
    assert best.name == "find_customer" and 0 < top <= 1
    assert all(score <= top for _, score in rest)
    assert found.total_available == 5  # CRM, calendar and the pool-less tool; not mail
    assert found.search_strategy == "keyword" and found.query_time_ms >= 0


def test_a_tool_outside_the_grants_is_never_returned_not_even_by_its_name(workspace):
    query = "search_mailbox: search the e-mail messages in a mailbox"
    assert names(workspace["mailer"], query)[0] == "search_mailbox"  # the query finds it
    assert "search_mailbox" not in names(workspace["assistant"], query, limit=20)
    assert "search_mailbox" not in names(
        workspace["assistant"], "mail-pool", strategy="category", limit=20
    )


def test_a_partner_narrows_what_is_found_to_its_own_grants(workspace):
    partner = Agent.objects.create(agent_id="acme", display_name="Acme", kind="external")
    partner.accessible_pools.set([workspace["crm-pool"]])
    acme = Authority.of_partner("acme")
    assert names(workspace["assistant"], "calendar events between two dates")[0] == (
        "list_calendar_events"
    )
    found = names(workspace["assistant"], "calendar events between two dates", acme, limit=20)
    assert "list_calendar_events" not in found and "check_reservations" not in found
    partner.enabled = False
    partner.save()
    assert names(workspace["assistant"], "customer record", acme) == []


def test_an_evicted_or_ungranted_tool_is_gone_from_results_at_once(workspace):
    assistant = workspace["assistant"]
    assert "list_open_deals" in names(assistant, "open sales opportunities")
    workspace["rewrite"]([t for t in workspace_tools() if t["name"] != "list_open_deals"])
    assert "list_open_deals" not in names(assistant, "open sales opportunities", limit=20)
    assistant.accessible_pools.remove(workspace["crm-pool"])
    assert "find_customer" not in names(assistant, "customer record", limit=20)


def test_what_a_search_keeps_follows_any_write_even_raw_sql(workspace):
    """Searches keep the visible ids and term counts per registry token: a write the ORM never
    saw (raw SQL, another process) moves the token, and the next search reads afresh."""
    assistant = workspace["assistant"]
    assert names(assistant, "weather forecast")[0] == names(assistant, "city")[0] == "get_weather"
    table = Mcplet._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET status = 'evicted' WHERE name = 'get_weather'")  # noqa: S608
    assert "get_weather" not in names(assistant, "weather forecast", limit=20)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET status = 'accepted' WHERE name = 'get_weather'")  # noqa: S608
        cursor.execute(f"DELETE FROM {Posting._meta.db_table} WHERE term = 'city'")  # noqa: S608
    assert names(assistant, "city") == []


def test_a_changed_description_is_searched_as_it_now_reads(workspace):
    tools = [t for t in workspace_tools() if t["name"] != "get_weather"]
    workspace["rewrite"]([*tools, described("get_weather", "Typhoon warnings for a region")])
    assert names(workspace["assistant"], "typhoon warning")[0] == "get_weather"
    assert "get_weather" not in names(workspace["assistant"], "city", limit=20)
    assert Posting.objects.filter(mcplet__name="get_weather", term="forecast").count() == 0


def test_categories_filter_by_pool_type_or_server(workspace):
    assistant = workspace["assistant"]
    assert set(names(assistant, "", strategy="category", categories=["crm-pool"])) == {
        "find_customer",
        "list_open_deals",
    }
    assert names(assistant, "calendar-pool", strategy="category") == [
        "check_reservations",
        "list_calendar_events",
    ]
    assert names(assistant, "list events", categories=["calendar-pool"], limit=20) == [
        "list_calendar_events",
        "check_reservations",  # 予約一覧: a list too
    ]
    assert names(assistant, "customer", risk_level_max="safe") == ["find_customer"]


def test_synonyms_meet_across_words_and_languages(workspace):
    """A person's word is not the description's: a bug is an issue, 予約 a booking."""
    assistant = workspace["assistant"]
    assert names(assistant, "who is the client with this e-mail")[0] == "find_customer"
    assert names(assistant, "show the bookings of a day")[0] == "check_reservations"
    assert names(assistant, "明日は雨？")[0] == "get_weather"
    assert names(assistant, "顧客を探して")[0] == "find_customer"


def test_semantic_falls_back_to_keyword_and_says_so(workspace):
    visible = gateway.visible_to(workspace["assistant"])
    found = search.search(visible, "customer record", strategy="semantic")
    assert found.search_strategy == "keyword" and found.fallback_strategy == "keyword"
    assert found.tools[0][0].name == "find_customer"


@pytest.mark.parametrize("query", ["", "   ", "\x00", "\ud800", "の", "a the of", "x" * 5000])
def test_queries_that_say_nothing_find_nothing(workspace, query):
    assert names(workspace["assistant"], query) == []


def test_one_tool_per_operation_and_the_server_the_query_names():
    """The same tool of many servers (vendors, regions) takes one place in an answer, shown
    through the server the query names; only when fewer operations match do the others follow."""
    rows = [(0, "jira_create_issue", "jira"), (1, "jira_eu_create_issue", "jira-eu")]
    rows += [(2, "create_issue", "linear"), (3, "jira_list_issues", "jira")]
    operations = search.operations_of(rows)
    assert {o.name for o in operations[0].values()} == {"create_issue", "list_issues"}
    index = {term: {0: 1.0, 1: 0.9, 2: 0.6} for term in text.terms("create")}
    index |= {term: {0: 1.0, 1: 0.9, 2: 0.6, 3: 1.0} for term in text.terms("issue")}

    def found(query, limit):
        postings = lambda terms: {t: index[t] for t in terms if t in index}  # noqa: E731
        return [
            pk for pk, _ in search.rank(postings, lambda: operations, 9, {0, 1, 2, 3}, query, limit)
        ]

    assert found("create an issue", 2) == [0, 3]
    assert found("create an issue in Linear", 2) == [2, 3]
    assert found("create an issue", 4) == [0, 3, 1, 2]


def test_japanese_is_cut_at_its_particles():
    found = text.terms("Jiraにバグの課題を起票して")
    assert {"jira", "バグ", "課題", "起票"} <= set(found)
    assert not {"にバ", "グの", "題を", "を起"} & set(found)


def test_a_file_name_names_a_file_and_a_web_address_a_page():
    assert "~file" in text.terms("what's in config/settings.yaml")
    assert "~webpage" in text.terms("the text of https://example.com/pricing")
    assert "~file" not in text.terms("mail jane@example.com about v1.4.0")
