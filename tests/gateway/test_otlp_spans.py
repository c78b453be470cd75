"""The gateway's OTLP span encoder (``_otlp_spans``) against the OpenTelemetry SDK's own.

Spans come from a real SDK tracer provider; the SDK's encoder (``encode_spans``) is the reference:
the bytes must decode to the same message, field by field. The exporter sends to the real OTLP
receiver of ``tests._otlp``, which decodes with the official protobuf definitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from residency._gateway._otlp_spans import FastOTLPSpanExporter, NotEncodable, SpanEncoder
from residency._gateway._span_records import SpanRecorder, SpanShape, readable
from tests._otlp import OTLPReceiver


class Kept(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def provider() -> tuple[TracerProvider, Kept]:
    kept = Kept()
    tp = TracerProvider(resource=Resource.create({"service.name": "t", "n": 3}, schema_url="https://r"))
    tp.add_span_processor(SimpleSpanProcessor(kept))
    return tp, kept


def assert_same_as_the_sdk(spans: Sequence[ReadableSpan]) -> None:
    mine = SpanEncoder().request(spans)
    theirs = encode_spans(spans)
    assert ExportTraceServiceRequest.FromString(mine) == theirs
    assert mine == theirs.SerializeToString()


def test_spans_encode_as_the_sdk_encodes_them() -> None:
    tp, kept = provider()
    tracer = tp.get_tracer("residency.gateway", "1.2", schema_url="https://s", attributes={"a": True})
    other = tp.get_tracer("other")
    remote = SpanContext(0x1234, 0x99, True, TraceFlags(1), TraceState([("k", "v")]))
    values: dict[str, Any] = {"s": "é✓", "b": False, "t": True, "i": -5, "big": 2**62, "f": 1.5}
    with tracer.start_as_current_span(
        "server",
        context=set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
        attributes=values,
    ) as span:
        span.set_status(StatusCode.ERROR, "it failed")
        child = tracer.start_span("client", kind=SpanKind.CLIENT, attributes={"x": "y"})
        child.set_status(StatusCode.OK)
        child.end()
        other.start_span("internal", start_time=1).end()
    tracer.start_span("root").end()
    assert len(kept.spans) == 4
    assert_same_as_the_sdk(kept.spans)


def test_kept_encodings_never_stand_in_for_an_equal_value_of_another_kind() -> None:
    # True == 1 and 0.0 == -0.0 in Python; on the wire they differ.
    tp, kept = provider()
    tracer = tp.get_tracer("residency.gateway")
    encoder = SpanEncoder()
    for value in (1, True, 0, False, 0.0, -0.0, "1"):
        tracer.start_span("s", attributes={"v": value}).end()
    for span in kept.spans:  # one at a time, through one encoder: its caches see them all
        decoded = ExportTraceServiceRequest.FromString(encoder.request([span]))
        assert decoded == encode_spans([span])
    assert_same_as_the_sdk(kept.spans)


def test_a_span_with_events_is_left_to_the_sdk() -> None:
    tp, kept = provider()
    span = tp.get_tracer("residency.gateway").start_span("s")
    span.add_event("happened", {"n": 1})
    span.end()
    with pytest.raises(NotEncodable):
        SpanEncoder().request(kept.spans)


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_exporter_sends_every_span_to_a_collector(compression: Compression) -> None:
    tp, kept = provider()
    tracer = tp.get_tracer("residency.gateway")
    tracer.start_span("plain", attributes={"k": "v"}).end()
    with_event = tracer.start_span("with an event")
    with_event.add_event("happened")
    with_event.end()
    with OTLPReceiver() as rx:
        exporter = FastOTLPSpanExporter(
            endpoint=f"{rx.endpoint}/v1/traces", headers={"x-key": "k"}, compression=compression
        )
        # One batch the encoder handles, one it leaves to the SDK's: both arrive.
        assert exporter.export(kept.spans[:1]) is SpanExportResult.SUCCESS
        assert exporter.export(kept.spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert [s.name for s in rx.spans()] == ["plain", "plain", "with an event"]
        assert rx.traces[0] == encode_spans(kept.spans[:1])
        assert all(h.get("x-key") == "k" for h in rx.headers)
        assert [s.span.events[0].name for s in rx.spans() if s.span.events] == ["happened"]


def test_a_collector_that_refuses_is_a_failed_export() -> None:
    tp, kept = provider()
    tp.get_tracer("residency.gateway").start_span("s").end()
    with OTLPReceiver() as rx:
        exporter = FastOTLPSpanExporter(endpoint=f"{rx.endpoint}/v1/nowhere", timeout=5)
        assert exporter.export(kept.spans) is SpanExportResult.FAILURE
        exporter.shutdown()
        assert not rx.traces


@pytest.mark.parametrize("schema_url", ["", "https://opentelemetry.io/schemas/1.40.0"])
def test_span_records_encode_as_the_sdk_encodes_the_same_spans(schema_url: str) -> None:
    """The gateway's own spans (``SpanRecord``s) against the SDK's encoding of them as
    ``ReadableSpan``s: a shape's encoding is written once and kept, so a second span of the same
    shape, another status and other attributes must still come out as its own. A batch of
    records alone is written in one piece, its lengths counted ahead: with schema URLs on the
    resource and scope too."""
    resource = Resource.create({"service.name": "t"}, schema_url=schema_url or None)
    scope = InstrumentationScope("residency.gateway", "1.2", schema_url=schema_url or None)
    recorder = SpanRecorder(DEFAULT_ON, None)
    server = SpanShape("tools/call x", SpanKind.SERVER, {"mcp.method.name": "tools/call", "n": 3})
    client = SpanShape("tools/call y", SpanKind.CLIENT, {"gen_ai.tool.name": "y", "ok": True})
    remote = SpanContext(0x1234, 0x99, True, TraceFlags(1), TraceState([("k", "v")]))
    first = recorder.start(server, remote, {"jsonrpc.request.id": "1"})
    first.set_attribute("error.type", "tool_error")
    first.set_status(StatusCode.ERROR, "it failed")
    child = recorder.start(client, first.context, None, start_time=5)
    second = recorder.start(server, None, {"jsonrpc.request.id": "2", "f": -0.0})
    for record in (child, first, second):
        recorder.end(record)
    records = [first, child, second]
    encoder = SpanEncoder(resource, scope)
    for _ in range(2):  # the second time from the kept encodings of the shapes
        mine = ExportTraceServiceRequest.FromString(encoder.request(records))
        assert mine == encode_spans([readable(r, resource, scope) for r in records])
    assert child.context.trace_id == first.context.trace_id == 0x1234
    assert second.context.trace_id != 0x1234 and second.parent is None


def test_an_empty_batch_is_an_empty_request() -> None:
    encoder = SpanEncoder(Resource.create({"service.name": "t"}), InstrumentationScope("residency.gateway"))
    assert encoder.request([]) == encode_spans([]).SerializeToString() == b""


def test_a_collector_gets_the_records_of_a_recorder() -> None:
    resource = Resource.create({"service.name": "t"})
    scope = InstrumentationScope("residency.gateway", "1.2")
    shape = SpanShape("admit x", SpanKind.INTERNAL, {"gen_ai.tool.name": "x"})
    with OTLPReceiver() as rx:
        exporter = FastOTLPSpanExporter(endpoint=f"{rx.endpoint}/v1/traces", resource=resource, scope=scope)
        kept = Kept()
        recorder = SpanRecorder(DEFAULT_ON, SimpleSpanProcessor(kept))
        for _ in range(3):
            recorder.end(recorder.start(shape, None))
        assert exporter.export(kept.spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
        received = rx.spans()
    assert [s.name for s in received] == ["admit x"] * 3
    assert all(s.attributes == {"gen_ai.tool.name": "x"} and s.scope == "residency.gateway" for s in received)
    assert {s.resource["service.name"] for s in received} == {"t"}
