"""Kept statements (mcplet_host.kept): a shape compiled by Django once sends what Django's ORM
would send for every later call, reads rows as the ORM reads them, and a shape it cannot bind as
Django does is never kept (its calls go through the ORM)."""

import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, transaction
from django.db.models import F, Value, signals
from django.db.models.functions import Upper
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from a2a.models import A2AMessage
from agents.models import Agent, AgentRun
from mcplet_host import guarded, kept, registry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh():
    """This connection's kept statements, none yet (a test's connection outlives it)."""
    statements().clear()


@pytest.fixture
def agents():
    return {
        "info": Agent.objects.create(agent_id="info-gathering-agent", display_name="Info"),
        "plan": Agent.objects.create(agent_id="planning-agent", display_name="Planning"),
    }


def message(**fields):
    body = {"payload": {"parameters": {"text": "café \u2603", "n": [1, 2.5, None]}}}
    return A2AMessage.objects.create(
        message_id=uuid.uuid4(),
        context_id=uuid.uuid4(),
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id="director",
        recipient_id="info-gathering-agent",
        body=body,
        provenance={"chain": ["director"]},
        signature="sig",
        **fields,
    )


def statements():
    return kept._statements(connections["default"])


def sent(func, *args, **kwargs):
    """What `func` returns, and the statements it sends as the database saw them."""
    with CaptureQueriesContext(connections["default"]) as captured:
        result = func(*args, **kwargs)
    return result, [q["sql"] for q in captured.captured_queries]


def test_a_row_read_by_a_kept_get_is_the_row_the_orm_reads():
    rows = [message(), message(delivered_at=timezone.now())]
    for _ in range(2):  # compiled at the first call, bound at the second
        for row in rows:
            ours = kept.get(A2AMessage, message_id=row.message_id, type=row.type)
            orms = A2AMessage.objects.get(message_id=row.message_id, type=row.type)
            fields = [f.attname for f in A2AMessage._meta.concrete_fields]
            assert {f: getattr(ours, f) for f in fields} == {f: getattr(orms, f) for f in fields}
            assert ours._state.adding is False and ours._state.db == "default"
    by_str = kept.get(A2AMessage, message_id=str(rows[0].message_id), type=rows[0].type)
    assert by_str.pk == rows[0].pk


def test_a_kept_get_with_a_column_reads_it_in_the_same_statement():
    row = message()
    token = {"registry_token": registry.token_query()}
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT {token['registry_token']}")
        [(expected,)] = cursor.fetchall()
    for _ in range(2):  # compiled at the first call, bound at the second
        ours, queries = sent(kept.get_with, A2AMessage, token, message_id=row.message_id)
        orms = A2AMessage.objects.get(message_id=row.message_id)
        fields = [f.attname for f in A2AMessage._meta.concrete_fields]
        assert {f: getattr(ours, f) for f in fields} == {f: getattr(orms, f) for f in fields}
        assert ours.registry_token == expected and len(queries) == 1
    with pytest.raises(A2AMessage.DoesNotExist):
        kept.get_with(A2AMessage, token, message_id=uuid.uuid4())


def _as_read(obj, depth=3):
    """An instance's columns, the related rows it holds (each as read, to `depth`; a reverse
    one-to-one holds its way back), and its state."""
    if not depth or obj is None:
        return obj and obj.pk
    held = obj._state.fields_cache
    return (
        {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields},
        {name: _as_read(related, depth - 1) for name, related in held.items()},
        (obj._state.db, obj._state.adding),
    )


def test_a_kept_get_with_related_rows_reads_them_as_the_orms_select_related(agents):
    agents["info"].hands_off_to = agents["plan"]
    agents["info"].save()
    request = message()
    runs = [
        AgentRun.objects.create(agent=agents["info"], request=request, provenance={}),
        AgentRun.objects.create(agent=agents["plan"], provenance={}),  # no request, no target
    ]
    related = ("agent__hands_off_to", "request")
    for _ in range(2):  # compiled at the first call, bound at the second
        for run in runs:
            ours, queries = sent(kept.get_related, AgentRun, related, pk=run.pk)
            orms = AgentRun.objects.select_related(*related).get(pk=run.pk)
            assert _as_read(ours) == _as_read(orms)
            assert len(queries) == 1 and "JOIN" in queries[0]
    with pytest.raises(AgentRun.DoesNotExist):
        kept.get_related(AgentRun, related, pk=uuid.uuid4())


