"""`manage.py seed_reference`: the restaurant scenario's configuration (plan §4–§6) — pools, the
eight MCPlet servers, the three agents with their grants and hand-offs, the Director on its
07:00 schedule, and the example partner of docs/partners.md. Idempotent: running it again brings the
reference rows back to these values (an agent's `model`, once chosen by an operator, is kept)."""

import os
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError, transaction

from agents.models import Agent
from mcplets.restaurant import SERVERS, STRICT_MODULES
from mcplets.restaurant.common import API_TOKEN_ENV, API_URL_ENV, DEFAULT_API_URL
from mcplets.verify import URL_ENV as VERIFY_URL_ENV
from passkey.models import VERIFY_KEY_PREFIX, BackendToken, hash_token
from pools.discovery import discover
from pools.models import McpServer, Pool

POOLS = {
    "media-pool": (60, "Publishing to customers: booking-site statistics, e-mail, SNS."),
    "info-pool": (120, "Outside information: web pages and partner APIs."),
}
SCHEDULE = "0 7 * * *"
PARTNER = "partner-bot"
PLAN_APPROVAL_PROMPT = "キャンペーン計画を承認してください (approve the campaign plan)"

# --- the agents' contracts (their §18.2 cards) -------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
    "required": ["name", "email"],
}
INFO_INPUT = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "description": "the day to analyse: YYYY-MM-DD or tomorrow"},
        "store": {"type": "string"},
        "instruction": {"type": "string"},
    },
}
INFO_OUTPUT = {
    "type": "object",
    "properties": {
        "analysis": {"type": "string", "minLength": 1},
        "rawData": {
            "type": "object",
            "properties": {
                "forecast": {"type": "object"},
                "atRiskCustomers": {
                    "type": "array",
                    "items": {
                        **PERSON,
                        "properties": {
                            **PERSON["properties"],
                            "reservationId": {"type": "string"},
                            "time": {"type": "string"},
                            "partySize": {"type": "integer"},
                            "rainTendency": {"type": "number"},
                        },
                    },
                },
                "dessertStock": {"type": "array"},
            },
            "required": ["forecast", "atRiskCustomers"],
        },
    },
    "required": ["analysis", "rawData"],
}
PLAN = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "measures": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "targetCustomers": {"type": "array", "items": PERSON},
        "email": {
            "type": "object",
            "properties": {
                "subject": {"type": "string", "minLength": 1, "maxLength": 200},
                "body": {"type": "string", "minLength": 1},
            },
            "required": ["subject", "body"],
        },
    },
    "required": ["measures", "targetCustomers", "email"],
}
PLANNING_INPUT = {"type": "object", "properties": INFO_OUTPUT["properties"]}
PLANNING_OUTPUT = {"type": "object", "properties": {"plan": PLAN}, "required": ["plan"]}
DISPATCH_INPUT = {
    "type": "object",
    "properties": {"plan": PLAN, "approvedAt": {"type": "string"}},
    "required": ["plan"],
}
DISPATCH_OUTPUT = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "actions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "tool": {"enum": ["send_email", "post_sns"]},
                    "arguments": {"type": "object"},
                    "why": {"type": "string"},
                },
                "required": ["tool", "arguments"],
            },
        },
    },
    "required": ["actions"],
}

# --- the prompts -------------------------------------------------------------------------------

STORE = "森の食卓 新宿店 (Mori no Shokutaku, Shinjuku), a restaurant in Tokyo"

