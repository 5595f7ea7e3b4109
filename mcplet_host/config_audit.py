"""Configuration changes as audit events: whoever changes what grants power — in admin, the
dashboard, a management command or through the ORM — the change is an event in the audit chain,
written in the change's own transaction (both or neither), naming who made it and what changed.
A secret's value is never written, only that it changed.

Each app tracks its own models in its `ready()` (`track`, `track_grants`); `ConfigChangeMiddleware`
tells who is signed in. Queryset `update()` and raw SQL bypass model signals: the host's own
code changes configuration through model methods (`save`, `revoke`, related managers)."""

import contextvars
import json
import os
import sys
from dataclasses import dataclass

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q
from django.db.models.signals import (
    m2m_changed,
    post_delete,
    post_save,
    pre_delete,
    pre_save,
)

from mcplet_host import audit

PREFIX = "mcplet.config."
# Configuration events that kept the names they had before this module.
CONFIGURATION = (
    Q(event_type__startswith=PREFIX)
    | Q(event_type__startswith="server.oauth.")
    | Q(event_type__in=["mcplet.passkey.registered", "mcplet.passkey.revoked"])
    | Q(event_type__regex=r"^dashboard\.(enable|disable|pause|resume)_")
)
LONGEST_VALUE = 500  # characters of a changed text kept in the event (a prompt can be long)

_request = contextvars.ContextVar("config_change_request", default=None)


@dataclass(frozen=True)
class Tracked:
    """A model whose rows are configuration: its event kind (`mcplet.config.<kind>.<verb>`),
    the fields that matter, those recorded only as changed, and the verb for a new row."""

    kind: str
    fields: tuple
    secret: tuple = ()
    created: str = "created"
    server: str = ""  # the attribute naming the MCP server the row belongs to, if any
    # instance -> {relation: names}: grants that go with the row when it is deleted (a cascade
    # sends no m2m signal)
    grants: object = None

    def target_server(self, instance):
        if not self.server:
            return ""
        value = instance
        for part in self.server.split("."):
            value = getattr(value, part, None)
        return str(value or "")


@dataclass(frozen=True)
class Grant:
    """A many-to-many relation that grants power, named from its owner's side."""

    kind: str
    name: str
    owner: type
    relation: str
    approver_check: object = None  # owner -> bool, for grants that make an approver
    members: object = None  # owner -> names, when the owner is a group

    def state(self, owner):
        held = sorted(str(item) for item in getattr(owner, self.relation).all())
        return held, self.approver_check(owner) if self.approver_check else None

    def owners(self, instance, reverse, pk_set):
        """The owners whose grant changes: the instance, or from the other side of the relation
        those named (every holder, for a clear())."""
        if not reverse:
            return [instance]
        holders = self.owner._base_manager
        if pk_set is None:
            return list(holders.filter(**{self.relation: instance}))
        return list(holders.filter(pk__in=pk_set))


_TRACKED = {}
_GRANTS = {}


def track(model, kind, *, extra=(), exclude=(), **options):
    """Audit changes to `model`'s rows: the fields an operator can edit (less `exclude`), and
    `extra` ones the host sets (a key's `revoked_at`)."""
    editable = [
        f.name
        for f in model._meta.concrete_fields
        if f.editable and not f.primary_key and f.name not in exclude
    ]
    _TRACKED[model._meta.concrete_model] = Tracked(kind, (*editable, *extra), **options)


def track_grants(relation, kind, name, **options):
    """`relation` is the many-to-many descriptor on its owner, e.g. Agent.accessible_pools."""
    field = relation.field
    _GRANTS[relation.through] = Grant(kind, name, field.model, field.name, **options)


# --- who makes the change -----------------------------------------------------------------


