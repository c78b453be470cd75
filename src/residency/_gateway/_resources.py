"""The gateway's resources: what a session holds, readable by the client (and the model).

``residency://tombstones``  one line per withheld tool whose arguments are still visible
``residency://tools``       the state table: every tool, its upstream, state and hash
``residency://chains``      archived abandoned chains with their rules
``residency://events``      the session's event log (re-expansions, refusals, tombstones, ...)
``residency://spans``       every span of the session: id, link, state, tags, key, size
``residency://spans/{id}``  one context span: its record and its original text, wherever it
                           stands; ``?offset=N&length=M`` reads a byte range of it (``span_range``)
``residency://upstreams``   the upstream servers: kind, status, tool count, protocol, last error

Every read but ``upstreams`` is scoped to the session the request belongs to; ``upstreams`` is
the gateway's (the same ``upstream_status`` the HTTP health endpoint serves). The list itself
is the same for everyone (it may be cached publicly); the contents change at any time.

A span's text is read from the content store (verified against its key) once it has been
written there, which is the case for every span that left the window; a resident span never
written (a small tagged result, see ``record_result``) is read from the session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import mcp_types as types

from residency._core._lifecycle import SpanState
from residency._core._spans import SpanRecord
from residency._core._tools import JSONObject
from residency._errors import InvalidInput, NotFound, SessionConflict, StoreError
from residency._gateway._aggregate import Catalog
from residency._gateway._config import Secrets, SpanSettings
from residency._gateway._upstream import Upstream
from residency._runtime import Session
from residency._text import printable
from residency._tokens import count_tokens

__all__ = [
    "CHAINS",
    "EVENTS",
    "SPANS",
    "SPAN_LIST",
    "TOMBSTONES",
    "TOOLS",
    "UPSTREAMS",
    "SPAN_META_KEY",
    "read_resource",
    "record_result",
    "resource_templates",
    "resources",
    "span_bytes",
    "span_range",
    "span_table",
    "upstream_status",
]

logger = logging.getLogger("residency.gateway")

TOMBSTONES = "residency://tombstones"
TOOLS = "residency://tools"
CHAINS = "residency://chains"
EVENTS = "residency://events"
SPANS = "residency://spans/"
SPAN_LIST = "residency://spans"
UPSTREAMS = "residency://upstreams"
SPAN_META_KEY = "residency/span"
"""``_meta`` key of a result that became a span: the span's id, uri, key, bytes and tokens."""
MAX_RANGE = 256 * 1024
"""The most bytes one range read returns (a client reads a larger span in several)."""


_JSON = "application/json"


def resources() -> list[types.Resource]:
    return [
        types.Resource(
            uri=TOMBSTONES,
            name="tombstones",
            description="Withheld tools whose earlier arguments are still in the conversation, one per line.",
            mime_type="text/plain",
        ),
        types.Resource(uri=TOOLS, name="tools", description="Every tool's residency state.", mime_type=_JSON),
        types.Resource(
            uri=CHAINS, name="chains", description="Archived abandoned tool chains.", mime_type=_JSON
        ),
        types.Resource(uri=EVENTS, name="events", description="The session's event log.", mime_type=_JSON),
        types.Resource(
            uri=SPAN_LIST,
            name="spans",
            description="Every context span of the session: its link, state (resident, externalized, "
            "evicted), tags, key and size.",
            mime_type=_JSON,
        ),
        types.Resource(
            uri=UPSTREAMS,
            name="upstreams",
            description="The upstream MCP servers: status, tool count, protocol version, last error.",
            mime_type=_JSON,
        ),
    ]


def resource_templates() -> list[types.ResourceTemplate]:
    return [
        types.ResourceTemplate(
            uri_template=SPANS + "{id}", name="span", description="One context span.", mime_type=_JSON
        )
    ]


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=False)


def tool_table(session: Session, catalog: Catalog) -> list[JSONObject]:
    rows: list[JSONObject] = []
    for name in session.tools():
        spec = session.tool(name)
        entry = catalog.get(name)
        rows.append(
            {
                "name": name,
                "server": entry.server if entry else None,
                "upstream_name": entry.upstream_name if entry else None,
                "offered": entry is not None,
                "state": session.state(name).value,
                "mutation": spec.mutation,
                "pinned": session.is_pinned(name),
                "arguments_resident": session.arguments_resident(name),
                "tokens": spec.tokens,
                "hash": spec.hash,
            }
        )
    return rows


def upstream_status(upstreams: Mapping[str, Upstream], secrets: Secrets) -> list[JSONObject]:
    """One entry per upstream, in configuration order (the health endpoint and ``residency://upstreams``).

    Each entry: ``name``, ``kind`` (``stdio``, ``http`` or ``in-process``), ``status``
    (``connected``, ``starting``, ``failed``: its last start or connection failed, or
    ``stopped``), ``tools`` (how many it last listed), ``protocol_version`` (None while not
    connected), ``starts`` (start attempts) and ``last_error`` (redacted; ``""`` if none).
    """
    return [
        {
            "name": name,
            "kind": upstream.kind,
            "status": upstream.status,
            "tools": len(upstream.tools),
            "protocol_version": upstream.protocol_version,
            "starts": upstream.starts,
            "last_error": secrets.redact(upstream.last_error),
        }
        for name, upstream in upstreams.items()
    ]


