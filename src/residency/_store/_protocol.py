"""The Store protocol: a write-ahead journal per session and an immutable content store.

A session's state is a pure function of its journal: every mutation is appended (atomically,
a batch at a time) before it is applied, and reopening a session replays the journal. The
content store is content-addressed: the key is the sha256 of the bytes, writing the same bytes
twice is a no-op, and every read verifies the hash.

Some entries may be appended *relaxed* (``append_relaxed``): a process crash loses nothing,
but a power loss may lose them until the next ordinary append, which makes everything before
it durable too. Sessions use it only for entries whose loss leaves a more cautious state (the
turn plan: a tool shown again, arguments thought still visible), never for a recorded call.
A store without ``append_relaxed`` gets ordinary appends.

Appends are *conditional* when the writer says what it has seen: ``after`` is the ``seq`` of the
last journal entry the writer has applied. If the session's journal has moved on (another
writer appended in between), the append raises ``StoreConflict`` and appends nothing, checked
atomically with the append. That makes a second writer of one session safe: it can never fork
the journal (two entries that each assume they follow the same state), only be told to catch
up. ``after=None`` appends unconditionally.

A store may also keep *archive scopes* (``archive_chain``, ``archived_chains``): append-only
sets of abandoned-chain records (``ChainRecord.to_json`` data) shared by every session that
names the scope, so a successor session inherits what its predecessors archived. A record is
identified by its ``digest``; adding it twice keeps the first. Stores without them give each
session only its own journaled archive. Such a store may also know which sessions belong to a
scope (``join_scope``) and serve the scope's recent calls (``scope_calls``: the ``tool`` of the
members' ``call`` entries), so that archiving in one session sees tools used in the others.

A store also keeps one *checkpoint* per session: an opaque blob holding the session's state
after journal entry ``seq``. It is derived data, never the source of truth: a session restores
it and replays only the entries after ``seq``, and falls back to the whole journal when the
blob is missing, stale or unreadable.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from residency._errors import InvalidInput

__all__ = [
    "DEFAULT_SCOPE",
    "Clock",
    "JournalEntry",
    "Store",
    "SystemClock",
    "check_archive_record",
    "check_scope",
    "check_search_label",
    "content_key",
    "positioned_records",
]

DEFAULT_SCOPE = "default"
"""The archive scope sessions share unless told otherwise: one per store."""
MAX_SCOPE_LENGTH = 200


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled mutation.

    Attributes:
        op: the operation, e.g. ``"call"`` or ``"transition"``.
        data: its JSON-serializable arguments.
        at: when it was written (seconds since the epoch, from the session's clock).
        seq: its position in the session's journal (1, 2, ...), set by the store on ``load``;
            0 on an entry not yet appended.
    """

    op: str
    data: Mapping[str, Any]
    at: float
    seq: int = 0