class ConfigChangeMiddleware:
    """Makes the request (and so its signed-in operator) known to changes made while it runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def changer():
    """(actor_type, actor_id, how) of a change made now."""
    request = _request.get()
    if request is not None:
        path = request.path
        how = {"via": path.strip("/").split("/")[0] or "web", "request": path}
        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            if hasattr(user, "get_username"):
                return audit.ActorType.USER, user.get_username(), how
            return audit.ActorType.PARTNER, str(getattr(user, "agent", "")), how
        return audit.ActorType.SYSTEM, "", how
    program = os.path.basename(sys.argv[0]) if sys.argv else ""
    if program in ("manage.py", "django-admin") and len(sys.argv) > 1:
        return audit.ActorType.SYSTEM, f"manage.py {sys.argv[1]}", {"via": "command"}
    return audit.ActorType.SYSTEM, "", {"via": "host"}


def _record(event_type, details, server=""):
    actor_type, actor_id, how = changer()
    audit.record(
        PREFIX + event_type,
        actor_type=actor_type,
        actor_id=actor_id,
        target_server=server,
        details={**details, **how},
    )


# --- what changed ---------------------------------------------------------------------------


def _raw(instance, name):
    return getattr(instance, instance._meta.get_field(name).attname)


def _shown(model, name, value, secret):
    """What the event says of a value: a related row's name, a secret's key names at most, a
    long text cut."""
    if secret:
        if isinstance(value, dict):
            return {"keys": sorted(value), "values": "withheld"}
        return "set (withheld)" if value else "empty"
    model_field = model._meta.get_field(name)
    if model_field.is_relation and value is not None:
        related = model_field.related_model._base_manager.filter(pk=value).first()
        return str(related) if related is not None else value
    if isinstance(value, str) and len(value) > LONGEST_VALUE:
        return value[:LONGEST_VALUE] + "…"
    try:
        json.dumps(value, cls=DjangoJSONEncoder)
    except TypeError:  # a time zone, say
        return str(value)
    return value


def _snapshot(instance, names):
    return {name: _raw(instance, name) for name in names}


def _before_save(sender, instance, raw=False, update_fields=None, **kwargs):
    tracked = _TRACKED.get(type(instance)._meta.concrete_model)
    if tracked is None or instance._state.adding or instance.pk is None:
        return
    names = [f for f in tracked.fields if update_fields is None or f in update_fields]
    stored = type(instance)._base_manager.filter(pk=instance.pk).first() if names else None
    instance._config_before = _snapshot(stored, names) if stored is not None else None


def _after_save(sender, instance, created, raw=False, **kwargs):
    tracked = _TRACKED.get(type(instance)._meta.concrete_model)
    if tracked is None:
        return
    before = instance.__dict__.pop("_config_before", None)
    model = type(instance)
    name = str(instance)
    server = tracked.target_server(instance)
    if created:
        values = {
            f: _shown(model, f, v, f in tracked.secret)
            for f, v in _snapshot(instance, tracked.fields).items()
            if v not in (None, "", [], {})
        }
        _record(f"{tracked.kind}.{tracked.created}", {"object": name, "values": values}, server)
        return
    if not before:
        return
    after = _snapshot(instance, before)
    changes = {}
    for f in before:
        if before[f] != after[f]:
            shown = [_shown(model, f, v, f in tracked.secret) for v in (before[f], after[f])]
            changes[f] = shown if shown[0] != shown[1] else "changed (withheld)"
    if not changes:
        return
    verb = "changed"
    if changes.keys() == {"revoked_at"} and after["revoked_at"] is not None:
        verb = "revoked"
    _record(f"{tracked.kind}.{verb}", {"object": name, "changes": changes}, server)


def _before_delete(sender, instance, **kwargs):
    tracked = _TRACKED.get(type(instance)._meta.concrete_model)
    if tracked is not None and tracked.grants:
        instance._config_grants_lost = tracked.grants(instance)


def _after_delete(sender, instance, **kwargs):
    tracked = _TRACKED.get(type(instance)._meta.concrete_model)
    if tracked is None:
        return
    details = {"object": str(instance)}
    if lost := instance.__dict__.pop("_config_grants_lost", None):
        details["grants"] = lost
    _record(f"{tracked.kind}.deleted", details, tracked.target_server(instance))


M2M_ACTIONS = ("pre_add", "pre_remove", "pre_clear", "post_add", "post_remove", "post_clear")


def _grants_changed(sender, instance, action, reverse, pk_set, **kwargs):
    grant = _GRANTS.get(sender)
    if grant is None or action not in M2M_ACTIONS:
        return
    if action.startswith("pre_"):
        owners = grant.owners(instance, reverse, pk_set)
        instance._config_grants = [(owner, grant.state(owner)) for owner in owners]
        return
    for owner, (held_before, approver_before) in instance.__dict__.pop("_config_grants", []):
        held_after, approver_after = grant.state(owner)
        if held_after == held_before:
            continue
        details = {
            "object": str(owner),
            "grant": grant.name,
            "before": held_before,
            "after": held_after,
            "added": sorted(set(held_after) - set(held_before)),
            "removed": sorted(set(held_before) - set(held_after)),
        }
        if grant.members:
            details["members"] = grant.members(owner)
        event = f"{grant.kind}.grants_changed"
        if approver_before != approver_after:
            event = "approver.granted" if approver_after else "approver.removed"
        _record(event, details)


def connect():
    """Listen to every model's saves (a proxy model sends its own class); once per process."""
    pre_save.connect(_before_save, dispatch_uid="config_audit.before_save")
    post_save.connect(_after_save, dispatch_uid="config_audit.after_save")
    pre_delete.connect(_before_delete, dispatch_uid="config_audit.before_delete")
    post_delete.connect(_after_delete, dispatch_uid="config_audit.after_delete")
    m2m_changed.connect(_grants_changed, dispatch_uid="config_audit.grants")
