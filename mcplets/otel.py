"""Whether OTEL_* asks for traces: one rule for the host and the MCPlets it launches (this
module imports nothing, so the host reads it without loading a server)."""

import os
from collections.abc import Mapping


def tracing_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """An OTLP endpoint, or an exporter other than `none`; OTEL_SDK_DISABLED=true wins."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
