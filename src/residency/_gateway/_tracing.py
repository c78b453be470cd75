"""OpenTelemetry traces and metrics of the gateway, sent over OTLP (the ``otel`` extra).

Imported only when the config has a ``residency.telemetry`` section (``_otel_config``): a
gateway without one never imports this module, the OpenTelemetry SDK or an exporter, and its
hot path pays one ``is None`` check per hook. (The ``mcp`` SDK itself imports the OpenTelemetry
*API* and wraps every request in a span of the process-wide tracer provider, a no-op unless an
application installs one; residency never installs one. With telemetry on, the gateway's
request spans take the place of the SDK's, see ``instrument``.)

Spans follow the OpenTelemetry semantic conventions for MCP (``gen-ai/mcp.md`` of
semantic-conventions-genai v0.1.0, status Development; the MCP section of semantic conventions
1.40 and later says the same):

* one ``SERVER`` span per MCP request the gateway receives, named ``{mcp.method.name} {target}``
  (the target is the tool's name for ``tools/call``; methods without a low-cardinality target
  are named by the method alone), with ``mcp.method.name``, ``mcp.protocol.version``,
  ``jsonrpc.request.id``, ``mcp.session.id`` (the ``Mcp-Session-Id`` of a stateful HTTP
  session), ``gen_ai.operation.name`` ``execute_tool`` and ``gen_ai.tool.name`` on
  ``tools/call``, ``mcp.resource.uri`` on resource requests, and on failure ``error.type`` (the
  JSON-RPC error code, or ``tool_error`` for a result with ``isError``) and an error status;
* its parent is the trace context the client sent in the request's ``params._meta``
  (``traceparent``/``tracestate``, W3C Trace Context, as the conventions' "Context
  propagation" says), when there is a valid one;
* one ``INTERNAL`` span per admission decision of a forwarded call, ``admit {tool}``:
  ``residency.admission.decision`` (``admitted`` or ``refused``), ``gen_ai.tool.name`` and
  ``residency.admission.reason`` (why: the refusal's ``_meta["residency/error"]`` reason, or
  ``resident``/``reexpanded`` for an admission);
* one ``CLIENT`` span per call forwarded upstream, ``tools/call {upstream tool}``, with
  ``mcp.method.name``, ``gen_ai.tool.name``, ``gen_ai.operation.name``,
  ``mcp.protocol.version``, ``residency.upstream`` and ``network.transport`` (``pipe`` for
  stdio, ``tcp`` for HTTP); its context goes to the upstream in the call's ``params._meta``
  (``traceparent``, and ``tracestate`` when there is one).

Tool names, session ids and resource URIs pass ``Secrets.redact`` before they become
attributes, as before they reach a log line.

Cost with telemetry on: each span's name, kind and the attributes its method, tool and
upstream decide are built once (a ``SpanShape``, kept per hook, bounded, dropped when the
secrets change). The spans are ``SpanRecord``s (``_span_records``), not the SDK's span objects:
profiled under the benchmark's workload, the SDK's three spans per call (sampler, bounded
attribute dicts, the read-only copy at their end) and the export thread's re-reading of every
attribute to encode them were most of what tracing cost a call, well above their time in a
tight loop. A record is started under the same sampler (``OTEL_TRACES_SAMPLER``; by default
parent-based, always on: every span is recorded and exported), with the parent the SDK would
give it (the client's ``_meta`` context, else the current span), is batched (``OTEL_BSP_*``)
and sent over OTLP/HTTP from the gateway's event loop (``_loop_export``: a sending thread costs
the loop its waits for the interpreter lock), and is encoded by ``_otlp_spans`` from its
shape's bytes, written once. Over gRPC the SDK's ``BatchSpanProcessor`` sends them. The
request and upstream spans are made current (as ``NonRecordingSpan``s of their context, with
``attach``/``detach``), so code that reads the current span, the ``mcp`` client's propagation
among it, sees them.

Metrics have one source: the ``Telemetry``'s Prometheus registry, the same that ``/metrics``
serves. Every ``metric_interval`` seconds (and once more at shutdown) a thread reads it and
sends it as OTLP metrics with the family's name (``residency_calls_forwarded``: Prometheus adds
``_total`` to a counter in its text format only), help text and labels: counters as cumulative
monotonic sums, gauges as gauges, ``residency_call_seconds`` as a cumulative histogram with the
same bucket bounds. So a collector and a scrape of ``/metrics`` read the same numbers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client, MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from opentelemetry.context import attach, detach
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry

from residency._errors import ConfigError
from residency._gateway._config import Secrets
from residency._gateway._otel_config import TelemetrySettings
from residency._gateway._span_records import ReadableExporter, SpanRecorder, SpanShape, SpanSink

if TYPE_CHECKING:
    from residency._gateway._loop_export import LoopSpanExport
    from residency._gateway._otlp_spans import FastOTLPSpanExporter

__all__ = ["SEMCONV", "Tracing", "registry_metrics"]

logger = logging.getLogger("residency.gateway")

SEMCONV = "semantic-conventions-genai v0.1.0 (gen-ai/mcp.md)"
"""The text the span names and attributes follow."""
SCOPE = "residency.gateway"
_TRANSPORTS = {"stdio": "pipe", "http": "tcp"}
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
_SHAPES = 1024  # span names and attributes kept per hook; past that the cache starts over


class Tracing:
    """The gateway's OpenTelemetry side (see the module docstring): its own tracer provider and
    metric exporter, never the process-wide ones (one process may run many gateways).

    Args:
        settings: the ``residency.telemetry`` section.
        registry: the ``Telemetry``'s registry, read for the metrics.
        secrets: scrubbed from every attribute value that could carry one.
        version: ``service.version``.

    Raises:
        ConfigError: the ``otel`` extra (or, for ``grpc``, the gRPC exporter) is not installed.
    """

    def __init__(
        self, settings: TelemetrySettings, registry: CollectorRegistry, secrets: Secrets, version: str
    ) -> None:
        self.settings = settings
        self._secrets = secrets
        self._redact = secrets.redact
        # Span names and fixed attributes by what they depend on (method and target, tool and
        # upstream), built once: redacted, so dropped whenever the secrets change.
        self._shapes: dict[tuple[Any, ...], SpanShape] = {}
        self._shapes_generation = secrets.generation
        self._registry = registry
        name = settings.service_name or os.environ.get("OTEL_SERVICE_NAME") or "residency"
        self.resource = Resource.create({"service.name": name, "service.version": version})
        self._scope = InstrumentationScope(SCOPE, version)
        self._propagator = TraceContextTextMapPropagator()
        span_exporter, self._metric_exporter = _exporters(settings, self.resource, self._scope)
        # Batched with the SDK's defaults (and its OTEL_BSP_* variables); OTLP/HTTP from the
        # gateway's event loop (``_loop_export``), gRPC by the SDK's processor and its thread.
        self._loop_export: LoopSpanExport | None = None
        self._processor: SpanSink | None = None
        if span_exporter is not None and settings.otlp.protocol == "http/protobuf":
            # Imported here: the HTTP exporter's package is there (``_exporters`` checked).
            from residency._gateway._loop_export import LoopSpanExport, loop_sendable

            if loop_sendable():
                self._loop_export = LoopSpanExport(cast("FastOTLPSpanExporter", span_exporter))
                self._processor = self._loop_export
        if span_exporter is not None and self._processor is None:
            self._processor = BatchSpanProcessor(span_exporter)
        # The sampler a tracer provider would use (OTEL_TRACES_SAMPLER, or parent-based always-on).
        sampler = TracerProvider(resource=self.resource, shutdown_on_exit=False).sampler
        self._spans = SpanRecorder(sampler, self._processor)
        self._stop = threading.Event()
        self._pusher: threading.Thread | None = None

    # -- lifetime ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the metric exports (spans are batched from the start; ``run_exports`` sends
        them over OTLP/HTTP)."""
        if self._metric_exporter is not None and self._pusher is None:
            self._pusher = threading.Thread(target=self._push, name="residency-otel-metrics", daemon=True)
            self._pusher.start()

    async def run_exports(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Send the spans' batches from the calling event loop until cancelled (a task of the
        gateway's task group); returns at once where the SDK's processor sends them."""
        if self._loop_export is None:
            task_status.started()
            return
        await self._loop_export.run(task_status=task_status)

    async def aclose_exports(self) -> None:
        """Send the spans still queued for the loop's sender (before ``shutdown``)."""
        if self._loop_export is not None:
            await self._loop_export.aclose()

    def shutdown(self) -> None:
        """Send what is pending (spans, one last metric export) and stop. Blocking: run it in a
        worker thread; each export is bounded by ``otlp.timeout``."""
        self._stop.set()
        if self._pusher is not None:
            self._pusher.join()
            self._pusher = None
        if self._metric_exporter is not None:
            self.export_metrics()
            self._metric_exporter.shutdown()
            self._metric_exporter = None
        if self._processor is not None:
            self._processor.shutdown()

    def _push(self) -> None:
        while not self._stop.wait(self.settings.metric_interval):
            self.export_metrics()

    def export_metrics(self) -> None:
        """Send the registry's current values once (failures are the exporter's to log)."""
        exporter = self._metric_exporter
        if exporter is None:
            return
        data = MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=self.resource,
                    scope_metrics=[
                        ScopeMetrics(
                            scope=self._scope, metrics=registry_metrics(self._registry), schema_url=""
                        )
                    ],
                    schema_url="",
                )
            ]
        )
        try:
            exporter.export(data, timeout_millis=self.settings.otlp.timeout * 1000)
        except Exception as exc:  # a collector's trouble must not stop the exports
            logger.warning("telemetry: the metric export failed: %s", type(exc).__name__)

    # -- hooks -------------------------------------------------------------------------------

    def instrument(self, server: Server[Any]) -> None:
        """Give ``server`` the gateway's ``SERVER`` spans (``middleware``), outermost (a request
        refused by a later middleware, a rate limit, is traced too), in the place of the ``mcp``
        SDK's own request spans: those go to the process-wide tracer provider and would only
        duplicate these where an application installs one."""
        kept = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
        server.middleware[:] = [self.middleware, *kept]

    def _shape(self, key: tuple[Any, ...]) -> SpanShape | None:
        if self._shapes_generation != self._secrets.generation:
            self._shapes.clear()
            self._shapes_generation = self._secrets.generation
        return self._shapes.get(key)

    def _keep(self, key: tuple[Any, ...], shape: SpanShape) -> SpanShape:
        if len(self._shapes) >= _SHAPES:
            self._shapes.clear()
        self._shapes[key] = shape
        return shape

    def _request_shape(self, method: str, params: Mapping[str, Any] | None) -> SpanShape:
        """A request span's name and the attributes its method and target decide."""
        target = params.get("name") if params and method in ("tools/call", "prompts/get") else None
        uri = params.get("uri") if params and method in _RESOURCE_METHODS else None
        key = (
            "request",
            method,
            target if isinstance(target, str) else None,
            uri if isinstance(uri, str) else None,
        )
        shape = self._shape(key)
        if shape is not None:
            return shape
        attributes: dict[str, Any] = {"mcp.method.name": method}
        name = method
        if isinstance(target, str):
            target = self._redact(target)
            name = f"{method} {target}"
            if method == "tools/call":
                attributes["gen_ai.operation.name"] = "execute_tool"
                attributes["gen_ai.tool.name"] = target
            else:
                attributes["gen_ai.prompt.name"] = target
        elif isinstance(uri, str):
            attributes["mcp.resource.uri"] = self._redact(uri)
        return self._keep(key, SpanShape(name, SpanKind.SERVER, attributes))

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """A ``Server.middleware``: the ``SERVER`` span of one request (see the module docstring)."""
        method = ctx.method
        shape = self._request_shape(method, ctx.params)
        attributes: dict[str, Any] = {}
        if ctx.protocol_version is not None:
            attributes["mcp.protocol.version"] = ctx.protocol_version
        if ctx.request_id is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        connection = getattr(ctx.session, "_connection", None)
        session_id = getattr(connection, "session_id", None)
        if isinstance(session_id, str):
            attributes["mcp.session.id"] = self._redact(session_id)
        parent = self._incoming(ctx.meta) or get_current_span().get_span_context()
        span = self._spans.start(shape, parent, attributes)
        # Current for the request's handling (the admission and upstream spans nest under it).
        token = attach(set_span_in_context(NonRecordingSpan(span.context)))
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            span.set_attribute("error.type", str(exc.error.code))
            span.set_status(StatusCode.ERROR, self._redact(exc.error.message))
            raise
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
        else:
            if method == "tools/call" and _is_error(result):
                span.set_attribute("error.type", "tool_error")
                span.set_status(StatusCode.ERROR)
            return result
        finally:
            detach(token)
            self._spans.end(span)

    def _incoming(self, meta: Mapping[str, Any] | None) -> SpanContext | None:
        """The client's trace context from ``_meta``, or None (the span nests under the current one)."""
        if not meta or "traceparent" not in meta:
            return None
        carrier = {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
        context = get_current_span(self._propagator.extract(carrier)).get_span_context()
        return context if context.is_valid else None

    def admission(
        self, tool: str, started_ns: int, *, reason: str, refused: bool, upstream: str = ""
    ) -> None:
        """One admission decision (``started_ns``: ``time.time_ns()`` when it began).

        A span of its own, as asked of the gateway (the MCP conventions define no admission:
        an event on the request span would carry the same attributes, but a span shows the
        decision's time and stays one query away whatever the request span holds)."""
        key = ("admit", tool, reason, refused, upstream)
        shape = self._shape(key)
        if shape is None:
            shown = self._redact(tool)
            attributes = {
                "residency.admission.decision": "refused" if refused else "admitted",
                "residency.admission.reason": reason,
                "gen_ai.tool.name": shown,
            }
            if upstream:
                attributes["residency.upstream"] = upstream
            shape = self._keep(key, SpanShape(f"admit {shown}", SpanKind.INTERNAL, attributes))
        parent = get_current_span().get_span_context()
        self._spans.end(self._spans.start(shape, parent, None, started_ns))

    def _upstream_shape(self, upstream: str, kind: str, tool: str, protocol: str | None) -> SpanShape:
        key = ("upstream", upstream, kind, tool, protocol)
        shape = self._shape(key)
        if shape is not None:
            return shape
        shown = self._redact(tool)
        attributes: dict[str, Any] = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": shown,
            "residency.upstream": upstream,
        }
        if protocol is not None:
            attributes["mcp.protocol.version"] = protocol
        if kind in _TRANSPORTS:
            attributes["network.transport"] = _TRANSPORTS[kind]
        return self._keep(key, SpanShape(f"tools/call {shown}", SpanKind.CLIENT, attributes))

    async def call_upstream(
        self, upstream: str, kind: str, client: Client, tool: str, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        """``client.call_tool`` in a ``CLIENT`` span whose context travels in ``params._meta``."""
        shape = self._upstream_shape(upstream, kind, tool, client.protocol_version)
        span = self._spans.start(shape, get_current_span().get_span_context())
        # W3C Trace Context, as ``TraceContextTextMapPropagator.inject`` writes it.
        context = span.context
        meta: dict[str, Any] = {
            "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        }
        if context.trace_state:
            meta["tracestate"] = context.trace_state.to_header()
        # Current during the call: the ``mcp`` client writes the current context into
        # ``_meta`` too (with the process-wide propagator), which must agree with this one.
        token = attach(set_span_in_context(NonRecordingSpan(context)))
        try:
            result = await client.call_tool(tool, dict(arguments), meta=cast(types.RequestParamsMeta, meta))
        except MCPError as exc:
            span.set_attribute("error.type", str(exc.error.code))
            span.set_status(StatusCode.ERROR)
            raise
        except BaseException as exc:  # a lost connection, or the call's deadline (a cancel)
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
        else:
            if result.is_error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(StatusCode.ERROR)
            return result
        finally:
            detach(token)
            self._spans.end(span)


def _is_error(result: HandlerResult) -> bool:
    """Whether a ``tools/call`` answer is an ``isError`` result (a model, or already a dict)."""
    if isinstance(result, types.CallToolResult):
        return bool(result.is_error)
    return isinstance(result, dict) and result.get("isError") is True


def _exporters(
    settings: TelemetrySettings, resource: Resource, scope: InstrumentationScope
) -> tuple[SpanExporter | None, MetricExporter | None]:
    """The span and metric exporters the settings ask for (``resource`` and ``scope``: those of
    the gateway's spans).

    Raises:
        ConfigError: the exporter's package is not installed.
    """
    otlp = settings.otlp
    headers = {k: v.get_secret_value() for k, v in otlp.headers.items()} or None
    base = otlp.endpoint.rstrip("/") if otlp.endpoint is not None else None
    try:
        if otlp.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GRPCMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GRPCSpanExporter,
            )

            spans: SpanExporter | None = (
                ReadableExporter(
                    GRPCSpanExporter(endpoint=base, headers=headers, timeout=otlp.timeout), resource, scope
                )
                if settings.traces
                else None
            )
            metrics: MetricExporter | None = (
                GRPCMetricExporter(endpoint=base, headers=headers, timeout=otlp.timeout)
                if settings.metrics
                else None
            )
            return spans, metrics
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from residency._gateway._otlp_spans import FastOTLPSpanExporter
    except ImportError as exc:
        package = (
            "opentelemetry-exporter-otlp-proto-grpc"
            if otlp.protocol == "grpc"
            else "opentelemetry-exporter-otlp-proto-http"
        )
        raise ConfigError(
            f"residency.telemetry: the {otlp.protocol} exporter is not installed ({package}); "
            f"install it with: pip install 'residency[otel{',otel-grpc' if otlp.protocol == 'grpc' else ''}]'"
        ) from exc
    spans = (
        FastOTLPSpanExporter(
            endpoint=f"{base}/v1/traces" if base else None,
            headers=headers,
            timeout=otlp.timeout,
            resource=resource,
            scope=scope,
        )
        if settings.traces
        else None
    )
    metrics = (
        OTLPMetricExporter(
            endpoint=f"{base}/v1/metrics" if base else None, headers=headers, timeout=otlp.timeout
        )
        if settings.metrics
        else None
    )
    return spans, metrics


def registry_metrics(registry: CollectorRegistry, now_ns: int | None = None) -> list[Metric]:
    """The registry's metrics as OTLP metrics (see the module docstring), read once."""
    now = now_ns if now_ns is not None else time.time_ns()
    found: list[Metric] = []
    for family in registry.collect():
        unit = "s" if family.name.endswith("_seconds") else ""
        if family.type == "counter":
            points = _counter_points(family.samples, now)
            found.append(
                Metric(
                    family.name,
                    family.documentation,
                    unit,
                    Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True),
                )
            )
        elif family.type == "gauge":
            gauge_points = [
                NumberDataPoint(dict(s.labels), now, now, _number(s.value)) for s in family.samples
            ]
            found.append(Metric(family.name, family.documentation, unit, Gauge(gauge_points)))
        elif family.type == "histogram":
            found.append(
                Metric(
                    family.name,
                    family.documentation,
                    unit,
                    Histogram(_histogram_points(family.samples, now), AggregationTemporality.CUMULATIVE),
                )
            )
    return found