def read_resource(
    uri: str,
    session: Session,
    catalog: Catalog,
    *,
    upstreams: Mapping[str, Upstream] | None = None,
    secrets: Secrets | None = None,
) -> types.TextResourceContents:
    """The contents of one resource for this session.

    Args:
        uri: the resource.
        session: the session the request belongs to.
        catalog: the aggregated catalog.
        upstreams: the gateway's upstreams, for ``residency://upstreams``.
        secrets: scrubbed from upstream errors (nothing is scrubbed when omitted).

    Raises:
        NotFound: an unknown URI or span id, or ``residency://upstreams`` without ``upstreams``.
    """
    if uri == TOMBSTONES:
        return types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="\n".join(session.tombstones())
        )
    if uri == TOOLS:
        text = _dump(tool_table(session, catalog))
    elif uri == CHAINS:
        text = _dump([{**c.to_json(), "rule": c.rule} for c in session.chains()])
    elif uri == EVENTS:
        text = _dump(
            [
                {"turn": e.turn, "kind": e.kind.value, "subject": e.subject, "detail": e.detail, "at": e.at}
                for e in session.events()
            ]
        )
    elif uri == UPSTREAMS:
        if upstreams is None:
            raise NotFound(f"{UPSTREAMS} cannot be read here: no upstreams were given to read it from")
        text = _dump(upstream_status(upstreams, secrets if secrets is not None else Secrets()))
    elif uri.startswith(SPANS) and "?" in uri:
        span_id, _, query = uri[len(SPANS) :].partition("?")
        params = parse_qs(query, keep_blank_values=True)
        offset, length = (params.get(k, [None])[-1] for k in ("offset", "length"))
        try:
            start = int(offset) if offset is not None else 0
            size = int(length) if length is not None else MAX_RANGE
        except ValueError:
            raise InvalidInput(f"{uri}: offset and length must be whole numbers", where="uri") from None
        text = _dump(span_range(session, span_id, start, size))
    elif uri == SPAN_LIST:
        text = _dump(span_table(session))
    elif uri.startswith(SPANS) and len(uri) > len(SPANS):
        record = session.span(uri[len(SPANS) :])
        data: JSONObject = {
            "id": record.id,
            "key": record.key,
            "state": session.span_state(record.id).value,
            "tags": sorted(record.tags),
            "source": record.source,
            "provenance": list(record.provenance),
            "derivation_depth": record.derivation_depth,
            "verified": record.verified,
            "turn": record.turn,
            "tokens": record.tokens,
        }
        try:
            data["text"] = span_bytes(session, record.id).decode("utf-8", "replace")
        except NotFound:
            data["text"] = None
        text = _dump(data)
    else:
        raise NotFound(
            f"unknown resource {uri!r}; the gateway serves {TOMBSTONES}, {TOOLS}, {CHAINS}, {EVENTS}, "
            f"{UPSTREAMS}, {SPAN_LIST} and {SPANS}{{id}}"
        )
    return types.TextResourceContents(uri=uri, mime_type=_JSON, text=text)


def span_table(session: Session) -> list[JSONObject]:
    """One row per span of the session, in the order added (``residency://spans``)."""
    return [
        {
            "id": record.id,
            "uri": SPANS + record.id,
            "state": session.span_state(record.id).value,
            "tags": sorted(record.tags),
            "precondition": record.precondition,
            "source": record.source,
            "key": record.key,
            "tokens": record.tokens,
            "turn": record.turn,
        }
        for record in session.spans()
    ]


def span_bytes(session: Session, span_id: str) -> bytes:
    """A span's original bytes, wherever it stands.

    From the content store (which verifies them against the key) once they were written there,
    as they are for every span that left the window; else the span is resident and never
    written, and its text is the session's.

    Raises:
        NotFound: unknown span, or its bytes are missing from the store.
        IntegrityError: the stored bytes do not match the span's key.
    """
    record = session.span(span_id)
    if session.externalized_copy(span_id) or session.span_state(span_id) is not SpanState.RESIDENT:
        return session.store.get_content(record.key)
    # Restoring a resident span changes nothing (nothing is journaled) and returns its text.
    return session.restore(span_id).encode("utf-8")


