"""Long-lived MCP client sessions for tool calls, one per server per process.

Opening a session costs a process launch (stdio) or a handshake (HTTP), so sessions are kept
open on one background event loop per process and shared by all threads. A session that
fails is dropped and reopened by the next call.
"""

import asyncio
import contextvars
import os
import threading
from contextlib import asynccontextmanager, contextmanager, suppress

from django.db import connections
from django.utils import timezone

from mcplet_host import tracing
from mcplet_host.celery import enqueue
from pools.mcp_client import (
    InvalidResult,
    OutcomeUnknown,
    ResultTooLarge,
    ServerUnreachable,
    describe,
    open_session,
)
from pools.oauth import tokens

# Seconds a stdio launch of the warm-up has before the next one starts beside it (a server
# that hangs as it starts must not hold the others back).
LAUNCH_TURN = 5.0

ELICITATION_COMPLETE = "notifications/elicitation/complete"
ELICITATION_COMPLETE_TASK = "mcplet_host.elicitation_complete"


@contextmanager
def _continuing(meta):
    """Run on this loop, a call has lost its caller's trace context: it continues the trace its
    `_meta.traceparent` names, so the SDK's own client span (and the traceparent it writes in
    its place) is the gateway's span's child."""
    if not tracing.ENABLED or not (meta or {}).get("traceparent"):
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract({"traceparent": meta["traceparent"]}))
    try:
        yield
    finally:
        context.detach(token)


def _tell(args):
    try:
        enqueue(ELICITATION_COMPLETE_TASK, args)
    finally:
        connections.close_all()  # this thread's own (an eager task may have opened one)


def _ask(asker, message, schema):
    try:
        return asker.ask(message, schema)
    finally:
        connections.close_all()  # this worker thread's own


def _refuse(askers, reason):
    try:
        for asker in askers:
            asker.refuse(reason)
    finally:
        connections.close_all()


async def _unless_refused(config, started):
    """A call whose server refused the host's OAuth grant did not run: say why, as
    unreachable, rather than as outcome-unknown or the SDK's "Server returned an error"."""
    if config.auth == "oauth" and (reason := await tokens.refused_since(config.id, started)):
        raise tokens.NotConnected(reason)


def _unread(config, message):
    """What an answer the host would not read (pools/bounded.py) means for the call, or
    None: the SDK reports it as a parse error quoting why."""
    from pools import bounded

    if text := bounded.TooLarge.said(message):
        return ResultTooLarge(f"{config.name}: {text}")
    if text := bounded.Encoded.said(message):
        return InvalidResult(f"{config.name}: {text}")
    return None


class SessionLost(ServerUnreachable):
    """The server no longer knows the session the call was sent on (it restarted: HTTP 404 to
    its `Mcp-Session-Id`), and so did not run it."""


class _Call:
    """One tools/call in flight on a session, with what takes its server's form requests to a
    person (`asker`: `.ask(message, schema)` → the ElicitResult's fields, `.refuse(reason)`,
    `.wait` seconds at most). Its timeout's clock stops while that person is asked: the call's
    own time is what it counts."""

    def __init__(self, asker):
        self.asker = asker
        self.deadline = None  # the call's asyncio.timeout, once it runs

    async def run(self, request, timeout):
        async with asyncio.timeout(timeout) as self.deadline:
            return await request

    @asynccontextmanager
    async def asking(self):
        """The clock stopped while a person answers, then what was left of it runs on (a call
        that ended meanwhile has no clock to move)."""
        loop, deadline = asyncio.get_running_loop(), self.deadline
        when = deadline.when() if deadline is not None else None
        left = None if when is None else when - loop.time()
        if left is not None:
            with suppress(RuntimeError):
                deadline.reschedule(None)
        try:
            yield
        finally:
            if left is not None:
                with suppress(RuntimeError):
                    deadline.reschedule(loop.time() + max(left, 0))


