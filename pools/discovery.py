"""MCPlet discovery (spec §5.3): list a server's tools, validate each, store the verdicts.

`snapshot()` is the MCP half (async, I/O only); `apply_snapshot()` the database half. Every
change of a tool's status and every server connection change is audited.
"""

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from mcplet_host import audit, jsonschemas, metrics, storable
from mcplets.envelope import AUTH_ENFORCEMENTS, MCPLET_TYPES, VISIBILITIES
from pools import signals
from pools.mcp_client import ServerConfig, ServerUnreachable, describe, open_session
from pools.models import Mcplet, McpServer, Pool

SCHEMA_FETCH_CONCURRENCY = 16
ALLOWED_VISIBILITY = [sorted(v) for v in VISIBILITIES]
# §16.1, verbatim: why a model-visible action must be strict.
STRICT_FOR_MODEL_ACTIONS = (
    "\"Backend-enforced authentication (`auth.enforcement: 'strict'`) for `action` type tools "
    'exposed to the model"'
)
MAX_DESCRIPTION = 16_384
MAX_PAGES = 10_000  # a server that keeps returning cursors is not answering, it is looping


@dataclass
class DiscoveredTool:
    name: str
    title: str = ""
    description: str = ""
    input_schema: dict = field(default_factory=dict)
    meta: object = None  # whatever the server sent as _meta, unvalidated
    result_schema: dict | None = None
    schema_error: str = ""
    unstorable: str = ""

    def __post_init__(self):
        """Text no database row can hold (NUL, lone surrogates, nesting past MAX_DEPTH) is a
        rejection, stored written out; a crash would stop the whole server's discovery."""
        fields = ["name", "title", "description", "input_schema", "meta"]
        spoilt = [
            f"its {name} ({problem[1]})"
            for name in fields
            if (problem := storable.problem(getattr(self, name)))
        ]
        if spoilt:
            self.unstorable = f"the host cannot store {', '.join(spoilt)}"
            for name in fields:
                setattr(self, name, storable.printable(getattr(self, name)))
        for name in ("name", "title"):  # the columns' lengths: PostgreSQL refuses more
            value, limit = getattr(self, name), Mcplet._meta.get_field(name).max_length
            if len(value) > limit:
                too_long = f"its {name} is longer than {limit} characters"
                self.unstorable = _joined(self.unstorable, too_long)
                digest = hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:12]
                setattr(self, name, f"{value[: limit - 13]}…{digest}")  # still one per name


async def list_all_tools(session, cache_mode="refresh"):
    """tools/list across every page (cursor pagination). `cache_mode="use"` takes pages whose
    `ttlMs` (2026-07-28) has not run out from the client's cache instead of asking again."""
    tools, cursor, seen = [], None, set()
    for _ in range(MAX_PAGES):
        page = await session.list_tools(cursor=cursor, cache_mode=cache_mode)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in seen:
            raise ServerUnreachable(f"tools/list returned the cursor {cursor!r} twice")
        seen.add(cursor)
    raise ServerUnreachable(f"tools/list did not end after {MAX_PAGES} pages")


