"""What the gateway checks, read once per process and kept while it is current: each routable
MCPlet by name (with its server and pool), and each agent's enabled flag and granted pools; what
a partner's request is authenticated and routed by (its key, the agents it may call); who is
signed in and what they may do (mcplet_host.backends).

Database triggers replace the registry's version token (`RegistryVersion`) at every write to
those tables, in the writer's own transaction, whoever writes — the ORM, a queryset update, raw
SQL, another process. Every check reads the token first (one row by primary key); what is kept
under another token is dropped. A committed change moves the token and the data at once, and
what is loaded after reading a token is at least as new as it: a kept answer is never older
than the database's own answer at that read."""

import pickle
import threading
from dataclasses import dataclass

from django.apps import apps
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

# The tables whose rows decide a check, as (app label, model, through field or "", columns
# whose updates alone change nothing that is kept).
WATCHED = (
    ("pools", "Mcplet", "", ()),
    ("pools", "McpServer", "", ()),
    ("pools", "Pool", "", ()),
    ("agents", "Agent", "", ()),
    ("agents", "Agent", "accessible_pools", ()),
    ("agents", "Agent", "callable_agents", ()),
    ("a2a", "PartnerKey", "", ("last_used_at",)),  # written once a minute per key in use
    # Who is signed in and what they may do (mcplet_host.backends); a login writes last_login.
    (*settings.AUTH_USER_MODEL.split("."), "", ("last_login",)),
    (*settings.AUTH_USER_MODEL.split("."), "groups", ()),
    (*settings.AUTH_USER_MODEL.split("."), "user_permissions", ()),
    ("auth", "Group", "permissions", ()),
    ("auth", "Permission", "", ()),
    ("contenttypes", "ContentType", "", ()),  # (a permission's name is its app's label)
    ("toolindex", "Posting", "", ()),  # what tool searches keep (term counts) follows it too
)
TRIGGER = "mcplet_registry_changed"
EVENTS = ("INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class Holder:
    """An agent as a check sees it: whether it may act, and the pools granted to it."""

    agent_id: str
    enabled: bool
    pool_ids: frozenset


class Snapshot:
    """What was read under one token. Entries are added as they are first needed; a name that
    resolves to nothing is not kept (a model may invent any number of names)."""

    def __init__(self, token):
        self.token = token
        self._tools, self._holders, self._kept = {}, {}, {}

    def kept(self, key, compute):
        """`compute()`, once under this token: for what follows from the watched tables alone
        (and from what is written in the same transactions, like the tool index)."""
        if self.token is None:
            return compute()
        if key not in self._kept:
            self._kept[key] = compute()
        return self._kept[key]

    def ids(self, queryset):
        """The primary keys a query of the watched tables returns (keyed by its SQL: the same
        statement under the same token has the same answer), e.g. the MCPlets an agent may
        see, which every tool search of its run starts from."""
        return self.kept(
            ("ids", str(queryset.query)),
            lambda: frozenset(queryset.values_list("pk", flat=True)),
        )

    def copy_of(self, key, compute):
        """A copy of the model instance `compute()` returns, kept pickled under this token so
        that each caller has its own (it may change and save it). None if it found nothing,
        which is not kept: a look-up by what a caller sent must not grow what is kept."""
        if key not in self._kept:
            value = compute()
            if value is None:
                return None
            if self.token is None:
                return value
            self._kept[key] = pickle.dumps(value)
        return pickle.loads(self._kept[key])  # noqa: S301 (only what this process pickled)

    def agents(self, agent_ids):
        """The agents of `agent_ids` that exist, by agent_id (copies, as `copy_of`'s), each with
        the agent it hands off to, with one query for those not kept yet."""
        missing = {a for a in agent_ids if ("agent", a) not in self._kept}
        found = {}
        if missing:
            agents = apps.get_model("agents", "Agent").objects.select_related("hands_off_to")
            found = agents.in_bulk(missing, field_name="agent_id")
        copies = {a: self.copy_of(("agent", a), lambda a=a: found.get(a)) for a in agent_ids}
        return {a: agent for a, agent in copies.items() if agent is not None}

    def tool(self, name):
        if name not in self._tools:
            found = (
                apps.get_model("pools", "Mcplet")
                .objects.routable()
                .select_related("server", "pool")
                .filter(name=name)
                .first()
            )
            if found is None or self.token is None:
                return found
            self._tools[name] = found
        return self._tools[name]

    def holder(self, agent_id):
        if agent_id not in self._holders:
            rows = list(
                apps.get_model("agents", "Agent")
                .objects.filter(agent_id=agent_id)
                .values_list("enabled", "accessible_pools")
            )
            if not rows:
                return None
            found = Holder(agent_id, rows[0][0], frozenset(p for _, p in rows if p is not None))
            if self.token is None:
                return found
            self._holders[agent_id] = found
        return self._holders[agent_id]


_kept = Snapshot(None)
_lock = threading.Lock()


def current(using=DEFAULT_DB_ALIAS):
    """The snapshot for the registry as it is now (a fresh one whenever the token moved; one
    that keeps nothing while the token row is missing, e.g. just after a flush)."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {token_query()}")  # noqa: S608 (our own name)
        return at(cursor.fetchone()[0])


def token_query():
    """The token as a scalar subquery (NULL without its row): read with the rows of another
    statement, the check that follows them takes its snapshot `at` it, a round trip fewer."""
    table = apps.get_model("mcplet_host", "RegistryVersion")._meta.db_table
    return f"(SELECT token FROM {table} WHERE id = 1)"  # noqa: S608 (our own name)


def at(token):
    """The snapshot for the registry whose token was just read as `token`."""
    global _kept
    kept = _kept
    if token is None or kept.token != token:
        kept = Snapshot(token)
        with _lock:
            _kept = kept
    return kept


def _tables():
    """(table, the columns whose updates move the token, or None for all of them)."""
    for app_label, model_name, field, ignored in WATCHED:
        model = apps.get_model(app_label, model_name)
        if field:
            model = model._meta.get_field(field).remote_field.through
        columns = [f.column for f in model._meta.concrete_fields if f.column not in ignored]
        yield model._meta.db_table, (columns if ignored else None)


def _update_of(columns, quote):
    return "UPDATE" if columns is None else f"UPDATE OF {', '.join(map(quote, columns))}"


def _renew(vendor, table):
    """The statement(s) that give the token a new random value, or None without triggers.
    SQLite's: no INSERT that could conflict, since a trigger's conflict policy is the outer
    statement's (Django's m2m `add` is an INSERT OR IGNORE, which would leave the token)."""
    if vendor == "postgresql":
        return (
            f"INSERT INTO {table} (id, token) VALUES (1, gen_random_uuid()::text) "  # noqa: S608
            "ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token"
        )
    if vendor == "sqlite":
        return (
            f"INSERT INTO {table} (id, token) SELECT 1, '' "  # noqa: S608
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE id = 1); "
            f"UPDATE {table} SET token = hex(randomblob(16)) WHERE id = 1"
        )
    return None  # no triggers, no token: nothing is kept and every check reads the database


def drop_triggers(connection):
    """Undo install_triggers (migrating RegistryVersion's table away)."""
    present = connection.introspection.table_names()
    names = [table for table, _ in _tables() if table in present]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in names:
                cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {TRIGGER}()")
        elif connection.vendor == "sqlite":
            for table in names:
                for event in EVENTS:
                    cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_{table}_{event.lower()}")


def install_triggers(using=DEFAULT_DB_ALIAS, **_):
    """(Re)create the triggers that move the token; idempotent, run after every migrate."""
    connection = connections[using]
    version = apps.get_model("mcplet_host", "RegistryVersion")._meta.db_table
    renew = _renew(connection.vendor, version)
    watched = dict(_tables())
    if renew is None or not {version, *watched} <= set(connection.introspection.table_names()):
        return  # a migrate back past one of them: the next migrate forward installs them
    quote, statements = connection.ops.quote_name, []
    if connection.vendor == "postgresql":
        statements.append(
            f"CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN {renew}; RETURN NULL; END $$"
        )
        for table, columns in watched.items():
            statements += [
                f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}",
                f"CREATE TRIGGER {TRIGGER} AFTER INSERT OR {_update_of(columns, quote)} OR DELETE"
                f" OR TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {TRIGGER}()",
            ]
    else:  # SQLite: row triggers only, and a rebuilt table has lost its triggers
        for table, columns in watched.items():
            for event in EVENTS:
                # (dropped first: a new column must join an UPDATE OF list)
                name = f"{TRIGGER}_{table}_{event.lower()}"
                when = _update_of(columns, quote) if event == "UPDATE" else event
                statements += [
                    f"DROP TRIGGER IF EXISTS {name}",
                    f"CREATE TRIGGER {name} AFTER {when} ON {table} BEGIN {renew}; END",
                ]
    with connection.cursor() as cursor:
        for statement in [*statements, *renew.split("; ")]:
            cursor.execute(statement)
