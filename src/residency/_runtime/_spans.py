"""The span part of a session: the window, externalization, eviction, summaries, provenance.

Every change that takes a span's text out of the window writes the text to the content store
first (``put_content``) and journals the change after, so the journal never names content the
store does not hold. The rules themselves (what may leave, in what form, what a summary may
claim) live in the pure core, ``_core/_spans.py``.

Text is held in memory only while a span is resident: once externalized or evicted, its bytes
live in the content store and are read back (and verified against the key) on ``restore``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from residency._core._lifecycle import SpanState
from residency._core._spans import (
    SpanRecord,
    WindowItem,
    WindowItemKind,
    fire_span,
    parse_span_ids,
    parse_tags,
    pointer_text,
    record_data,
    summary_depth,
    summary_refusal,
    summary_verified,
)
from residency._core._state import SessionState
from residency._errors import InvalidInput, NotFound, StoreError, UnverifiedSummary
from residency._runtime._journal import Journal
from residency._store._protocol import content_key
from residency._tokens import count_tokens

__all__ = ["SpanPart"]


class SpanPart:
    """Spans of context: add, externalize, evict, summarize, re-ground, restore, the window."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    @property
    def _s(self) -> SessionState:
        return self._journal.state

    # -- reading -----------------------------------------------------------------------------

    def span(self, span_id: str) -> SpanRecord:
        """The span's record. Raises ``NotFound`` for an unknown id."""
        try:
            return self._s.spans[span_id]
        except (KeyError, TypeError):
            raise NotFound(f"unknown span id {span_id!r}") from None

    def spans(self, state: SpanState | None = None) -> list[SpanRecord]:
        """Every span in the order added, optionally only those in ``state``."""
        return [r for i, r in self._s.spans.items() if state is None or self._s.span_states[i] is state]

    def span_state(self, span_id: str) -> SpanState:
        """Where the span stands. Raises ``NotFound`` for an unknown id."""
        self.span(span_id)
        return self._s.span_states[span_id]

    def externalized_copy(self, span_id: str) -> bool:
        """Whether the span's bytes have been written to the content store."""
        self.span(span_id)
        return span_id in self._s.stored

    def window(self) -> list[WindowItem]:
        """What the host shows the model, in span order.

        Resident spans show their own text; externalized spans show a pointer line with their
        key; evicted spans show nothing. Nothing is ever shown as a paraphrase.

        Raises:
            IntegrityError: the stored copy of a restored span no longer matches its key.
        """
        items: list[WindowItem] = []
        for span_id, record in self._s.spans.items():
            state = self._s.span_states[span_id]
            if state is SpanState.RESIDENT:
                text = self._resident_text(record)
                items.append(WindowItem(span_id, WindowItemKind.TEXT, text, record.key, record.tags))
            elif state is SpanState.EXTERNALIZED:
                items.append(
                    WindowItem(span_id, WindowItemKind.POINTER, pointer_text(record), record.key, record.tags)
                )
        return items

    def _resident_text(self, record: SpanRecord) -> str:
        text = self._s.texts.get(record.id)
        if text is None:
            # A span restored in an earlier process: its bytes are in the store.
            text = self._read(record)
            self._s.texts[record.id] = text
        return text

    def _read(self, record: SpanRecord) -> str:
        data = self._journal.store.get_content(record.key)
        if content_key(data) != record.key:
            raise StoreError(
                f"span {record.id!r}: the store returned bytes for another key than {record.key}"
            )
        return data.decode("utf-8")

    # -- adding ------------------------------------------------------------------------------

    def add_span(self, text: str, tags: Iterable[str] = (), source: str = "") -> SpanRecord:
        """Add a span of context to the window.

        Args:
            text: the span's text (immutable from now on).
            tags: free-form tags; ``invariant``, ``constraint``, ``negative_result`` and
                ``scope_qualifier`` make it a precondition span, which leaves only as a pointer.
            source: where it came from, e.g. ``"tool:describe_table"``.

        Returns:
            The span's record (``.id`` names it, ``.key`` is its content address).

        Raises:
            InvalidInput: text or source not a string, or malformed tags; nothing is added.
        """
        if not isinstance(text, str):
            raise InvalidInput("span text must be a string", where="text")
        if not isinstance(source, str):
            raise InvalidInput("span source must be a string", where="source")
        tag_set = parse_tags(tags)
        span_id = self._s.next_span_id()
        data = {
            "id": span_id,
            "key": content_key(text.encode("utf-8")),
            "text": text,
            "tags": sorted(tag_set),
            "source": source,
            "tokens": count_tokens(text),
        }
        self._journal.commit(("span_add", data))
        return self._s.spans[span_id]

    def offload_span(
        self, text: str, tags: Iterable[str] = (), source: str = "", *, tokens: int | None = None
    ) -> SpanRecord:
        """Add a span that enters the window already externalized: for text too large to show.

        The bytes are written to the content store (and durable) before the span is journaled,
        and the journal holds only the key, so a large tool result never passes through it.
        ``restore`` brings the text into the window; the store serves it by range meanwhile.

        Args:
            text: the span's text.
            tags: as ``add_span`` (a precondition tag keeps it as a pointer, never dropped).
            source: where it came from, e.g. ``"tool:describe_table"``.
            tokens: ``count_tokens(text)``, when the caller has counted it already (the
                gateway does, to decide whether to offload); None counts it here. Counting a
                large text costs about 10 ms, so it is done once.

        Returns:
            The span's record, in state ``EXTERNALIZED``.

        Raises:
            InvalidInput: text or source not a string, tokens not a non-negative integer, or
                malformed tags; nothing is added.
            StoreError: the store filed the bytes under another key; nothing is journaled.
        """
        if not isinstance(text, str):
            raise InvalidInput("span text must be a string", where="text")
        if not isinstance(source, str):
            raise InvalidInput("span source must be a string", where="source")
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
            raise InvalidInput(
                "tokens must be a non-negative integer (the text's count_tokens)", where="tokens"
            )
        tag_set = parse_tags(tags)
        raw = text.encode("utf-8")
        expected = content_key(raw)
        key = self._journal.store.put_content(raw)
        if key != expected:
            raise StoreError(f"the store filed an offloaded span under {key}, expected {expected}")
        span_id = self._s.next_span_id()
        data = {
            "id": span_id,
            "key": key,
            "tags": sorted(tag_set),
            "source": source,
            "tokens": count_tokens(text) if tokens is None else tokens,
            "bytes": len(raw),
        }
        self._journal.commit(("span_offload", data))
        return self._s.spans[span_id]

    # -- leaving the window ------------------------------------------------------------------

    def _put(self, record: SpanRecord) -> None:
        """Write a resident span's bytes to the content store (before the journal names them)."""
        if record.id in self._s.stored:
            return
        key = self._journal.store.put_content(self._resident_text(record).encode("utf-8"))
        if key != record.key:
            raise StoreError(
                f"span {record.id!r}: the store filed its bytes under {key}, expected {record.key}"
            )

    def _leave(self, span_id: str, dest: SpanState, trigger: str) -> tuple[str, Mapping[str, Any]] | None:
        """Write a leaving span's bytes first; its journal item, or None if nothing changes."""
        state = self._s.span_states[span_id]
        if dest is state:
            return None
        if state is SpanState.RESIDENT:
            self._put(self._s.spans[span_id])
        return ("span_transition", {"id": span_id, "trigger": trigger, "dest": dest.value})

    def _fire(self, span_id: str, trigger: str) -> SpanState:
        return fire_span(
            self._s.spans[span_id],
            self._s.span_states[span_id],
            trigger,
            externalized_copy=span_id in self._s.stored,
        )

    def externalize(self, span_id: str) -> str:
        """Write the span to the content store and leave a pointer showing its key.

        The bytes are written (and durable) before the change is journaled. Externalizing an
        externalized span changes nothing.

        Returns:
            The span's key (``sha256:<hex>``), which the window's pointer shows.

        Raises:
            NotFound: unknown span id.
            IllegalTransition: the span was evicted (restore it first).
        """
        self.span(span_id)
        item = self._leave(span_id, self._fire(span_id, "externalize"), "externalize")
        if item is not None:
            self._journal.commit(item)
        return self._s.spans[span_id].key

    def evict_span(self, *span_ids: str) -> None:
        """Take spans out of the window, all or none.

        A span without a precondition tag leaves entirely (its bytes are still written to the
        content store first). A precondition span leaves only as a pointer: if it has an
        externalized copy it becomes a pointer, else the eviction is refused.

        Raises:
            NotFound: an unknown span id (nothing is evicted).
            UnrecoverablePruneError: a precondition span with no externalized copy (nothing is
                evicted). Externalize it first.
        """
        for span_id in span_ids:
            self.span(span_id)
        # Check every span before writing anything, so a refusal changes nothing.
        dests = {span_id: self._fire(span_id, "evict") for span_id in dict.fromkeys(span_ids)}
        items = [item for i, dest in dests.items() if (item := self._leave(i, dest, "evict")) is not None]
        if items:
            self._journal.commit(*items)

    # -- coming back -------------------------------------------------------------------------

    def restore(self, span_id: str) -> str:
        """Bring the span's original text back into the window, read from the content store.

        Returns:
            The text exactly as it was added, verified against the span's key. Restoring a
            resident span changes nothing and returns its text.

        Raises:
            NotFound: unknown span id, or its bytes are missing from the store.
            IntegrityError: the stored bytes no longer match the key.
        """
        record = self.span(span_id)
        state = self._s.span_states[span_id]
        self._fire(span_id, "restore")
        if state is SpanState.RESIDENT:
            return self._resident_text(record)
        text = self._read(record)
        self._journal.commit(
            ("span_transition", {"id": span_id, "trigger": "restore", "dest": SpanState.RESIDENT.value})
        )
        self._s.texts[span_id] = text
        return text

    def reground(self, span_id: str) -> dict[str, str]:
        """Read a span's original bytes back from the content store, never from the live world.

        For an original span this is its own text; for a summary, the original text of every
        span at the root of its provenance. Re-grounding a summary marks it grounded (so it
        may be summarized in turn).

        Returns:
            Original span id -> its text as written, verified against its key.

        Raises:
            NotFound: unknown span id, or an original's bytes are missing from the store.
            IntegrityError: an original's stored bytes no longer match its key.
            UnverifiedSummary: the summary's provenance does not resolve; nothing changes.
        """
        record = self.span(span_id)
        if not record.is_summary:
            text = self._read(record) if span_id in self._s.stored else self._resident_text(record)
            return {span_id: text}
        originals: dict[str, str] = {}
        unresolved = self._resolve(record, originals)
        if unresolved or not record.verified:
            raise UnverifiedSummary(
                f"summary {span_id!r} cannot be re-grounded: "
                + (
                    f"sources {', '.join(unresolved)} do not resolve" if unresolved else "it names no sources"
                ),
                span=span_id,
                unresolved=tuple(unresolved),
            )
        if not record.grounded:
            self._journal.commit(("span_reground", {"id": span_id}))
        return originals

    def _resolve(self, record: SpanRecord, originals: dict[str, str]) -> list[str]:
        """Collect original texts under ``record``; return the ids that did not resolve."""
        if not record.is_summary:
            try:
                originals[record.id] = (
                    self._read(record) if record.id in self._s.stored else self._resident_text(record)
                )
            except (StoreError, NotFound):
                return [record.id]
            return []
        unresolved: list[str] = []
        for source_id in record.provenance:
            source = self._s.spans.get(source_id)
            if source is None:
                unresolved.append(source_id)
                continue
            if source.is_summary and not source.verified:
                unresolved.append(source_id)
            unresolved.extend(self._resolve(source, originals))
        return unresolved

    # -- summaries ---------------------------------------------------------------------------

    def summarize(
        self, span_ids: Iterable[str], text: str, *, tags: Iterable[str] = (), source: str = ""
    ) -> SpanRecord:
        """Replace spans in the window by a summary that records where it came from.

        The sources leave the window as by ``evict_span`` (precondition spans stay as
        pointers), and the summary is added, in one journal batch.

        Args:
            span_ids: the spans the summary compresses (its provenance). An empty list makes
                an unverified summary.
            text: the summary's text.
            tags: the summary's own tags.
            source: who wrote it, e.g. ``"model"``.

        Returns:
            The summary's record: ``provenance`` = the source ids, ``derivation_depth`` =
            1 + the deepest source, ``verified`` as the core decides.

        Raises:
            NotFound: an unknown span id.
            UnrecoverablePruneError: a source is a summary not yet re-grounded, or a
                precondition span with no externalized copy. Nothing changes.
            InvalidInput: malformed ids, text, tags or source.
        """
        ids = parse_span_ids(span_ids, where="span_ids")
        if not isinstance(text, str):
            raise InvalidInput("summary text must be a string", where="text")
        if not isinstance(source, str):
            raise InvalidInput("summary source must be a string", where="source")
        tag_set = parse_tags(tags)
        sources = [self.span(i) for i in ids]
        refusal = summary_refusal(sources)
        if refusal is not None:
            raise refusal
        dests = {i: self._fire(i, "evict") for i in ids}
        items: list[tuple[str, Mapping[str, Any]]] = [
            item for i, dest in dests.items() if (item := self._leave(i, dest, "evict")) is not None
        ]
        summary_id = self._s.next_span_id()
        items.append(
            (
                "span_summary",
                {
                    "id": summary_id,
                    "key": content_key(text.encode("utf-8")),
                    "text": text,
                    "tags": sorted(tag_set),
                    "source": source,
                    "provenance": list(ids),
                    "depth": summary_depth(sources),
                    "verified": summary_verified(sources),
                    "grounded": False,
                    "tokens": count_tokens(text),
                },
            )
        )
        self._journal.commit(*items)
        return self._s.spans[summary_id]

    # -- justification -----------------------------------------------------------------------

    def unresolved_provenance(self, span_id: str) -> tuple[str, ...] | None:
        """Check a span against the store now: None if it resolves, else the ids that do not.

        An original span resolves when its bytes can be read (and verified). A summary
        resolves when it names sources and each of them resolves, recursively. An empty tuple
        means a summary with no sources.

        Raises:
            NotFound: unknown span id.
        """
        record = self.span(span_id)
        unresolved = self._resolve(record, {})
        if unresolved or not record.verified:
            return tuple(dict.fromkeys(unresolved))
        return None

    def may_justify(self, span_id: str) -> bool:
        """Whether the span may justify a destructive action: its provenance resolves now.

        A host asks this before acting on a summary's claim ("already verified", "redundant").

        Raises:
            NotFound: unknown span id.
        """
        return self.unresolved_provenance(span_id) is None

    def require_verified(self, span_id: str) -> SpanRecord:
        """Like ``may_justify``, raising instead of returning False.

        Returns:
            The span's record.

        Raises:
            NotFound: unknown span id.
            UnverifiedSummary: its provenance does not resolve; ``unresolved`` names the ids.
        """
        unresolved = self.unresolved_provenance(span_id)
        if unresolved is not None:
            what = f"sources {', '.join(unresolved)} do not resolve" if unresolved else "it names no sources"
            raise UnverifiedSummary(
                f"span {span_id!r} cannot justify a destructive action: {what}. "
                f"Re-derive it from spans that resolve, or restore the originals",
                span=span_id,
                unresolved=unresolved,
            )
        return self._s.spans[span_id]

    # -- comparison --------------------------------------------------------------------------

    def snapshot_parts(self, parts: dict[str, Any]) -> None:
        parts["spans"] = {
            i: {**record_data(r), "state": self._s.span_states[i].value, "stored": i in self._s.stored}
            for i, r in self._s.spans.items()
        }