def parse_schema_resource(text):
    """The JSON Schema inside a §9.4 payload (or a bare schema); raises ValueError."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    schema = payload.get("schema") if isinstance(payload, dict) and "schema" in payload else payload
    if why := jsonschemas.problem(schema):
        raise ValueError(f"it {why}")
    return schema


async def fetch_result_schemas(session, uris):
    """uri → (schema, "") or (None, reason); §5.3.4 prefetch, a few reads at a time."""
    found = {}
    limiter = anyio.CapacityLimiter(SCHEMA_FETCH_CONCURRENCY)

    async def fetch(uri):
        async with limiter:
            try:
                result = await session.read_resource(uri)
                text = next((c.text for c in result.contents if getattr(c, "text", None)), None)
                if text is None:
                    raise ValueError("the resource has no text content")
                found[uri] = (parse_schema_resource(text), "")
            except ValueError as exc:
                found[uri] = (None, f"result schema {uri} is unusable: {exc}")
            except Exception as exc:
                found[uri] = (None, f"result schema {uri} could not be read: {describe(exc)}")

    async with anyio.create_task_group() as group:
        for uri in uris:
            group.start_soon(fetch, uri)
    return found


async def snapshot(session):
    """Every tool of an open session, with its prefetched result schema."""
    tools = await list_all_tools(session)
    uris = {
        t.meta.get("mcpletToolResultSchemaUri")
        for t in tools
        if isinstance(t.meta, Mapping) and isinstance(t.meta.get("mcpletToolResultSchemaUri"), str)
    }
    schemas = await fetch_result_schemas(session, sorted(uris))
    discovered = []
    for t in tools:
        meta = dict(t.meta) if isinstance(t.meta, Mapping) else t.meta
        uri = meta.get("mcpletToolResultSchemaUri") if isinstance(meta, dict) else None
        schema, error = schemas.get(uri, (None, "")) if isinstance(uri, str) else (None, "")
        discovered.append(
            DiscoveredTool(
                name=t.name,
                title=t.title or "",
                description=t.description or "",
                input_schema=t.input_schema,
                meta=meta,
                result_schema=schema,
                schema_error=error,
            )
        )
    return discovered


# --- validation (spec §5.3.1, §6) -----------------------------------------------------------


def classify(tool, pools):
    """The Mcplet fields for `tool`, with status and a reason a person understands."""
    meta = tool.meta if isinstance(tool.meta, dict) else {}
    reasons = []
    if hidden := _unseen_in(tool.name):
        reasons.append(
            f"its name holds {hidden}, which no page or log shows as it is (MCP: a tool's name "
            "SHOULD be of A-Z, a-z, 0-9, _, - and .)"
        )
    if not isinstance(tool.meta, dict | type(None)):
        reasons.append("its _meta is not an object")

    mcplet_type = meta.get("mcpletType")
    if mcplet_type is None:
        reasons.append(f"{Mcplet.UNTYPED} (§5.3.1: a tool without one is rejected)")
    elif mcplet_type not in MCPLET_TYPES:
        reasons.append(
            f"mcpletType {mcplet_type!r} is not one of read, prepare, action (§4, §5.3.1)"
        )

    visibility = meta.get("visibility")
    # §6.3 allows ['model'], ['app'] and ['model', 'app'] (in any order).
    valid_visibility = (
        isinstance(visibility, list)
        and all(isinstance(v, str) for v in visibility)
        and sorted(visibility) in ALLOWED_VISIBILITY
    )
    if visibility is None:
        reasons.append("it declares no _meta.visibility (§5.1: a registration must provide it)")
    elif not valid_visibility:
        reasons.append(f"visibility {visibility!r} is not a list of 'model' and/or 'app' (§6.3)")

    auth = meta.get("auth")
    if auth is not None:
        if not isinstance(auth, dict):
            reasons.append("_meta.auth is not an object (§6.7)")
            auth = None
        elif auth.get("required") != "passkey":
            reasons.append(f"auth.required {auth.get('required')!r} is not 'passkey' (§6.7)")
        elif auth.get("enforcement") not in AUTH_ENFORCEMENTS:
            reasons.append(
                f"auth.enforcement {auth.get('enforcement')!r} is not strict or host-only (§6.7)"
            )
    if mcplet_type == "action" and valid_visibility and "model" in visibility:
        if not auth:
            reasons.append(
                "it is an action visible to the model without _meta.auth (§5.3.1, §4.2: prohibited)"
            )
        elif auth.get("enforcement") == "host-only":
            reasons.append(
                "it is an action visible to the model with auth.enforcement 'host-only', not "
                f"'strict' (§16.1: {STRICT_FOR_MODEL_ACTIONS})"
            )

    pool_name, pool = meta.get("pool"), None
    if pool_name is not None:
        if not isinstance(pool_name, str) or not pool_name:
            reasons.append("_meta.pool is not a pool name (§6.2: a single string)")
            pool_name = ""
        elif pool_name not in pools:
            reasons.append(
                f"it names the pool {pool_name!r}, which is not registered on this host "
                "(§5.3.3: a configuration error; create the pool and it is accepted on the "
                "next discovery)"
            )
        else:
            pool = pools[pool_name]

    uri = meta.get("mcpletToolResultSchemaUri", "")
    if not isinstance(uri, str):
        reasons.append("_meta.mcpletToolResultSchemaUri is not a URI (§6.4)")
        uri = ""
    elif uri != (cut := _fitted("result_schema_uri", uri)):
        reasons.append("_meta.mcpletToolResultSchemaUri is longer than the host keeps")
        uri = cut
    if why := jsonschemas.problem(tool.input_schema):
        reasons.append(f"its inputSchema {why} (§5.3.1)")
    if tool.schema_error:
        reasons.append(tool.schema_error)
    if tool.unstorable:
        reasons.append(tool.unstorable)
    if len(tool.description) > MAX_DESCRIPTION:
        reasons.append(
            f"its description is longer than {MAX_DESCRIPTION} characters (§16.1: payload size "
            "limits; every LLM request would carry it)"
        )

    auth = auth or {}
    return {
        "title": tool.title,
        # Cut past the limit: a rejected tool's evidence, not a hostile server's 50 MB.
        "description": storable.cut(tool.description, MAX_DESCRIPTION),
        "input_schema": tool.input_schema,
        "meta": tool.meta if tool.meta is not None else {},
        "mcplet_type": mcplet_type if mcplet_type in MCPLET_TYPES else "",
        "visibility": visibility if valid_visibility else [],
        "pool_name": _fitted("pool_name", pool_name or ""),
        "pool": pool,
        "auth_required": _fitted("auth_required", str(auth.get("required", "") or "")),
        "auth_enforcement": auth.get("enforcement", "")
        if auth.get("enforcement") in AUTH_ENFORCEMENTS
        else "",
        "auth_prompt_message": str(auth.get("promptMessage", "") or ""),
        "result_schema_uri": uri,
        "result_schema": tool.result_schema,
        "status": Mcplet.Status.REJECTED if reasons else Mcplet.Status.ACCEPTED,
        "rejection_reason": "; ".join(reasons),
    }


def _unseen_in(name):
    """The first character of `name` a person would not see for what it is, named, or ""."""
    for character in name:
        if storable.unseen(character):
            return f"the character U+{ord(character):04X}"
    return ""


def _fitted(field_name, value):
    """A rejected tool's value cut to its column (the reason's evidence: a pool name or an
    auth value no registered one could match)."""
    return storable.fitted(Mcplet, field_name, value)


def _joined(*reasons):
    return "; ".join(filter(None, reasons))


# --- applying a snapshot to the registry ----------------------------------------------------

TRACKED_FIELDS = [
    "title",
    "description",
    "input_schema",
    "meta",
    "mcplet_type",
    "visibility",
    "pool_name",
    "pool",
    "auth_required",
    "auth_enforcement",
    "auth_prompt_message",
    "result_schema_uri",
    "result_schema",
    "status",
    "rejection_reason",
    "model_visible",
    "app_visible",
]


def _tracked(mcplet):
    # attname: compare the pool by its id, without loading the Pool of every tool.
    return {f: getattr(mcplet, Mcplet._meta.get_field(f).attname) for f in TRACKED_FIELDS}


@dataclass
class DiscoveryReport:
    server: str
    accepted: int = 0
    rejected: int = 0
    evicted: int = 0
    changed: list = field(default_factory=list)

    def __str__(self):
        return (
            f"{self.server}: {self.accepted} accepted, {self.rejected} rejected, "
            f"{self.evicted} evicted"
        )


def _served_elsewhere(server, names):
    """name → the other server already routing an accepted tool of that name."""
    taken, names = {}, list(names)
    for start in range(0, len(names), 500):
        rows = (
            # Accepted, routable or not: the unique constraint is on accepted names.
            Mcplet.objects.filter(status=Mcplet.Status.ACCEPTED)
            .filter(name__in=names[start : start + 500])
            .exclude(server=server)
            .values_list("name", "server__name")
        )
        taken.update(rows)
    return taken


def _tool_event(server, mcplet, what):
    status = mcplet.status
    return audit.event(
        f"mcplet.tool.{what}",
        target_server=server.name,
        target_tool=mcplet.name,
        result=audit.SUCCESS if status == Mcplet.Status.ACCEPTED else audit.BLOCKED,
        details={
            "status": status,
            "reason": mcplet.rejection_reason,
            "mcpletType": mcplet.mcplet_type,
            "pool": mcplet.pool_name,
            "visibility": mcplet.visibility,
        },
    )


def apply_snapshot(server_id, tools, protocol_version=""):
    """Store a server's tool list (listed at `protocol_version`): validate new and changed
    tools, evict removed ones."""
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server_id)
        pools = {p.name: p for p in Pool.objects.all()}
        existing = {m.name: m for m in server.mcplets.all()}
        taken = _served_elsewhere(server, {t.name for t in tools})
        report, events, to_create, to_update, seen = DiscoveryReport(server.name), [], [], [], set()

        listed = Counter(tool.name for tool in tools)
        for tool in tools:
            fields = classify(tool, pools)
            if tool.name in seen:
                continue  # a name listed twice is one rejected tool, kept as first listed
            seen.add(tool.name)
            if listed[tool.name] > 1:
                fields["status"] = Mcplet.Status.REJECTED
                fields["rejection_reason"] = _joined(
                    fields["rejection_reason"],
                    f"the server lists {listed[tool.name]} tools of this name: which one a "
                    "call would run is unknown",
                )
            if fields["status"] == Mcplet.Status.ACCEPTED and tool.name in taken:
                fields["status"] = Mcplet.Status.REJECTED
                fields["rejection_reason"] = (
                    f"the tool name is already served by the server {taken[tool.name]!r}; "
                    "routing by name must stay unambiguous"
                )
            mcplet = existing.get(tool.name)
            if mcplet is None:
                mcplet = Mcplet(server=server, name=tool.name, **fields)
                mcplet.sync_surfaces()
                to_create.append(mcplet)
                events.append(_tool_event(server, mcplet, fields["status"]))
            else:
                before = _tracked(mcplet)
                for name, value in fields.items():
                    setattr(mcplet, name, value)
                mcplet.sync_surfaces()
                if before != _tracked(mcplet):
                    to_update.append(mcplet)
                    what = mcplet.status if before["status"] != mcplet.status else "changed"
                    events.append(_tool_event(server, mcplet, what))
                    report.changed.append(tool.name)
            if mcplet.status == Mcplet.Status.ACCEPTED:
                report.accepted += 1
            else:
                report.rejected += 1

        for name, mcplet in existing.items():
            if name not in seen and mcplet.status != Mcplet.Status.EVICTED:
                mcplet.status = Mcplet.Status.EVICTED
                evicted_at = f"{timezone.now():%Y-%m-%d %H:%M:%S} UTC"
                mcplet.rejection_reason = f"no longer listed by the server (evicted {evicted_at})"
                to_update.append(mcplet)
                events.append(_tool_event(server, mcplet, "evicted"))
                report.evicted += 1
                report.changed.append(name)

        Mcplet.objects.bulk_create(to_create, batch_size=500)
        Mcplet.objects.bulk_update(to_update, [*TRACKED_FIELDS, "updated_at"], batch_size=500)
        signals.tools_listed.send(Mcplet, server=server, mcplets=[*to_create, *to_update])
        _set_status(server, McpServer.Status.CONNECTED, "", events)
        server.last_discovery_at = timezone.now()
        server.protocol_version = protocol_version or server.protocol_version
        server.save(update_fields=["status", "last_error", "last_discovery_at", "protocol_version"])
        audit.record_many(events)
    metrics.discovered(report)
    return report


def _set_status(server, status, error, events):
    """Move the server to `status`, adding the audit event of a connection change."""
    was_connected = server.status == McpServer.Status.CONNECTED
    if status == McpServer.Status.CONNECTED and not was_connected:
        events.append(audit.event(audit.EventType.SERVER_CONNECTED, target_server=server.name))
    elif status in (McpServer.Status.ERROR, McpServer.Status.DISCONNECTED) and (
        was_connected or server.last_error != error
    ):
        events.append(
            audit.event(
                audit.EventType.SERVER_DISCONNECTED,
                target_server=server.name,
                result=audit.FAILURE if status == McpServer.Status.ERROR else audit.SUCCESS,
                details={"status": status, "error": error},
            )
        )
    server.status, server.last_error = status, error


def mark_server(server_id, status, error=""):
    with transaction.atomic():
        server = McpServer.objects.select_for_update().filter(pk=server_id).first()
        if server is None:
            return
        events = []
        _set_status(server, status, error, events)
        server.save(update_fields=["status", "last_error"])
        audit.record_many(events)


async def snapshot_of(config, session):
    """`snapshot()` with any failure reported as the server being unreachable."""
    try:
        return await snapshot(session)
    except Exception as exc:
        raise ServerUnreachable(f"{config.name}: {describe(exc)}") from exc


async def discover_with_session(config, session):
    """Re-discover over an already open session (the watcher's path)."""
    tools = await snapshot_of(config, session)
    return await sync_to_async(apply_snapshot)(config.id, tools, session.protocol_version)


async def fetch_snapshot(config, timeout):
    """(the server's tools, the MCP revision they were listed at)."""
    async with open_session(config, timeout=timeout) as session:
        return await snapshot_of(config, session), session.protocol_version


def discover(server, timeout=30.0):
    """Connect, list, validate and store; returns a DiscoveryReport or raises ServerUnreachable
    (after recording the error on the server, whose tools stay as they were)."""
    if server.status != McpServer.Status.CONNECTED:
        mark_server(server.pk, McpServer.Status.CONNECTING)
    try:
        tools, protocol_version = anyio.run(fetch_snapshot, ServerConfig.of(server), timeout)
    except ServerUnreachable as exc:
        mark_server(server.pk, McpServer.Status.ERROR, str(exc))
        raise
    report = apply_snapshot(server.pk, tools, protocol_version)
    server.refresh_from_db()
    return report