def test_a_kept_get_refuses_as_the_orm_does():
    with pytest.raises(A2AMessage.DoesNotExist):
        kept.get(A2AMessage, message_id=uuid.uuid4(), type=A2AMessage.Type.TASK_REQUEST)
    for hostile in ("not a uuid", "\x00", "\ud800"):
        with pytest.raises(ValidationError):
            A2AMessage.objects.get(message_id=hostile, type=A2AMessage.Type.TASK_REQUEST)
        with pytest.raises(ValidationError):
            kept.get(A2AMessage, message_id=hostile, type=A2AMessage.Type.TASK_REQUEST)
    twins = [message(), message()]
    with pytest.raises(A2AMessage.MultipleObjectsReturned):
        kept.get(A2AMessage, recipient_id=twins[0].recipient_id, signature="sig")


def test_a_kept_update_sends_what_the_orm_sends():
    rows = [message(), message()]
    now = timezone.now()
    for i, row in enumerate(rows * 2):
        where = {"pk": row.pk, "state": A2AMessage.State.QUEUED}
        values = {"state": A2AMessage.State.QUEUED, "delivered_at": now + timedelta(seconds=i)}
        orms, theirs = sent(A2AMessage.objects.filter(**where).update, **values)
        ours, mine = sent(kept.update, A2AMessage, where, values)
        assert (ours, mine) == (orms, theirs) == (1, theirs)
    assert sum(s is not kept.NOT_KEPT for s in statements().values()) == 1


def test_values_django_writes_into_the_sql_are_part_of_the_shape(agents):
    """None (SET … = NULL), booleans, an IN's length: each its own statement, each as Django's."""
    run = AgentRun.objects.create(agent=agents["info"], context_id="c", lease_owner="w")
    final = (AgentRun.Status.SUCCESS, AgentRun.Status.ERROR)
    cases = [
        ({"pk": run.pk}, {"result": None, "error": {"message": "x"}, "lease_owner": ""}, final),
        ({"pk": run.pk}, {"result": {"a": [1]}, "error": None, "lease_owner": "w2"}, final),
        ({"pk": run.pk, "may_have_held": False}, {"steps": 3, "waiting_for": None}, final[:1]),
        ({"pk": run.pk, "lease_until__isnull": True}, {"agent": agents["plan"]}, final),
    ]
    for where, values, excluded in cases * 2:
        exclude = {"status__in": excluded}
        orm = AgentRun.objects.filter(**where).exclude(**exclude)
        orms, theirs = sent(orm.update, **values)
        ours, mine = sent(kept.update, AgentRun, where, values, exclude=exclude)
        assert (ours, mine) == (orms, theirs)
        assert ours == 1
    kept_now = [s for s in statements().values() if s is not kept.NOT_KEPT]
    assert len(kept_now) == len(cases)
    run.refresh_from_db()
    assert run.agent == agents["plan"] and run.steps == 3


def test_a_shape_django_binds_otherwise_is_never_kept_and_still_runs():
    row = message()
    assert kept.update(A2AMessage, {"pk": row.pk}, {"signature": F("recipient_id")}) == 1
    row.refresh_from_db()
    assert row.signature == row.recipient_id
    assert list(statements().values()) == [kept.NOT_KEPT]
    assert kept.update(A2AMessage, {"pk": row.pk}, {"signature": F("sender_id")}) == 1
    row.refresh_from_db()
    assert row.signature == "director"


def test_an_update_through_a_join_is_never_kept(agents):
    run = AgentRun.objects.create(agent=agents["info"], context_id="c")
    where = {"pk": run.pk, "agent__agent_id": "info-gathering-agent"}
    assert kept.update(AgentRun, where, {"steps": 7}) == 1
    assert list(statements().values()) == [kept.NOT_KEPT]
    run.refresh_from_db()
    assert run.steps == 7
    assert Agent.objects.filter(agent_id="info-gathering-agent").exists()


