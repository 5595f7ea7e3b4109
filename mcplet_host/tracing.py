"""OpenTelemetry traces (docs/tracing.md): off unless the operator sets the standard `OTEL_*`
variables. When off, nothing here imports OpenTelemetry: `span` hands out a no-op and
`traceparent` an empty string. When on, `setup` gives each process (a web process, a Celery
worker or its prefork child, runhost) a tracer provider exporting over OTLP/HTTP, and the
Django, Celery and httpx instrumentations carry the W3C trace context across every hop."""

import os
import re
import secrets
from contextlib import contextmanager

from mcplets.otel import tracing_wanted

SERVICE_NAME = "mcplet-host"
TRACER = "mcplet_host"
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
# What a URL may hold that a trace store must not keep: its query (an OAuth callback's code and
# state, a webhook's token) and a held call's token, in the approval pages' paths.
_HELD_CALL = re.compile(r"(/passkey/ceremonies/)[^/?#]+")
URL_ATTRIBUTES = ("http.url", "url.full", "http.target", "url.path", "url.query")


wanted = tracing_wanted  # the kit's rule, so launched MCPlets decide alike


# Whether this process traces: only once `setup` found OTEL_* asking for it.
ENABLED = False
_set_up_in = None  # the pid of the process whose provider is set up (a forked child sets its own)


def setup():
    """Set up this process's tracer provider and instrumentations, once per process. Before
    Django's handler loads its middleware (the Django instrumentation adds one)."""
    global ENABLED, _set_up_in
    from django.conf import settings

    settings.MCPLET_TRACE_CONTENT  # noqa: B018 (loads the settings, and with them a local .env)
    if not wanted() or _set_up_in == os.getpid():
        return
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    hooks = {"request_hook": _without_secrets}
    for instrumentor, options in (
        (DjangoInstrumentor(), hooks),
        (CeleryInstrumentor(), {}),
        (HTTPXClientInstrumentor(), hooks),
    ):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=provider, **options)
    _set_up_in, ENABLED = os.getpid(), True


def url_without_secrets(url):
    """`url` as a trace may keep it: no query or fragment, no held call's token."""
    return _HELD_CALL.sub(r"\1{token}", url.split("#", 1)[0].split("?", 1)[0])


def _without_secrets(span, *request):
    """The Django and httpx instrumentations' request hook: the URL attributes they set, as a
    trace may keep them."""
    if span is None or not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    for key in URL_ATTRIBUTES:
        if attributes.get(key):
            kept = "REDACTED" if key == "url.query" else url_without_secrets(str(attributes[key]))
            span.set_attribute(key, kept)


@contextmanager
def untraced():
    """Work inside starts no trace of its own: runhost's watcher thread, like the watcher's own
    process, which does not trace. Its spans (the MCP SDK's) have an unsampled parent, which
    the default, parent-based sampler follows."""
    if not ENABLED:
        yield
        return
    from opentelemetry import context, trace

    quiet = trace.SpanContext(
        secrets.randbits(127) + 1, secrets.randbits(63) + 1, is_remote=False
    )  # trace flags 0: not sampled
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(quiet)))
    try:
        yield
    finally:
        context.detach(token)


def _exporter():
    """OTEL_TRACES_EXPORTER: `otlp` (the default; OTLP/HTTP protobuf, configured by the
    OTEL_EXPORTER_OTLP_* variables) or `console` (to a process's standard output)."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


class _Off:
    """The span of a process that does not trace: every call does nothing."""

    def set_attribute(self, key, value):
        pass

    def set_attributes(self, attributes):
        pass

    def fail(self, error_type, message=""):
        pass


OFF = _Off()


class _On:
    """A recording span with the one helper the host's spans share: `fail`, which sets
    `error.type` (the semantic conventions' name for what went wrong) and the error status."""

    def __init__(self, span):
        self._span = span

    def __getattr__(self, name):
        return getattr(self._span, name)

    def fail(self, error_type, message=""):
        from opentelemetry.trace import StatusCode

        self._span.set_attribute("error.type", str(error_type))
        self._span.set_status(StatusCode.ERROR, message or None)


@contextmanager
def span(name, *, kind="internal", attributes=None, links_to=()):
    """A span of the host's own work, the current one's child. `attributes`: a dict, or a
    callable returning one (called only when tracing); `links_to`: traceparents of spans it
    follows from without being their child (a held call's holder)."""
    if not ENABLED:
        yield OFF
        return
    from opentelemetry import trace

    if callable(attributes):
        attributes = attributes()

    links = [trace.Link(c) for c in map(_span_context, links_to) if c is not None]
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(
        name,
        kind=getattr(trace.SpanKind, kind.upper()),
        attributes={k: v for k, v in (attributes or {}).items() if v not in (None, "")},
        links=links,
    ) as current:
        yield _On(current)


def traceparent():
    """The current span's W3C traceparent, or "" (tracing off, or no span)."""
    if not ENABLED:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def trace_id(parent):
    """The trace id a traceparent names, or "" — also when it is not sampled (a partner's
    flag can say so): no span of it is recorded, so there is no trace to link to."""
    found = _TRACEPARENT.match(parent or "")
    return found.group(1) if found and int(parent[-2:], 16) & 1 else ""


def _span_context(parent):
    from opentelemetry import trace

    found = _TRACEPARENT.match(parent or "")
    if not found:
        return None
    return trace.SpanContext(
        int(found.group(1), 16),
        int(found.group(2), 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(parent[-2:], 16)),
    )


def content_recorded():
    """Whether tool arguments and results go into spans: only if the operator opts in
    (MCPLET_TRACE_CONTENT), for they may carry what a trace store must not keep."""
    from django.conf import settings

    return ENABLED and settings.MCPLET_TRACE_CONTENT


def trace_url(trace_id):
    """Where the operator's trace viewer shows a trace (MCPLET_TRACE_URL), or ""."""
    from django.conf import settings

    template = settings.MCPLET_TRACE_URL
    if not trace_id or not template.startswith(("http://", "https://")):
        return ""
    return template.replace("{trace_id}", trace_id)
