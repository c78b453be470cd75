"""The in-memory store: for tests, embedding, and sessions that need not survive the process."""

from __future__ import annotations

from collections.abc import Sequence

from residency._errors import IntegrityError, InvalidInput, NotFound
from residency._store._protocol import JournalEntry, content_key

__all__ = ["MemoryStore"]


class MemoryStore:
    """Journals and content kept in dicts. Same contract as ``SQLiteStore``."""

    def __init__(self) -> None:
        self._journals: dict[str, list[JournalEntry]] = {}
        self._checkpoints: dict[str, tuple[int, bytes]] = {}
        self._content: dict[str, bytes] = {}

    def append(self, session_id: str, entries: Sequence[JournalEntry]) -> int:
        # Kept as given; ``load`` numbers them (entries are immutable, so nothing can change).
        journal = self._journals.setdefault(session_id, [])
        journal.extend(entries)
        return len(journal)

    def append_relaxed(self, session_id: str, entries: Sequence[JournalEntry]) -> int:
        return self.append(session_id, entries)  # nothing here survives a power loss anyway

    def load(self, session_id: str, after: int = 0) -> list[JournalEntry]:
        # Sequence numbers are 1, 2, ... with no gaps: entry ``seq`` sits at index ``seq - 1``.
        start = max(after, 0)
        kept = self._journals.get(session_id, [])[start:]
        return [JournalEntry(e.op, e.data, e.at, seq) for seq, e in enumerate(kept, start + 1)]

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
        try:
            data = self._content[key]
        except KeyError:
            raise NotFound(f"no content stored under {key!r}") from None
        if content_key(data) != key:
            raise IntegrityError(f"content under {key!r} does not match its hash")
        return data

    def close(self) -> None:
        pass
