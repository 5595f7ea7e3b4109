"""Statements of the hot paths, compiled by Django once and kept (design.md, "Kept statements").

Django builds a statement anew at each call: the query, its WHERE tree, the compiler, the quoted
names. That is 0.1–0.3 ms of CPU a statement here, against about 0.05 ms for psycopg to send it
and read the answer, and most of what an A2A delivery or an approval costs. A kept statement is
one shape of a query (the model, the lookups, the columns set): Django compiles it the first
time each connection (each thread) runs it, and later calls only bind their values — with the
fields' own conversions — and read rows with Django's converters and `from_db`.

Values Django writes into the SQL itself rather than as parameters (None, True and False, how
many distinct values an `__in` binds) are part of the shape, and so are the types of the values
an UPDATE sets. The first call checks that binding its values gives Django's own parameters; a
shape whose parameters Django builds in another way (an expression, a join an UPDATE must select
through, a lookup not known here) is never kept: each of its calls goes through the ORM.
"""

import copy
import logging

from django.core.exceptions import EmptyResultSet, FieldDoesNotExist
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Model, TextField, signals, sql
from django.db.models.constants import LOOKUP_SEP, OnConflict
from django.db.models.expressions import RawSQL
from django.db.models.query import get_related_populators

log = logging.getLogger(__name__)

ONE_VALUE = {"exact", "gt", "gte", "lt", "lte"}
NOT_KEPT = object()


def get(model, **where):
    """`model.objects.get(**where)` for lookups of a unique key (at most one row)."""
    return get_related(model, (), **where)


def get_related(model, related, **where):
    """`model.objects.select_related(*related).get(**where)`: the related rows come with it,
    in the one statement."""
    return _get(model, where, related, {})


def get_with(model, columns, **where):
    """`get` with more columns read in the same statement: `columns` maps a name to an SQL
    expression of no parameters (a scalar subquery of another table), its value set on the
    row under that name, as Django's `annotate(name=RawSQL(sql, ()))` does."""
    return _get(model, where, (), columns)


def _get(model, where, related, columns):
    statement, connection = _select(model, where, unique=True, related=related, columns=columns)
    if statement is NOT_KEPT:
        manager = model._default_manager.db_manager(connection.alias)
        queryset = manager.select_related(*related) if related else manager.all()
        return queryset.annotate(**_raw(columns)).get(**where)
    found = statement.rows(where, connection)
    if not found:
        name = model._meta.object_name
        raise model.DoesNotExist(f"{name} matching query does not exist.")
    if len(found) > 1:
        raise model.MultipleObjectsReturned(
            f"get() returned more than one {model._meta.object_name}"
        )
    return found[0]


def _raw(columns):
    text = TextField()  # the callers' own SQL, with no values in it
    return {name: RawSQL(sql, (), output_field=text) for name, sql in columns.items()}  # noqa: S611


def rows(model, **where):
    """`list(model.objects.filter(**where))`, in the model's own order."""
    statement, connection = _select(model, where, unique=False)
    if statement is NOT_KEPT:
        return list(model._default_manager.db_manager(connection.alias).filter(**where))
    return statement.rows(where, connection)


def _select(model, where, unique, related=(), columns=None):
    connection, columns = connections[router.db_for_read(model)], columns or {}
    key = ("get" if unique else "rows", model, _shape(where), tuple(related), *columns.items())
    statement = compiled(
        connection, key, lambda: _Select.compile(model, where, connection, unique, related, columns)
    )
    return statement, connection


def update(model, where, values, exclude=None):
    """`model.objects.filter(**where).exclude(**exclude).update(**values)`: the rows changed."""
    db = router.db_for_write(model)
    connection = connections[db]
    key = ("update", model, *update_shape(where, values, exclude or {}))
    statement = compiled(
        connection, key, lambda: compiled_update(model, where, values, exclude or {}, connection)
    )
    if statement is NOT_KEPT:
        return _queryset(model, where, exclude, db).update(**values)
    with transaction.mark_for_rollback_on_error(using=db), connection.cursor() as cursor:
        cursor.execute(statement.sql, statement.bind(where, values, exclude or {}, connection))
        return cursor.rowcount


