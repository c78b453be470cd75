"""A real OTLP/HTTP receiver for the telemetry tests: ``POST /v1/traces`` and ``/v1/metrics``,
protobuf bodies (gzip or not) decoded with the official definitions (``opentelemetry-proto``).

No OpenTelemetry Collector binary installs here without a build (none on PyPI or npm, no apt
package), so the tests run this one: it speaks the OTLP/HTTP protocol as the collector does
(200 with an empty ``Export*ServiceResponse``; 400 for a body that does not decode; 404 for
another path), and keeps what it decoded for the tests to read.
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = ["OTLPReceiver", "ReceivedSpan", "attributes"]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``KeyValue``s as a dict."""
    return {kv.key: _value(kv.value) for kv in items}


@dataclass(frozen=True)
class ReceivedSpan:
    span: Span
    resource: dict[str, Any]
    scope: str

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes(self.span.attributes)

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()


class OTLPReceiver:
    """Serves on 127.0.0.1 (a free port) while entered; ``endpoint`` is its base URL. With
    ``tls`` (a server context) it serves HTTPS."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.refused = 0
        self.unavailable = 0  # the next requests answered 503 (Service Unavailable)
        self.answer_after = 0.0  # seconds between taking a request and answering it
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._changed:
                    busy = receiver.unavailable > 0
                    receiver.unavailable -= busy
                if busy:  # as a collector under load answers: try again (at once)
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                response: Any
                try:
                    if self.path == "/v1/traces":
                        request: Any = ExportTraceServiceRequest.FromString(body)
                        response = ExportTraceServiceResponse()
                        target = receiver.traces
                    elif self.path == "/v1/metrics":
                        request = ExportMetricsServiceRequest.FromString(body)
                        response = ExportMetricsServiceResponse()
                        target = receiver.metrics
                    else:
                        self.send_error(404)
                        return
                except Exception:  # protobuf's DecodeError: a body that is not the message
                    with receiver._changed:
                        receiver.refused += 1
                    self.send_error(400)
                    return
                with receiver._changed:
                    target.append(request)
                    receiver.headers.append(dict(self.headers))
                    receiver._changed.notify_all()
                time.sleep(receiver.answer_after)  # a slow collector: taken, answered later
                payload = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.headers: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:  # HTTPS: the handshake happens as a request is read
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"

        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def __enter__(self) -> OTLPReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[ReceivedSpan]:
        with self._changed:
            requests = list(self.traces)
        found: list[ReceivedSpan] = []
        for request in requests:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    found.extend(ReceivedSpan(span, resource, ss.scope.name) for span in ss.spans)
        return found

    def metric_points(self) -> dict[str, Metric]:
        """The metrics of the latest export that held each metric, by name: ``Metric`` messages."""
        with self._changed:
            requests = list(self.metrics)
        latest: dict[str, Metric] = {}
        for request in requests:
            for metric in _metrics(request):
                latest[metric.name] = metric
        return latest

    def wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Block (in a worker thread) until ``done()`` holds after a receipt, or ``timeout``."""
        with self._changed:
            return self._changed.wait_for(done, timeout)


def _metrics(request: ExportMetricsServiceRequest) -> Iterator[Metric]:
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            yield from sm.metrics
