"""Connecting a server behind OAuth as admin does, with a stand-in for the operator's browser:
the flow's authorization URL is followed to the (auto-approving) test authorization server,
and its redirect back is handed to the callback the way the callback view does."""

from urllib.parse import parse_qs, urlparse

import httpx

from pools.oauth import connect


def authorization_response(url):
    """Where the authorization server sends the browser back: (code, state, iss) or an error."""
    response = httpx.get(url, follow_redirects=False, timeout=10)
    assert response.status_code in (302, 303), response.text
    query = parse_qs(urlparse(response.headers["location"]).query)
    return {key: values[0] for key, values in query.items()}


def connect_server(
    server,
    operator="operator",
    redirect_uri="http://localhost/oauth/callback",
    client_metadata_url=None,
):
    """Run the whole flow for `server`; the flow's outcome ({"ok", "message"})."""
    flow_id = connect.start(server, operator, redirect_uri, client_metadata_url)
    state = connect.wait(flow_id, lambda s: "url" in s or "outcome" in s, 20)
    assert state is not None
    if "outcome" in state:
        return state["outcome"]
    back = authorization_response(state["url"])
    assert connect.flow_of_state(back.get("state")) == flow_id
    connect.answer(
        flow_id, back.get("code", ""), back.get("state"), back.get("iss"), back.get("error", "")
    )
    ended = connect.wait(flow_id, lambda s: "outcome" in s, 30)
    return ended["outcome"]