class _Held:
    """A session kept open by a task that waits until it is told to close."""

    def __init__(self, config, timeout):
        self.config = config
        self.ready = asyncio.get_running_loop().create_future()
        self.closing = asyncio.Event()
        self.calls = set()
        self.session_id = ""  # the server's Mcp-Session-Id, if it gives one
        self.lost = False  # the server no longer knows that id
        # In a context of its own: the session's tasks (its reader's notifications among them)
        # must not carry the trace of the call that happened to open it.
        self.task = asyncio.create_task(self._hold(timeout), context=contextvars.Context())

    async def _hold(self, timeout):
        try:
            async with open_session(
                self.config,
                timeout=timeout,
                message_handler=self._heard,
                elicitation_callback=self._elicit,
                answered=self._answered,
            ) as session:
                self.ready.set_result(session)
                await self.closing.wait()
        except Exception as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)

    def _answered(self, response):
        if given := response.headers.get("mcp-session-id"):
            self.session_id = given[:200]
        elif response.status_code == 404 and response.request.headers.get("mcp-session-id"):
            self.lost = True  # it restarted: MCP 2025-11-25 says to start a new session

    async def _heard(self, message):
        """The server's notifications/elicitation/complete: a task completes the step-up that
        waits for it, whichever process's session heard it (this loop never touches the
        database, and the broker is reached off the loop)."""
        if getattr(message, "method", None) != ELICITATION_COMPLETE:
            return
        elicitation_id = message.params.elicitation_id
        if isinstance(elicitation_id, str) and 0 < len(elicitation_id) <= 200:
            await asyncio.to_thread(_tell, [self.config.id, elicitation_id])

    async def _elicit(self, context, params):
        """A server's form request (`elicitation/create`) during a call. The request does not
        name the call it is for (the SDK's context holds only its own id; over HTTP the related
        request id only picks the stream it travels on), so it goes to the one call in flight
        on this session; with several in flight it could be any of them: declined, audited."""
        from mcp_types import ElicitResult

        calls = [call for call in self.calls if call.asker is not None]
        if getattr(params, "mode", "form") != "form" or len(calls) != 1 or len(self.calls) != 1:
            reason = "several calls in flight on the session" if calls else "no call to ask for"
            if getattr(params, "mode", "form") != "form":
                reason = "URL steps are taken from the call's -32042 error"
            await asyncio.to_thread(_refuse, [call.asker for call in calls], reason)
            return ElicitResult(action="decline")
        call = calls[0]
        async with call.asking():
            answer = await asyncio.to_thread(
                _ask, call.asker, params.message, params.requested_schema
            )
        return ElicitResult(**answer)

    async def close(self):
        self.closing.set()
        if not self.ready.done():
            self.task.cancel()  # still opening (a server that hangs as it starts): nothing to end
        await asyncio.wait([self.task], timeout=10)
        if not self.task.done():  # one that did not end in time, as wait_for ends it
            self.task.cancel()
            await asyncio.wait([self.task])
        if not self.ready.done():  # its waiters learn that it is gone, rather than wait for ever
            self.ready.set_exception(ServerUnreachable(f"{self.config.name}: closed as it opened"))
            self.ready.exception()  # retrieved: no "never retrieved" log when nobody waits