def update_shape(where, values, exclude):
    """What of an UPDATE's lookups and values decides its SQL."""
    return _shape(where), _set_shape(values), _shape(exclude)


def compiled_update(model, where, values, exclude, connection):
    """The UPDATE of this shape as Django compiles it (NOT_KEPT if it binds otherwise)."""
    return _Update.compile(model, where, values, exclude, connection)


def compiled_insert(obj, connection, on_conflict):
    """The INSERT of `obj` as `save()` would send it (NOT_KEPT if Django binds otherwise)."""
    return _Insert.compile(obj, connection, on_conflict)


def create(model, **values):
    """`model.objects.create(**values)` for a model of one table (no parents), with the
    pre_save and post_save signals Django sends."""
    return _create(model, values, None)


def create_unless_taken(model, **values):
    """As `create`, but None when a unique constraint holds these values already (INSERT … ON
    CONFLICT DO NOTHING): no error, so no savepoint around it in a transaction. (SQLite's
    INSERT OR IGNORE also leaves out a row that breaks NOT NULL or CHECK: None then too.)"""
    return _create(model, values, OnConflict.IGNORE)


def new(model, values):
    obj = model(**values)
    if obj.pk is None:  # as Model.save(): a primary key's default, if it has one
        obj.pk = obj._meta.pk.get_pk_value_on_save(obj)
    return obj


def expressions(*values):
    return any(hasattr(v, "resolve_expression") for each in values for v in each.values())


def _create(model, values, on_conflict):
    obj = new(model, values)
    db = router.db_for_write(model, instance=obj)
    connection = connections[db]
    if expressions(values):
        statement = NOT_KEPT  # an expression is SQL of its own
    else:
        key = ("create", model, obj.pk is None, on_conflict)
        statement = compiled(connection, key, lambda: compiled_insert(obj, connection, on_conflict))
    if statement is not NOT_KEPT:
        return obj if statement.insert(obj, connection, db) else None
    if on_conflict is None:
        obj.save(force_insert=True, using=db)
        return obj
    try:
        with transaction.atomic(using=db):
            obj.save(force_insert=True, using=db)
    except IntegrityError:
        return None
    return obj


def compiled(connection, key, compile_it):
    """The statement of this shape on this connection, compiled at its first call."""
    statements = _statements(connection)
    if key not in statements:
        statements[key] = compile_it()
    return statements[key]


def _statements(connection):
    """The statements kept on this connection (Django's, one per thread and alias): they go
    with it."""
    try:
        return connection.mcplet_kept_statements
    except AttributeError:
        connection.mcplet_kept_statements = {}
        return connection.mcplet_kept_statements


def _shape(lookups):
    """What of these lookups decides the SQL: their names, and what Django writes inline (NULL,
    a boolean, how many values an IN binds)."""
    return tuple((name, _inline(name, value)) for name, value in lookups.items())


def _inline(name, value):
    if value is None or isinstance(value, bool):
        return value
    if name.endswith(LOOKUP_SEP + "in"):
        return ("in", len(_distinct(value)))  # as Django's In: each once, no NULL
    return type(value)


def _set_shape(values):
    """What of the values an UPDATE sets decides the SQL: which are NULL (`SET … = NULL`), and
    their types (an expression is SQL of its own)."""
    return tuple((name, None if value is None else type(value)) for name, value in values.items())


def _distinct(values):
    return dict.fromkeys(v for v in values if v is not None)


def _queryset(model, where, exclude, db):
    queryset = model._default_manager.db_manager(db).filter(**where)
    return queryset.exclude(**exclude) if exclude else queryset


class _Statement:
    def __init__(self, model, sql_text, where_order, exclude_order, set_fields):
        self.model, self.sql = model, sql_text
        self.where_order, self.exclude_order = where_order, exclude_order
        self.set_fields = set_fields  # (name, field) in the order Django sets them

    def bind(self, where, values, exclude, connection):
        params = [
            _save_param(field, values[name], connection)
            for name, field in self.set_fields
            if values[name] is not None  # SET … = NULL, written into the SQL
        ]
        for names, lookups in ((self.where_order, where), (self.exclude_order, exclude)):
            for name in names:
                params += _lookup_params(self.model, name, lookups[name], connection)
        return params

    @classmethod
    def checked(cls, statement, django_params, where, values, exclude, connection):
        """The statement if binding the first call's values gives Django's own parameters."""
        try:
            ours = statement.bind(where, values, exclude, connection)
        except _Unknown:
            return NOT_KEPT
        return _if_same(statement, ours, django_params)