@runtime_checkable
class Store(Protocol):
    """Where sessions live. Implementations: ``MemoryStore``, ``SQLiteStore``."""

    def append(self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None) -> int:
        """Append entries to a session's journal, all or none (durable on return).

        Args:
            session_id: the session.
            entries: the entries, in order.
            after: the seq of the last entry the writer has applied (0: none); None appends
                whatever the journal holds.

        Returns:
            The sequence number of the session's last entry after the append.

        Raises:
            StoreConflict: ``after`` is not the journal's last entry; nothing is appended.
        """

    def append_relaxed(
        self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
    ) -> int:
        """``append``, all or none and in order, durable against a process crash but not yet
        against a power loss: the next ``append`` makes it durable (optional; see above).

        Returns:
            The sequence number of the session's last entry after the append.

        Raises:
            StoreConflict: as ``append``.
        """

    def load(self, session_id: str, after: int = 0) -> list[JournalEntry]:
        """The session's journal entries with ``seq > after``, in append order, with ``seq`` set.

        Empty for a new session.
        """

    def save_checkpoint(self, session_id: str, seq: int, blob: bytes) -> None:
        """Keep ``blob`` as the session's state after journal entry ``seq``, all or none.

        It replaces the session's checkpoint unless that one covers a later entry (a
        checkpoint never moves backwards). A crash during the save leaves the previous one.

        Raises:
            InvalidInput: ``seq`` is not the number of an entry in the session's journal.
        """

    def load_checkpoint(self, session_id: str) -> tuple[int, bytes] | None:
        """The session's checkpoint as ``(seq, blob)``, or None if it has none."""

    def sessions(self) -> list[str]:
        """The ids of every session with a journal, sorted."""

    def put_content(self, data: bytes) -> str:
        """Store bytes immutably; returns their key (``sha256:<hex>``). Idempotent."""

    def get_content(self, key: str) -> bytes:
        """The bytes stored under ``key``, verified against it.

        Raises:
            NotFound: no content under that key.
            IntegrityError: the stored bytes no longer match the key.
        """

    def close(self) -> None:
        """Release the store's resources."""

    # Optional (sessions check for them): archive scopes, see the module docstring.
    #
    # def archive_chain(self, scope: str, record: Mapping[str, Any]) -> bool:
    #     """Add a chain record to the scope (durable on return); False if its digest is there."""
    #
    # def archived_chains(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
    #     """The scope's records as ``(position, record)`` with ``position > after``, in the
    #     order they were added. Positions only grow; the last one seen is the next ``after``."""
    #
    # def join_scope(self, scope: str, session_id: str) -> None:
    #     """Note the session as one of the scope's (idempotent, durable on return)."""
    #
    # def scope_calls(self, scope: str, limit: int, *, exclude: str | None = None) -> list[tuple[str, str]]:
    #     """``(session_id, tool)`` of the ``limit`` most recent ``call`` entries of the scope's
    #     sessions (``exclude`` left out), oldest first."""
    #
    # And a batched read for readers that list many sessions (the dashboard):
    #
    # def last_entries(self, session_ids: Sequence[str], op: str | None = None) -> dict[str, JournalEntry]:
    #     """Each listed session's last journal entry (its last ``op`` entry, if given), with
    #     ``seq`` set, in one read; sessions with no such entry are left out."""
    #
    # And search labels (queries that led to successful calls, see ``residency._search._learned``):
    #
    # def learn_searches(self, scope: str, labels: Sequence[Mapping[str, Any]]) -> None:
    #     """Add labels (``check_search_label`` records) to the scope (durable on return)."""
    #
    # def search_labels(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
    #     """The scope's labels as ``(position, record)`` with ``position > after``, oldest first."""
    #
    # def forget_search_labels(self, scope: str, tool: str | None = None) -> int:
    #     """Delete the scope's labels (of ``tool`` only, if given); how many were deleted."""


class Clock(Protocol):
    """Where the session reads the time (the core never does)."""

    def now(self) -> float:
        """Seconds since the epoch."""


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