def _key(labels: Mapping[str, str], *drop: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _counter_points(samples: Any, now: int) -> list[NumberDataPoint]:
    created: dict[tuple[tuple[str, str], ...], int] = {}
    totals: list[tuple[tuple[tuple[str, str], ...], float]] = []
    for s in samples:
        if s.name.endswith("_created"):
            created[_key(s.labels)] = int(s.value * 1e9)
        elif s.name.endswith("_total"):
            totals.append((_key(s.labels), s.value))
    return [NumberDataPoint(dict(k), created.get(k, now), now, _number(v)) for k, v in totals]


def _histogram_points(samples: Any, now: int) -> list[HistogramDataPoint]:
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for s in samples:
        entry = series.setdefault(_key(s.labels, "le"), {"buckets": []})
        if s.name.endswith("_bucket"):
            entry["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            entry["count"] = int(s.value)
        elif s.name.endswith("_sum"):
            entry["sum"] = s.value
        elif s.name.endswith("_created"):
            entry["created"] = int(s.value * 1e9)
    points = []
    for key, entry in series.items():
        buckets = sorted(entry["buckets"])
        bounds = [b for b, _ in buckets if b != float("inf")]
        cumulative = [int(c) for _, c in buckets]
        counts = [c - p for c, p in zip(cumulative, [0, *cumulative[:-1]], strict=True)]
        points.append(
            HistogramDataPoint(
                attributes=dict(key),
                start_time_unix_nano=entry.get("created", now),
                time_unix_nano=now,
                count=entry.get("count", 0),
                sum=entry.get("sum", 0.0),
                bucket_counts=counts,
                explicit_bounds=bounds,
                # Prometheus keeps no minimum or maximum: left unset on the wire.
                min=cast(float, None),
                max=cast(float, None),
            )
        )
    return points
