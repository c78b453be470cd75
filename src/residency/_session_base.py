"""The journal machinery every part of a Session shares.

A session's state is rebuilt from its journal: each public mutation validates against the
current state (raising, with nothing changed, if it may not happen), appends its journal
entries to the store in one atomic batch (write-ahead), and only then applies them. Opening a
session replays the journal through the same ``_apply_<op>`` methods, so a reopened session
equals the one that wrote it, and replaying twice gives what replaying once gives.

Parts of the session (tools, spans, chains) are mixins over ``SessionBase``: each adds its
state in ``_init_state`` (calling ``super()``), its ``_apply_<op>`` methods, and its part of
``snapshot()`` in ``_snapshot_parts``.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

from residency._core._events import Event, EventKind
from residency._errors import StoreError
from residency._store._memory import MemoryStore
from residency._store._protocol import Clock, JournalEntry, Store, SystemClock

__all__ = ["SessionBase"]


class SessionBase:
    """Journal, clock, turn counter and event log. Not used on its own: see ``Session``."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        session_id: str = "default",
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            from residency._errors import InvalidInput

            raise InvalidInput("session_id must be a non-empty string", where="session_id")
        self._store: Store = store if store is not None else MemoryStore()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._session_id = session_id
        self._init_state()
        self._replaying = True
        # Replay builds many small long-lived objects; the cyclic collector would rescan them
        # over and over (about 30% of reopen time) and they hold no cycles worth collecting.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for entry in self._store.load(session_id):
                self._apply(entry)
        finally:
            self._replaying = False
            if collecting:
                gc.enable()

    # -- state -------------------------------------------------------------------------------

    def _init_state(self) -> None:
        self._turn = 0
        self._phase: str | None = None
        self._events: list[Event] = []
        self._at = 0.0

    @property
    def session_id(self) -> str:
        """The id this session is stored under."""
        return self._session_id

    @property
    def store(self) -> Store:
        """The store this session journals to."""
        return self._store

    @property
    def turn(self) -> int:
        """The current turn (0 before the first ``plan_turn``)."""
        return self._turn

    def events(self, kind: EventKind | None = None) -> list[Event]:
        """The event log, oldest first, optionally of one kind."""
        if kind is None:
            return list(self._events)
        return [e for e in self._events if e.kind is kind]

    # -- journal -----------------------------------------------------------------------------

    def _commit(self, *items: tuple[str, Mapping[str, Any]]) -> None:
        """Write ``(op, data)`` items ahead to the journal, then apply them."""
        at = self._clock.now()
        entries = [JournalEntry(op, data, at) for op, data in items]
        self._store.append(self._session_id, entries)
        for entry in entries:
            self._apply(entry)

    def _apply(self, entry: JournalEntry) -> None:
        handler = getattr(self, f"_apply_{entry.op}", None)
        if handler is None:
            raise StoreError(
                f"session {self._session_id!r}: journal has an unknown operation {entry.op!r} "
                f"(written by a newer version?)"
            )
        self._at = entry.at
        handler(entry.data)

    def _event(self, kind: EventKind, subject: str, detail: str = "") -> Event:
        event = Event(self._turn, kind, subject, detail, self._at)
        self._events.append(event)
        return event

    def _apply_turn(self, data: Mapping[str, Any]) -> None:
        self._turn = int(data["turn"])
        phase = data.get("phase")
        self._phase = phase if isinstance(phase, str) else None

    # -- comparison --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data: equal snapshots mean equal sessions."""
        parts: dict[str, Any] = {}
        self._snapshot_parts(parts)
        return parts

    def _snapshot_parts(self, parts: dict[str, Any]) -> None:
        parts["turn"] = self._turn
        parts["phase"] = self._phase
        parts["events"] = [(e.turn, e.kind.value, e.subject, e.detail) for e in self._events]
