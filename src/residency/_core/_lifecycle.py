"""Lifecycle tables and the machines built from them.

Theory of operation
-------------------
Everything that decides whether a record may change state lives here. Each lifecycle kind
(tools, spans) has one transition table stored as data: a tuple of ``Transition`` rows
``(trigger, source, dest, when/unless guard)``. From that one table we build

* one ``transitions.Machine`` per kind, shared by every record of that kind: to fire a trigger
  we set the shared cursor's state to the record's state, fire, and read the state back (a
  Machine or ``add_model`` per record costs ~90 us and ~60 KB each; this costs one trigger);
* the Mermaid diagram printed by ``residency lifecycle``;
* the exhaustive (state, trigger, guards) tests.

Guards are named facts about the record that the caller passes in (for tools:
``arguments_resident``). Every state also carries the facts it shows the model: whether the
schema is resident (S) and whether a tombstone is shown (T). The ghost state, arguments
resident while S and T are both false, has no row leading into it: every row whose target
shows neither schema nor tombstone is guarded by ``unless arguments_resident``. A refused
trigger raises and the record keeps its state.

This module is pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from transitions import Machine, MachineError

from residency._errors import GhostToolError, IllegalTransition

__all__ = [
    "SPAN_LIFECYCLE",
    "TOOL_LIFECYCLE",
    "Lifecycle",
    "SpanState",
    "StateFacts",
    "ToolState",
    "Transition",
]


class ToolState(enum.Enum):
    """Where a tool stands in the model's context."""

    RESIDENT = "resident"
    """Its (minified) schema is in the list the model sees."""
    TOMBSTONED = "tombstoned"
    """Schema withheld, one tombstone line shown; calls are refused until re-expanded."""
    EVICTED = "evicted"
    """Schema withheld and no arguments resident: a safe prune. Searchable and re-expandable."""
    ARCHIVED = "archived"
    """Out of the active index with an abandoned chain: not searchable, not callable."""


class SpanState(enum.Enum):
    """Where a span of context stands."""

    RESIDENT = "resident"
    """Its text is in the window."""
    EXTERNALIZED = "externalized"
    """Its text is in the content store; the window shows a pointer with the key."""
    EVICTED = "evicted"
    """Gone from the window (a copy is still in the content store). Never a precondition span."""


S = TypeVar("S", bound=enum.Enum)


@dataclass(frozen=True, slots=True)
class Transition(Generic[S]):
    """One row of a transition table. ``when``/``unless`` name a guard fact."""

    trigger: str
    source: S
    dest: S
    when: str | None = None
    unless: str | None = None

    def allows(self, facts: Mapping[str, bool]) -> bool:
        if self.when is not None and not facts.get(self.when, False):
            return False
        return not (self.unless is not None and facts.get(self.unless, False))

    @property
    def guard_label(self) -> str:
        if self.when:
            return self.when.replace("_", " ")
        if self.unless:
            return "no " + self.unless.replace("_", " ")
        return ""


@dataclass(frozen=True, slots=True)
class StateFacts:
    """What the model sees of a record in a state."""

    schema_resident: bool
    tombstone_shown: bool


class _Cursor:
    """The one model object of a shared machine; guards read ``facts``."""

    state: str
    facts: Mapping[str, bool]