class _Select(_Statement):
    @classmethod
    def compile(cls, model, where, connection, unique, related, columns):
        queryset = _queryset(model, where, None, connection.alias).annotate(**_raw(columns))
        if related:
            queryset = queryset.select_related(*related)
        if unique:  # as QuerySet.get(), with a limit of 2: more than one row is an error
            queryset = queryset.order_by()[:2]
        compiler = queryset.query.get_compiler(connection=connection)
        try:
            sql_text, params = compiler.as_sql()
        except EmptyResultSet:  # an empty IN: Django answers without asking the database
            return NOT_KEPT
        klass_info = compiler.klass_info
        joined = bool(klass_info.get("related_klass_infos"))
        if compiler.annotation_col_map.keys() != columns.keys() or joined != bool(related):
            return NOT_KEPT
        statement = cls(model, sql_text, sorted(where), (), ())
        statement.annotations = compiler.annotation_col_map
        fields = klass_info["select_fields"]
        statement.columns = slice(fields[0], fields[-1] + 1)
        statement.init_list = [f[0].target.attname for f in compiler.select[statement.columns]]
        statement.compiler = compiler  # its converters, for the rows read
        statement.populators = get_related_populators(klass_info, compiler.select, connection.alias)
        return cls.checked(statement, params, where, {}, {}, connection)

    def rows(self, where, connection):
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.bind(where, {}, {}, connection))
            found = cursor.fetchall()
        objs = []
        for row in self.compiler.results_iter(results=[found]):
            objs.append(self.model.from_db(connection.alias, self.init_list, row[self.columns]))
            for populator in self.populators:  # as QuerySet's ModelIterable
                populator.populate(row, objs[-1])
            for name, index in self.annotations.items():
                setattr(objs[-1], name, row[index])
        return objs


class _Update(_Statement):
    @classmethod
    def compile(cls, model, where, values, exclude, connection):
        query = _queryset(model, where, exclude, connection.alias).query.chain(sql.UpdateQuery)
        query.add_update_values(values)
        query.clear_select_clause()
        if query.related_updates or query.count_active_tables() != 1:
            return NOT_KEPT  # Django selects the rows first, or updates other tables too
        try:
            sql_text, params = query.get_compiler(connection=connection).as_sql()
        except EmptyResultSet:
            return NOT_KEPT
        set_fields = [(name, model._meta.get_field(name)) for name in values]
        statement = cls(model, sql_text, sorted(where), sorted(exclude), set_fields)
        return cls.checked(statement, params, where, values, exclude, connection)


