"""`manage.py seed_reference`: the plan's pools, servers, agents and Director; idempotent;
stdio or streamable HTTP; and the eight MCPlets as discovery registers them."""

import os
import socket
import subprocess
import sys
import time
from importlib import import_module

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management.base import CommandError
from django_celery_beat.models import PeriodicTask

from agents.models import Agent
from mcplets.restaurant import SERVERS
from passkey.models import BackendToken
from pools.discovery import discover
from pools.models import Mcplet, McpServer, Pool
from tests.restaurant.conftest import seed

pytestmark = pytest.mark.django_db

STRICT = {"required": "passkey", "enforcement": "strict"}
# plan §4: tool → (mcpletType, pool, visibility, auth)
EXPECTED = {
    "read_site_stats": ("read", "media-pool", ["model"], None),
    "send_email": ("action", "media-pool", ["app"], "メール送信を承認してください"),
    "post_sns": ("action", "media-pool", ["app"], "SNS投稿を承認してください"),
    "fetch_web_content": ("read", "info-pool", ["model"], None),
    "call_external_api": ("read", "info-pool", ["model"], None),
    "query_crm": ("read", None, ["model"], None),
    "query_erp": ("read", None, ["model"], None),
    "query_hr": ("read", None, ["model"], None),
}


def snapshot_of_rows():
    return {
        "pools": list(Pool.objects.values_list("name", "rate_limit_per_minute")),
        "servers": list(
            McpServer.objects.values_list("name", "transport", "command", "args", "env", "url")
        ),
        "agents": list(
            Agent.objects.values_list(
                "agent_id", "kind", "model", "system_prompt", "hands_off_to__agent_id"
            )
        ),
        "grants": sorted(
            Agent.accessible_pools.through.objects.values_list("agent__agent_id", "pool__name")
        ),
        "tokens": BackendToken.objects.count(),
        "tasks": list(PeriodicTask.objects.values_list("name", "task", "crontab__hour")),
    }


def test_the_plans_configuration():
    seed(api_url="http://127.0.0.1:5100")
    assert dict(Pool.objects.values_list("name", "rate_limit_per_minute")) == {
        "media-pool": 60,
        "info-pool": 120,
    }
    crm = McpServer.objects.get(name="restaurant-crm")
    assert crm.transport == "stdio" and crm.command == "python"
    assert crm.args == ["-m", "mcplets.restaurant.crm"]
    assert crm.env == {"RESTAURANT_API_URL": "http://127.0.0.1:5100"}
    mail = McpServer.objects.get(name="restaurant-mail")
    # No verify URL stored with a guessed port: the host gives its own at launch.
    assert set(mail.env) == {"RESTAURANT_API_URL", "MCPLET_VERIFY_TOKEN"}
    assert BackendToken.authenticate(mail.env["MCPLET_VERIFY_TOKEN"]).server == mail
    assert McpServer.objects.filter(name__startswith="restaurant-").count() == 8

    info, planning, dispatch = (
        Agent.objects.get(agent_id=a)
        for a in ("info-gathering-agent", "planning-agent", "dispatch-agent")
    )
    pools = {
        a.agent_id: sorted(a.accessible_pools.values_list("name", flat=True))
        for a in (info, planning, dispatch)
    }
    assert pools == {
        "info-gathering-agent": ["info-pool"],
        "planning-agent": [],
        "dispatch-agent": ["media-pool"],
    }
    assert info.hands_off_to == planning and planning.hands_off_to == dispatch
    assert dispatch.hands_off_to is None
    assert planning.result_needs_approval and not info.result_needs_approval
    prompt = "キャンペーン計画を承認してください (approve the campaign plan)"
    assert planning.approval_prompt == prompt
    assert info.output_schema["required"] == ["analysis", "rawData"]
    plan = planning.output_schema["properties"]["plan"]
    assert set(plan["required"]) == {"measures", "targetCustomers", "email"}
    assert dispatch.output_schema["required"] == ["actions"]
    assert "http://127.0.0.1:5100/weather/forecast" in info.system_prompt
    assert all(a.model == "" for a in Agent.objects.all())  # MCPLET_LLM_MODEL applies

    director = Agent.objects.get(agent_id="director")
    assert director.kind == Agent.Kind.DIRECTOR
    assert list(director.targets.all()) == [info] and not director.accessible_pools.exists()
    assert director.max_retries == 3 and director.backoff_seconds == 5.0
    assert "キャンセル率を下げる施策を立案してください" in director.prompt_template
    crontab = director.schedule.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_month) == ("0", "7", "*")
    assert director.schedule.task == "agents.run_director"

    # The partner example of docs/partners.md: one agent it may call, with the pool it needs.
    partner = Agent.objects.get(agent_id="partner-bot")
    assert partner.kind == Agent.Kind.EXTERNAL and partner.pools_beyond_callable_agents() == []
    assert list(partner.callable_agents.all()) == [info]
    assert list(partner.accessible_pools.values_list("name", flat=True)) == ["info-pool"]


