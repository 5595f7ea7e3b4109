"""Values an operator's admin form must refuse, not save: a JSON field holding what the
database or a page cannot carry (a lone surrogate typed as `\\ud800`, NUL, `1e400`), a server
URL whose host clients read differently, a header no client can send. Once saved, such a value
made its change page (and a pool's whole list) a 500; now the form says why and keeps nothing."""

import pytest

from agents.forms import AgentForm
from agents.models import Agent
from pools.models import McpServer, Pool
from tests.pools.test_server_admin import form as server_form

pytestmark = pytest.mark.django_db


def admin_form_data(client, url):
    """What the admin's change form at `url` posts when saved unchanged."""
    form = client.get(url).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(value, bool) or value is None:
            if value:
                data[name] = "on"
            continue
        if isinstance(value, list | tuple) and hasattr(field, "queryset"):
            data[name] = [str(getattr(item, "pk", item)) for item in value]
            continue
        data[name] = field.prepare_value(value) if hasattr(field, "encoder") else value
    return data


HOSTILE_JSON = [
    ('["\\ud800"]', "lone surrogate"),
    ('["a\\u0000b"]', "NUL"),
    ("[1e400]", "not a finite number"),
]


@pytest.mark.parametrize(("typed", "why"), HOSTILE_JSON)
def test_a_pool_allowlist_the_page_could_not_show_is_refused(staff_client, typed, why):
    pool = Pool.objects.create(name="media-pool", domain_allowlist=["api.example"])
    url = f"/admin/pools/pool/{pool.pk}/change/"
    data = {**admin_form_data(staff_client, url), "domain_allowlist": typed}
    answer = staff_client.post(url, data)
    assert answer.status_code == 200 and why in answer.content.decode()
    pool.refresh_from_db()
    assert pool.domain_allowlist == ["api.example"]
    assert staff_client.get("/admin/pools/pool/").status_code == 200


@pytest.mark.parametrize("field", ["input_schema", "output_schema", "pinned_tools"])
@pytest.mark.parametrize(("typed", "why"), HOSTILE_JSON)
def test_an_agent_json_field_the_page_could_not_show_is_refused(staff_client, field, typed, why):
    agent = Agent.objects.create(agent_id="planner", display_name="Planner")
    url = f"/admin/agents/agent/{agent.pk}/change/"
    value = typed if field == "pinned_tools" else f'{{"description": {typed[1:-1]}}}'
    answer = staff_client.post(url, {**admin_form_data(staff_client, url), field: value})
    assert answer.status_code == 200 and why in answer.content.decode()
    agent.refresh_from_db()
    assert getattr(agent, field) == Agent._meta.get_field(field).get_default()
    assert staff_client.get(url).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1\\@evil.example/mcp",  # WHATWG: host 127.0.0.1; httpx: evil.example
        "http://trusted.example\\.evil.example/mcp",
        "http://user@evil.example/mcp",
    ],
)
def test_a_server_url_clients_read_differently_is_refused(staff_client, url):
    answer = staff_client.post("/admin/pools/mcpserver/add/", server_form(url=url))
    assert answer.status_code == 200
    assert "Enter a URL every client reads alike" in answer.content.decode()
    assert not McpServer.objects.exists()


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ("X-Tenant: caf\u00e9", "a character a header cannot carry"),
        ("X-Tenant: a\u0007b", "a character a header cannot carry"),
        ("X Tenant: 7", "is not a header name"),
        ("X-Tenant\u00e9: 7", "is not a header name"),
    ],
)
def test_a_header_no_client_can_send_is_refused(staff_client, headers, why):
    answer = staff_client.post("/admin/pools/mcpserver/add/", server_form(headers=headers))
    assert answer.status_code == 200 and why in answer.content.decode()
    assert not McpServer.objects.exists()
    # A remote agent's headers are the same field.
    remote = AgentForm({"kind": Agent.Kind.REMOTE, "credentials": headers})
    assert not remote.is_valid() and why in str(remote.errors["credentials"])


def test_a_header_clients_send_is_kept(staff_client):
    headers = "Authorization: Bearer a.b-c_d~e+f/g=\nX-Tenant: 7\t8"
    answer = staff_client.post("/admin/pools/mcpserver/add/", server_form(headers=headers))
    assert answer.status_code == 302, answer.content
    assert McpServer.objects.get().headers == {
        "Authorization": "Bearer a.b-c_d~e+f/g=",
        "X-Tenant": "7\t8",
    }