def test_each_connection_compiles_its_own():
    row = message()
    kept.get(A2AMessage, message_id=row.message_id, type=row.type)
    other = connections.create_connection("default")
    try:
        assert kept._statements(other) == {}
        assert len(statements()) == 1
    finally:
        other.close()


def test_a_read_through_a_join_is_kept_and_reads_the_same(django_user_model):
    from passkey.models import PasskeyCredential

    users = [django_user_model.objects.create_user(name) for name in ("ann", "bob")]
    keys = [
        PasskeyCredential.objects.create(
            user=user, name="laptop", credential_id=f"cred-{user.pk}", public_key=b"\x00\xffk"
        )
        for user in users
    ]
    for _ in range(2):
        for user, key in zip(users, keys, strict=True):
            where = {**PasskeyCredential.ACTIVE, "user": user, "credential_id": key.credential_id}
            ours = kept.get(PasskeyCredential, **where)
            assert ours == PasskeyCredential.objects.active().get(
                user=user, credential_id=key.credential_id
            )
            assert bytes(ours.public_key) == b"\x00\xffk" and ours.transports == []
    assert [s is not kept.NOT_KEPT for s in statements().values()] == [True]
    users[1].is_active = False
    users[1].save()
    with pytest.raises(PasskeyCredential.DoesNotExist):  # its owner is no longer active
        kept.get(
            PasskeyCredential,
            **PasskeyCredential.ACTIVE,
            user=users[1],
            credential_id=keys[1].credential_id,
        )
    with pytest.raises(PasskeyCredential.DoesNotExist):  # another's passkey
        kept.get(
            PasskeyCredential,
            **PasskeyCredential.ACTIVE,
            user=users[0],
            credential_id=keys[1].credential_id,
        )


def test_a_kept_create_writes_the_row_the_orm_writes_and_sends_its_signals(agents):
    heard = []

    def receiver(signal, sender, instance, **kwargs):
        heard.append((signal, instance.pk, kwargs.get("created"), kwargs["raw"], kwargs["using"]))

    fields = {
        "sender_id": "director",
        "recipient_id": "info-gathering-agent",
        "type": A2AMessage.Type.TASK_REQUEST,
        "body": {"payload": {"parameters": {"text": "\u2603", "nested": [{"a": None}]}}},
        "provenance": {"chain": ["director"]},
        "signature": "sig",
    }
    signals.pre_save.connect(receiver, sender=A2AMessage)
    signals.post_save.connect(receiver, sender=A2AMessage)
    try:
        for _ in range(2):
            ids = {"message_id": uuid.uuid4(), "context_id": uuid.uuid4()}
            ours = kept.create(A2AMessage, **fields, **ids)
            orms = A2AMessage.objects.create(**fields, **{**ids, "message_id": uuid.uuid4()})
            assert isinstance(ours.pk, int) and ours.pk != orms.pk
            assert ours._state.adding is False and ours._state.db == "default"
            assert ours.created_at is not None
            read = A2AMessage.objects.get(pk=ours.pk)
            for field in A2AMessage._meta.concrete_fields:
                if field.attname not in ("id", "message_id", "created_at"):
                    assert getattr(read, field.attname) == getattr(orms, field.attname), field
            assert read.created_at == ours.created_at
    finally:
        signals.pre_save.disconnect(receiver, sender=A2AMessage)
        signals.post_save.disconnect(receiver, sender=A2AMessage)
    assert [(s, c, r, u) for s, _, c, r, u in heard] == [
        (signals.pre_save, None, False, "default"),
        (signals.post_save, True, False, "default"),
    ] * 4
    assert heard[1][1] is not None  # post_save sees the row's id
    run = kept.create(AgentRun, agent=agents["info"], context_id="c", transcript=[{"r": 1}])
    assert AgentRun.objects.get(pk=run.pk).transcript == [{"r": 1}]
    assert [s is not kept.NOT_KEPT for s in statements().values()] == [True, True]