INFO_PROMPT = f"""You are the information-gathering and analysis agent of {STORE}.
Your task says which day to look at (`date`: YYYY-MM-DD or "tomorrow"; default tomorrow).

Gather the facts with your tools before you conclude anything:
1. fetch_web_content the weather forecast: {{api}}/weather/forecast?date=<the day>
2. query_crm with query=customers, filter=rain_cancel_tendency: the customers who often cancel
   when it rains (cancel_tendency.rain at or above the threshold it reports).
3. query_crm with query=reservations, date=<the day>: that day's bookings.
4. query_erp with item=dessert: the dessert stock (a free dessert is the store's usual way to
   thank guests who come despite the weather).
5. Optionally call_external_api (source=supplier_stock or local_events) and query_hr.

A customer is AT RISK when all of these hold: rain is forecast for the day, they hold a
CONFIRMED reservation that day, and they are in the rain_cancel_tendency list. Match customers
by e-mail address. Leave out cancelled bookings. Use only what the tools returned: never invent
customers, numbers or addresses.

Then answer with the JSON object only:
- "analysis": a short report in Japanese (an English summary in parentheses is welcome): the
  forecast, how many at-risk bookings and guests, the relevant stock, your assessment.
- "rawData": {{"forecast": {{...}}, "atRiskCustomers": [{{"name", "email", "reservationId",
  "time", "partySize", "rainTendency"}}, ...], "dessertStock": [...]}}."""

PLANNING_PROMPT = f"""You are the planning agent of {STORE}.
Your task holds the information agent's result: "analysis" and "rawData" (with
rawData.atRiskCustomers). Draw up a campaign that keeps the at-risk guests from cancelling.

- Check what you rely on: query_erp for the stock of what you offer (enough for every guest of
  every at-risk party?), query_crm or query_hr when you need to.
- measures: concrete steps (what, for whom, how many, who does it), in Japanese.
- targetCustomers: EXACTLY the at-risk customers from rawData.atRiskCustomers, as
  {{"name", "email"}}, each once — nobody else. If there are none, give an empty list.
- email: {{"subject", "body"}}, polite Japanese (敬語) from 森の食卓 新宿店. The same text goes
  to every target customer; write {{name}} where the customer's name goes (it is filled in per
  recipient). No per-guest details (times, party sizes), no other guest's data.

The store manager approves your plan with a passkey before anything is sent, so make it clear
and complete. Answer with the JSON object only: {{"plan": {{"summary", "measures",
"targetCustomers", "email"}}}}."""

DISPATCH_PROMPT = f"""You are the dispatch agent of {STORE}.
Your task holds a campaign plan the store manager approved ("plan", "approvedAt"). Carry it out
exactly; do not change the recipients or the text.

- You may look at read_site_stats (the booking site's statistics) to mention the context.
- Sending is not done by calling a tool: list what must be sent under "actions", and the host
  asks the store manager to approve each action with a passkey, then runs it.
- E-mail: ONE action {{"tool": "send_email", "arguments": {{"to": ["<name> <<email>>" for every
  plan.targetCustomers entry, in order], "subject": plan.email.subject, "body":
  plan.email.body}}, "why": "<one line>"}}. Each recipient gets a separate message; keep
  {{name}} in the body as it is.
- SNS: only if a measure asks for a public post, one post_sns action {{"platform": "x",
  "text": <at most 280 characters, no personal data>}}.
- No target customers: no e-mail action.

Answer with the JSON object only: {{"summary": "<what will be sent>", "actions": [...]}}."""

DIRECTOR_SYSTEM = f"""You are the Director of {STORE}. Every morning you start the workflow that
lowers tomorrow's cancellations by giving one task to the information-gathering agent. Put the
day to analyse (YYYY-MM-DD) in parameters.date and the store ("shinjuku") in parameters.store."""

DIRECTOR_TEMPLATE = """今日の天気予報と在庫情報、キャンセル傾向の高い予約客情報を収集・分析し、
キャンセル率を下げる施策を立案してください。
{% comment %}
"Collect and analyse today's weather forecast, the stock, and the customers with a high
cancellation tendency, and draw up measures that lower the cancellation rate."
{% endcomment %}
対象日 (the day to analyse): {{ tomorrow|date:"Y-m-d" }}（明日 / tomorrow）
本日 (today): {{ today|date:"Y-m-d" }}
依頼先 (targets): {{ targets|join:", " }}"""