def content_key(data: bytes) -> str:
    """The content address of ``data``: ``sha256:`` and the hex digest."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def verified_content(data: bytes | None, key: str, where: str = "") -> bytes:
    """The bytes a store read under ``key`` (None: nothing there), checked against the key.

    Raises:
        NotFound: no content under that key.
        IntegrityError: the stored bytes no longer match the key (``where`` names the store).
    """
    from residency._errors import IntegrityError, NotFound

    if data is None:
        raise NotFound(f"no content stored under {key!r}")
    if content_key(data) != key:
        prefix = f"{where}: " if where else ""
        raise IntegrityError(f"{prefix}content under {key!r} does not match its hash")
    return data


def check_scope(scope: object) -> None:
    """Refuse an archive scope name that is not a short non-empty string (``InvalidInput``)."""
    if not isinstance(scope, str) or not scope or len(scope) > MAX_SCOPE_LENGTH:
        raise InvalidInput(
            f"an archive scope must be a non-empty string of at most {MAX_SCOPE_LENGTH} characters, "
            f"not {scope!r}",
            where="scope",
        )


def check_archive_record(record: object) -> tuple[str, dict[str, Any]]:
    """The digest and a JSON copy of a chain record to archive; ``InvalidInput`` if malformed.

    The store checks only what it needs (a JSON object with a string ``digest``); sessions
    verify the record itself (``ChainRecord.from_json``) when they read it back.
    """
    digest = record.get("digest") if isinstance(record, Mapping) else None
    if not isinstance(digest, str) or not digest:
        raise InvalidInput("a chain record must be a JSON object with a 'digest'", where="record")
    try:
        kept: dict[str, Any] = json.loads(json.dumps(record, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a chain record must be JSON data ({exc})", where="record") from None
    return digest, kept


MAX_LABEL_QUERY = 500
"""The longest query a search label keeps (``search_tools`` accepts no longer ones)."""


def check_search_label(record: object) -> dict[str, Any]:
    """A JSON copy of a search label to store; ``InvalidInput`` if malformed.

    A label is ``{"query", "tool", "session", "at"}``: non-empty strings (the query at most
    ``MAX_LABEL_QUERY`` characters) and a finite time in seconds since the epoch.
    """
    if not isinstance(record, Mapping):
        raise InvalidInput("a search label must be a JSON object", where="label")
    kept: dict[str, Any] = {}
    for key in ("query", "tool", "session"):
        value = record.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(f"a search label's {key!r} must be a non-empty string", where="label")
        kept[key] = value
    if len(kept["query"]) > MAX_LABEL_QUERY:
        raise InvalidInput(f"a search label's query is over {MAX_LABEL_QUERY} characters", where="label")
    at = record.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise InvalidInput("a search label's 'at' must be a time in seconds", where="label")
    kept["at"] = float(at)
    return kept


def positioned_records(
    rows: Iterable[tuple[int, str]], where: str, what: str, scope: str
) -> list[tuple[int, dict[str, Any]]]:
    """``(position, record)`` of a scope's stored JSON rows (chain records, search labels).

    Raises:
        StoreError: a row is not JSON (``where`` names the store, ``what`` the kind of row).
    """
    from residency._errors import StoreError

    out: list[tuple[int, dict[str, Any]]] = []
    for pos, text in rows:
        try:
            out.append((int(pos), json.loads(text)))
        except ValueError:
            raise StoreError(f"{where}: {what} {pos} in scope {scope!r} is not JSON") from None
    return out


def entries_from_rows(
    rows: Iterable[tuple[int, str, str, float]], where: str, session_id: str
) -> list[JournalEntry]:
    """Journal entries from stored ``(seq, op, data JSON, at)`` rows, in order.

    Decoding builds many small containers that all survive; the cyclic collector would rescan
    them again and again (about a third of the time on 200k entries), so it is paused.

    Raises:
        StoreError: an entry's data is not valid JSON (``where`` names the store).
    """
    from residency._errors import StoreError

    loads = json.loads
    out = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        for seq, op, data, at in rows:
            try:
                out.append(JournalEntry(op, loads(data), at, seq))
            except ValueError:
                raise StoreError(
                    f"{where}: session {session_id!r}, journal entry {seq} is not valid JSON"
                ) from None
    finally:
        if collecting:
            gc.enable()
    return out


def last_entries_from_rows(
    rows: Iterable[tuple[str, int, str, str, float]], where: str
) -> dict[str, JournalEntry]:
    """``last_entries``' answer from stored ``(session_id, seq, op, data JSON, at)`` rows.

    Raises:
        StoreError: an entry's data is not valid JSON (``where`` names the store).
    """
    from residency._errors import StoreError

    loads = json.loads
    out = {}
    for session_id, seq, op, data, at in rows:
        try:
            out[session_id] = JournalEntry(op, loads(data), at, seq)
        except ValueError:
            raise StoreError(
                f"{where}: session {session_id!r}, journal entry {seq} is not valid JSON"
            ) from None
    return out
