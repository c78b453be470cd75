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
cache beside the state (``residency._runtime._plan_index``, not journaled) keeps up to date
from the event log: such a turn costs what changed since the last plan and what is shown, not
the catalog size, and plans exactly what the decision over every tool plans. When the cache is
cold (a new, reopened or restored state) or most tools can matter, the turn reads every tool.
Tools that leave together with the same trigger and destination are journaled as one
``transitions`` entry, so a cold plan over a large catalog, which prunes thousands of new
tools, writes one entry rather than one per tool. No checkpoint is written inside a plan (see
``residency._runtime._journal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from typing import Any, NamedTuple

from residency._core._events import Event, EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._planner import Budget, PlanDecision, ResidentCall, ToolStanding, decide
from residency._core._tools import JSONObject
from residency._errors import InvalidInput
from residency._runtime._journal import Item, Journal
from residency._runtime._plan_index import PlanIndex
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
    by_reference: bool
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
# A named tuple made straight from a row tuple (no Python-level ``__new__`` call per tool).
_standing = partial(tuple.__new__, ToolStanding)


class PlanPart:
    """Turn planning over a session's tools.

    ``incremental`` (on by default) plans a turn from the tools that can matter to it (see
    ``PlanIndex``); off, every turn reads every tool (a baseline to measure against; the plans
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
        self._index_cache: PlanIndex | None = None
        # The full ``residency_order``'s cache: the event log it read, how far, and the order.
        self._order_cache: tuple[list[Event], int, dict[str, None]] | None = None

    def plan_turn(self, budget: Budget, phase: str | None, *, by_reference: bool = False) -> TurnPlan:
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

        ``by_reference``: the host delivers tools by reference (a fixed list of the pinned
        tools; other schemas reach the model in results it records with ``record_delivery``).
        A resident tool that is neither pinned nor carried by a delivered result still in the
        transcript leaves (tombstoned if its arguments are visible, else evicted); a carried
        one stays whatever the schema budget, and a phase brings no tool back
        (``residency._core._planner``). The argument budget applies as always.

        Raises:
            InvalidInput: ``budget`` is not a ``Budget``, ``phase`` is unknown or
                ``by_reference`` is not a bool.
        """
        self._validate(budget, phase)
        if not isinstance(by_reference, bool):
            raise InvalidInput("by_reference must be True or False", where="by_reference")
        shortcut = self._steady_plan(budget, phase, by_reference)
        if shortcut is not None:
            return shortcut
        decision = self._decide(budget, phase, by_reference)
        return self._commit(decision, budget, phase, by_reference)

    # -- 1. validate -------------------------------------------------------------------------

    def _validate(self, budget: Budget, phase: str | None) -> None:
        if not isinstance(budget, Budget):
            raise InvalidInput("plan_turn needs a Budget", where="budget")
        if phase is not None and phase not in self.phases:
            raise InvalidInput(f"unknown phase {phase!r}; known: {sorted(self.phases)}", where="phase")

    # -- 2. decide ---------------------------------------------------------------------------

    def _steady_plan(self, budget: Budget, phase: str | None, by_reference: bool) -> TurnPlan | None:
        """The plan of a turn after a steady one, or None if something may have changed."""
        steady, state = self._steady, self._journal.state
        if (
            steady is None
            or steady.revision != self._journal.revision
            or steady.budget != budget
            or steady.phase != phase
            or steady.by_reference is not by_reference
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

    def _decide(self, budget: Budget, phase: str | None, by_reference: bool = False) -> PlanDecision:
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
        stable = budget.planner == "stable" and not by_reference
        return decide(
            budget,
            standings,
            (ResidentCall(c.id, c.tool, c.argument_tokens) for c in state.resident.values()),
            state.argument_total,
            state.turn + 1,
            entered=stable and phase is not None and phase != state.phase,
            fresh=self._asked_this_turn() if stable else (),
            by_reference=by_reference,
            carried=state.carried_by_tool.keys() if by_reference else (),
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

    def _commit(
        self, decision: PlanDecision, budget: Budget, phase: str | None, by_reference: bool = False
    ) -> TurnPlan:
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
                by_reference,
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

    def _index(self) -> PlanIndex:
        """The index, caught up with the state (made again if the state was replaced)."""
        index = self._warm_index()
        if index is None:
            index = self._index_cache = PlanIndex(self._journal.state)
        return index

    def _warm_index(self) -> PlanIndex | None:
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