DEADLOCK = "40P01"  # PostgreSQL's deadlock_detected
DEADLOCK_ATTEMPTS = 5


class Command(BaseCommand):
    help = (
        "Create or update the restaurant reference scenario: pools, the eight MCPlet servers, "
        "the info/planning/dispatch agents with their grants and hand-offs, the Director "
        "(07:00 daily) and the example partner partner-bot. Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--http",
            action="store_true",
            help="register the servers as streamable HTTP URLs (docker compose: "
            "`python -m mcplets.restaurant` serves them) instead of stdio commands",
        )
        parser.add_argument(
            "--http-host",
            default=os.environ.get("RESTAURANT_MCPLET_HOST", "127.0.0.1"),
            help="--http: the host name of the MCPlet servers (default 127.0.0.1)",
        )
        parser.add_argument(
            "--base-port",
            type=int,
            default=SERVERS[0].port,
            help=f"--http: the first server's port (default {SERVERS[0].port})",
        )
        parser.add_argument(
            "--api-url",
            default=os.environ.get(API_URL_ENV, DEFAULT_API_URL),
            help=f"the backing service as the MCPlets reach it (default {DEFAULT_API_URL})",
        )
        parser.add_argument(
            "--verify-url",
            default="",
            help="stdio: a fixed verify-assertion URL for the strict MCPlets (default: none "
            "stored; the host gives them its own when it launches them, see MCPLET_VERIFY_URL)",
        )
        parser.add_argument(
            "--discover", action="store_true", help="run discovery on each server afterwards"
        )

    def handle(self, *args, http, http_host, base_port, api_url, verify_url, discover, **options):
        api_url = api_url.rstrip("/")
        if not api_url.startswith(("http://", "https://")):
            raise CommandError(f"--api-url {api_url!r} is not an http(s) URL.")
        if verify_url and not verify_url.startswith(("http://", "https://")):
            raise CommandError(f"--verify-url {verify_url!r} is not an http(s) URL.")
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                with transaction.atomic():
                    pools = self.seed_pools()
                    servers = self.seed_servers(http, http_host, base_port, api_url, verify_url)
                    self.seed_agents(pools, api_url)
                break
            except OperationalError as exc:
                # A watcher discovering the same servers meanwhile takes their rows and the
                # registry's version row (and the audit chain's head) in another order: PostgreSQL
                # ends one of the two transactions, and the seed, idempotent, runs again.
                if (
                    getattr(exc.__cause__, "sqlstate", None) != DEADLOCK
                    or attempt == DEADLOCK_ATTEMPTS
                ):
                    raise
                self.stdout.write(self.style.WARNING("deadlock with a concurrent writer: again"))
                time.sleep(0.2 * attempt)
        if discover:
            self.discover(servers)
        self.stdout.write(self.style.SUCCESS("Reference scenario ready."))

    # --- pools and servers -----------------------------------------------------------------

    def seed_pools(self):
        pools = {}
        for name, (rate, description) in POOLS.items():
            pools[name], created = Pool.objects.update_or_create(
                name=name, defaults={"rate_limit_per_minute": rate, "description": description}
            )
            self.stdout.write(f"pool {name}: {rate}/min ({'created' if created else 'updated'})")
        return pools

    def seed_servers(self, http, http_host, base_port, api_url, verify_url):
        servers = []
        for index, info in enumerate(SERVERS):
            server = McpServer.objects.filter(name=info.name).first() or McpServer(name=info.name)
            created = server.pk is None
            strict = info.module in STRICT_MODULES
            if http:
                server.transport = McpServer.Transport.HTTP
                server.url = f"http://{http_host}:{base_port + index}/mcp"
                server.command, server.args, server.env = "", [], {}
            else:
                env = {API_URL_ENV: api_url}
                if os.environ.get(API_TOKEN_ENV):
                    env[API_TOKEN_ENV] = os.environ[API_TOKEN_ENV]
                if strict:
                    env["MCPLET_VERIFY_TOKEN"] = (server.env or {}).get("MCPLET_VERIFY_TOKEN", "")
                    if verify_url:
                        env[VERIFY_URL_ENV] = verify_url
                server.transport = McpServer.Transport.STDIO
                server.command, server.args = "python", ["-m", info.dotted]
                server.env, server.url = env, ""
            server.headers, server.enabled = {}, True
            server.full_clean()
            server.save()
            if strict:
                self.seed_verify_token(server, info, http)
            where = server.url if http else f"python -m {info.dotted}"
            self.stdout.write(
                f"server {info.name} ({info.tool}): {where} ({'created' if created else 'updated'})"
            )
            servers.append(server)
        return servers

    def seed_verify_token(self, server, info, http):
        """A verify-assertion token per strict server: in its stdio environment, or (HTTP) the
        one given as RESTAURANT_<MODULE>_VERIFY_TOKEN, or a new one printed once."""
        if not http:
            raw = server.env.get("MCPLET_VERIFY_TOKEN", "")
            token = BackendToken.authenticate(raw) if raw else None
            if token is None or token.server_id != server.pk:
                _, raw = BackendToken.issue(server, name="seed_reference (stdio environment)")
                server.env = {**server.env, "MCPLET_VERIFY_TOKEN": raw}
                server.save(update_fields=["env"])
            return
        variable = f"RESTAURANT_{info.module.upper()}_VERIFY_TOKEN"
        raw = os.environ.get(variable, "").strip()
        if raw:
            self.register_token(server, raw, variable)
        elif BackendToken.objects.filter(server=server, revoked_at__isnull=True).exists():
            self.stdout.write(
                f"  {info.name} keeps its verify token(s); the MCPlet server needs one as "
                f"{variable}"
            )
        else:
            _, raw = BackendToken.issue(server, name="seed_reference (http)")
            self.stdout.write(
                f"  {info.name} verify token (shown once; give it to the MCPlet server as "
                f"{variable}): {raw}"
            )

    def register_token(self, server, raw, variable):
        if not raw.startswith(VERIFY_KEY_PREFIX) or len(raw) < len(VERIFY_KEY_PREFIX) + 24:
            raise CommandError(f"{variable} must start with {VERIFY_KEY_PREFIX} (24+ characters).")
        prefix = raw[: len(VERIFY_KEY_PREFIX) + 8]
        existing = BackendToken.objects.filter(prefix=prefix).first()
        if existing is None:
            BackendToken.objects.create(
                server=server,
                name=f"seed_reference ({variable})",
                prefix=prefix,
                token_hash=hash_token(raw),
            )
        elif existing.server_id != server.pk or existing.token_hash != hash_token(raw):
            raise CommandError(f"{variable} collides with another verify token; make a new one.")
        elif existing.revoked_at is not None:
            raise CommandError(f"{variable} was revoked in admin; set a new one.")

    # --- agents and the Director -----------------------------------------------------------

    def seed_agents(self, pools, api_url):
        specs = {
            "info-gathering-agent": {
                "display_name": "Information & analysis agent (情報収集・分析)",
                "description": "Collects the forecast, bookings, rain-cancellation tendencies "
                "and stock, and names the bookings at risk.",
                "system_prompt": INFO_PROMPT.replace("{api}", api_url),
                "input_schema": INFO_INPUT,
                "output_schema": INFO_OUTPUT,
                "result_needs_approval": False,
                "approval_prompt": "",
            },
            "planning-agent": {
                "display_name": "Planning agent (施策立案)",
                "description": "Turns the analysis into a campaign plan — measures, target "
                "customers, e-mail text — that the store manager approves.",
                "system_prompt": PLANNING_PROMPT,
                "input_schema": PLANNING_INPUT,
                "output_schema": PLANNING_OUTPUT,
                "result_needs_approval": True,
                "approval_prompt": PLAN_APPROVAL_PROMPT,
            },
            "dispatch-agent": {
                "display_name": "Dispatch agent (配信)",
                "description": "Carries out an approved plan: the e-mails (and SNS posts) it "
                "asks for, each approved with a passkey.",
                "system_prompt": DISPATCH_PROMPT,
                "input_schema": DISPATCH_INPUT,
                "output_schema": DISPATCH_OUTPUT,
                "result_needs_approval": False,
                "approval_prompt": "",
            },
        }
        grants = {
            "info-gathering-agent": ["info-pool"],
            "planning-agent": [],
            "dispatch-agent": ["media-pool"],
        }
        agents = {}
        for agent_id, fields in specs.items():
            agents[agent_id] = self.upsert(agent_id, kind=Agent.Kind.INTERNAL, **fields)
            agents[agent_id].accessible_pools.set([pools[p] for p in grants[agent_id]])
        hand_offs = {
            "info-gathering-agent": "planning-agent",
            "planning-agent": "dispatch-agent",
            "dispatch-agent": None,
        }
        for agent_id, target in hand_offs.items():
            agents[agent_id].hands_off_to = agents[target] if target else None
            agents[agent_id].save(update_fields=["hands_off_to", "updated_at"])

        director = self.upsert(
            "director",
            kind=Agent.Kind.DIRECTOR,
            display_name="Director (毎朝のキャンセル対策)",
            description="Starts the cancellation-reduction workflow every morning at 07:00.",
            system_prompt=DIRECTOR_SYSTEM,
            prompt_template=DIRECTOR_TEMPLATE,
            max_retries=3,
            backoff_seconds=5.0,
            result_needs_approval=False,
            hands_off_to=None,
        )
        director.accessible_pools.clear()
        director.targets.set([agents["info-gathering-agent"]])
        director.schedule_cron(SCHEDULE)
        # The partner example of docs/partners.md: it may ask the information agent, with the one
        # pool that agent's analysis needs (a partner's task runs with the pools both hold; with
        # none, the forecast and supplier MCPlets would be refused).
        partner = self.upsert(
            PARTNER,
            kind=Agent.Kind.EXTERNAL,
            display_name="Example partner (docs/partners.md)",
            description="A partner agent on the A2A REST API: may ask the information agent.",
        )
        partner.accessible_pools.set([pools["info-pool"]])
        partner.callable_agents.set([agents["info-gathering-agent"]])
        for agent_id, agent in agents.items():
            pools_text = ", ".join(grants[agent_id]) or "pool-less MCPlets only"
            nxt = f" → {agent.hands_off_to.agent_id}" if agent.hands_off_to else ""
            self.stdout.write(f"agent {agent_id} [{pools_text}]{nxt}")
        self.stdout.write(
            f"director: {SCHEDULE} ({settings.TIME_ZONE}) → info-gathering-agent "
            f"(periodic task {director.schedule.name!r})"
        )
        self.stdout.write(
            f"partner {PARTNER} [info-pool] may call info-gathering-agent "
            f"(a key: manage.py create_partner_key {PARTNER})"
        )

    def upsert(self, agent_id, **fields):
        # An operator's choice of model survives a re-seed; a new agent uses MCPLET_LLM_MODEL.
        agent, _ = Agent.objects.update_or_create(
            agent_id=agent_id,
            defaults={"enabled": True, **fields},
            create_defaults={"enabled": True, "model": "", **fields},
        )
        return agent

    # --- discovery -------------------------------------------------------------------------

    def discover(self, servers):
        for server in servers:
            try:
                report = discover(server)
            except Exception as exc:  # discovery is a convenience here, never a failure
                self.stdout.write(self.style.WARNING(f"discovery of {server.name} failed: {exc}"))
                continue
            self.stdout.write(f"discovered {report}")