def test_a_fixed_verify_url_is_kept_until_the_next_seed_without_it():
    seed(verify_url="http://host.internal:8123/auth/verify-assertion")
    mail = McpServer.objects.get(name="restaurant-mail")
    assert mail.env["MCPLET_VERIFY_URL"] == "http://host.internal:8123/auth/verify-assertion"
    assert "MCPLET_VERIFY_URL" not in McpServer.objects.get(name="restaurant-crm").env
    seed()
    assert "MCPLET_VERIFY_URL" not in McpServer.objects.get(name="restaurant-mail").env
    with pytest.raises(CommandError, match="verify-url"):
        seed(verify_url="localhost:8000/auth/verify-assertion")


def test_running_it_twice_changes_nothing():
    seed()
    first = snapshot_of_rows()
    seed()
    assert snapshot_of_rows() == first


def test_an_operators_model_choice_survives_a_reseed():
    seed()
    Agent.objects.filter(agent_id="planning-agent").update(
        model="openai/gpt-4o", system_prompt="edited"
    )
    seed()
    planning = Agent.objects.get(agent_id="planning-agent")
    assert planning.model == "openai/gpt-4o" and planning.system_prompt != "edited"


def test_a_revoked_stdio_token_is_replaced():
    seed()
    mail = McpServer.objects.get(name="restaurant-mail")
    BackendToken.authenticate(mail.env["MCPLET_VERIFY_TOKEN"]).revoke()
    seed()
    mail.refresh_from_db()
    assert BackendToken.authenticate(mail.env["MCPLET_VERIFY_TOKEN"]).server == mail


def test_http_servers_for_docker_compose(monkeypatch):
    monkeypatch.setenv("RESTAURANT_MAIL_VERIFY_TOKEN", "mcpv_" + "m" * 40)
    monkeypatch.delenv("RESTAURANT_SNS_VERIFY_TOKEN", raising=False)
    out = seed(http=True, http_host="mcplets")
    urls = dict(McpServer.objects.values_list("name", "url"))
    assert urls["restaurant-site-stats"] == "http://mcplets:9101/mcp"
    assert urls["restaurant-hr"] == "http://mcplets:9108/mcp"
    assert set(McpServer.objects.values_list("transport", flat=True)) == {"http"}
    assert BackendToken.authenticate("mcpv_" + "m" * 40).server.name == "restaurant-mail"
    (line,) = [line for line in out.splitlines() if "restaurant-sns verify token" in line]
    raw = line.rsplit(" ", 1)[1]
    assert BackendToken.authenticate(raw).server.name == "restaurant-sns"
    again = seed(http=True, http_host="mcplets")  # keeps the tokens, prints no secret
    assert "mcpv_" not in again and BackendToken.objects.count() == 2
    seed()  # and back to stdio
    assert McpServer.objects.get(name="restaurant-hr").args == ["-m", "mcplets.restaurant.hr"]


def test_a_bad_verify_token_or_api_url_is_refused(monkeypatch):
    monkeypatch.setenv("RESTAURANT_MAIL_VERIFY_TOKEN", "short")
    with pytest.raises(CommandError, match="RESTAURANT_MAIL_VERIFY_TOKEN"):
        seed(http=True)
    with pytest.raises(CommandError, match="api-url"):
        seed(api_url="ftp://example.org")
    assert not Pool.objects.exists()  # all or nothing


