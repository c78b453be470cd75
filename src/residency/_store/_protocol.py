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

A store also keeps one *checkpoint* per session: an opaque blob holding the session's state
after journal entry ``seq``. It is derived data, never the source of truth: a session restores
it and replays only the entries after ``seq``, and falls back to the whole journal when the
blob is missing, stale or unreadable.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["Clock", "JournalEntry", "Store", "SystemClock", "content_key"]


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
