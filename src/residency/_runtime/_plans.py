"""Turn plans: what the host shows the model each turn, and what it must drop.

``plan_turn`` runs in three named steps:

1. **validate** the budget and phase (``InvalidInput``, nothing changed);
2. **decide**: the pure planner (``residency._core._planner.decide``) reads one standing per
   tool and returns what leaves and what comes back; the lifecycle machine is asked once per
   distinct (state, trigger, facts) question, not once per tool;
3. **commit** the turn's journal entries in one batch and build the ``TurnPlan`` from the
   state they leave.

A turn after a *steady* one (nothing changed, every candidate fit; see ``PlanDecision.steady``)
skips the decision: only the turn opens (O(1)). Any other turn reads only the tools that can
matter to it (resident, tombstoned, archived, pinned, in the phase; see ``decide``), which a
cache beside the state (``_Index``, not journaled) keeps up to date from the event log: such a
turn costs what changed since the last plan and what is shown, not the catalog size, and plans
exactly what the decision over every tool plans. When the cache is cold (a new, reopened or
restored state) or most tools can matter, the turn reads every tool. Tools that leave together
with the same trigger and destination are journaled as one ``transitions`` entry, so a cold
plan over a large catalog, which prunes thousands of new tools, writes one entry rather than
one per tool. No checkpoint is written inside a plan (see ``residency._runtime._journal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from operator import attrgetter, le
from typing import Any, NamedTuple

from residency._core._events import Event, EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._planner import Budget, PlanDecision, ResidentCall, ToolStanding, decide
from residency._core._state import SessionState
from residency._core._tools import JSONObject
from residency._errors import InvalidInput
from residency._runtime._journal import Item, Journal
from residency._runtime._tools import ToolPart

__all__ = ["PlanPart", "TurnPlan"]


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the host shows the model this turn, and what it must drop.

    Attributes:
        turn: the turn this plan opens.
        tools: the resident tools as the model is shown them (minified; shared by every session
            that registered the same definitions: copy one before changing it): with the ``stable``
            planner in the order they became resident (a tool that arrives goes at the end,
            the others keep their places; see ``resident_tools``), with ``greedy`` in
            registration order.
        tombstones: one line per tool whose schema is withheld while its arguments are
            visible, sorted by tool name. They change more often than the tools: keep them
            out of the tool block (a prompt cache is keyed on it) and show
            ``new_tombstones`` in the result of the call the plan follows.
        evictions: ids of calls whose arguments the host must now drop from its transcript.
        events: what this plan changed.
        schema_tokens: tokens of ``tools``.
        argument_tokens: tokens of the arguments still resident after ``evictions``.
        new_tombstones: the lines of ``tombstones`` this plan created, sorted by tool name.
        steady: the plan changed nothing and every candidate fit: the next plan under the same
            budget and phase is made in O(1) unless something changes in between.
    """

    turn: int
    tools: tuple[JSONObject, ...]
    tombstones: tuple[str, ...]
    evictions: tuple[str, ...]
    events: tuple[Event, ...]
    schema_tokens: int
    argument_tokens: int
    new_tombstones: tuple[str, ...] = ()
    steady: bool = field(default=False, compare=False)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t["name"] for t in self.tools)


class _Steady(NamedTuple):
    """The last steady turn: what it was planned under and what it showed."""

    revision: int
    budget: Budget
    phase: str | None
    warm_until: int | None
    tools: tuple[JSONObject, ...]
    tombstones: tuple[str, ...]
    schema_tokens: int


_STEPS = (
    ("evict", "cascade", "arguments left: tombstone no longer needed"),
    ("reexpand", "restore", "pinned or in the active phase"),
    ("prune", "prune", "schema budget or idle"),
)


_RESIDENT = ToolState.RESIDENT
_TOMBSTONED = ToolState.TOMBSTONED
_ARCHIVED = ToolState.ARCHIVED
_REGISTERED = EventKind.REGISTERED
_REEXPANDED = EventKind.REEXPANDED
# A named tuple made straight from a row tuple (no Python-level ``__new__`` call per tool).
_standing = partial(tuple.__new__, ToolStanding)
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