def test_a_kept_create_refuses_a_duplicate_as_the_orm_does():
    first = message()
    with pytest.raises(IntegrityError), transaction.atomic():
        kept.create(
            A2AMessage,
            message_id=first.message_id,
            context_id=uuid.uuid4(),
            type=A2AMessage.Type.TASK_REQUEST,
            sender_id="x",
            recipient_id="y",
            body={},
        )
    assert A2AMessage.objects.filter(message_id=first.message_id).count() == 1


def test_create_unless_taken_leaves_a_taken_row_out_and_the_transaction_goes_on():
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append(instance.message_id)

    first = message()
    fields = {"context_id": uuid.uuid4(), "type": A2AMessage.Type.TASK_REQUEST, "body": {}}
    signals.post_save.connect(receiver, sender=A2AMessage)
    try:
        with transaction.atomic():
            taken, queries = sent(
                kept.create_unless_taken, A2AMessage, message_id=first.message_id, **fields
            )
            fresh = kept.create_unless_taken(A2AMessage, message_id=uuid.uuid4(), **fields)
            # An expression goes through the ORM, in a savepoint of its own.
            also_taken = kept.create_unless_taken(
                A2AMessage, message_id=first.message_id, signature=Upper(Value("x")), **fields
            )
            A2AMessage.objects.filter(pk=first.pk).update(signature="still here")
    finally:
        signals.post_save.disconnect(receiver, sender=A2AMessage)
    assert taken is None and also_taken is None
    assert [q.split()[0] for q in queries] == ["INSERT"]  # no savepoint around it
    assert isinstance(fresh.pk, int) and heard == [fresh.message_id]
    assert A2AMessage.objects.get(pk=first.pk).signature == "still here"
    assert A2AMessage.objects.filter(message_id=first.message_id).count() == 1
    assert A2AMessage.objects.get(pk=fresh.pk).message_id == fresh.message_id


def test_create_if_updated_creates_the_row_only_with_its_guards_change(agents):
    request = message()
    queued = {"pk": request.pk, "state": A2AMessage.State.QUEUED}
    now = timezone.now()
    guard = guarded.Guard(A2AMessage, queued, {"state": "delivered", "delivered_at": now})
    values = {
        "agent": agents["info"],
        "request": request,
        "context_id": "c\u2603",
        "provenance": {"chain": ["director"]},
        "transcript": [{"role": "user", "content": "café"}],
        "lease_owner": "w1",
        "lease_until": now + timedelta(seconds=30),
    }
    run, queries = sent(guarded.create_if_updated, guard, AgentRun, **values)
    again, queries_again = sent(guarded.create_if_updated, guard, AgentRun, **values)

    assert again is None and AgentRun.objects.count() == 1
    read = AgentRun.objects.get(pk=run.pk)
    orms = AgentRun.objects.create(**{**values, "request": None})
    for field in AgentRun._meta.concrete_fields:
        if field.attname not in ("id", "request_id", "started_at", "updated_at"):
            assert getattr(read, field.attname) == getattr(orms, field.attname), field
    assert read.request_id == request.pk and read.started_at == run.started_at
    request.refresh_from_db()
    assert (request.state, request.delivered_at) == ("delivered", now)
    if connections["default"].vendor == "postgresql":  # one statement, its own transaction
        assert [q.split()[:3] for q in queries + queries_again] == [["WITH", "guard", "AS"]] * 2
    else:  # the UPDATE, then the INSERT, in one transaction
        assert [q.split()[0] for q in queries] == ["SAVEPOINT", "UPDATE", "INSERT", "RELEASE"]
        assert [q.split()[0] for q in queries_again] == ["SAVEPOINT", "UPDATE", "RELEASE"]


