"""Push notification configs over both standard bindings, driven by the unmodified a2a-sdk
client (create, get, list, delete; a webhook given with the message), and the webhook URLs this
host refuses: private, loopback and link-local addresses unless the operator allowed them for
that partner, URLs read differently by different parsers — at registration, and again at each
POST. Every refusal is audited, and the webhook and the MCP server's own log show that nothing
was sent and nothing ran."""

import json
import uuid

import httpx
import pytest
from django.utils import timezone

from a2a import push, webhooks
from a2a.models import A2AMessage, PartnerKey, PushConfig, PushDelivery
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from tests.a2a.test_standard_bindings import BINDINGS, dispatch_script, one, user_message
from tests.a2a_sdk import sdk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

AUTHORIZATION, TOKEN = "Bearer hook-secret-2", "notification-token-2"


@pytest.fixture
def partner(registry, script):
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"]])
    partner.accessible_pools.set([registry["media-pool"]])
    registry["dispatch"].model = dispatch_script(script)
    registry["dispatch"].save()
    return partner


@pytest.fixture
def key(partner):
    return PartnerKey.issue(partner, "sdk")[1]


@pytest.fixture
def hook():
    with sdk.receiver(AUTHORIZATION, TOKEN) as served:
        yield served


def webhook(url, config_id="hook-1"):
    return {
        "id": config_id,
        "url": url,
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": "hook-secret-2"},
    }


def send(peer, live_server, key, binding, push):
    url = f"{live_server.url}/a2a/v1/dispatch-agent"
    return one(
        peer.call(op="send", url=url, key=key, binding=binding, message=user_message(), push=push)
    )


