"""An OTLP/HTTP trace receiver for tests and benchmarks: POST /v1/traces, an
ExportTraceServiceRequest decoded with the official `opentelemetry-proto`.

    python -m tests.otlp PORT   # a sink that counts the spans it got, for bench runs
"""

import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    """An attribute's value, whatever its type."""
    return getattr(any_value, any_value.WhichOneof("value"))


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP endpoint: POST /v1/traces, an ExportTraceServiceRequest in protobuf."""

    def __init__(self, port):
        self.spans, self.lock = [], threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def received(self, request):
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append((resource, span))

    def trace(self, trace_id):
        with self.lock:
            return {s.span_id.hex(): (r, s) for r, s in self.spans if s.trace_id.hex() == trace_id}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.received(request)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop, and say how many
    sink = Receiver(int(sys.argv[1]))
    try:
        sink.serve_forever()
    finally:
        print(f"{len(sink.spans)} spans received", flush=True)
