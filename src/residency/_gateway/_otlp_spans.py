"""The gateway's OTLP/HTTP span exporter: the SDK's, with a cheaper encoder.

The SDK's encoder builds a protobuf object for every span, attribute and value and then
serializes them: about 70 µs of Python per span, spent in the exporter's thread while it holds
the GIL the gateway's event loop needs. This one writes the protobuf wire format directly, with
each attribute's encoded form (key and value) kept in a bounded cache: the gateway's spans
repeat the same tool names, methods and upstreams. The gateway's own spans (``SpanRecord``s of
``_span_records``) cost less again: a shape's name, kind and fixed attributes are encoded once
and kept on the shape, so a record costs its ids, times, status and varying attributes (its ids
and times written by one ``struct`` call each), and a batch of records alone, the gateway's, is
joined once, its lengths counted ahead. Its output decodes to the same
``ExportTraceServiceRequest`` as the SDK's (tests compare them field by field).

It handles the spans the gateway makes: attribute values that are strings, booleans, integers
or floats, no events or links. A batch holding anything else (an instrumentation the
application added to the same tracer provider could) is encoded by the SDK's encoder. Sending
is the SDK exporter's own: endpoint, headers, compression, retries, timeout and the
``OTEL_EXPORTER_OTLP_*`` variables behave as they do there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import DEFAULT_TRACE_STATE, SpanContext, SpanKind, StatusCode

from residency._gateway._span_records import SpanRecord, readable

__all__ = ["FastOTLPSpanExporter", "NotEncodable", "SpanEncoder"]

# Span.kind in OTLP: the SDK's SpanKind plus one (0 is SPAN_KIND_UNSPECIFIED).
_KIND = {kind: bytes((0x30, kind.value + 1)) for kind in SpanKind}
# Span.flags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, and IS_REMOTE for a remote parent.
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)
_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
_STATUS_UNSET = b"\x7a\x00"  # an empty Status: code UNSET, no message
_CACHED = 4096  # encoded attributes kept; past that the cache starts over
# A record's ids and times in one call each: trace_id (field 1, as two big-endian halves),
# span_id (2), and parent_span_id (4) when there is a parent; start and end times (7, 8).
_IDS = struct.Struct(">2sQQ2sQ")
_IDS_PARENT = struct.Struct(">2sQQ2sQ2sQ")
_TIMES = struct.Struct("<BQBQ")
_LOW64 = (1 << 64) - 1
_SMALL = [bytes((n,)) for n in range(0x80)]  # one-byte varints
_NO_STATE = DEFAULT_TRACE_STATE  # a context's trace state when it has none


class NotEncodable(Exception):
    """A span this encoder does not handle (events, links, another kind of attribute value)."""


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _identity(context: SpanContext, parent: SpanContext | None) -> list[bytes]:
    """A span's trace id, span id, trace state and parent span id fields (the message's start)."""
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_field(0x1A, context.trace_state.to_header().encode()))
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    return parts


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (``tag`` is the field number and wire type 2, one byte)."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    # bool first: it is an int too.
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(0x0A, value.encode())
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise NotEncodable("an integer outside int64")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    raise NotEncodable(f"an attribute value of type {type(value).__name__}")


class SpanEncoder:
    """Spans to an ``ExportTraceServiceRequest``'s bytes (see the module docstring)."""

    def __init__(self, resource: Resource | None = None, scope: InstrumentationScope | None = None) -> None:
        # The resource and scope of the ``SpanRecord``s it is given (the SDK's spans carry theirs).
        self._resource = resource if resource is not None else Resource.get_empty()
        self._scope_of_records = scope
        # (key, type, value) -> the encoded KeyValue field; the type keeps True apart from 1.
        # Floats are not kept: 0.0 and -0.0 are equal keys with different encodings.
        self._attributes: dict[tuple[str, type, Any], bytes] = {}
        self._names: dict[str, bytes] = {}

    def _key_values(self, attributes: Mapping[str, Any] | None, tag: int) -> Iterable[bytes]:
        if not attributes:
            return ()
        cache = self._attributes
        out = []
        for key, value in attributes.items():
            kind = type(value)
            entry = (key, kind, value)
            encoded = cache.get(entry) if kind is not float else None
            if encoded is None:
                encoded = _field(tag, _field(0x0A, key.encode()) + _field(0x12, _any_value(value)))
                if kind is not float:
                    if len(cache) >= _CACHED:
                        cache.clear()
                    cache[entry] = encoded
            out.append(encoded)
        return out

    def _name(self, name: str) -> bytes:
        encoded = self._names.get(name)
        if encoded is None:
            encoded = _field(0x2A, name.encode())
            if len(self._names) >= _CACHED:
                self._names.clear()
            self._names[name] = encoded
        return encoded

    def span(self, span: ReadableSpan) -> bytes:
        """One ``Span`` message (its fields, without the enclosing tag).

        Raises:
            NotEncodable: the span has events or links, or an attribute value of another type.
        """
        if span.events or span.links or span.dropped_events or span.dropped_links:
            raise NotEncodable("a span with events or links")
        context = span.get_span_context()
        if context is None or span.start_time is None or span.end_time is None:
            raise NotEncodable("a span without a context or times")
        parent = span.parent
        parts = _identity(context, parent)
        parts.append(self._name(span.name))
        parts.append(_KIND[span.kind])
        parts.append(b"\x39" + _FIXED64.pack(span.start_time))
        parts.append(b"\x41" + _FIXED64.pack(span.end_time))
        parts.extend(self._key_values(span.attributes, 0x4A))
        if span.dropped_attributes:
            parts.append(b"\x50" + _varint(span.dropped_attributes))
        status = span.status
        message = status.description.encode() if status.description else b""
        code = status.status_code.value
        parts.append(
            _field(0x7A, (_field(0x12, message) if message else b"") + (bytes((0x18, code)) if code else b""))
        )
        parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
        return b"".join(parts)

    def record(self, span: SpanRecord) -> bytes:
        """One ``Span`` message of a ``SpanRecord`` (as ``span`` writes the SDK's)."""
        shape = span.shape
        fixed = shape.encoded
        if fixed is None:
            fixed = (
                self._name(shape.name) + _KIND[shape.kind],
                b"".join(self._key_values(shape.attributes, 0x4A)),
            )
            shape.encoded = fixed
        context = span.context
        parent = span.parent
        trace_id = context.trace_id
        high, low = trace_id >> 64, trace_id & _LOW64
        state = context.trace_state
        if state is not _NO_STATE and state:  # field 3 goes between the span's id and its parent's
            ids = _IDS.pack(b"\x0a\x10", high, low, b"\x12\x08", context.span_id)
            ids += _field(0x1A, state.to_header().encode())
            if parent is not None:
                ids += b"\x22\x08" + parent.span_id.to_bytes(8, "big")
        elif parent is None:
            ids = _IDS.pack(b"\x0a\x10", high, low, b"\x12\x08", context.span_id)
        else:
            ids = _IDS_PARENT.pack(
                b"\x0a\x10", high, low, b"\x12\x08", context.span_id, b"\x22\x08", parent.span_id
            )
        times = _TIMES.pack(0x39, span.start_time, 0x41, span.end_time)
        flags = _FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL
        code, description = span.status
        if code is StatusCode.UNSET:
            status = _STATUS_UNSET
        else:
            message = _field(0x12, description.encode()) if description else b""
            status = _field(0x7A, message + bytes((0x18, code.value)))
        if span.attributes:
            varying = b"".join(self._key_values(span.attributes, 0x4A))
            return b"".join((ids, fixed[0], times, fixed[1], varying, status, flags))
        return b"".join((ids, fixed[0], times, fixed[1], status, flags))

    def _scope(self, scope: InstrumentationScope | None) -> bytes:
        if scope is None:
            return b""
        parts = [_field(0x0A, scope.name.encode()) if scope.name else b""]
        if scope.version:
            parts.append(_field(0x12, scope.version.encode()))
        parts.extend(self._key_values(scope.attributes, 0x1A))
        return b"".join(parts)

    def request(self, spans: Sequence[ReadableSpan | SpanRecord]) -> bytes:
        """The ``ExportTraceServiceRequest`` of ``spans``, grouped by resource and scope.

        Raises:
            NotEncodable: a span this encoder does not handle (see ``span``).
        """
        if spans and all(type(s) is SpanRecord for s in spans):
            return self._records(cast("Sequence[SpanRecord]", spans))
        # Grouped by the resource object, not by equality: a Resource hashes its attributes
        # as JSON, every time (the spans of one tracer provider share one object).
        resources: dict[int, Resource] = {}
        groups: dict[int, dict[InstrumentationScope | None, list[bytes]]] = {}
        for s in spans:
            if isinstance(s, SpanRecord):
                resource, scope, message = self._resource, self._scope_of_records, self.record(s)
            else:
                resource, scope, message = s.resource, s.instrumentation_scope or None, self.span(s)
            by_scope = groups.get(id(resource))
            if by_scope is None:
                by_scope = groups[id(resource)] = {}
                resources[id(resource)] = resource
            by_scope.setdefault(scope, []).append(_field(0x12, message))
        out = []
        for key, by_scope in groups.items():
            resource = resources[key]
            body = [_field(0x0A, b"".join(self._key_values(resource.attributes, 0x0A)))]
            for scope, encoded in by_scope.items():
                scope_spans = [_field(0x0A, self._scope(scope)), *encoded]
                if scope is not None and scope.schema_url:
                    scope_spans.append(_field(0x1A, scope.schema_url.encode()))
                body.append(_field(0x12, b"".join(scope_spans)))
            if resource.schema_url:
                body.append(_field(0x1A, resource.schema_url.encode()))
            out.append(_field(0x0A, b"".join(body)))
        return b"".join(out)

    def _records(self, spans: Sequence[SpanRecord]) -> bytes:
        """``request`` for ``SpanRecord``s alone (the gateway's batches): one resource and scope,
        each span's length prefix written beside it and the whole joined once."""
        parts: list[bytes] = []
        size = 0
        for s in spans:
            message = self.record(s)
            n = len(message)
            prefix = b"\x12" + _varint(n)  # ScopeSpans.spans
            parts.append(prefix)
            parts.append(message)
            size += len(prefix) + n
        scope = self._scope_of_records
        scope_field = _field(0x0A, self._scope(scope))
        scope_url = scope.schema_url if scope is not None else ""
        scope_schema = _field(0x1A, scope_url.encode()) if scope_url else b""
        resource = self._resource
        resource_field = _field(0x0A, b"".join(self._key_values(resource.attributes, 0x0A)))
        resource_schema = _field(0x1A, resource.schema_url.encode()) if resource.schema_url else b""
        scope_size = len(scope_field) + size + len(scope_schema)
        scope_head = b"\x12" + _varint(scope_size)  # ResourceSpans.scope_spans
        resource_size = len(resource_field) + len(scope_head) + scope_size + len(resource_schema)
        head = b"\x0a" + _varint(resource_size) + resource_field + scope_head + scope_field
        return b"".join((head, *parts, scope_schema, resource_schema))


class FastOTLPSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` with ``SpanEncoder`` (see the module docstring); ``resource`` and
    ``scope`` are those of the ``SpanRecord``s it is given."""

    def __init__(
        self,
        *args: Any,
        resource: Resource | None = None,
        scope: InstrumentationScope | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = SpanEncoder(resource, scope)
        self._resource = resource if resource is not None else Resource.get_empty()
        self._records_scope = scope if scope is not None else InstrumentationScope("")

    def _readable(self, spans: Sequence[ReadableSpan | SpanRecord]) -> Sequence[ReadableSpan]:
        return [
            readable(s, self._resource, self._records_scope) if isinstance(s, SpanRecord) else s
            for s in spans
        ]

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[no-untyped-call]  # the SDK's is not annotated

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client = getattr(self, "_client", None)
        limit = getattr(self, "_max_request_size", None)
        metrics = getattr(self, "_metrics", None)
        if self._shutdown or client is None or limit is None or metrics is None:
            return super().export(self._readable(spans))
        try:
            body = self._encoder.request(spans)
        except NotEncodable:
            return super().export(self._readable(spans))
        if 0 < limit < len(body):
            # The SDK's path drops it, logs and counts it so.
            return super().export(self._readable(spans))
        with metrics.export_operation(len(spans)) as result:
            sent = client.export(body)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {"http.response.status_code": sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
