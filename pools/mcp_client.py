"""Client sessions to registered MCP servers (stdio or streamable HTTP), via the `mcp` SDK.

The SDK is imported when a session is opened, not with this module: the admin, the dashboard
and every manage.py command import the registry, and the SDK takes about a second to import."""

import functools
import os
import re
import shlex
import shutil
import ssl
import sys
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import anyio
from django.conf import settings
from django.urls import reverse

# `python` in a stdio command means the host's own interpreter, so `python -m mcplets...` runs
# with the host's packages whatever the PATH of the process that launched the host.
PYTHON_ALIASES = {"python", "python3"}


@dataclass(frozen=True)
class ServerConfig:
    """What it takes to reach one server: a plain snapshot, safe to hand to async code."""

    id: int
    name: str
    transport: str
    command: str = ""
    args: tuple = ()
    env: tuple = field(default=(), repr=False)
    url: str = ""
    headers: tuple = field(default=(), repr=False)
    auth: str = "none"
    # Client credentials: (client id, secret, scopes, issuer).
    credentials: tuple = field(default=(), repr=False)

    @classmethod
    def of(cls, server):
        env = server.env or {}
        # The kit's module loads the MCP SDK: imported here, not at the host's start-up.
        from mcplets.verify import URL_ENV

        if server.transport == server.Transport.STDIO and URL_ENV not in env:
            env = {**env, URL_ENV: verify_url()}
        return cls(
            id=server.pk,
            name=server.name,
            transport=server.transport,
            command=server.command,
            args=tuple(server.args or ()),
            env=tuple(sorted(env.items())),
            url=server.url,
            headers=tuple(sorted((server.headers or {}).items())),
            auth=server.auth,
            credentials=(
                server.oauth_client_id,
                server.oauth_client_secret,
                server.oauth_scope,
                server.oauth_issuer,
            )
            if server.auth == server.Auth.CLIENT_CREDENTIALS
            else (),
        )


def verify_url():
    """Where a stdio MCPlet the host launches verifies passkey assertions, unless its server
    sets its own: MCPLET_VERIFY_URL, or this host's endpoint at its passkey origin. Derived at
    launch, so a row never keeps an address the host no longer serves."""
    origin = settings.PASSKEY_ORIGIN.rstrip("/")
    return settings.MCPLET_VERIFY_URL or origin + reverse("passkey:verify-assertion")


class ServerUnreachable(Exception):
    """The server could not be reached or did not answer; the message says why."""


class OutcomeUnknown(ServerUnreachable):
    """The request was sent, and then no answer came (a timeout, a lost connection): the tool
    may have run. Never to be re-sent by the host as if nothing had happened."""


class InvalidResult(Exception):
    """The server answered, and the MCP SDK refused its result against the tool's MCP
    outputSchema: the tool ran, and its answer is unusable."""

    SDK_WORDS = (  # what the SDK's ClientSession.validate_tool_result raises it with
        "Invalid structured content returned by tool",
        "Invalid schema for tool",
        "has an output schema but did not return structured content",
    )

    @classmethod
    def said(cls, exc):
        return isinstance(exc, RuntimeError) and any(w in str(exc) for w in cls.SDK_WORDS)


class ResultTooLarge(Exception):
    """The server answered past what the host reads of a message (pools/bounded.py): the tool
    ran, and its answer was not read."""


def first_leaf(exc):
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc):
    """A one-line reason from whatever anyio, httpx or the SDK raised (groups included)."""
    exc = first_leaf(exc)
    if isinstance(exc, ServerUnreachable):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc) or repr(exc)
    if refused := _connection_error(exc):  # "All connection attempts failed" says less
        text = os.strerror(refused.errno)
    return f"{type(exc).__name__}: {text}"


