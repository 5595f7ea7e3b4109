"""The gateway's kept registry (mcplet_host.registry): a check reads one row while nothing
changed, and a change made any way at all — a queryset update, raw SQL as another process
would, an m2m edit — refuses the very next call. Nothing ran is read from the server's log."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplet_host.gateway import checks
from mcplet_host.models import AuditEvent, RegistryVersion
from mcplet_host.registry import current
from pools.models import Mcplet, McpServer, Pool

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
FETCH, URL = "fetch_web_content", {"url": "https://weather.example/today"}


def sql(statement, *params):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def table(model, field=""):
    if field:
        model = model._meta.get_field(field).remote_field.through
    return connection.ops.quote_name(model._meta.db_table)


@pytest.fixture
def warm(registry, calls):
    """The info agent, acting for the partner, has called FETCH once: all of it is kept."""
    registry["partner"].accessible_pools.set([registry["info-pool"]])
    authority = Authority.of_partner("partner-bot").then("info-gathering-agent")
    outcome = gateway.call_tool(registry["info"], FETCH, URL, authority=authority)
    assert outcome.status == "executed" and not outcome.is_error
    assert len(calls(FETCH)) == 1
    return authority


def refused_and_nothing_ran(registry, calls, authority, says):
    outcome = gateway.call_tool(registry["info"], FETCH, URL, authority=authority)
    assert outcome.status == "refused", outcome.envelope
    assert says in outcome.envelope["error"]["message"]
    assert len(calls(FETCH)) == 1  # only the warming call reached the server
    assert AuditEvent.objects.filter(event_type="TOOL_BLOCKED", target_tool=FETCH).exists()


def test_a_kept_check_reads_one_row(registry, warm, django_assert_num_queries):
    with django_assert_num_queries(1):
        checks.check(FETCH, URL, registry["info"], warm, "model")


def test_a_grant_removed_by_raw_sql(registry, calls, warm):
    Agent = type(registry["info"])
    sql(
        f"DELETE FROM {table(Agent, 'accessible_pools')} WHERE agent_id = %s",  # noqa: S608
        registry["info"].pk,
    )
    refused_and_nothing_ran(registry, calls, warm, "not granted to info-gathering-agent")


def test_a_partners_grant_removed_through_the_orm(registry, calls, warm):
    registry["partner"].accessible_pools.remove(registry["info-pool"])
    refused_and_nothing_ran(registry, calls, warm, "not granted to partner-bot")


def test_an_agent_disabled_by_a_queryset_update(registry, calls, warm):
    type(registry["partner"]).objects.filter(agent_id="partner-bot").update(enabled=False)
    refused_and_nothing_ran(registry, calls, warm, "partner-bot is disabled")


def test_a_partner_deleted(registry, calls, warm):
    sql(
        f"DELETE FROM {table(type(registry['partner']), 'accessible_pools')} WHERE agent_id = %s",  # noqa: S608
        registry["partner"].pk,
    )
    sql(f"DELETE FROM {table(type(registry['partner']))} WHERE id = %s", registry["partner"].pk)  # noqa: S608
    refused_and_nothing_ran(
        registry, calls, warm, "partner partner-bot this work acts for is unknown"
    )


def test_a_tool_rejected_by_raw_sql(registry, calls, warm):
    sql(f"UPDATE {table(Mcplet)} SET status = %s WHERE name = %s", "rejected", FETCH)  # noqa: S608
    refused_and_nothing_ran(registry, calls, warm, f"No MCPlet named {FETCH!r}")


def test_a_pool_renamed(registry, calls, warm):
    Pool.objects.filter(name="info-pool").update(name="info-pool-2")
    refused_and_nothing_ran(registry, calls, warm, f"No MCPlet named {FETCH!r}")


def test_a_server_disabled_by_raw_sql(registry, calls, warm):
    sql(f"UPDATE {table(McpServer)} SET enabled = %s WHERE name = %s", False, "reference")  # noqa: S608
    outcome = gateway.call_tool(registry["info"], FETCH, URL, authority=warm)
    assert outcome.envelope["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert "disabled" in outcome.envelope["error"]["message"]
    assert len(calls(FETCH)) == 1


def test_a_grant_added_is_seen_too(registry, calls, warm):
    """The cache keeps no refusal: a pool granted after a refused call works at once."""
    media_tool = Mcplet.objects.routable().filter(pool__name="media-pool").first()
    assert media_tool is not None
    before = gateway.call_tool(registry["info"], media_tool.name, {}, authority=warm)
    assert before.status == "refused"
    registry["info"].accessible_pools.add(registry["media-pool"])
    registry["partner"].accessible_pools.add(registry["media-pool"])
    after = checks.check(media_tool.name, {}, registry["info"], warm, "model")
    assert after.pk == media_tool.pk


def test_without_the_token_row_nothing_is_kept(registry, warm, django_assert_num_queries):
    """Just after a flush the row is gone: every check reads the database itself."""
    RegistryVersion.objects.all().delete()
    assert current().token is None
    with django_assert_num_queries(4):  # the token, the tool, the agent, the partner
        checks.check(FETCH, URL, registry["info"], warm, "model")


SQLITE_SCRIPT = """
from django.core.management import call_command
from django.db import connection
from agents.models import Agent
from mcplet_host.registry import current
from pools.models import Pool

