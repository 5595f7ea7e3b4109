"""A partner authenticated by its own identity provider: a JWT its issuer signed, checked against
the issuer's keys, which a test issuer serves over HTTP. Keys keep working; every bad token is
401, audited, and runs nothing (the MCP server's call log)."""

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import Client
from jwt.algorithms import RSAAlgorithm

from a2a import identity, messages
from a2a.models import PartnerKey
from agents.models import AgentRun
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

AUDIENCE = "https://mcplet-host.test"


class Issuer:
    """An OpenID provider of the test's own: its discovery document and JWKS over HTTP."""

    def __init__(self):
        self.keys = {"k1": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        self.published = ["k1"]
        self.fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks.json"}
                elif self.path == "/jwks.json":
                    issuer.fetches += 1
                    body = {"keys": [issuer.jwk(kid) for kid in issuer.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jwk(self, kid):
        key = json.loads(RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
        return {**key, "kid": kid, "use": "sig", "alg": "RS256"}

    def token(self, kid="k1", **claims):
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "acme", "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        key = self.keys.setdefault(
            kid, rsa.generate_private_key(public_exponent=65537, key_size=2048)
        )
        return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})

    def public_pem(self, kid="k1"):
        return (
            self.keys[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


@pytest.fixture
def issuer():
    issuer = Issuer()
    yield issuer
    issuer.server.shutdown()


@pytest.fixture
def partner(registry, script, issuer):
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"]])
    partner.accessible_pools.set([registry["info-pool"]])
    partner.oidc_issuer, partner.oidc_audience, partner.oidc_subject = issuer.url, AUDIENCE, "acme"
    partner.save()
    turns = [{"tool_calls": [{"name": "query_crm", "arguments": {"filter": "x"}}]}, {"text": "ok"}]
    registry["info"].model = script({"info-gathering-agent": turns})
    registry["info"].save()
    return partner


def bearer(token):
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def send(client):
    body = messages.task_request("partner-bot", "info-gathering-agent", {"store": "shinjuku"})
    return client.post("/a2a/tasks", body, content_type="application/json")


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header, claims, signature=b""):
    head, body = b64(json.dumps(header).encode()), b64(json.dumps(claims).encode())
    return f"{head}.{body}.{b64(signature)}"


def test_a_token_from_the_partners_issuer_works_as_its_key(partner, issuer, calls):
    response = send(bearer(issuer.token()))
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "success"
    assert [c["name"] for c in calls()] == ["query_crm"]
    assert AgentRun.objects.get().provenance == {"partner": "partner-bot"}
    _, raw = PartnerKey.issue(partner, "still")
    assert bearer(raw).get("/a2a/agents").status_code == 200  # keys keep working


def test_made_up_key_ids_do_not_make_the_host_fetch_again(partner, issuer):
    assert bearer(issuer.token()).get("/a2a/agents").status_code == 200  # keys by discovery
    for kid in ("made-up-1", "made-up-2"):
        assert bearer(issuer.token(kid=kid)).get("/a2a/agents").status_code == 401
    assert issuer.fetches == 1  # within the cooldown, an unknown key id fetches nothing


def test_a_rotated_key_is_fetched_when_a_token_names_it(partner, issuer, monkeypatch):
    monkeypatch.setattr(identity, "KEYS_COOLDOWN", 0)  # (the cooldown's 10 s, not waited)
    assert bearer(issuer.token()).get("/a2a/agents").status_code == 200
    issuer.published = ["k1", "k2"]  # the issuer rotates: a new key id, unseen by the host
    response = bearer(issuer.token(kid="k2")).get("/a2a/agents")
    assert response.status_code == 200, response.content
    assert issuer.fetches == 2


def test_one_issuer_many_partners_told_apart_by_the_claim(partner, issuer, registry):
    other = registry["partner"].__class__.objects.create(
        agent_id="other-bot", display_name="Other", kind="external"
    )
    other.oidc_issuer, other.oidc_audience, other.oidc_claim = issuer.url, AUDIENCE, "azp"
    other.save()  # claim value: its agent id
    response = bearer(issuer.token(sub="nobody", azp="other-bot")).get("/a2a/agents")
    assert response.status_code == 200 and response.json() == {"agents": []}


def refused_tokens(issuer):
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": AUDIENCE, "sub": "acme", "exp": now + 300}
    hs256 = unsigned({"alg": "HS256", "typ": "JWT", "kid": "k1"}, claims)
    head_body = hs256.rsplit(".", 1)[0].encode()
    forged = hmac.new(issuer.public_pem(), head_body, hashlib.sha256).digest()
    return {
        "expired": (issuer.token(exp=now - 3600), "expired"),
        "not yet valid": (issuer.token(nbf=now + 3600), "not yet valid"),
        "wrong audience": (issuer.token(aud="https://elsewhere.test"), "Audience"),
        "unknown kid": (issuer.token(kid="rogue"), "signing key"),
        "alg none": (unsigned({"alg": "none", "typ": "JWT"}, claims), "algorithm 'none'"),
        "HS256 with the public key": (f"{head_body.decode()}.{b64(forged)}", "'HS256'"),
        "another issuer": (issuer.token(iss="https://evil.test"), "no partner"),
        "another partner's claim": (issuer.token(sub="someone-else"), "no partner"),
        "no expiry": (issuer.token(exp=None), "exp"),
        "tampered claims": (
            issuer.token().split(".")[0]
            + "."
            + b64(json.dumps({**claims, "sub": "acme", "exp": now + 99999}).encode())
            + "."
            + issuer.token().split(".")[2],
            "Signature verification failed",
        ),
        "a NUL in the issuer": (issuer.token(iss="x\x00y"), "no issuer"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "expired",
        "not yet valid",
        "wrong audience",
        "unknown kid",
        "alg none",
        "HS256 with the public key",
        "another issuer",
        "another partner's claim",
        "no expiry",
        "tampered claims",
        "a NUL in the issuer",
    ],
)
def test_a_bad_token_is_401_audited_and_runs_nothing(partner, issuer, calls, case):
    token, says = refused_tokens(issuer)[case]
    response = send(bearer(token))
    assert response.status_code == 401, response.content
    error = response.json()["error"]
    assert error["code"] == "AUTH_FAILED" and says in error["message"], error
    assert not AgentRun.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").latest("seq")
    assert (event.result, event.details["status"]) == ("BLOCKED", 401)


def test_a_disabled_partners_token_no_longer_authenticates(partner, issuer):
    partner.enabled = False
    partner.save()
    response = bearer(issuer.token()).get("/a2a/agents")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "This partner is disabled."


def test_the_cards_declare_both_schemes(client):
    card = client.get("/.well-known/agent-card.json").json()
    assert set(card["securitySchemes"]) == {"partnerKey", "partnerToken"}
    assert card["securitySchemes"]["partnerToken"]["httpAuthSecurityScheme"]["bearerFormat"] == (
        "JWT"
    )


def test_an_issuer_out_of_reach_is_401_not_500(partner, issuer, calls):
    token = issuer.token()
    issuer.server.shutdown()
    issuer.server.server_close()  # its discovery document can no longer be read
    response = send(bearer(token))
    assert response.status_code == 401, response.content
    assert "discovery document could not be read" in response.json()["error"]["message"]
    assert not AgentRun.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").latest("seq")
    assert (event.result, event.details["status"]) == ("BLOCKED", 401)
