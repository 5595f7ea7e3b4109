"""Writes that depend on an UPDATE, as one statement on PostgreSQL (design.md, "Kept
statements"): a request marked delivered and its run created; a run ended, its response, the
request's `answered` mark, its audit event and its hand-off's request; a held call approved and
its audit event. Each is a kept shape (`mcplet_host.kept`) whose pieces Django compiled, joined
by a data-modifying WITH: one round trip and its own transaction outside one, where BEGIN, each
statement and COMMIT took one each.
The guard's UPDATE takes its row's lock first, so a concurrent copy waits for it, then finds the
row changed and does nothing else."""

import re
from typing import NamedTuple

from django.db import connections, router, transaction
from django.db.models.constants import OnConflict

from mcplet_host import audit, kept


class Guard(NamedTuple):
    """`model.objects.filter(**where).exclude(**exclude).update(**values)`, of one row at
    most (`where` names its key)."""

    model: type
    where: dict
    values: dict
    exclude: dict | None = None


class Then(NamedTuple):
    """What `updated_then` does once its guard changed its row: insert `model(**values)`
    (`on_conflict`), if any, then `mark` if that row was inserted; insert `also`, a second row
    (`(model, values)`), whatever the first's conflict; and call `function`, if any, a
    set-returning SQL function of one jsonb argument, with `argument` (JSON text)."""

    model: type | None
    values: dict | None
    on_conflict: OnConflict | None = None
    mark: Guard | None = None
    function: str | None = None
    argument: str | None = None
    also: tuple | None = None


class Done(NamedTuple):
    """What `updated_then` wrote: its row (None if a conflict left it out), `also`'s row, and
    the rows its function returned."""

    created: object
    also: object
    called: list


class NotKept(Exception):
    """A shape `updated_then` cannot send as Django would: the caller takes its general path."""


def create_if_updated(guard, model, **values):
    """`model(**values)`, created only if the `guard` changed its row (else None): on
    PostgreSQL `WITH guard AS (UPDATE … RETURNING 1 AS one) INSERT … SELECT … FROM guard`;
    elsewhere the UPDATE, then the INSERT, in one transaction."""
    if one_statement(model):
        try:
            outcome = updated_then(guard, Then(model, values))
        except NotKept:
            pass
        else:
            return outcome and outcome.created
    with transaction.atomic(using=router.db_for_write(model)):
        if not kept.update(guard.model, guard.where, guard.values, guard.exclude):
            return None
        return kept.create(model, **values)


def one_statement(model):
    """True where `updated_then` runs: PostgreSQL's data-modifying WITH."""
    return connections[router.db_for_write(model)].vendor == "postgresql"


def updated_and_audited(guard, events):
    """The `guard`'s UPDATE and, only if it changed its row, `events` appended to the audit
    chain, in one statement: True, or False if it changed nothing. NotKept where that cannot
    be one statement (the caller writes both in a transaction)."""
    if not one_statement(guard.model):
        raise NotKept(guard.model)
    then = Then(None, None, function=audit.APPEND, argument=audit.in_statement(events))
    outcome = updated_then(guard, then)
    if outcome is None:
        return False
    audit.appended(events, outcome.called)
    return True


def updated_then(guard, then):
    """None if the `guard` changed no row; else what `then` wrote (Done), from one statement:

        WITH guard AS (UPDATE … RETURNING 1 AS one),
             created AS (INSERT … SELECT … FROM guard … RETURNING …),
             marked AS (UPDATE … AND EXISTS (SELECT 1 FROM created)),
             also AS (INSERT … SELECT … FROM guard RETURNING …)
        SELECT created.*, also.*, called.* FROM guard LEFT JOIN created ON true
            LEFT JOIN also ON true
            LEFT JOIN LATERAL function(CASE WHEN guard.one = 1 THEN %s::jsonb END) AS called

    The function, if any, is called once per row of `guard`: never if it changed none (without
    one the SELECT ends at `created`). PostgreSQL only
    (`one_statement`); NotKept for a shape Django binds otherwise."""
    obj = kept.new(then.model, then.values) if then.model else None
    also = kept.new(*then.also) if then.also else None
    db = router.db_for_write(then.model or guard.model, instance=obj)
    connection = connections[db]
    marking = then.mark.values if then.mark else {}
    if kept.expressions(guard.values, then.values or {}, marking, then.also[1] if also else {}):
        raise NotKept(then.model)
    key = ("updated_then", _shape(guard), then.model, obj and obj.pk is None, then.on_conflict)
    key += (then.mark and _shape(then.mark), then.function, also and (type(also), also.pk is None))
    statement = kept.compiled(
        connection, key, lambda: _Then.compile(guard, then, (obj, also), connection)
    )
    if statement is kept.NOT_KEPT:
        raise NotKept(then.model)
    return statement.run(guard, then, (obj, also), connection, db)


