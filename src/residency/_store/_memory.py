"""The in-memory store: for tests, embedding, and sessions that need not survive the process."""

from __future__ import annotations

from collections.abc import Sequence

from residency._errors import IntegrityError, NotFound
from residency._store._protocol import JournalEntry, content_key

__all__ = ["MemoryStore"]


class MemoryStore:
    """Journals and content kept in dicts. Same contract as ``SQLiteStore``."""

    def __init__(self) -> None:
        self._journals: dict[str, list[JournalEntry]] = {}
        self._content: dict[str, bytes] = {}

    def append(self, session_id: str, entries: Sequence[JournalEntry]) -> None:
        self._journals.setdefault(session_id, []).extend(entries)

    def load(self, session_id: str) -> list[JournalEntry]:
        return list(self._journals.get(session_id, ()))

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