class _Insert:
    """As Model.save() inserts a new row: every concrete column (the AutoField's too if it is
    set), the fields' pre_save (auto_now_add), the columns the database returns."""

    @classmethod
    def compile(cls, obj, connection, on_conflict):
        meta = obj._meta
        if meta.parents or meta.proxy or meta.order_with_respect_to:
            return NOT_KEPT
        if any(f.has_db_default() for f in meta.local_concrete_fields):
            return NOT_KEPT  # DEFAULT is written into the SQL
        if not connection.features.can_return_columns_from_insert:
            return NOT_KEPT
        statement = cls()
        pk_set = obj.pk is not None
        statement.fields = [
            f
            for f in meta.local_concrete_fields
            if not f.generated and (pk_set or f is not meta.auto_field)
        ]
        statement.returning = meta.db_returning_fields
        probe = copy.copy(obj)  # Django's compiler runs the fields' pre_save on it
        query = sql.InsertQuery(obj.__class__, on_conflict=on_conflict)
        query.insert_values(statement.fields, [probe])
        compiler = query.get_compiler(connection=connection)
        compiler.returning_fields = statement.returning
        [(statement.sql, params)] = compiler.as_sql()
        statement.returning_params = compiler.returning_params
        columns = [f.get_col(meta.db_table) for f in statement.returning]
        statement.converters, statement.compiler = compiler.get_converters(columns), compiler
        ours = [f.get_db_prep_save(getattr(probe, f.attname), connection) for f in statement.fields]
        return _if_same(statement, ours, params)

    def insert(self, obj, connection, db):
        """Insert `obj`: False if ON CONFLICT DO NOTHING left the row out."""
        params = self.params(obj, connection, db)
        with transaction.mark_for_rollback_on_error(using=db), connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            if self.returning:
                row = connection.ops.fetch_returned_insert_columns(cursor, self.returning_params)
            else:
                row = () if cursor.rowcount else None
        return self.inserted(obj, row, db)

    def params(self, obj, connection, db):
        """The values to bind for `obj`, once its pre_save signal is sent (as `save()`)."""
        obj._prepare_related_fields_for_save(operation_name="save")
        model = obj.__class__
        signals.pre_save.send(sender=model, instance=obj, raw=False, using=db, update_fields=None)
        return [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in self.fields]

    def inserted(self, obj, row, db):
        """`obj` saved with the columns the database returned (`row`), and its post_save
        signal sent: False if the row was left out (`row` None)."""
        if row is None:
            return False
        if self.converters:
            [row] = self.compiler.apply_converters([row], self.converters)
        for value, field in zip(row, self.returning, strict=True):
            setattr(obj, field.attname, value)
        obj._state.db, obj._state.adding = db, False
        signals.post_save.send(
            sender=obj.__class__,
            instance=obj,
            created=True,
            update_fields=None,
            raw=False,
            using=db,
        )
        return True

    def as_select(self, source):
        """This INSERT with the SELECT of its values from `source`'s rows in place of VALUES
        (an INSERT's SELECT gives its values the columns' own types), or None."""
        head, values, rest = self.sql.partition(" VALUES (")
        depth, end = 1, 0
        while depth and end < len(rest):
            depth += {"(": 1, ")": -1}.get(rest[end], 0)
            end += 1
        if not values or depth:
            return None
        return f"{head} SELECT {rest[: end - 1]} FROM {source}{rest[end:]}"  # noqa: S608


class _Unknown(Exception):
    """A lookup or value this module does not bind as Django does."""


def _save_param(field, value, connection):
    if hasattr(value, "resolve_expression"):
        raise _Unknown(value)
    if isinstance(value, Model):
        value = value.prepare_database_save(field)
    return field.get_db_prep_save(value, connection=connection)


def _lookup_params(model, name, value, connection):
    field, lookup = _field_and_lookup(model, name)
    if lookup == "isnull" or value is None or isinstance(value, bool):
        return []  # written into the SQL (part of the shape)
    if isinstance(value, Model):
        value = value.pk
    if lookup in ONE_VALUE:
        return [_prep(field, value, connection)]
    if lookup == "in":
        return [_prep(field, v, connection) for v in _distinct(value)]
    raise _Unknown(name)


def _prep(field, value, connection):
    return field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True)


def _field_and_lookup(model, name):
    opts, parts = model._meta, name.split(LOOKUP_SEP)
    field = None
    for i, part in enumerate(parts):
        if field is not None and field.is_relation:
            opts = field.related_model._meta
        try:
            field = opts.pk if part == "pk" else opts.get_field(part)
        except FieldDoesNotExist:
            if i == len(parts) - 1 and field is not None:
                return _target(field), part
            raise _Unknown(name) from None
    return _target(field), "exact"


def _target(field):
    return field.target_field if field.is_relation else field


def _if_same(statement, ours, django_params):
    """The statement if its binding gave Django's own parameters, else never kept."""
    if [_comparable(p) for p in ours] == [_comparable(p) for p in django_params]:
        return statement
    log.debug("not kept (its parameters differ from Django's): %s", statement.sql)
    return NOT_KEPT


def _comparable(param):
    """psycopg's JSON wrappers compare by identity: compare what they wrap."""
    return (type(param), getattr(param, "obj", param))
