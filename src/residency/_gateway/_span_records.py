"""The gateway's spans as plain records: what ``_tracing`` makes instead of the SDK's spans.

A span of the SDK costs tens of microseconds of Python on the event loop (sampler calls,
bounded attribute dicts with a lock, a read-only copy at its end) and tens more in the export
thread, which re-reads every attribute of it to encode it. The gateway's spans have few shapes
(a name, a kind and attributes fixed by the method, tool and upstream), so a ``SpanRecord``
holds a reference to its ``SpanShape``, its ids, times, status and the few attributes that vary;
``_otlp_spans`` encodes each shape once and a record in a few field writes.

What the SDK decides is decided the same way: the sampler is the SDK's (``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_SAMPLER_ARG``; the default, parent-based always-on, is evaluated inline: a span
is sampled when it has no parent or a sampled one), the trace and span ids are random as the
SDK's, a child keeps its parent's trace id, trace state and random-trace-id flag, and only
sampled spans reach the processor (``_loop_export`` over OTLP/HTTP, the SDK's
``BatchSpanProcessor`` over gRPC; their ``OTEL_BSP_*`` settings apply). The records pass
through it to the exporter as the SDK's spans would; ``readable``
turns one into the SDK's ``ReadableSpan`` for an exporter that needs those (gRPC). Not
applied: the SDK's span limits (``OTEL_SPAN_ATTRIBUTE_*``, ``OTEL_ATTRIBUTE_*``); a gateway span
has at most eight attributes, each set by the gateway, and no events or links.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

__all__ = ["ReadableExporter", "SpanRecord", "SpanRecorder", "SpanShape", "SpanSink", "readable"]

_SAMPLED = TraceFlags.SAMPLED
_RANDOM = TraceFlags.RANDOM_TRACE_ID
_FLAGS = {n: TraceFlags(n) for n in range(4)}


class SpanShape:
    """A span's name, kind and the attributes that do not vary, built once per hook key.

    ``encoded`` is the exporter's to fill: the shape's OTLP bytes, written once."""

    __slots__ = ("attributes", "encoded", "kind", "name")

    def __init__(self, name: str, kind: SpanKind, attributes: Mapping[str, Any]) -> None:
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.encoded: tuple[bytes, bytes] | None = None


class SpanRecord:
    """One span: its shape, context, parent, times, status and the attributes that vary
    (after the shape's, in the order they were set)."""

    __slots__ = ("attributes", "context", "end_time", "parent", "shape", "start_time", "status")

    def __init__(
        self,
        shape: SpanShape,
        context: SpanContext,
        parent: SpanContext | None,
        start_time: int,
        attributes: dict[str, Any] | None,
    ) -> None:
        self.shape = shape
        self.context = context
        self.parent = parent
        self.start_time = start_time
        self.end_time = 0
        self.attributes = attributes
        self.status: tuple[StatusCode, str | None] = (StatusCode.UNSET, None)

    def set_attribute(self, key: str, value: Any) -> None:
        if self.attributes is None:
            self.attributes = {}
        self.attributes[key] = value

    def set_status(self, code: StatusCode, description: str | None = None) -> None:
        self.status = (code, description if code is StatusCode.ERROR else None)


class SpanSink(Protocol):
    """What ``SpanRecorder`` hands sampled spans to: the SDK's ``SpanProcessor``, or the
    gateway's ``LoopSpanExport``."""

    def on_end(self, span: ReadableSpan) -> None: ...

    def shutdown(self) -> None: ...


class SpanRecorder:
    """Starts and ends ``SpanRecord``s under ``sampler``; sampled ones go to ``processor``."""

    def __init__(self, sampler: Sampler, processor: SpanSink | None) -> None:
        self._sampler = sampler
        self._default = sampler is DEFAULT_ON
        self._processor = processor

    def start(
        self,
        shape: SpanShape,
        parent: SpanContext | None,
        attributes: dict[str, Any] | None = None,
        start_time: int | None = None,
    ) -> SpanRecord:
        """A span of ``shape`` under ``parent`` (None, or an invalid context: a root span)."""
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            flags = parent.trace_flags & _RANDOM
            state = parent.trace_state
        else:
            parent = None
            trace_id = 0
            while not trace_id:
                trace_id = random.getrandbits(128)
            flags = _RANDOM
            state = None
        if self._default:
            if parent is None or parent.trace_flags & _SAMPLED:
                flags |= _SAMPLED
        else:
            given = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else Context()
            merged = {**shape.attributes, **(attributes or {})}
            result = self._sampler.should_sample(given, trace_id, shape.name, shape.kind, merged)
            if result.decision is Decision.RECORD_AND_SAMPLE:
                flags |= _SAMPLED
            state = result.trace_state
            if result.attributes:
                added = {k: v for k, v in result.attributes.items() if shape.attributes.get(k) != v}
                attributes = added or None
        span_id = 0
        while not span_id:
            span_id = random.getrandbits(64)
        context = SpanContext(trace_id, span_id, False, _FLAGS[flags], state)
        return SpanRecord(
            shape, context, parent, start_time if start_time is not None else time.time_ns(), attributes
        )

    def end(self, span: SpanRecord) -> None:
        """End ``span`` now; a sampled one is handed to the processor, to be exported."""
        span.end_time = time.time_ns()
        if self._processor is not None and span.context.trace_flags & _SAMPLED:
            # The batch processor keeps and hands on what it is given; the exporter takes records.
            self._processor.on_end(cast(ReadableSpan, span))


def readable(span: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """``span`` as the SDK's ``ReadableSpan`` (for an exporter that encodes those)."""
    code, description = span.status
    return ReadableSpan(
        name=span.shape.name,
        context=span.context,
        parent=span.parent,
        resource=resource,
        attributes={**span.shape.attributes, **(span.attributes or {})},
        kind=span.shape.kind,
        status=Status(code, description),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=scope,
    )


class ReadableExporter(SpanExporter):
    """``exporter`` given the SDK's ``ReadableSpan``s for the ``SpanRecord``s it is handed (an
    exporter that encodes those itself, gRPC's); the conversion runs in the export thread."""

    def __init__(self, exporter: SpanExporter, resource: Resource, scope: InstrumentationScope) -> None:
        self._exporter = exporter
        self._resource = resource
        self._scope = scope

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export(
            [readable(s, self._resource, self._scope) if isinstance(s, SpanRecord) else s for s in spans]
        )

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)
