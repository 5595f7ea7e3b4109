"""The httpx auth of a server an operator connected with OAuth (its own module: httpx loads
with the first session, not with every process that imports the token rules)."""

import asyncio

import httpx2

from pools.oauth import tokens
from pools.oauth.tokens import in_thread


class GrantAuth(httpx2.Auth):
    """httpx auth sending the grant's bearer token; on a 401 (revoked, or refreshed by another
    worker after this one read it) it tries once more with the token got again."""

    def __init__(self, server_id):
        self.server_id = server_id

    async def async_auth_flow(self, request):
        token = await asyncio.to_thread(in_thread, self.server_id, "")
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            token = await asyncio.to_thread(in_thread, self.server_id, token)
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
        if response.status_code == 403:
            from mcp.client.auth.utils import extract_field_from_www_auth

            if extract_field_from_www_auth(response, "error") == "insufficient_scope":
                scopes = extract_field_from_www_auth(response, "scope") or ""
                await tokens.asked(self.server_id, scopes[:500])
