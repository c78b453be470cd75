"""The in-memory store: for tests, embedding, and sessions that need not survive the process."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from residency._errors import InvalidInput, StoreConflict
from residency._store._protocol import (
    JournalEntry,
    check_archive_record,
    check_scope,
    check_search_label,
    content_key,
    verified_content,
)

__all__ = ["MAX_MEMORY_LABELS", "MemoryStore"]

MAX_MEMORY_LABELS = 10_000
"""Search labels a memory store keeps per scope (the most recent)."""


class MemoryStore:
    """Journals and content kept in dicts. Same contract as ``SQLiteStore``.

    One store may be shared by many sessions and threads: an append checks ``after`` and
    extends the journal under one lock.
    """

    def __init__(self) -> None:
        self._journals: dict[str, list[JournalEntry]] = {}
        self._checkpoints: dict[str, tuple[int, bytes]] = {}
        self._content: dict[str, bytes] = {}
        self._archives: dict[str, dict[str, dict[str, Any]]] = {}  # scope -> digest -> record
        self._members: dict[str, set[str]] = {}  # scope -> session ids
        self._labels: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # scope -> (pos, label)
        self._label_pos = 0
        self._lock = threading.Lock()

    def append(self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None) -> int:
        # Kept as given; ``load`` numbers them (entries are immutable, so nothing can change).
        batch = list(entries)
        with self._lock:
            journal = self._journals.get(session_id)
            last = len(journal) if journal is not None else 0
            if after is not None and after != last:
                raise StoreConflict(
                    f"session {session_id!r}: the journal's last entry is {last}, not {after}: "
                    f"another writer appended to it",
                    session_id=session_id,
                    after=after,
                    last=last,
                )
            if batch:
                if journal is None:
                    journal = self._journals[session_id] = []
                journal.extend(batch)
            return last + len(batch)

    def append_relaxed(
        self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
    ) -> int:
        return self.append(session_id, entries, after=after)  # nothing here survives a power loss anyway

    def load(self, session_id: str, after: int = 0) -> list[JournalEntry]:
        # Sequence numbers are 1, 2, ... with no gaps: entry ``seq`` sits at index ``seq - 1``.
        start = max(after, 0)
        kept = self._journals.get(session_id, [])[start:]
        return [JournalEntry(e.op, e.data, e.at, seq) for seq, e in enumerate(kept, start + 1)]

    def last_entries(self, session_ids: Sequence[str], op: str | None = None) -> dict[str, JournalEntry]:
        found = {}
        for session_id in session_ids:
            journal = self._journals.get(session_id, [])
            for seq in range(len(journal), 0, -1):
                e = journal[seq - 1]
                if op is None or e.op == op:
                    found[session_id] = JournalEntry(e.op, e.data, e.at, seq)
                    break
        return found

    def save_checkpoint(self, session_id: str, seq: int, blob: bytes) -> None:
        if (
            isinstance(seq, bool)
            or not isinstance(seq, int)
            or not 1 <= seq <= len(self._journals.get(session_id, ()))
        ):
            raise InvalidInput(
                f"session {session_id!r}: a checkpoint must name an entry of its journal, not {seq!r}",
                where="seq",
            )
        known = self._checkpoints.get(session_id)
        if known is None or known[0] <= seq:
            self._checkpoints[session_id] = (seq, bytes(blob))

    def load_checkpoint(self, session_id: str) -> tuple[int, bytes] | None:
        return self._checkpoints.get(session_id)

    def sessions(self) -> list[str]:
        return sorted(self._journals)

    def put_content(self, data: bytes) -> str:
        key = content_key(data)
        self._content.setdefault(key, bytes(data))
        return key

    def get_content(self, key: str) -> bytes:
        return verified_content(self._content.get(key), key)

    def archive_chain(self, scope: str, record: Mapping[str, Any]) -> bool:
        check_scope(scope)
        digest, kept = check_archive_record(record)
        with self._lock:
            chains = self._archives.setdefault(scope, {})
            if digest in chains:
                return False
            chains[digest] = kept
            return True

    def archived_chains(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        check_scope(scope)
        with self._lock:
            records = list(self._archives.get(scope, {}).values())
        start = max(after, 0)
        return [(pos, dict(r)) for pos, r in enumerate(records[start:], start + 1)]

    def join_scope(self, scope: str, session_id: str) -> None:
        check_scope(scope)
        with self._lock:
            self._members.setdefault(scope, set()).add(session_id)

    def scope_calls(self, scope: str, limit: int, *, exclude: str | None = None) -> list[tuple[str, str]]:
        check_scope(scope)
        with self._lock:
            members = sorted(self._members.get(scope, set()) - {exclude})
            calls = [
                (entry.at, session_id, i, str(entry.data.get("tool")))
                for session_id in members
                for i, entry in enumerate(self._journals.get(session_id, ()))
                if entry.op == "call"
            ]
        calls.sort()  # by time written; a session's own calls keep their order
        return [(session_id, tool) for _, session_id, _, tool in calls[-limit:]] if limit > 0 else []

    def learn_searches(self, scope: str, labels: Sequence[Mapping[str, Any]]) -> None:
        check_scope(scope)
        kept = [check_search_label(label) for label in labels]
        with self._lock:
            held = self._labels.setdefault(scope, [])
            for label in kept:
                self._label_pos += 1
                held.append((self._label_pos, label))
            del held[: max(0, len(held) - MAX_MEMORY_LABELS)]  # the oldest go first

    def search_labels(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        check_scope(scope)
        with self._lock:
            return [(pos, dict(label)) for pos, label in self._labels.get(scope, ()) if pos > after]

    def forget_search_labels(self, scope: str, tool: str | None = None) -> int:
        check_scope(scope)
        with self._lock:
            held = self._labels.get(scope, [])
            kept = [] if tool is None else [(p, lab) for p, lab in held if lab["tool"] != tool]
            self._labels[scope] = kept
            return len(held) - len(kept)

    def close(self) -> None:
        pass