class SessionPool:
    def __init__(self):
        self._lock = threading.Lock()
        self._pid = None

    def _loop(self):
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked worker child
                self._pid = os.getpid()
                self._held, self._locks = {}, {}
                self._event_loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._event_loop.run_forever, name="mcp-sessions", daemon=True
                ).start()
            return self._event_loop

    def warm(self, configs, timeout=30.0):
        """Open a session to each server now, so that a worker's first call to it is a warm
        one. A server that does not open is left to the first call (and the watcher, which
        reports it); nothing waits here. Servers over HTTP open all at once; stdio servers are
        launched one after another: each is an interpreter starting (about half a second of
        CPU), and a prefork worker runs a child per core, so one launch at a time in each
        leaves a task taken meanwhile (the Director's "Run now") its share of the cores."""
        loop = self._loop()
        launched = [c for c in configs if c.transport == "stdio"]
        for config in configs:
            if config.transport != "stdio":
                asyncio.run_coroutine_threadsafe(self._warm(config, timeout), loop)
        asyncio.run_coroutine_threadsafe(self._warm_in_turn(launched, timeout), loop)

    async def _warm_in_turn(self, configs, timeout):
        for config in configs:
            opening = asyncio.ensure_future(self._warm(config, timeout))
            await asyncio.wait([opening], timeout=LAUNCH_TURN)  # a slow one goes on opening

    async def _warm(self, config, timeout):
        with suppress(Exception):
            await self._session(config, timeout)

    def call_tool(
        self, config, name, arguments, *, meta=None, timeout=30.0, asker=None, reply=None
    ):
        """`tools/call` on the server: its CallToolResult, or (2026-07-28) an
        InputRequiredResult — the server asks for input first, and the same call is sent again
        with `reply` ({"inputResponses", "requestState"}, held.rounds). Raises
        ServerUnreachable (not reached), or its subclass OutcomeUnknown (sent, then no answer:
        it may have run). The server's form requests during the call (`elicitation/create`,
        2025-11-25) go to `asker` (see _Call); without one they are declined."""
        future = asyncio.run_coroutine_threadsafe(
            self._call(config, name, arguments, meta, timeout, asker, reply or {}), self._loop()
        )
        return future.result()

    def session_id(self, server_id):
        """The `Mcp-Session-Id` of this process's session to the server, or "": stdio, a
        2026-07-28 server (sessionless), or no session open."""
        held = self._held.get(server_id) if self._pid == os.getpid() else None
        return held.session_id if held is not None else ""

    def close_all(self):
        if self._pid == os.getpid():
            asyncio.run_coroutine_threadsafe(self._close_all(), self._event_loop).result(30)

    async def _session(self, config, timeout):
        lock = self._locks.setdefault(config.id, asyncio.Lock())
        async with lock:
            held = self._held.get(config.id)
            if held is not None and (held.config != config or held.task.done()):
                await held.close()  # edited in admin, or its transport died
                held = None
            if held is None:
                held = self._held[config.id] = _Held(config, timeout)
            try:
                return held, await held.ready
            except Exception:
                self._held.pop(config.id, None)
                raise

    async def _call(self, config, *request):
        try:
            return await self._call_once(config, *request)
        except SessionLost:  # refused unrun: once more, on a new session
            return await self._call_once(config, *request)

    async def _call_once(self, config, name, arguments, meta, timeout, asker, reply):
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST, PARSE_ERROR, REQUEST_TIMEOUT

        held, client = await self._session(config, timeout)
        started = timezone.now()
        if config.auth == "oauth":
            await tokens.ensure(config.id)
        call = _Call(asker)
        held.calls.add(call)
        # The SDK's own timeout allows for a person's answer; `run` keeps the call's to `timeout`.
        read_timeout = timeout + (asker.wait if asker is not None else 0)
        # From here the request may have left: whatever breaks, its outcome is unknown.
        try:
            with _continuing(meta):
                return await call.run(
                    client.session.call_tool(
                        name,
                        arguments,
                        read_timeout_seconds=read_timeout,
                        meta=meta,
                        input_responses=reply.get("inputResponses"),
                        request_state=reply.get("requestState"),
                        allow_input_required=True,
                    ),
                    timeout,
                )
        except TimeoutError:
            raise OutcomeUnknown(
                f"{config.name}: no answer within {timeout:g} s (the outcome is unknown)"
            ) from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise OutcomeUnknown(
                    f"{config.name}: no answer within {timeout:g} s (the outcome is unknown)"
                ) from None
            if held.lost and exc.code == INVALID_REQUEST:  # its answer was the 404
                await self._drop(config)
                raise SessionLost(f"{config.name}: it no longer knows the host's session") from None
            if exc.code == PARSE_ERROR and (unread := _unread(config, exc.message)):
                raise unread from None  # an answer: the session is fine
            if exc.code != CONNECTION_CLOSED:
                await _unless_refused(config, started)
                raise  # the server answered with a JSON-RPC error: the session is fine
            await self._drop(config)
            await _unless_refused(config, started)
            said = "" if exc.message == "Connection closed" else f": {exc.message}"
            raise OutcomeUnknown(
                f"{config.name}: the connection closed{said} (the outcome is unknown)"
            ) from exc
        except Exception as exc:
            if InvalidResult.said(exc):  # an answer: the session is fine
                raise InvalidResult(f"{config.name}: {exc} (its MCP outputSchema)") from exc
            await self._drop(config)
            await _unless_refused(config, started)
            raise OutcomeUnknown(
                f"{config.name}: {describe(exc)} (the outcome is unknown)"
            ) from exc
        finally:
            held.calls.discard(call)

    async def _drop(self, config):
        held = self._held.pop(config.id, None)
        if held is not None:
            await held.close()

    async def _close_all(self):
        held, self._held = list(self._held.values()), {}
        for entry in held:
            await entry.close()


sessions = SessionPool()