def span_range(session: Session, span_id: str, offset: int = 0, length: int = MAX_RANGE) -> JSONObject:
    """Bytes ``offset`` to ``offset + length`` of a span's text (``span_bytes``), as text.

    The range is moved to whole UTF-8 characters (its start back, its end back, or forward
    when it would be empty), so pieces read one after another join to the exact original:
    read from ``next_offset`` until ``done``.

    Raises:
        NotFound: unknown span, or its bytes are not in the store.
        IntegrityError: the stored bytes do not match the span's key.
        InvalidInput: a negative offset, an offset past the end, or a length under 1.
    """
    record = session.span(span_id)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInput(f"offset must be a whole number of bytes, not {offset!r}", where="offset")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InvalidInput(f"length must be at least 1 byte, not {length!r}", where="length")
    raw = span_bytes(session, record.id)
    total = len(raw)
    if offset > total:
        raise InvalidInput(f"offset {offset} is past the span's end ({total} bytes)", where="offset")
    start = offset
    while 0 < start < total and raw[start] & 0xC0 == 0x80:  # inside a character: back to its start
        start -= 1
    end = min(total, start + min(length, MAX_RANGE))
    while start < end < total and raw[end] & 0xC0 == 0x80:
        end -= 1
    if end == start < total:  # shorter than the character there: return that one character
        end += 1
        while end < total and raw[end] & 0xC0 == 0x80:
            end += 1
    return {
        "id": record.id,
        "uri": SPANS + record.id,
        "offset": start,
        "next_offset": end,
        "bytes": total,
        "done": end >= total,
        "text": raw[start:end].decode("utf-8"),
    }


def record_result(
    session: Session, result: types.CallToolResult, tool: str, settings: SpanSettings
) -> types.CallToolResult:
    """What a forwarded result becomes: an offloaded span, a tagged resident span, or itself.

    Only a successful result whose blocks are all text is considered; its text is the blocks'
    text joined by newlines.

    * Over ``settings.offload_tokens`` tokens, and without structured content (its shape is the
      upstream's contract with the client), it is offloaded: written to the content store
      first and replaced by a preview and a link, as an externalized span with the tool's tags
      (``settings.tags``), if it has any.
    * Else, if ``settings.tags`` has a rule for the tool, it is recorded whole as a resident
      span with those tags (``add_span``), however small, and passes unchanged: a precondition
      result (``describe_table`` -> ``constraint``) is tracked, and kept by pointer when the
      host drops it.
    * Any other result passes unrecorded: its text would only grow the journal.

    A result that became a span names it in ``_meta[SPAN_META_KEY]``: ``id``, ``uri``, ``key``,
    ``bytes`` (of its UTF-8 text) and ``tokens``. If the store cannot take it (or a tag rule
    holds a tag the core refuses), the result passes whole and unrecorded: the call has
    already run, and losing its answer is worse than a large one.
    """
    if result.is_error or not result.content:
        return result
    if not all(isinstance(block, types.TextContent) for block in result.content):
        return result
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    try:
        try:
            return _record(session, result, tool, text, settings)
        except SessionConflict:
            # Another writer appended to the session: it has caught up, and nothing was recorded.
            return _record(session, result, tool, text, settings)
    except (StoreError, InvalidInput, SessionConflict) as exc:  # a full or failing store; bad tags
        logger.warning(
            "%s: its result could not be recorded as a span (%s); passed whole",
            printable(tool),
            printable(str(exc)),
        )
        return result


def _record(
    session: Session, result: types.CallToolResult, tool: str, text: str, settings: SpanSettings
) -> types.CallToolResult:
    tags = settings.tags.get(tool, ())
    source = f"tool:{tool}"
    limit = settings.offload_tokens
    # A token is at least one character: a text no longer than the limit cannot be over it.
    if limit is not None and result.structured_content is None and len(text) > limit:
        tokens = count_tokens(text)  # once: the span records this count (about 10 ms at 1 MB)
        if tokens > limit:
            record = session.offload_span(text, tags=tags, source=source, tokens=tokens)
            return _offloaded(record, result, text, settings.preview_chars)
    if not tags:
        return result
    record = session.add_span(text, tags=tags, source=source)
    result.meta = {**(result.meta or {}), SPAN_META_KEY: _link(record, len(text.encode("utf-8")))}
    return result


def _link(record: SpanRecord, size: int) -> JSONObject:
    return {
        "id": record.id,
        "uri": SPANS + record.id,
        "key": record.key,
        "bytes": size,
        "tokens": record.tokens,
    }


def _offloaded(
    record: SpanRecord, result: types.CallToolResult, text: str, preview_chars: int
) -> types.CallToolResult:
    """The result the client gets for an offloaded span: a preview, its size and its link."""
    size = len(text.encode("utf-8"))
    preview = text[:preview_chars]
    uri = SPANS + record.id
    note = (
        f"\n[residency: result offloaded, {size} bytes (about {record.tokens} tokens); above are its first "
        f"{len(preview)} characters. Read it by byte range with read_span(id={record.id!r}, offset, length), "
        f"from offset {len(preview.encode('utf-8'))}, or resources/read {uri}?offset=N&length=M]"
    )
    offloaded = types.CallToolResult(
        content=[types.TextContent(type="text", text=preview + note)], is_error=False
    )
    offloaded.meta = {**(result.meta or {}), SPAN_META_KEY: _link(record, size)}
    return offloaded