def test_a_guarded_create_that_fails_leaves_the_guards_row_as_it_was(agents):
    request = message()
    taken = AgentRun.objects.create(agent=agents["info"], request=request, context_id="c")
    guard = guarded.Guard(A2AMessage, {"pk": request.pk}, {"state": "delivered"})
    with pytest.raises(IntegrityError), transaction.atomic():
        guarded.create_if_updated(
            guard, AgentRun, pk=taken.pk, agent=agents["plan"], context_id="d"
        )
    request.refresh_from_db()
    assert request.state == A2AMessage.State.QUEUED
    assert AgentRun.objects.get().agent == agents["info"]


def test_a_create_with_an_expression_goes_through_the_orm():
    row = kept.create(
        A2AMessage,
        message_id=uuid.uuid4(),
        context_id=uuid.uuid4(),
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id="x",
        recipient_id="y",
        body={},
        signature=Upper(Value("abc")),
    )
    row.refresh_from_db()
    assert row.signature == "ABC"
    assert statements() == {}


def test_kept_rows_are_the_orms_in_its_order(django_user_model):
    from passkey.models import PasskeyCredential

    ann, bob = (django_user_model.objects.create_user(name) for name in ("ann", "bob"))
    for i, user in enumerate([ann, ann, bob, ann]):
        PasskeyCredential.objects.create(
            user=user, name=f"key {i}", credential_id=f"cred-{i}", public_key=b"k"
        )
    PasskeyCredential.objects.filter(name="key 1").update(revoked_at=timezone.now())
    for _ in range(2):
        for user in (ann, bob):
            ours = kept.rows(PasskeyCredential, **PasskeyCredential.ACTIVE, user=user)
            assert ours == list(PasskeyCredential.objects.active().filter(user=user))
    assert [k.name for k in ours] == ["key 2"]
    assert [k.name for k in kept.rows(PasskeyCredential, **PasskeyCredential.ACTIVE, user=ann)] == [
        "key 3",
        "key 0",
    ]  # the newest first, as the model orders them
    assert kept.rows(PasskeyCredential, user=django_user_model.objects.create_user("cy")) == []


def test_true_and_false_are_two_statements(agents):
    """Django writes `WHERE flag` and `WHERE NOT flag`: one kept for the other would match the
    wrong rows."""
    held = AgentRun.objects.create(agent=agents["info"], context_id="c", may_have_held=True)
    clean = AgentRun.objects.create(agent=agents["info"], context_id="c", may_have_held=False)
    for flag, run in ((False, clean), (True, held), (False, clean), (True, held)):
        where = {"context_id": "c", "may_have_held": flag}
        assert kept.update(AgentRun, where, {"steps": 9 if flag else 1}) == 1
        assert kept.get(AgentRun, **where) == run
    held.refresh_from_db()
    clean.refresh_from_db()
    assert (held.steps, clean.steps) == (9, 1)


def test_an_in_is_shaped_by_its_distinct_values(agents):
    run = AgentRun.objects.create(agent=agents["info"], context_id="c")
    running = AgentRun.Status.RUNNING
    for statuses in [(running, None), (running, running), (running, "x"), (), (None,), ("x",)]:
        where = {"pk": run.pk, "status__in": statuses}
        expected = AgentRun.objects.filter(**where).count()
        assert kept.update(AgentRun, where, {"steps": 2}) == expected
        found = kept.rows(AgentRun, **where)
        assert found == list(AgentRun.objects.filter(**where))
    assert expected == 0 and found == []


def test_values_set_are_shaped_by_null_and_type_not_by_content(agents):
    """A transcript (a list of objects) is a value like any other; an expression is SQL."""
    run = AgentRun.objects.create(agent=agents["info"], context_id="c")
    for transcript in ([{"role": "user"}, {"role": "assistant"}], [], [{"a": [1, {"b": 2}]}]):
        assert kept.update(AgentRun, {"pk": run.pk}, {"transcript": transcript}) == 1
        run.refresh_from_db()
        assert run.transcript == transcript
    assert kept.update(AgentRun, {"pk": run.pk}, {"steps": F("steps") + 5}) == 1
    assert kept.update(AgentRun, {"pk": run.pk}, {"steps": 1}) == 1
    assert kept.update(AgentRun, {"pk": run.pk}, {"steps": F("steps") + 5}) == 1
    run.refresh_from_db()
    assert run.steps == 6
