"""Span rules: what may leave the window, in what form, and what a summary may claim.

Theory of operation
-------------------
A span is a piece of context (a tool output, a plan, a diff, a summary). Its text is
immutable: the span is named by an id and addressed by the sha256 of its UTF-8 bytes, so the
copy written to the content store is the span, not a paraphrase of it.

* A span leaves the window by ``externalize`` (the window keeps a pointer that shows the key)
  or ``evict`` (it leaves entirely). Either way the shell writes its bytes to the content
  store *before* the journal records the change, so nothing that left can be lost.
* A precondition span (tagged ``invariant``, ``constraint``, ``negative_result`` or
  ``scope_qualifier``) leaves only as a pointer. Evicting one that has no externalized copy is
  refused with ``UnrecoverablePruneError``; one that has a copy becomes a pointer.
* A summary records the ids it compresses (its provenance) and
  ``derivation_depth = 1 + max(depth of sources)``; an original span has depth 0.
  Summarizing a summary is refused until that summary has been re-grounded against the store
  (its sources' original bytes read back and verified).
* A summary is verified when its provenance is non-empty and every source is itself verified.
  An unverified summary cannot justify a destructive action.

The state changes go through the shared ``SPAN_LIFECYCLE`` machine with two facts:
``precondition`` and ``externalized_copy``. This module is pure: no I/O, no clock; the shell
reads and writes the store and passes the results in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from residency._core._lifecycle import SPAN_LIFECYCLE, SpanState
from residency._errors import InvalidInput, UnrecoverablePruneError

__all__ = [
    "PRECONDITION_TAGS",
    "SpanRecord",
    "WindowItem",
    "WindowItemKind",
    "fire_span",
    "parse_span_ids",
    "parse_tags",
    "pointer_text",
    "record_data",
    "record_from",
    "span_facts",
    "summary_depth",
    "summary_refusal",
    "summary_verified",
]

PRECONDITION_TAGS: frozenset[str] = frozenset(
    {"invariant", "constraint", "negative_result", "scope_qualifier"}
)
"""Tags of spans whose content later actions depend on: they leave the window only as pointers."""


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A span of context. Immutable; its lifecycle state is kept by the session.

    Attributes:
        id: the span's id in its session (``s1``, ``s2``, ...).
        key: the content address of its text: ``sha256:`` and the hex digest of the UTF-8 bytes.
        tags: free-form tags; the precondition tags among them decide how it may leave.
        source: where it came from, e.g. ``"tool:describe_table"`` (free text).
        provenance: for a summary, the ids of the spans it compresses; empty for an original.
        derivation_depth: 0 for an original, ``1 + max(depth of sources)`` for a summary.
        verified: an original is verified; a summary is verified when its provenance is
            non-empty and every source is verified.
        grounded: an original is grounded; a summary is grounded once its sources' original
            bytes have been read back from the store (``reground``). Only a grounded summary
            may itself be summarized.
        turn: the session turn it was added in.
        tokens: tokens of its text.
    """

    id: str
    key: str
    tags: frozenset[str]
    source: str
    provenance: tuple[str, ...] = ()
    derivation_depth: int = 0
    verified: bool = True
    grounded: bool = True
    turn: int = 0
    tokens: int = 0

    @property
    def precondition(self) -> bool:
        """Whether it carries a precondition tag (it may leave only as a pointer)."""
        return not self.tags.isdisjoint(PRECONDITION_TAGS)

    @property
    def is_summary(self) -> bool:
        """Whether it was derived from other spans (``derivation_depth >= 1``)."""
        return self.derivation_depth >= 1


class WindowItemKind(enum.Enum):
    """How a span appears in the window."""

    TEXT = "text"
    """The span's own text."""
    POINTER = "pointer"
    """One line naming the span and the key of its externalized copy."""


@dataclass(frozen=True, slots=True)
class WindowItem:
    """One item of what the host shows the model, in span order.

    Attributes:
        span_id: the span shown.
        kind: its own text, or a pointer to its externalized copy.
        text: what the model sees: the span's text, or the pointer line (which shows the key).
        key: the span's content address.
        tags: the span's tags.
    """

    span_id: str
    kind: WindowItemKind
    text: str
    key: str
    tags: frozenset[str]


def parse_tags(tags: object, *, where: str = "tags") -> frozenset[str]:
    """Validate tags: an iterable of non-empty strings (a lone string is refused).

    Raises:
        InvalidInput: a string given where a collection is expected, or a tag that is not a
            non-empty string.
    """
    if isinstance(tags, str | bytes):
        raise InvalidInput(
            f"{where} must be a collection of strings, not one string (did you mean [{tags!r}]?)",
            where=where,
        )
    if not isinstance(tags, Iterable):
        raise InvalidInput(f"{where} must be a collection of strings", where=where)
    out: set[str] = set()
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag:
            raise InvalidInput(f"{where}[{i}] must be a non-empty string, got {tag!r}", where=f"{where}[{i}]")
        out.add(tag)
    return frozenset(out)


