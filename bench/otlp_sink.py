"""A minimal OTLP/HTTP trace sink for the tracing-on benchmark runs (``docs/benchmarks.md``, "Tracing").

    python -m bench.otlp_sink [--port 4318]

Answers every ``POST /v1/traces`` with an empty ``ExportTraceServiceResponse`` and counts the spans it was
sent (decoded with ``opentelemetry-proto``); prints the count when stopped. Point a bridge process at it with
``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:<port>``: the exporter's cost is then measured, not a
collector's.
"""

from __future__ import annotations

import argparse
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_count = [0]
_lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with _lock:
            _count[0] += spans
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: Any) -> None:
        pass


def main() -> None:
    """Serve until interrupted (INT or TERM), then print how many spans arrived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped with TERM too (a background job)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print(f"spans received: {_count[0]}", flush=True)


if __name__ == "__main__":
    main()