def _connection_error(exc):
    """The ConnectionError (refused, reset...) behind a client library's own exception."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConnectionError) and exc.errno:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _http_problem(config, responses, exc):
    """Why an HTTP server did not open a session, naming the URL and what it answered."""
    url = config.url
    if responses:
        response = responses[-1]
        if response.status_code >= 400:
            answered = f"{url} answered HTTP {response.status_code} {response.reason_phrase}"
            if config.auth in ("oauth", "client_credentials") and response.status_code == 401:
                return answered + (
                    ": it refuses the host's OAuth token (one for another resource or "
                    "audience, or revoked): check what its authorization server issues the "
                    "host's client for this server"
                )
            return answered + _authorization_needed(response)
        kind = response.headers.get("content-type", "").split(";")[0] or "no content type"
        if kind not in ("application/json", "text/event-stream"):
            return f"{url} answered HTTP {response.status_code} with {kind}: not an MCP endpoint"
    return f"{url}: {describe(exc)}"


def _authorization_needed(response):
    """What a 401 from a server behind OAuth (the MCP authorization spec: a Bearer challenge
    naming its Protected Resource Metadata, RFC 9728) asks of the operator, or ""."""
    challenge = response.headers.get("www-authenticate", "")
    if response.status_code != 401 or not challenge.lower().startswith("bearer"):
        return ""
    found = re.search(r'resource_metadata="([!#-~]{1,500})"', challenge)  # printable only
    where = f" (its Protected Resource Metadata: {found.group(1)})" if found else ""
    return (
        f": it is protected by OAuth{where}. Choose OAuth as its authentication and connect it "
        "in admin (MCP servers → the server → Connect…), or give it a token it accepts as a "
        "header (Authorization: Bearer …)"
    )


class ServerLog:
    """A stdio server's stderr, appended to VAR_DIR/log/<server>.log rather than left on the
    host's console or in a command's output; its tail goes into the error when the server does
    not start, which is where the reason usually is."""

    MAX_BYTES = 1_000_000  # then the log moves to <server>.log.1 (one old log is kept)
    TAIL_LINES = 12

    def __init__(self, name):
        self.path = Path(settings.VAR_DIR) / "log" / f"{name}.log"
        self.start = 0

    def open(self, command):
        """The file to hand to the server as its stderr, headed by a line for this launch."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            if self.path.stat().st_size > self.MAX_BYTES:
                self.path.replace(self.path.with_name(self.path.name + ".1"))
        file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (the session closes it)
        file.write(f"--- {datetime.now():%Y-%m-%d %H:%M:%S} launching {shlex.join(command)}\n")
        file.flush()
        self.start = os.fstat(file.fileno()).st_size
        return file

    def tail(self):
        """The last lines the server wrote since this launch ('' if none)."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self.start)
                text = file.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-self.TAIL_LINES :])


def _keep_last(responses, answered=None):
    async def hook(response):
        responses[:] = [response]  # one: the session may live for days
        if answered is not None:
            answered(response)

    return hook


@functools.cache
def _ssl_context():
    # Loading the CA bundle costs ~26 ms: once per process, not once per session.
    return ssl.create_default_context()


async def decline_elicitation(context, params):
    """An `elicitation/create` no call of ours can take to a person: declined, never answered
    by an LLM. (URL step-ups reach the host as the call's -32042 error instead.)"""
    from mcp_types import ElicitResult

    return ElicitResult(action="decline")


def unsupported(exc):
    """The versions a server says it speaks, when it refused every version we speak (-32022
    with its `supported` list), else None."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import UNSUPPORTED_PROTOCOL_VERSION

    exc = first_leaf(exc)
    if not isinstance(exc, MCPError) or exc.code != UNSUPPORTED_PROTOCOL_VERSION:
        return None
    supported = exc.data.get("supported") if isinstance(exc.data, dict) else None
    return [str(v)[:40] for v in supported[:10]] if isinstance(supported, list) else []


def _version_problem(config, supported, exc):
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    ours = sorted({*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS})
    theirs = ", ".join(supported) or "none it would name"
    if set(supported) & set(ours):  # it named one we speak, and still refused to open
        return f"{config.name}: the server refused to open a session ({describe(exc)})"
    return (
        f"{config.name}: the server speaks MCP {theirs}; this host speaks {', '.join(ours)}, "
        "so no version is shared"
    )


def stdio_env(configured, environ=os.environ):
    """What a stdio server gets besides the SDK's few safe variables: the host's OTEL_* ones,
    so that its own spans go where the host's go (docs/tracing.md), under the variables the
    operator set on the server, which win. Not OTEL_SERVICE_NAME: each server names itself."""
    passed = {k: v for k, v in environ.items() if k.startswith("OTEL_")}
    passed.pop("OTEL_SERVICE_NAME", None)
    return passed | configured


@asynccontextmanager
async def open_session(
    config,
    *,
    timeout=30.0,
    message_handler=None,
    elicitation_callback=decline_elicitation,
    auth=None,
    answered=None,
):
    """A connected `mcp.Client` to the server, at the newest MCP revision both speak: the SDK
    probes `server/discover` (2026-07-28) and falls back to the `initialize` handshake
    (2025-11-25 and older); `client.protocol_version` says which. ServerUnreachable if it
    cannot be opened, naming the server's versions when none is shared. The client's response
    cache honours the list results' `ttlMs` (the SDK's default). `auth`: an httpx auth to use
    instead of the server's own (the OAuth connect flow's). `answered`: called with each HTTP
    response of a streamable HTTP session (its `Mcp-Session-Id`, 2025-11-25, is in their
    headers; the SDK's Client does not expose it)."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from pools import bounded

    opened, log, responses = False, None, []
    try:
        async with AsyncExitStack() as stack:
            if config.transport == "stdio":
                command = sys.executable if config.command in PYTHON_ALIASES else config.command
                params = StdioServerParameters(
                    command=command,
                    args=list(config.args),
                    env=stdio_env(dict(config.env)) or None,
                    cwd=settings.BASE_DIR,
                )
                log = ServerLog(config.name)
                errlog = stack.enter_context(log.open([config.command, *config.args]))
                transport = stdio_client(params, errlog)
            else:
                client = httpx2.AsyncClient(
                    auth=auth or http_auth(config),
                    headers={**dict(config.headers), **bounded.ACCEPT},
                    timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
                    verify=_ssl_context(),
                    # The SDK turns an HTTP error into a vague JSON-RPC one: keep the status.
                    event_hooks={
                        "response": [_keep_last(responses, answered), bounded.hold_to_limit]
                    },
                )
                await stack.enter_async_context(client)
                transport = streamable_http_client(
                    config.url,
                    http_client=client,
                    max_sse_event_size=settings.MCPLET_MAX_MESSAGE_BYTES,
                )
            session = await stack.enter_async_context(
                Client(
                    transport,
                    read_timeout_seconds=timeout,
                    message_handler=message_handler,
                    # Declares elicitation `form` and `url` (the SDK derives both from the
                    # callback): servers may then ask a person for a step or a form — as a
                    # -32042 or `elicitation/create` (2025-11-25) or an `input_required`
                    # result (2026-07-28).
                    elicitation_callback=elicitation_callback,
                )
            )
            opened = True
            yield session
    except Exception as exc:
        # Transport failures surface when its task group exits, so this wraps the whole block.
        # Once the session was handed out, the caller's own error passes through, out of the
        # exception group the transport's task group put it in.
        if opened or isinstance(first_leaf(exc), ServerUnreachable):
            raise first_leaf(exc)  # noqa: B904 (the group stays attached as __context__)
        if (supported := unsupported(exc)) is not None:
            message = _version_problem(config, supported, exc)
        elif config.transport == "stdio":
            message = f"{config.name}: {describe(exc)}"
        elif refused := _oauth_refusal(exc):
            message = f"{config.name}: its authorization server refused the host: {refused}"
        else:
            message = f"{config.name}: {_http_problem(config, responses, exc)}"
        if log is not None and (tail := log.tail()):
            message += f"\nIts stderr ({log.path}) ends with:\n{tail}"
        raise ServerUnreachable(message) from exc


def http_auth(config):
    """The httpx auth for a server behind OAuth (None for the others): the grant an operator
    connected, or the SDK's client-credentials provider (its tokens kept per process)."""
    if config.auth == "oauth":
        from pools.oauth.grant_auth import GrantAuth

        return GrantAuth(config.id)
    if config.auth == "client_credentials":
        from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

        client_id, secret, scope, issuer = config.credentials
        if algorithm := signing_algorithm(secret):
            from mcp.client.auth.extensions.client_credentials import (
                PrivateKeyJWTOAuthProvider,
                SignedJWTParameters,
            )

            signer = SignedJWTParameters(
                issuer=client_id, subject=client_id, signing_key=secret, signing_algorithm=algorithm
            )
            return PrivateKeyJWTOAuthProvider(
                config.url,
                _credentials_storage(config),
                client_id=client_id,
                assertion_provider=signer.create_assertion_provider(),
                scope=scope or None,
                issuer=issuer,
            )
        return ClientCredentialsOAuthProvider(
            config.url,
            _credentials_storage(config),
            client_id=client_id,
            client_secret=secret,
            scope=scope or None,
            issuer=issuer,
        )
    return None


def signing_algorithm(secret):
    """The JWS algorithm of a client secret that is a private key in PEM (private_key_jwt,
    RFC 7523): ES256 for a P-256 key, RS256 for RSA; None for a shared secret. ValueError for a
    PEM that is no key of these."""
    if "-----BEGIN" not in secret:
        return None
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(secret.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the private key cannot be read ({exc})") from None
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
        return "ES256"
    raise ValueError("the private key must be RSA or EC P-256 (RS256, ES256)")


class MemoryTokenStorage:
    """The SDK's TokenStorage, in memory: a process's client-credentials tokens, or one
    connect flow's (pools.oauth.connect) until its grant is stored."""

    def __init__(self, client_info=None):
        self.tokens, self.client_info = None, client_info

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


@functools.cache
def _credentials_storage(config):
    """One token store per server configuration and process: a session reuses the token the
    last one got until it expires (an edited server is a new configuration)."""
    return MemoryTokenStorage()


def _oauth_refusal(exc):
    """What the SDK's OAuth client says went wrong (a token request refused, a flow that
    cannot go on), or None: the last HTTP answer is then the token endpoint's, not the server's."""
    from mcp.client.auth import OAuthFlowError

    exc = first_leaf(exc)
    if not isinstance(exc, OAuthFlowError):
        return None
    # Its first line: a malformed token response's pydantic error goes on for lines (and may
    # quote the token).
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def command_problem(command):
    """Why a stdio command cannot be launched here, or None. Cheap: nothing is started."""
    if command in PYTHON_ALIASES or shutil.which(command):
        return None
    if os.sep in command:
        return f"{command} does not exist or is not an executable file"
    return f"the command {command!r} is not on the PATH"


def probe(config, timeout=10.0):
    """Open a session (stdio: launch the server; then agree on a revision) and close it again:
    the MCP revision agreed; raises ServerUnreachable with the reason when that fails."""

    async def negotiate():
        # The whole check keeps to `timeout`: the SDK tries `server/discover`, then
        # `initialize`, each with a timeout of its own.
        with anyio.fail_after(timeout):
            async with open_session(config, timeout=timeout) as client:
                return client.protocol_version

    try:
        return anyio.run(negotiate)
    except TimeoutError:
        raise ServerUnreachable(f"{config.name}: no answer within {timeout:g} s") from None