class _Index:
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
        every tool's state itself). Thousands of events at a time (every tool of a catalog registered,
        then pruned by a cold plan), so the columns are read with C-level maps and only the
        placing events are visited one by one."""
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
            # when no name comes twice (else each takes its last place, below).
            placed.update(zip((self.events[i].subject for i in placing), placing, strict=True))
            if len(placed) == len(placing):
                self.last_turn = turns[-1]
                self.seen = end
                return
            placed.clear()
        for i in placing:
            event = self.events[i]
            name = event.subject
            placed.pop(name, None)
            placed[name] = i
            if event.kind is _REEXPANDED:
                if event.turn != self.reexpanded_turn:
                    self.reexpanded_turn, self.reexpanded = event.turn, set()
                self.reexpanded.add(name)
        self.last_turn = turns[-1]
        self.seen = end

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


class PlanPart:
    """Turn planning over a session's tools.

    ``incremental`` (on by default) plans a turn from the tools that can matter to it (see
    ``_Index``); off, every turn reads every tool (a baseline to measure against; the plans
    are the same).
    """

    def __init__(
        self,
        journal: Journal,
        tools: ToolPart,
        phases: Mapping[str, frozenset[str]],
        *,
        steady_plans: bool,
        incremental: bool = True,
    ) -> None:
        self._journal = journal
        self._tools = tools
        self.phases = phases
        self._steady_plans = steady_plans
        self.incremental = incremental
        self._steady: _Steady | None = None  # a shortcut for the next plan, not state
        self._index_cache: _Index | None = None
        # The full ``residency_order``'s cache: the event log it read, how far, and the order.
        self._order_cache: tuple[list[Event], int, dict[str, None]] | None = None

    def plan_turn(self, budget: Budget, phase: str | None) -> TurnPlan:
        """Open the next turn and plan what the model is shown.

        Arguments leave first (oldest first, to the argument budget); tombstoned tools whose
        arguments all left are evicted; then resident schemas are chosen to the schema budget
        (pinned, active phase, recency, frequency); a pruned tool with resident arguments is
        tombstoned. ``budget.planner`` says how (``residency._core._planner``): ``stable``
        (the default) changes the list only to add what is needed (a phase entered: its tools
        together) or, past the budget's margin, to cut it in one step to its low-water mark;
        ``greedy`` keeps it as small as it can every turn. Chains of the archive scope are
        adopted first, so the plan leaves out what they retired. No checkpoint is written
        inside a plan (see ``checkpoint``).

        Raises:
            InvalidInput: ``budget`` is not a ``Budget`` or ``phase`` is unknown.
        """
        self._validate(budget, phase)
        shortcut = self._steady_plan(budget, phase)
        if shortcut is not None:
            return shortcut
        decision = self._decide(budget, phase)
        return self._commit(decision, budget, phase)

    # -- 1. validate -------------------------------------------------------------------------

    def _validate(self, budget: Budget, phase: str | None) -> None:
        if not isinstance(budget, Budget):
            raise InvalidInput("plan_turn needs a Budget", where="budget")
        if phase is not None and phase not in self.phases:
            raise InvalidInput(f"unknown phase {phase!r}; known: {sorted(self.phases)}", where="phase")

    # -- 2. decide ---------------------------------------------------------------------------

    def _steady_plan(self, budget: Budget, phase: str | None) -> TurnPlan | None:
        """The plan of a turn after a steady one, or None if something may have changed."""
        steady, state = self._steady, self._journal.state
        if (
            steady is None
            or steady.revision != self._journal.revision
            or steady.budget != budget
            or steady.phase != phase
            or state.argument_total > budget.argument_ceiling
            or (steady.warm_until is not None and state.turn + 1 > steady.warm_until)
        ):
            return None
        # Nothing can have changed since a steady turn (see ``PlanDecision.steady``): only the
        # turn opens. Tool states are the same, so are the tools and tombstones shown.
        self._journal.commit(("turn", {"turn": state.turn + 1, "phase": phase}), relaxed=True, in_plan=True)
        return TurnPlan(
            turn=state.turn,
            tools=steady.tools,
            tombstones=steady.tombstones,
            evictions=(),
            events=(),
            schema_tokens=steady.schema_tokens,
            argument_tokens=state.argument_total,
            steady=True,
        )

    def _decide(self, budget: Budget, phase: str | None) -> PlanDecision:
        state = self._journal.state
        in_phase = self.phases.get(phase, frozenset()) if phase else frozenset()
        # One standing per tool read, built column by column (fields in ToolStanding's order:
        # name, state, tokens, pinned, in_phase, last_turn, uses, resident_calls): only the tools
        # that can matter to the decision when the index knows them, else every tool.
        tools, pinned = state.tools, self._tools.pinned
        index = self._warm_index()
        deciding = index.deciding(pinned, in_phase) if index is not None else None
        names = list(tools) if deciding is None else deciding
        tokens = (
            [spec.tokens for spec in tools.values()] if deciding is None else [tools[n].tokens for n in names]
        )
        last_turn, uses, resident_calls = state.last_turn.get, state.uses.get, state.resident_by_tool.get
        standings = list(
            map(
                _standing,
                zip(
                    names,
                    map(state.states.__getitem__, names),
                    tokens,
                    [n in pinned for n in names] if pinned else [False] * len(names),
                    [n in in_phase for n in names] if in_phase else [False] * len(names),
                    [last_turn(n, -1) for n in names],
                    [uses(n, 0) for n in names],
                    [resident_calls(n, 0) for n in names],
                    strict=True,
                ),
            )
        )
        stable = budget.planner == "stable"
        return decide(
            budget,
            standings,
            (ResidentCall(c.id, c.tool, c.argument_tokens) for c in state.resident.values()),
            state.argument_total,
            state.turn + 1,
            entered=stable and phase is not None and phase != state.phase,
            fresh=self._asked_this_turn() if stable else (),
        )

    def _items(self, decision: PlanDecision, budget: Budget, phase: str | None) -> list[Item]:
        """The turn's journal entries: the decision carried out through the lifecycle machine."""
        state = self._journal.state
        left: dict[str, int] = {}
        for call_id in decision.evict_calls:
            tool = state.resident[call_id].tool
            left[tool] = left.get(tool, 0) + 1
        items: list[Item] = [("turn", {"turn": state.turn + 1, "phase": phase})]
        if decision.evict_calls:
            items.append(("evict_arguments", {"ids": list(decision.evict_calls)}))
        # The tools whose arguments stay resident after this turn's evictions (few: the tools
        # with calls), so a tool's facts cost one set lookup.
        with_arguments = {n for n, c in state.resident_by_tool.items() if c - left.get(n, 0) > 0}
        for trigger, part, reason in _STEPS:
            chosen: tuple[str, ...] = getattr(decision, part)
            # The machine's answer depends only on (state, trigger, facts): it is asked once per
            # distinct question, not once per tool, and consecutive tools asking the same
            # question go as one run (a cold plan prunes thousands of tools with one question).
            # A refusal raises at once and is never kept.
            answers: dict[tuple[ToolState, bool], ToolState] = {}
            run: list[str] = []
            run_dest: ToolState | None = None
            questions = zip(
                map(state.states.__getitem__, chosen), map(with_arguments.__contains__, chosen), strict=True
            )
            at = 0
            for question, same in groupby(questions):
                size = sum(1 for _ in same)
                names = chosen[at : at + size]
                at += size
                dest = answers.get(question)
                if dest is None:
                    facts = {"arguments_resident": question[1]}
                    dest = answers[question] = TOOL_LIFECYCLE.fire(
                        question[0], trigger, record=names[0], facts=facts
                    )
                if dest is not run_dest and run:
                    items.append(_transitions(run, trigger, run_dest, reason))
                    run = []
                run_dest = dest
                run.extend(names)
            if run:
                items.append(_transitions(run, trigger, run_dest, reason))
        if decision.over_budget:
            items.append(
                ("budget", {"schema_tokens": decision.schema_tokens, "budget": budget.schema_tokens})
            )
        return items

    # -- 3. commit ---------------------------------------------------------------------------

    def _commit(self, decision: PlanDecision, budget: Budget, phase: str | None) -> TurnPlan:
        state = self._journal.state
        items = self._items(decision, budget, phase)
        first_event = len(state.events)
        # Relaxed: losing a plan to a power loss leaves a more cautious state (arguments still
        # thought visible, a tool shown again), never a ghost; the next recorded call syncs it.
        self._journal.commit(*items, relaxed=True, in_plan=True)
        state = self._journal.state
        specs = state.tools
        if budget.planner == "stable":
            shown = tuple(specs[n].shown for n in self.resident_tools())
        else:
            shown = tuple(specs[n].shown for n in self._registration_order())
        events = tuple(state.events[first_event:])
        tombstoned = sorted(e.subject for e in events if e.kind is EventKind.TOMBSTONED)
        steady = decision.steady and self._steady_plans
        plan = TurnPlan(
            turn=state.turn,
            tools=shown,
            tombstones=self._tombstones(),
            evictions=decision.evict_calls,
            events=events,
            schema_tokens=decision.schema_tokens,
            argument_tokens=state.argument_total,
            new_tombstones=tuple(self._tools.tombstone_text(n) for n in tombstoned),
            steady=steady,
        )
        self._steady = (
            _Steady(
                self._journal.revision,
                budget,
                phase,
                decision.warm_until,
                shown,
                plan.tombstones,
                plan.schema_tokens,
            )
            if steady
            else None
        )
        return plan

    # -- reading -----------------------------------------------------------------------------

    def resident_tools(self) -> list[str]:
        """The resident tools in the order they became resident: the order a stable plan shows.

        A tool is placed when it is registered or re-expanded (by the model, or by a plan
        bringing a pinned or phase tool back) and keeps its place while it stays resident, so
        a list drawn in this order changes only at its end when tools arrive. The order is
        read from the event log, so a reopened session has the same one.
        """
        if self.incremental:
            index = self._index()
            resident, placed = index.resident, index.placed
            if len(resident) * 4 > len(placed):
                return [n for n in placed if n in resident]
            return sorted((n for n in resident if n in placed), key=placed.__getitem__)
        order = self._residency_order()
        states = self._journal.state.states
        return [n for n in order if states.get(n) is _RESIDENT]

    def _registration_order(self) -> list[str]:
        """The resident tools in registration order (the order a greedy plan shows)."""
        state = self._journal.state
        if self.incremental:
            index = self._index()
            resident, registered = index.resident, index.registered
            if len(resident) * 4 <= len(registered):
                return sorted(resident, key=registered.__getitem__)
        states = state.states
        return [n for n in state.tools if states[n] is _RESIDENT]

    def _tombstones(self) -> tuple[str, ...]:
        """``ToolPart.tombstones``, from the index's tombstoned and archived tools."""
        if not self.incremental:
            return tuple(self._tools.tombstones())
        index = self._index()
        calls = self._journal.state.resident_by_tool
        names = index.tombstoned.union(n for n in index.archived if calls.get(n, 0) > 0)
        text = self._tools.tombstone_text
        return tuple(text(n) for n in sorted(names))

    def _index(self) -> _Index:
        """The index, caught up with the state (made again if the state was replaced)."""
        index = self._warm_index()
        if index is None:
            index = self._index_cache = _Index(self._journal.state)
        return index

    def _warm_index(self) -> _Index | None:
        """The index caught up with the state, or None if there is none for this state yet
        (then the decision reads every tool: making it costs as much; the plan's commit makes
        it, as it reads the residency order anyway)."""
        index = self._index_cache
        if not self.incremental or index is None or not index.fits(self._journal.state):
            return None
        index.read()
        return index

    def _residency_order(self) -> dict[str, None]:
        # Kept up to date from the event log, which the journal rebuilds on replay and a
        # checkpoint restores; a cache (not state): remade after the log is replaced.
        events = self._journal.state.events
        cache = self._order_cache
        if cache is not None and cache[0] is events and cache[1] <= len(events):
            _, start, order = cache
        else:
            start, order = 0, {}
        placed = (EventKind.REGISTERED, EventKind.REEXPANDED)
        for i in range(start, len(events)):
            event = events[i]
            if event.kind in placed:
                order.pop(event.subject, None)
                order[event.subject] = None
        self._order_cache = (events, len(events), order)
        return order

    def _asked_this_turn(self) -> frozenset[str]:
        """Tools the model called or re-expanded in the current turn (what a cut keeps first)."""
        state = self._journal.state
        turn = state.turn
        asked: set[str] = set()
        for call in reversed(state.calls.values()):
            if call.turn != turn:
                break
            asked.add(call.tool)
        index = self._warm_index()
        if index is not None and index.monotonic:
            if index.reexpanded_turn == turn:
                asked.update(index.reexpanded)
            return frozenset(asked)
        reexpanded = EventKind.REEXPANDED
        for event in reversed(state.events):
            if event.turn != turn:
                break
            if event.kind is reexpanded:
                asked.add(event.subject)
        return frozenset(asked)


def _transitions(names: list[str], trigger: str, dest: ToolState | None, reason: str) -> Item:
    """One tool's ``transition`` entry, or one ``transitions`` entry for several."""
    assert dest is not None
    if len(names) == 1:
        return ("transition", {"tool": names[0], "trigger": trigger, "dest": dest.value, "reason": reason})
    data: dict[str, Any] = {"tools": names, "trigger": trigger, "dest": dest.value, "reason": reason}
    return ("transitions", data)