def _shape(guard):
    return (guard.model, *kept.update_shape(guard.where, guard.values, guard.exclude or {}))


def _compile(guard, connection):
    exclude = guard.exclude or {}
    return kept.compiled_update(guard.model, guard.where, guard.values, exclude, connection)


def _bind(update, guard, connection):
    return update.bind(guard.where, guard.values, guard.exclude or {}, connection)


def _from_guard(insert):
    """`insert`'s SQL with its values selected from the guard's row, and the width of what it
    returns (at least one column: a row left out reads as NULLs), or None."""
    if insert is kept.NOT_KEPT or not (select := insert.as_select("guard")):
        return None
    if not insert.returning:
        return f"{select} RETURNING 1", 1
    return select, len(insert.returning)


class _Then:
    @classmethod
    def compile(cls, guard, then, objs, connection):
        if then.function and not re.fullmatch(r"[a-z_][a-z0-9_]*", then.function):
            return kept.NOT_KEPT
        obj, also = objs
        statement = cls()
        statement.insert = obj and kept.compiled_insert(obj, connection, then.on_conflict)
        statement.also = kept.compiled_insert(also, connection, None) if also else None
        statement.guard = _compile(guard, connection)
        statement.mark = _compile(then.mark, connection) if then.mark else None
        created, added = obj and _from_guard(statement.insert), also and _from_guard(statement.also)
        if (
            kept.NOT_KEPT in (statement.guard, statement.mark)
            or (obj and not created)
            or (also and not added)
            or (not obj and (then.mark or not then.function))  # a mark follows an insert
        ):
            return kept.NOT_KEPT
        with_ = [f"guard AS ({statement.guard.sql} RETURNING 1 AS one)"]
        rows, joins, widths = [], ["FROM guard"], []
        if created:
            with_.append(f"created AS ({created[0]})")
            rows.append("created.*")
            joins.append("LEFT JOIN created ON true")
            widths.append(created[1])
        if statement.mark:
            marked = f"{statement.mark.sql} AND EXISTS (SELECT 1 FROM created)"  # noqa: S608
            with_.append(f"marked AS ({marked})")
        if added:
            with_.append(f"also AS ({added[0]})")
            rows.append("also.*")
            joins.append("LEFT JOIN also ON true")
            widths.append(added[1])
        if then.function:
            rows.append("called.*")
            joins.append(
                f"LEFT JOIN LATERAL {then.function}"
                "(CASE WHEN guard.one = 1 THEN %s::jsonb END) AS called ON true"
            )
        statement.widths = widths
        statement.sql = f"WITH {', '.join(with_)} SELECT {', '.join(rows)} {' '.join(joins)}"
        return statement

    def run(self, guard, then, objs, connection, db):
        obj, also = objs
        params = _bind(self.guard, guard, connection)
        if obj:
            params += self.insert.params(obj, connection, db)
        if self.mark:
            params += _bind(self.mark, then.mark, connection)
        if also:
            params += self.also.params(also, connection, db)
        with transaction.mark_for_rollback_on_error(using=db), connection.cursor() as cursor:
            cursor.execute(self.sql, [*params, then.argument] if then.function else params)
            rows = cursor.fetchall()
        if not rows:
            return None
        inserts = [(insert, new) for insert, new in ((self.insert, obj), (self.also, also)) if new]
        saved, start = [], 0
        for (insert, new), width in zip(inserts, self.widths, strict=True):
            returned = rows[0][start : start + len(insert.returning)]
            inserted = insert.inserted(new, None if rows[0][start] is None else returned, db)
            saved.append(new if inserted else None)
            start += width
        called = [row[start:] for row in rows]
        called = [row for row in called if any(v is not None for v in row)]
        created = saved.pop(0) if obj else None
        return Done(created, saved.pop(0) if also else None, called)