@pytest.mark.parametrize("binding", BINDINGS)
def test_configs_are_created_read_listed_and_deleted(
    live_server, peer, key, partner, hook, calls, binding
):
    partner.push_networks = "127.0.0.0/8"
    partner.save()
    url, received = hook
    task = send(peer, live_server, key, binding, webhook(url))["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"  # (returnImmediately: as created)
    agent = f"{live_server.url}/a2a/v1/dispatch-agent"
    common = {"url": agent, "key": key, "binding": binding}
    got = one(peer.call(op="get", **common, id=task["id"]))
    assert got["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"

    created = one(
        peer.call(
            op="push_create", **common, config={**webhook(url, "hook-2"), "taskId": task["id"]}
        )
    )
    assert created == {
        "id": "hook-2",
        "taskId": task["id"],
        "url": url,
        "authentication": {"scheme": "Bearer"},  # the secrets are never shown again
    }
    got = one(peer.call(op="push_get", **common, taskId=task["id"], id="hook-1"))
    assert got["url"] == url and "token" not in got and "credentials" not in got["authentication"]
    listed = one(peer.call(op="push_list", **common, taskId=task["id"]))
    assert [c["id"] for c in listed["configs"]] == ["hook-1", "hook-2"]

    assert one(peer.call(op="push_delete", **common, taskId=task["id"], id="hook-2")) == {
        "deleted": True
    }
    assert one(peer.call(op="push_delete", **common, taskId=task["id"], id="hook-2")) == {
        "deleted": True  # idempotent
    }
    missing = one(peer.call(op="push_get", **common, taskId=task["id"], id="hook-2"))
    assert missing["raised"] == "TaskNotFoundError"
    listed = one(peer.call(op="push_list", **common, taskId=task["id"]))
    assert [c["id"] for c in listed["configs"]] == ["hook-1"]
    stranger = one(peer.call(op="push_list", **common, taskId=str(uuid.uuid4())))
    assert stranger["raised"] == "TaskNotFoundError"

    # hook-1 heard the task start and wait, with the credentials it was given.
    states = [r["event"]["statusUpdate"]["status"]["state"] for r in received()]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_AUTH_REQUIRED"]
    assert {r["status"] for r in received()} == {200}
    assert calls() == []
    card = one(peer.call(op="extended", url=live_server.url, key=key, binding=binding))
    assert card["capabilities"]["pushNotifications"] is True


def test_another_partners_task_has_no_configs_for_you(
    live_server, peer, key, partner, registry, hook
):
    partner.push_networks = "127.0.0.1"
    partner.save()
    task = send(peer, live_server, key, "JSONRPC", webhook(hook[0]))["task"]
    other = registry["partner"].__class__.objects.create(agent_id="other-partner", kind="external")
    other.callable_agents.set([registry["dispatch"]])
    other_key = PartnerKey.issue(other, "sdk")[1]
    common = {"url": f"{live_server.url}/a2a/v1/dispatch-agent", "key": other_key}
    for binding in BINDINGS:
        config = {**webhook(hook[0], "mine"), "taskId": task["id"]}
        created = one(peer.call(op="push_create", **common, binding=binding, config=config))
        assert created["raised"] == "TaskNotFoundError"
        got = one(
            peer.call(op="push_get", **common, binding=binding, taskId=task["id"], id="hook-1")
        )
        assert got["raised"] == "TaskNotFoundError"
    assert list(PushConfig.objects.values_list("config_id", flat=True)) == ["hook-1"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_webhook_at_a_private_address_is_refused_and_audited(
    live_server, peer, key, partner, hook, calls, binding
):
    url, received = hook  # 127.0.0.1: loopback, and this partner is allowed no network
    refused = send(peer, live_server, key, binding, webhook(url))
    assert refused["raised"] == "InvalidParamsError", refused
    assert "refused" in refused["message"] and "127.0.0.1" in refused["message"]
    assert not A2AMessage.objects.exists()  # no task was accepted
    event = AuditEvent.objects.get(event_type="a2a.push.refused")
    assert event.result == "BLOCKED" and event.actor_id == partner.agent_id
    assert event.details["url"] == url

    partner.push_networks = "127.0.0.1/32"
    partner.save()
    task = send(peer, live_server, key, binding, None)["task"]
    common = {"url": f"{live_server.url}/a2a/v1/dispatch-agent", "key": key, "binding": binding}
    for private in ("http://10.1.2.3/hook", "http://169.254.169.254/latest", "http://[::1]:9/"):
        config = {**webhook(private), "taskId": task["id"]}
        answer = one(peer.call(op="push_create", **common, config=config))
        assert answer["raised"] == "InvalidParamsError", answer
    assert AuditEvent.objects.filter(event_type="a2a.push.refused").count() == 4
    assert received() == [] and calls() == [] and not PushConfig.objects.exists()


def test_each_post_checks_the_address_again(
    live_server, peer, key, partner, hook, calls, admin_user
):
    url, received = hook
    partner.push_networks = "127.0.0.1/32"
    partner.save()
    task = send(peer, live_server, key, "HTTP+JSON", webhook(url))["task"]
    assert len(received()) == 2  # working, auth-required

    partner.push_networks = ""  # the operator withdraws the allowance
    partner.save()
    Ceremony.objects.get().approve(
        admin_user, assertion={"type": "passkey_assertion", "signature": "c2ln"}
    )
    assert len(received()) == 2  # nothing more reached it
    failed = AuditEvent.objects.get(event_type="a2a.push.failed", trace_id=task["contextId"])
    assert failed.details["error"].startswith("refused: ") and failed.result == "FAILURE"
    pending = PushDelivery.objects.filter(state="pending")  # the first waits; the rest after it
    assert [(d.kind, d.attempts) for d in pending] == [
        ("statusUpdate TASK_STATE_WORKING", 1),
        ("artifactUpdate", 0),
        ("statusUpdate TASK_STATE_COMPLETED", 0),
        ("task", 0),
    ]

    # The operator allows it again; once the retry is due, beat's sweep sends the rest in order.
    partner.push_networks = "127.0.0.1/32"
    partner.save()
    push.sweep()
    assert len(received()) == 2  # not due yet: nothing is sent before its time
    PushDelivery.objects.update(next_attempt_at=timezone.now())
    push.sweep()
    states = [sorted(r["event"])[0] for r in received()]
    assert states == ["statusUpdate"] * 3 + ["artifactUpdate", "statusUpdate", "task"]
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {"delivered"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1/",  # WHATWG reads these as 127.0.0.1 too
        "http://0x7f.0.0.1/",
        "http://2130706433/",
        "http://localhost:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "http://[64:ff9b:1::a00:1]/",  # local-use NAT64
        "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "http://[2002:a00:1::]/",  # 6to4 of 10.0.0.1
        "http://[::7f00:1]/",  # IPv4-compatible 127.0.0.1
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "http://100.64.0.1/",  # shared address space
        "http://192.168.1.10/",
        "http://224.0.0.1/",
        "http://evil.example\\@8.8.8.8/",
        "http://user@8.8.8.8/",
        "ftp://8.8.8.8/",
        "file:///etc/passwd",
        "http://8.8.8.8\x00/",
        "javascript:alert(1)",
        "x" * 3000,
    ],
)
def test_webhook_urls_refused(url):
    with pytest.raises(webhooks.Refused):
        webhooks.target(url, [])


def test_a_public_address_is_pinned_and_an_allowed_network_opens_one():
    pinned, host, name = webhooks.target("https://8.8.8.8:8443/hook?x=1", [])
    assert (pinned, host, name) == ("https://8.8.8.8:8443/hook?x=1", "8.8.8.8:8443", "8.8.8.8")
    allowed = webhooks.networks("10.20.0.0/16, 127.0.0.1")
    assert webhooks.target("http://10.20.3.4/h", allowed)[0] == "http://10.20.3.4:80/h"
    assert webhooks.target("http://127.0.0.1:9/h", allowed)[0] == "http://127.0.0.1:9/h"
    with pytest.raises(webhooks.Refused):
        webhooks.target("http://10.21.0.1/h", allowed)
    # An IPv6 address carrying a public IPv4 one is public; carrying an allowed one, allowed.
    assert webhooks.target("http://[64:ff9b::808:808]/h", [])[0] == "http://[64:ff9b::808:808]:80/h"
    assert webhooks.target("http://[64:ff9b::a14:304]/h", allowed)  # 10.20.3.4


def rpc_create(task_id, **config):
    params = {"taskId": task_id, "url": "http://127.0.0.1:9/hook", **config}
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "CreateTaskPushNotificationConfig",
        "params": params,
    }


@pytest.mark.parametrize(
    ("config", "code"),
    [
        ({"url": "http://127.0.0.1:9/\ud800"}, -32700),  # refused as it is read
        ({"url": "http://127.0.0.1\\@8.8.8.8/"}, -32602),
        ({"url": "http://x/" + "a" * 5000}, -32602),
        ({"url": ["http://8.8.8.8/"]}, -32602),
        ({"id": "a" * 101}, -32602),
        ({"id": "hook 1"}, -32602),
        *(({"id": bad}, -32602) for bad in ("q?x=1", "h#frag", "p%41", "a/b", "..", "../../x")),
        ({"token": "t\r\nX-Injected: 1"}, -32602),
        ({"authentication": {"scheme": "Bearer\r\nX-Injected: 1"}}, -32602),
        ({"authentication": {"scheme": "Bearer", "credentials": "é"}}, -32602),
        ({"authentication": {"scheme": "Bearer", "powers": "all"}}, -32602),
        ({"taskId": str(uuid.uuid4())}, -32001),
    ],
)
def test_a_hostile_config_is_a_clear_refusal(live_server, key, partner, calls, config, code):
    partner.push_networks = "127.0.0.1/32"
    partner.save()
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": {"store": "x"}}]}
    headers = {"Authorization": f"Bearer {key}"}
    agent = f"{live_server.url}/a2a/v1/dispatch-agent"
    with httpx.Client(headers=headers) as api:
        sent = api.post(
            agent,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "SendMessage",
                "params": {"message": message},
            },
        )
        task_id = sent.json()["result"]["task"]["id"]
        body = json.dumps(rpc_create(task_id, **config)).encode()  # (a lone surrogate escaped)
        answer = api.post(agent, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 200 and answer.json()["error"]["code"] == code, answer.text
        rest = api.post(f"{agent}/tasks/{task_id}/pushNotificationConfigs", json={"url": 5})
        assert rest.status_code == 400 and "INVALID_PARAMS" in rest.text
        other = api.post(
            f"{agent}/tasks/{task_id}/pushNotificationConfigs",
            json={"url": "http://127.0.0.1:9/", "taskId": str(uuid.uuid4())},
        )
        assert other.status_code == 400
        assert (
            api.delete(f"{agent}/tasks/{uuid.uuid4()}/pushNotificationConfigs/x").status_code == 404
        )
        assert api.get(f"{agent}/tasks/{task_id}/pushNotificationConfigs/none").status_code == 404
    assert not PushConfig.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").order_by("seq")[1]
    assert event.result == "BLOCKED" and event.details["code"] == code