class Lifecycle(Generic[S]):
    """A lifecycle kind: its table, the facts of its states, and the machine built from them.

    Args:
        kind: the record kind, e.g. ``"tool"``.
        states: the enum of states.
        initial: the state a new record starts in.
        table: the transition table.
        facts: for tools, what each state shows the model (used for the ghost check).
        guarded_fact: the fact whose presence in a ghost-making target raises ``GhostToolError``.
    """

    def __init__(
        self,
        kind: str,
        states: type[S],
        initial: S,
        table: tuple[Transition[S], ...],
        facts: Mapping[S, StateFacts] | None = None,
        guarded_fact: str | None = None,
    ) -> None:
        self.kind = kind
        self.states = states
        self.initial = initial
        self.table = table
        self.facts = dict(facts or {})
        self.guarded_fact = guarded_fact
        self.triggers: tuple[str, ...] = tuple(dict.fromkeys(t.trigger for t in table))
        self._rows: dict[tuple[S, str], tuple[Transition[S], ...]] = {}
        for row in table:
            key = (row.source, row.trigger)
            self._rows[key] = (*self._rows.get(key, ()), row)
        self._lock = threading.Lock()
        self._cursor = _Cursor()
        self._cursor.facts = {}
        guards = sorted({g for t in table for g in (t.when, t.unless) if g})
        for guard in guards:
            # transitions resolves condition names on the model; each reads the passed facts.
            setattr(_Cursor, f"_fact_{guard}", _fact_reader(guard))
        self._machine = Machine(
            model=self._cursor,
            states=[s.value for s in states],
            initial=initial.value,
            transitions=[
                {
                    "trigger": t.trigger,
                    "source": t.source.value,
                    "dest": t.dest.value,
                    "conditions": [f"_fact_{t.when}"] if t.when else [],
                    "unless": [f"_fact_{t.unless}"] if t.unless else [],
                }
                for t in table
            ],
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )

    def target(self, state: S, trigger: str, facts: Mapping[str, bool]) -> S | None:
        """The table's answer without firing: the destination, or None if refused."""
        for row in self._rows.get((state, trigger), ()):
            if row.allows(facts):
                return row.dest
        return None

    def fire(self, state: S, trigger: str, *, record: str, facts: Mapping[str, bool]) -> S:
        """Fire ``trigger`` on a record in ``state`` through the shared machine.

        Returns:
            The new state.

        Raises:
            GhostToolError: the trigger exists from ``state`` but its target would show neither
                schema nor tombstone while ``guarded_fact`` holds.
            IllegalTransition: any other refusal. Nothing is changed either way: the caller
                stores the returned state only on success.
        """
        with self._lock:
            cursor = self._cursor
            cursor.state = state.value
            cursor.facts = facts
            try:
                fired = bool(cursor.trigger(trigger))  # type: ignore[attr-defined]
            except (MachineError, AttributeError):
                fired = False
            dest = cursor.state
        if fired:
            return self.states(dest)
        raise self._refusal(state, trigger, record, facts)

    def _refusal(self, state: S, trigger: str, record: str, facts: Mapping[str, bool]) -> IllegalTransition:
        rows = self._rows.get((state, trigger), ())
        fields = {"kind": self.kind, "record": record, "state": state.value, "trigger": trigger}
        if (
            self.guarded_fact
            and facts.get(self.guarded_fact)
            and any(self.is_ghost_target(r.dest) for r in rows)
        ):
            return GhostToolError(
                f"{self.kind} {record!r}: {trigger} would withhold its schema while arguments of "
                f"an earlier call are still visible and no tombstone is shown (a ghost tool); "
                f"evict those arguments first, or prune it to leave a tombstone",
                **fields,
            )
        allowed = sorted({t for (s, t) in self._rows if s == state})
        hint = f"allowed from {state.value}: {', '.join(allowed)}" if allowed else "no triggers"
        if rows:
            hint = "its guard does not hold"
        return IllegalTransition(
            f"{self.kind} {record!r} is {state.value}: cannot {trigger} ({hint})", **fields
        )

    def is_ghost_target(self, state: S) -> bool:
        """True if a record in ``state`` shows neither schema nor tombstone."""
        f = self.facts.get(state)
        return f is not None and not f.schema_resident and not f.tombstone_shown

    def mermaid(self) -> str:
        """The state diagram in Mermaid syntax, generated from the table."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial.value}"]
        for t in self.table:
            label = t.trigger + (f" [{t.guard_label}]" if t.guard_label else "")
            lines.append(f"    {t.source.value} --> {t.dest.value}: {label}")
        return "\n".join(lines)


def _fact_reader(name: str):  # type: ignore[no-untyped-def]
    def read(self: _Cursor) -> bool:
        return bool(self.facts.get(name, False))

    return read


_A = "arguments_resident"
_TS = ToolState

TOOL_TABLE: tuple[Transition[ToolState], ...] = (
    # A prune never loses information: it tombstones when arguments are still visible.
    Transition("prune", _TS.RESIDENT, _TS.TOMBSTONED, when=_A),
    Transition("prune", _TS.RESIDENT, _TS.EVICTED, unless=_A),
    Transition("tombstone", _TS.RESIDENT, _TS.TOMBSTONED),
    Transition("evict", _TS.RESIDENT, _TS.EVICTED, unless=_A),
    Transition("evict", _TS.TOMBSTONED, _TS.EVICTED, unless=_A),
    Transition("reexpand", _TS.TOMBSTONED, _TS.RESIDENT),
    Transition("reexpand", _TS.EVICTED, _TS.RESIDENT),
    # An upstream definition change invalidates visible arguments built against the old one.
    Transition("redefine", _TS.RESIDENT, _TS.TOMBSTONED, when=_A),
    Transition("archive", _TS.RESIDENT, _TS.ARCHIVED),
    Transition("archive", _TS.TOMBSTONED, _TS.ARCHIVED),
    Transition("archive", _TS.EVICTED, _TS.ARCHIVED),
    Transition("readmit", _TS.ARCHIVED, _TS.TOMBSTONED, when=_A),
    Transition("readmit", _TS.ARCHIVED, _TS.EVICTED, unless=_A),
)

TOOL_FACTS: dict[ToolState, StateFacts] = {
    _TS.RESIDENT: StateFacts(schema_resident=True, tombstone_shown=False),
    _TS.TOMBSTONED: StateFacts(schema_resident=False, tombstone_shown=True),
    _TS.EVICTED: StateFacts(schema_resident=False, tombstone_shown=False),
    # An archived tool whose arguments are still visible is listed with the tombstones.
    _TS.ARCHIVED: StateFacts(schema_resident=False, tombstone_shown=True),
}

TOOL_LIFECYCLE: Lifecycle[ToolState] = Lifecycle(
    "tool", ToolState, ToolState.RESIDENT, TOOL_TABLE, TOOL_FACTS, guarded_fact=_A
)

_P = "precondition"
_X = "externalized_copy"
_SS = SpanState

SPAN_TABLE: tuple[Transition[SpanState], ...] = (
    # The shell writes the span's bytes to the content store before any row that leaves
    # RESIDENT is journaled, so an evicted span is still recoverable by id.
    Transition("externalize", _SS.RESIDENT, _SS.EXTERNALIZED),
    Transition("externalize", _SS.EXTERNALIZED, _SS.EXTERNALIZED),
    # Only a span that carries no precondition may leave entirely; a precondition span with an
    # externalized copy leaves as a pointer; one without a copy has no row (refused).
    Transition("evict", _SS.RESIDENT, _SS.EVICTED, unless=_P),
    Transition("evict", _SS.RESIDENT, _SS.EXTERNALIZED, when=_X),
    Transition("evict", _SS.EXTERNALIZED, _SS.EVICTED, unless=_P),
    Transition("evict", _SS.EXTERNALIZED, _SS.EXTERNALIZED, when=_P),
    Transition("evict", _SS.EVICTED, _SS.EVICTED),
    Transition("restore", _SS.RESIDENT, _SS.RESIDENT),
    Transition("restore", _SS.EXTERNALIZED, _SS.RESIDENT),
    Transition("restore", _SS.EVICTED, _SS.RESIDENT),
)

SPAN_LIFECYCLE: Lifecycle[SpanState] = Lifecycle("span", SpanState, SpanState.RESIDENT, SPAN_TABLE)