call_command("migrate", verbosity=0)
tokens = [current().token]
def moved(what):
    tokens.append(current().token)
    assert tokens[-1] and tokens[-1] != tokens[-2], what

pool = Pool.objects.create(name="p")
moved("a pool created")
agent = Agent.objects.create(agent_id="a", display_name="A")
moved("an agent created")
agent.accessible_pools.add(pool)  # INSERT OR IGNORE: the trigger must not take its policy
moved("a grant added")
Agent.objects.filter(pk=agent.pk).update(enabled=False)
moved("a queryset update")
with connection.cursor() as cursor:
    cursor.execute("DELETE FROM agents_agent_accessible_pools")
    moved("raw SQL")
    cursor.execute("DROP TRIGGER mcplet_registry_changed_agents_agent_accessible_pools_insert")
call_command("migrate", verbosity=0)  # a rebuilt table lost its triggers: migrate puts them back
tokens.append(current().token)
agent.accessible_pools.add(pool)
moved("a grant added after the triggers were put back")
print("ok", len(set(tokens)))
"""


def test_the_triggers_on_sqlite(tmp_path):
    """The embedded default's database: every kind of write moves the token, and a migrate
    reinstalls a trigger a table rebuild dropped."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'host.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "mcplet_host.settings",
    }
    env.pop("REDIS_URL", None)
    command = [sys.executable, "manage.py", "shell", "--no-imports", "-c", SQLITE_SCRIPT]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", "8"]


@pytest.mark.django_db(transaction=True)
def test_migrating_the_token_away_takes_its_triggers_along():
    """Back before the token's table, the watched tables are written as before (no trigger
    left writing to a table that is gone); forward again, the token moves once more."""
    from django.db.migrations.executor import MigrationExecutor

    from mcplet_host.registry import install_triggers

    executor = MigrationExecutor(connection)
    executor.migrate([("mcplet_host", "0004_recovery_schedules")])
    try:
        # (bulk: no model signal, so no audit event, whose append came later than 0004)
        Pool.objects.bulk_create([Pool(name="written-while-migrated-back")])
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
        install_triggers()  # as `migrate` does after every run
    before = current().token
    Pool.objects.create(name="written-after")
    assert before and current().token != before


def test_a_calling_agent_deleted_is_refused(registry, calls, warm):
    """The caller's own row gone (its instance still in a worker's hands): nothing runs."""
    Agent = type(registry["info"])
    sql(f"DELETE FROM {table(Agent, 'accessible_pools')} WHERE agent_id = %s", registry["info"].pk)  # noqa: S608
    sql(f"DELETE FROM {table(Agent)} WHERE id = %s", registry["info"].pk)  # noqa: S608
    refused_and_nothing_ran(registry, calls, warm, "The agent info-gathering-agent is unknown.")
