"""The plan index: the tools a turn's decision must read, kept up to date from the event log.

A cache beside a session's state (nothing of it is journaled or checkpointed), read by
``residency._runtime._plans``; made again from the state when the state or its event log is
replaced.
"""

from __future__ import annotations

from operator import attrgetter, le

from residency._core._events import EventKind
from residency._core._lifecycle import ToolState
from residency._core._state import SessionState

__all__ = ["PlanIndex"]

_RESIDENT = ToolState.RESIDENT
_TOMBSTONED = ToolState.TOMBSTONED
_ARCHIVED = ToolState.ARCHIVED
_REGISTERED = EventKind.REGISTERED
_REEXPANDED = EventKind.REEXPANDED
_TURN = attrgetter("turn")
_KIND = attrgetter("kind")
# Every event that may change a tool's state names the tool (``residency._core._state``). A
# tuple, not a set: membership compares identities, where a set would hash each enum member in
# Python (a loop over thousands of events in a cold plan).
_TOOL_KINDS = (
    EventKind.EVICTED,
    EventKind.REGISTERED,
    EventKind.REEXPANDED,
    EventKind.TOMBSTONED,
    EventKind.REDEFINED,
    EventKind.ARCHIVED,
    EventKind.READMITTED,
)


class PlanIndex:
    """What a plan reads instead of every tool, kept up to date from the event log.

    Every change of a tool's state appends an event naming the tool, so the events appended
    since the last read say which tools to look at again: reading costs what changed. A cache
    beside the state, not state (nothing of it is journaled or checkpointed): made again from
    the state when the state or its event log is replaced (a reopen, a restore, a replay).

    Attributes:
        placed: name -> the index of its last REGISTERED or REEXPANDED event, in that order:
            the order resident tools are shown in (``PlanPart.resident_tools``).
        resident, tombstoned, archived: the tools in that state.
        reexpanded: the tools re-expanded in turn ``reexpanded_turn`` (the last turn with a
            re-expansion); while event turns never decrease (``monotonic``), the tools
            re-expanded in the current turn are these when it is that turn.
        registration: see ``registered``.
    """

    __slots__ = (
        "archived",
        "events",
        "last_turn",
        "monotonic",
        "placed",
        "reexpanded",
        "reexpanded_turn",
        "registration",
        "resident",
        "seen",
        "state",
        "tombstoned",
    )

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.events = state.events
        self.seen = 0
        self.registration: dict[str, int] | None = None  # made when first needed
        self.placed: dict[str, int] = {}
        self.resident: set[str] = set()
        self.tombstoned: set[str] = set()
        self.archived: set[str] = set()
        self.last_turn = -1
        self.monotonic = True
        self.reexpanded_turn = -1
        self.reexpanded: set[str] = set()
        self._reread()
        self._scan_placements(0, len(self.events))

    def fits(self, state: SessionState) -> bool:
        """Whether this index follows ``state`` (else make a new one)."""
        return state is self.state and state.events is self.events and self.seen <= len(self.events)

    def read(self) -> None:
        """Catch up with the events appended since the last read."""
        start, end = self.seen, len(self.events)
        if start == end:
            return
        # Many events at once (a cold plan pruning thousands of tools): one pass over every
        # state costs less than a look at each tool an event names.
        if (end - start) * 4 <= len(self.state.states):
            self._scan(start, end)
        else:
            self._reread()
            self._scan_placements(start, end)

    def _scan(self, start: int, end: int) -> None:
        """Read events ``start`` to ``end``, looking again at each tool they name."""
        events, registered, placed, states = self.events, self.registration, self.placed, self.state.states
        last_turn = self.last_turn
        for i in range(start, end):
            event = events[i]
            turn = event.turn
            if turn != last_turn:
                if turn < last_turn:
                    self.monotonic = False
                last_turn = turn
            kind = event.kind
            if kind not in _TOOL_KINDS:
                continue
            name = event.subject
            if kind is _REGISTERED or kind is _REEXPANDED:
                placed.pop(name, None)
                placed[name] = i
                if kind is _REEXPANDED:
                    if turn != self.reexpanded_turn:
                        self.reexpanded_turn, self.reexpanded = turn, set()
                    self.reexpanded.add(name)
                elif registered is not None and name not in registered:
                    registered[name] = len(registered)
            self.resident.discard(name)
            self.tombstoned.discard(name)
            self.archived.discard(name)
            now = states.get(name)
            if now is _RESIDENT:
                self.resident.add(name)
            elif now is _TOMBSTONED:
                self.tombstoned.add(name)
            elif now is _ARCHIVED:
                self.archived.add(name)
        self.last_turn = last_turn
        self.seen = end

    def _scan_placements(self, start: int, end: int) -> None:
        """Read events ``start`` to ``end`` for the turns and placements only (the caller reads
        every tool's state itself). Thousands of events at a time (every tool of a catalog
        registered, then pruned by a cold plan): the columns are read with C-level maps, and
        only the placing events are visited."""
        chunk = self.events[start:end]
        turns = list(map(_TURN, chunk))
        if not turns:
            return
        if self.monotonic and not all(map(le, [self.last_turn, *turns[:-1]], turns)):
            self.monotonic = False
        placed = self.placed
        placing = [
            i for i, kind in enumerate(map(_KIND, chunk), start) if kind is _REGISTERED or kind is _REEXPANDED
        ]
        if not placed and all(self.events[i].kind is _REGISTERED for i in placing):
            # A new index over registrations only (a session's catalog): placed in one update
            # when no name comes twice (else each takes its last place, one by one).
            placed.update(zip((self.events[i].subject for i in placing), placing, strict=True))
            if len(placed) != len(placing):
                placed.clear()
                self._place(placing)
        else:
            self._place(placing)
        self.last_turn = turns[-1]
        self.seen = end

    def _place(self, placing: list[int]) -> None:
        """Place the tools of the REGISTERED and REEXPANDED events at ``placing``, in order."""
        placed = self.placed
        for i in placing:
            event = self.events[i]
            name = event.subject
            placed.pop(name, None)
            placed[name] = i
            if event.kind is _REEXPANDED:
                if event.turn != self.reexpanded_turn:
                    self.reexpanded_turn, self.reexpanded = event.turn, set()
                self.reexpanded.add(name)

    def _reread(self) -> None:
        state = self.state
        if self.registration is not None and len(self.registration) != len(state.tools):
            self.registration = None
        items = state.states.items()
        self.resident = {n for n, s in items if s is _RESIDENT}
        withheld = [(n, s) for n, s in items if s is _TOMBSTONED or s is _ARCHIVED]
        self.tombstoned = {n for n, s in withheld if s is _TOMBSTONED}
        self.archived = {n for n, s in withheld if s is _ARCHIVED}

    @property
    def registered(self) -> dict[str, int]:
        """Name -> its place in registration order (the order of ``state.tools``)."""
        if self.registration is None:
            self.registration = {name: i for i, name in enumerate(self.state.tools)}
        return self.registration

    def deciding(self, pinned: frozenset[str], in_phase: frozenset[str]) -> list[str] | None:
        """The tools a decision must read, in registration order (see ``decide``), or None
        when most tools are among them (reading every tool then costs no more)."""
        registered = self.registered
        names = self.resident | self.tombstoned
        names.update(n for n in pinned if n in registered)
        names.update(n for n in in_phase if n in registered)
        if len(names) * 2 > len(registered):
            return None
        return sorted(names, key=registered.__getitem__)
