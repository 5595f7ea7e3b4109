"""Partners authenticated by their own identity provider (A2A's OpenID Connect scheme): a bearer
JWT signed by the issuer an operator configured on the partner's agent, checked against the
issuer's published keys (JWKS) — signature, `iss`, `aud`, `exp`/`nbf` with a small leeway, and
an allow-list of asymmetric algorithms (never `none`, never an HMAC: a public key is public).
PyJWT does the checking; its JWKS client keeps the keys and fetches them again when a token
names a key id it has not seen (the issuer rotated its keys)."""

import threading

import httpx
import jwt
from jwt import PyJWKClient

from agents.models import Agent
from mcplet_host import storable

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
LEEWAY = 30  # seconds of clock skew between the issuer and us
FETCH_TIMEOUT = 5
KEYS_LIFESPAN = 300  # seconds a fetched key set is kept (an unknown key id fetches it again)
# ... but not sooner than this after the last fetch: tokens naming made-up key ids must not
# make the host hammer the partner's identity provider.
KEYS_COOLDOWN = 10

_clients, _discovered, _lock = {}, {}, threading.Lock()


class Invalid(Exception):
    """Why a token authenticates nobody (said to the caller, and audited)."""


def looks_like_jwt(token):
    return token.count(".") == 2


def partner_for(token):
    """The enabled external agent a valid token from its issuer names; raises Invalid."""
    try:
        header = jwt.get_unverified_header(token)
        unverified = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise Invalid(f"it is not a JWT ({exc})") from None
    if header.get("alg") not in ALGORITHMS:
        raise Invalid(f"its algorithm {str(header.get('alg'))[:20]!r} is not accepted")
    issuer = unverified.get("iss")
    if not isinstance(issuer, str) or not issuer or storable.text_problem(issuer):
        raise Invalid("it names no issuer")
    agent = _named(issuer, unverified)
    try:
        key = _keys(agent).get_signing_key_from_jwt(token).key
        jwt.decode(
            token,
            key,
            algorithms=ALGORITHMS,
            audience=agent.oidc_audience,
            issuer=agent.oidc_issuer,
            leeway=LEEWAY,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.PyJWKClientConnectionError as exc:
        raise Invalid(f"its issuer's keys could not be fetched ({exc})") from None
    except jwt.PyJWTError as exc:
        raise Invalid(f"{exc}".rstrip(".") or type(exc).__name__) from None
    return agent


def _named(issuer, claims):
    """The partner of this issuer whose claim the token carries (one issuer may serve several
    partners, told apart by the claim)."""
    for agent in Agent.objects.filter(kind=Agent.Kind.EXTERNAL, oidc_issuer=issuer):
        if str(claims.get(agent.oidc_claim, "")) == (agent.oidc_subject or agent.agent_id):
            return agent
    raise Invalid("it names no partner of this host")


def _keys(agent):
    url = agent.oidc_jwks_url or _jwks_uri(agent.oidc_issuer)
    with _lock:
        if url not in _clients:
            _clients[url] = PyJWKClient(
                url, lifespan=KEYS_LIFESPAN, timeout=FETCH_TIMEOUT, cooldown_duration=KEYS_COOLDOWN
            )
        return _clients[url]


def _jwks_uri(issuer):
    """The jwks_uri of the issuer's OpenID discovery document (kept once read)."""
    if issuer not in _discovered:
        document = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
        try:
            uri = httpx.get(document, timeout=FETCH_TIMEOUT).raise_for_status().json()["jwks_uri"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise Invalid(f"its issuer's discovery document could not be read ({exc})") from None
        if not isinstance(uri, str):
            raise Invalid("its issuer's discovery document names no jwks_uri")
        _discovered[issuer] = uri
    return _discovered[issuer]