def parse_span_ids(ids: object, *, where: str = "ids") -> tuple[str, ...]:
    """Validate a collection of span ids (order kept, duplicates dropped).

    Raises:
        InvalidInput: a lone string, or an id that is not a string.
    """
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidInput(f'{where} must be a collection of span ids (e.g. ["s1", "s2"])', where=where)
    out: list[str] = []
    for i, span_id in enumerate(ids):
        if not isinstance(span_id, str):
            raise InvalidInput(
                f"{where}[{i}] must be a span id string, got {span_id!r}", where=f"{where}[{i}]"
            )
        out.append(span_id)
    return tuple(dict.fromkeys(out))


def span_facts(record: SpanRecord, *, externalized_copy: bool) -> dict[str, bool]:
    """The guard facts the span table reads."""
    return {"precondition": record.precondition, "externalized_copy": externalized_copy}


def fire_span(record: SpanRecord, state: SpanState, trigger: str, *, externalized_copy: bool) -> SpanState:
    """Fire a span trigger through the shared machine.

    Returns:
        The new state (it may equal ``state``: e.g. evicting a pointer of a precondition span).

    Raises:
        UnrecoverablePruneError: ``evict`` of a precondition span with no externalized copy.
        IllegalTransition: any other refusal. Nothing changes either way.
    """
    facts = span_facts(record, externalized_copy=externalized_copy)
    if (
        trigger == "evict"
        and record.precondition
        and not externalized_copy
        and SPAN_LIFECYCLE.target(state, trigger, facts) is None
    ):
        tags = ", ".join(sorted(record.tags & PRECONDITION_TAGS))
        raise UnrecoverablePruneError(
            f"span {record.id!r} carries a precondition ({tags}) and has no externalized copy: "
            f"evicting it would lose what later actions depend on. Externalize it first; the "
            f"window then keeps a pointer to {record.key}"
        )
    return SPAN_LIFECYCLE.fire(state, trigger, record=record.id, facts=facts)


def summary_depth(sources: Sequence[SpanRecord]) -> int:
    """``1 + max(depth of sources)``; 1 for a summary with no sources."""
    return 1 + max((s.derivation_depth for s in sources), default=0)


def summary_verified(sources: Sequence[SpanRecord]) -> bool:
    """A summary is verified when it has sources and every one of them is verified."""
    return bool(sources) and all(s.verified for s in sources)


def summary_refusal(sources: Sequence[SpanRecord]) -> UnrecoverablePruneError | None:
    """The refusal for summarizing ``sources``, or None if they may be summarized.

    A source that is itself a summary must have been re-grounded first: otherwise the new
    summary would be derived from a paraphrase whose qualifiers may already be gone.
    """
    ungrounded = [s.id for s in sources if s.is_summary and not s.grounded]
    if not ungrounded:
        return None
    return UnrecoverablePruneError(
        f"span(s) {', '.join(map(repr, ungrounded))} are summaries (derivation depth >= 1) that "
        f"have not been re-grounded: call reground() on each to read their sources' original "
        f"bytes back from the store, then summarize again"
    )


def pointer_text(record: SpanRecord) -> str:
    """The line the window shows for an externalized span: it always shows the full key."""
    tags = f" [{', '.join(sorted(record.tags))}]" if record.tags else ""
    origin = f" from {record.source}" if record.source else ""
    return (
        f"<span {record.id}{tags}{origin} externalized as {record.key}; "
        f"restore span {record.id} to read the original>"
    )


def record_data(record: SpanRecord) -> dict[str, Any]:
    """The record as plain data (for snapshots)."""
    return {
        "key": record.key,
        "tags": sorted(record.tags),
        "source": record.source,
        "provenance": list(record.provenance),
        "derivation_depth": record.derivation_depth,
        "verified": record.verified,
        "grounded": record.grounded,
        "turn": record.turn,
        "tokens": record.tokens,
    }


def record_from(data: Mapping[str, Any], *, turn: int) -> SpanRecord:
    """Build a record from a journal entry's data (``span_add`` or ``span_summary``)."""
    return SpanRecord(
        id=data["id"],
        key=data["key"],
        tags=frozenset(data.get("tags", ())),
        source=data.get("source", ""),
        provenance=tuple(data.get("provenance", ())),
        derivation_depth=int(data.get("depth", 0)),
        verified=bool(data.get("verified", True)),
        grounded=bool(data.get("grounded", True)),
        turn=turn,
        tokens=int(data.get("tokens", 0)),
    )