@pytest.mark.django_db(transaction=True)
def test_discovery_registers_the_eight_mcplets_as_the_plan_says():
    """Real discovery over stdio: each server launched as the host launches it."""
    out = seed(discover=True)
    assert out.count(": 1 accepted, 0 rejected") == 8, out
    found = {m.name: m for m in Mcplet.objects.select_related("pool", "server")}
    assert set(found) == set(EXPECTED)
    for tool, (mcplet_type, pool, visibility, prompt) in EXPECTED.items():
        mcplet = found[tool]
        assert mcplet.status == Mcplet.Status.ACCEPTED, (tool, mcplet.rejection_reason)
        assert mcplet.mcplet_type == mcplet_type and mcplet.visibility == visibility
        assert (mcplet.pool.name if mcplet.pool else None) == pool == mcplet.meta.get("pool")
        if prompt is None:
            assert "auth" not in mcplet.meta
        else:
            assert mcplet.meta["auth"] == {**STRICT, "promptMessage": prompt}
            assert mcplet.auth_enforcement == "strict" and mcplet.needs_approval
        assert mcplet.result_schema and mcplet.result_schema_uri.endswith(f"/{tool}")
        (server,) = [s for s in SERVERS if s.tool == tool]
        assert mcplet.server.name == server.name
    assert "please approve sending the e-mail" in found["send_email"].description
    assert "to" in found["send_email"].input_schema["required"]


@pytest.mark.django_db(transaction=True)
def test_an_mcplet_over_streamable_http(backend_url):
    """Each MCPlet also serves streamable HTTP; the host discovers and calls it there."""
    from mcplet_host import gateway

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "RESTAURANT_API_URL": backend_url}
    command = [sys.executable, "-m", "mcplets.restaurant.erp", "--transport", "streamable-http"]
    process = subprocess.Popen([*command, "--port", str(port)], cwd=settings.BASE_DIR, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        seed(http=True, base_port=port - 6)  # query_erp is the seventh server
        erp = McpServer.objects.get(name="restaurant-erp")
        assert erp.url == f"http://127.0.0.1:{port}/mcp"
        assert str(discover(erp)).endswith("1 accepted, 0 rejected, 0 evicted")
        planning = Agent.objects.get(agent_id="planning-agent")
        outcome = gateway.call_tool(planning, "query_erp", {"item": "dessert"}, "model")
        assert outcome.envelope["result"]["count"] == 5
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_discovery_that_cannot_run_does_not_fail_the_seed():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = seed(http=True, base_port=port, discover=True)
    assert out.count("discovery of restaurant-") == 8 and "Reference scenario ready." in out
    assert Agent.objects.filter(agent_id="director").exists()


def test_a_database_seeded_with_the_old_guessed_port_is_mended_by_migrate():
    """`make run` seeds once; before, seed_reference stored PASSKEY_ORIGIN's default port."""
    seeded = "http://localhost:8000/auth/verify-assertion"
    seed(verify_url=seeded)
    chosen = "http://host.internal:8123/auth/verify-assertion"  # an operator's, kept
    sns = McpServer.objects.get(name="restaurant-sns")
    sns.env |= {"MCPLET_VERIFY_URL": chosen}
    sns.save()
    migration = import_module("pools.migrations.0006_derive_reference_verify_url")
    migration.derive_at_launch(apps, None)
    mail = McpServer.objects.get(name="restaurant-mail")
    assert set(mail.env) == {"RESTAURANT_API_URL", "MCPLET_VERIFY_TOKEN"}
    assert McpServer.objects.get(name="restaurant-sns").env["MCPLET_VERIFY_URL"] == chosen


@pytest.mark.django_db(transaction=True)
def test_a_deadlock_with_a_concurrent_writer_runs_the_seed_again():
    """A writer that holds a server's row and then wants the registry's version row (as
    discovery does) deadlocks with the seed, which holds them in the other order: PostgreSQL
    ends the seed's transaction, and the seed runs it again once the writer is done."""
    import threading

    import psycopg
    from django.db import connection

    seed()
    first = McpServer.objects.order_by("pk").first()
    db = connection.settings_dict
    writer = psycopg.connect(
        host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"]
    )
    writer.execute("SET deadlock_timeout = '60s'")  # the seed's check finds the cycle first
    writer.execute("SELECT 1 FROM pools_mcpserver WHERE id = %s FOR UPDATE", [first.pk])

    def then_want_the_version_row():
        with psycopg.connect(
            host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"]
        ) as watch:
            for _ in range(200):  # until the seed waits for the server's row
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database() AND pid <> %s",
                    [writer.info.backend_pid],
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.05)
        writer.execute("UPDATE mcplet_host_registryversion SET token = token")
        writer.commit()

    thread = threading.Thread(target=then_want_the_version_row)
    thread.start()
    try:
        out = seed()
    finally:
        thread.join(timeout=60)
        writer.close()
    assert "deadlock with a concurrent writer: again" in out
    assert "Reference scenario ready." in out
    assert McpServer.objects.count() == len(SERVERS)
