"""The turn planner: which arguments leave, which schemas stay, which tombstones show.

Theory of operation
-------------------
Order matters, and it is the order that keeps ghost tools from being made:

1. Argument budget first. Resident call arguments are evicted oldest first.
2. Cascade in the same turn. A tombstoned tool whose last resident arguments just left needs
   no tombstone any more: it is evicted.
3. Schema budget: which tools are resident.
4. A pruned tool whose arguments are still resident is tombstoned, never silently dropped. The
   session applies that through the lifecycle machine (``prune``), which cannot do otherwise.

Two planners answer step 1 and 3 (``Budget.planner``):

``stable`` (the default) values a tool list that stays the same, because a host's prompt
cache is keyed on it: every change of the list makes the host pay again for the whole
conversation after it. So the list changes only when something is worth it.

- Additions are worth a change: a tool the model re-expands (outside the planner), and the
  tools of a phase being entered, restored together in this one plan. Within a phase, an
  evicted phase tool is not brought back turn after turn.
- Removals only save tokens, so they wait until the shown tools exceed the schema budget by a
  margin (``high_water`` times the budget), and then cut in one step down to ``low_water``
  times the budget. What stays at a cut, in order, while it fits: pinned tools (always),
  tools the model called or re-expanded in the turn just ended (it must get to call them),
  the active phase's tools, then tools it called before, most recent first. A tool nobody
  asked for (only registered) goes. Arguments follow the same rule: nothing leaves until
  they exceed their budget by the margin, then the oldest leave down to the low-water mark.
- No tool is demoted for being idle unless ``idle_turns`` is set.
- The session shows resident tools in the order they became resident, so a tool that
  arrives goes at the end and the others keep their places (``Session.resident_tools``).

``greedy`` is the planner before ``stable``, kept for hosts that want the smallest list every
turn: pinned and active-phase tools are brought back every turn; the others are the warm
tools (registered, called, re-expanded or found within the last ``idle_turns`` turns), ranked
(what the agent used or asked for in the turn just ended, then the active phase, recency,
frequency) and kept while they fit the budget, which is a ceiling, not a target. Arguments
leave oldest first until they fit. Its list changes whenever a tool goes cold or a new one
pushes out the lowest-ranked, one tool at a time.

Delivery by reference (``decide(by_reference=True)``, either planner) is for a host whose tool
list stays fixed, its pinned tools, while other schemas reach the model in results (a search
hit with its schema, a re-expansion: ``Session.record_delivery``). Such a schema is resident
while a result that showed it is in the transcript, and the plan follows that instead of the
schema budget:

- a resident tool that is neither pinned nor *carried* (shown, at its current definition, by
  a delivered result still in the transcript) leaves, by the usual rule: tombstoned if its
  arguments are visible, else evicted. That is how a schema leaves with its last result, and
  how a tool registered since, which the model was never shown, is withheld;
- a carried tool stays, whatever the schema budget and ``idle_turns``: demoting it would not
  take its schema out of the transcript (the host cannot edit a result away), only tombstone a
  tool the model can still call correctly. The schema budget has nothing to bound here: the
  list is the pinned tools, and results only grow the transcript when the model asks;
- evicted pinned tools come back; a phase brings no tool back (the list does not change for
  one, and a restored tool would be resident with no schema anywhere the model can see it);
- the argument budget and the cascade apply as always (arguments first).

The planner only decides: it is a pure function of the standings it is given and returns a
``PlanDecision``. The session fires the transitions, journals them and builds the plan.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal, NamedTuple

from residency._core._lifecycle import ToolState
from residency._errors import InvalidInput

__all__ = [
    "HIGH_WATER",
    "LOW_WATER",
    "PLANNERS",
    "Budget",
    "PlanDecision",
    "Planner",
    "ResidentCall",
    "ToolStanding",
    "decide",
]

# Bound once: reading an enum member off its class costs a lookup each time, in a loop over
# the tools of every turn.
_RESIDENT = ToolState.RESIDENT
_EVICTED = ToolState.EVICTED
_NAME = attrgetter("name")
_TOMBSTONED = ToolState.TOMBSTONED

Planner = Literal["stable", "greedy"]
PLANNERS: tuple[Planner, ...] = ("stable", "greedy")

HIGH_WATER = 1.5
"""The stable planner removes nothing until the shown tools (or the resident arguments)
exceed their budget times this."""
LOW_WATER = 1.0
"""...and then cuts them in one step down to their budget times this."""

GREEDY_IDLE_TURNS = 8
"""``Budget.greedy``'s ``idle_turns``: the greedy planner's default before ``stable``."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Token budgets for one turn, and how the planner keeps to them.

    Attributes:
        schema_tokens: the tokens of resident (minified) tool schemas to show.
        argument_tokens: the tokens of earlier call arguments to keep in the transcript.
        idle_turns: a tool not registered, called, re-expanded or found for more than this
            many turns leaves even when the schema budget has room. ``None`` (the default)
            demotes tools only to keep to the budget.
        planner: ``"stable"`` (the default) changes the tool list only when that is worth it
            (see the module docstring); ``"greedy"`` keeps the list as small as it can on
            every turn, at the price of a list that changes often (``Budget.greedy``).
        high_water: stable only: nothing is removed until the shown schemas (or the resident
            arguments) exceed their budget times this (at least 1.0; 1.0 makes the budget a
            hard ceiling).
        low_water: stable only: a cut goes down to the budget times this (0.0 to 1.0).

    Raises:
        InvalidInput: a budget that is not a non-negative integer, an unknown planner, or
            water marks out of range.
    """

    schema_tokens: int
    argument_tokens: int
    idle_turns: int | None = None
    planner: Planner = "stable"
    high_water: float = HIGH_WATER
    low_water: float = LOW_WATER

    def __post_init__(self) -> None:
        for name in ("schema_tokens", "argument_tokens", "idle_turns"):
            value = getattr(self, name)
            if value is None and name == "idle_turns":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(f"Budget.{name} must be a non-negative integer, got {value!r}", where=name)
        if self.planner not in PLANNERS:
            raise InvalidInput(
                f"Budget.planner must be one of {list(PLANNERS)}, got {self.planner!r}", where="planner"
            )
        high, low = self.high_water, self.low_water
        if not _is_number(high) or not 1.0 <= high <= 1e6:
            raise InvalidInput(f"Budget.high_water must be a number >= 1.0, got {high!r}", where="high_water")
        if not _is_number(low) or not 0.0 <= low <= 1.0:
            raise InvalidInput(
                f"Budget.low_water must be a number from 0.0 to 1.0, got {low!r}", where="low_water"
            )

    @classmethod
    def greedy(
        cls, schema_tokens: int, argument_tokens: int, idle_turns: int | None = GREEDY_IDLE_TURNS
    ) -> Budget:
        """The greedy planner: the list kept to the budget on every turn, and a tool idle for
        ``idle_turns`` (default 8) demoted."""
        return cls(schema_tokens, argument_tokens, idle_turns, "greedy")

    @property
    def schema_ceiling(self) -> int:
        """The most schema tokens a plan leaves shown (pinned tools aside)."""
        return self.schema_tokens if self.planner == "greedy" else int(self.schema_tokens * self.high_water)

    @property
    def schema_floor(self) -> int:
        """What a cut of the shown schemas goes down to (the ceiling for ``greedy``)."""
        return self.schema_tokens if self.planner == "greedy" else int(self.schema_tokens * self.low_water)

    @property
    def argument_ceiling(self) -> int:
        """The most argument tokens a plan leaves resident."""
        return (
            self.argument_tokens if self.planner == "greedy" else int(self.argument_tokens * self.high_water)
        )

    @property
    def argument_floor(self) -> int:
        """What an eviction of arguments goes down to (the ceiling for ``greedy``)."""
        return (
            self.argument_tokens if self.planner == "greedy" else int(self.argument_tokens * self.low_water)
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


class ToolStanding(NamedTuple):
    """What the planner knows of one tool this turn.

    A named tuple, not a frozen dataclass: one is built per tool a turn reads (every tool on a
    cold turn), and a tuple is built about three times faster.
    """

    name: str
    state: ToolState
    tokens: int
    pinned: bool
    in_phase: bool
    last_turn: int
    uses: int
    resident_calls: int


class ResidentCall(NamedTuple):
    """A call whose arguments are resident, for the argument budget."""

    id: str
    tool: str
    tokens: int


@dataclass(frozen=True, slots=True)
class PlanDecision:
    """What the planner decided; the session carries it out.

    Attributes:
        evict_calls: call ids whose arguments leave the transcript (host applies).
        cascade: tombstoned tools whose arguments all left: evict them.
        restore: evicted pinned or active-phase tools to make resident again.
        prune: resident tools to prune (tombstone if arguments resident, else evict).
        resident: the resident set after the plan (greedy: best-ranked first; stable: in
            registration order).
        schema_tokens: tokens of the resident set.
        argument_tokens: tokens of the arguments still resident.
        over_budget: pinned tools alone exceed the schema budget (stable: its ceiling).
        steady: nothing changes and every candidate fit: until a tool changes state, the
            phase or budget changes, arguments overflow their budget or ``warm_until`` passes,
            every later turn decides nothing as well (see ``Session.plan_turn``).
        warm_until: the last turn on which every tool kept only for being warm still is;
            None when no tool is kept for that alone.
    """

    evict_calls: tuple[str, ...]
    cascade: tuple[str, ...]
    restore: tuple[str, ...]
    prune: tuple[str, ...]
    resident: tuple[str, ...]
    schema_tokens: int
    argument_tokens: int
    over_budget: bool
    steady: bool = False
    warm_until: int | None = None


def decide(
    budget: Budget,
    tools: Sequence[ToolStanding],
    resident_calls: Iterable[ResidentCall],
    argument_total: int,
    turn: int,
    *,
    entered: bool = False,
    fresh: Collection[str] = (),
    by_reference: bool = False,
    carried: Collection[str] = (),
) -> PlanDecision:
    """Plan one turn.

    A tool that is neither resident, nor tombstoned, nor pinned, nor in the active phase
    changes nothing here: ``tools`` may leave it out and the decision is the same. A shell
    that keeps those few tools at hand plans a turn in time of their number, not the
    catalog's (``residency._runtime._plans``).

    Args:
        budget: the turn's budgets and planner.
        tools: the registered tools in registration order: every one, or at least every
            resident, tombstoned, pinned and active-phase tool.
        resident_calls: the calls whose arguments are resident, oldest first.
        argument_total: the sum of their tokens.
        turn: the turn being planned (for ``idle_turns``).
        entered: stable: the turn enters a phase (its evicted tools come back together).
        fresh: stable: tools called or re-expanded in the turn just ended (kept at a cut).
        by_reference: plan for delivery by reference (see the module docstring); the schema
            budget, ``idle_turns``, ``entered`` and ``fresh`` do not apply.
        carried: by reference: the tools a delivered result still in the transcript shows.

    Returns:
        The decision; nothing is changed here.
    """
    # 1. Argument budget first.
    evict_calls: list[str] = []
    left_by_tool: dict[str, int] = {}
    if argument_total > budget.argument_ceiling:
        floor = budget.argument_floor
        for call in resident_calls:
            if argument_total <= floor:
                break
            evict_calls.append(call.id)
            argument_total -= call.tokens
            left_by_tool[call.tool] = left_by_tool.get(call.tool, 0) + 1

    # 2. Cascade: arguments gone means the tombstone is no longer needed.
    cascade = (
        [
            t.name
            for t in tools
            if t.state is _TOMBSTONED
            and t.name in left_by_tool
            and t.resident_calls - left_by_tool[t.name] == 0
        ]
        if left_by_tool
        else []
    )

    # 3. Schema budget (by reference: what the transcript carries).
    if by_reference:
        schema = _reference_schemas(tools, carried)
    elif budget.planner == "greedy":
        schema = _greedy_schemas(budget, tools, turn)
    else:
        schema = _stable_schemas(budget, tools, turn, entered, fresh)
    restore, prune, resident, used, over_budget, settled, warm_until = schema
    steady = settled and not (evict_calls or cascade)
    return PlanDecision(
        evict_calls=tuple(evict_calls),
        cascade=tuple(cascade),
        restore=tuple(restore),
        prune=tuple(prune),
        resident=tuple(resident),
        schema_tokens=used,
        argument_tokens=argument_total,
        over_budget=over_budget,
        steady=steady,
        warm_until=warm_until,
    )


class _Schemas(NamedTuple):
    restore: list[str]
    prune: list[str]
    resident: list[str]
    used: int
    over_budget: bool
    settled: bool  # nothing to restore or prune, and nothing would be on a later turn either
    warm_until: int | None


def _reference_schemas(tools: Sequence[ToolStanding], carried: Collection[str]) -> _Schemas:
    """Delivery by reference: pinned and carried tools stay, evicted pinned ones come back, any
    other resident tool leaves (see the module docstring)."""
    restore: list[str] = []
    prune: list[str] = []
    resident: list[str] = []
    used = 0
    for t in tools:
        state = t.state
        if state is _RESIDENT:
            if t.pinned or t.name in carried:
                resident.append(t.name)
                used += t.tokens
            else:
                prune.append(t.name)
        elif state is _EVICTED and t.pinned:
            restore.append(t.name)
            resident.append(t.name)
            used += t.tokens
    return _Schemas(
        restore=restore,
        prune=prune,
        resident=resident,
        used=used,
        over_budget=False,  # no schema budget applies
        settled=not (restore or prune),
        warm_until=None,
    )


def _warm(t: ToolStanding, idle: int | None, turn: int) -> bool:
    return idle is None or (t.last_turn >= 0 and turn - t.last_turn <= idle)


def _stable_schemas(
    budget: Budget, tools: Sequence[ToolStanding], turn: int, entered: bool, fresh: Collection[str]
) -> _Schemas:
    idle = budget.idle_turns
    shown: list[ToolStanding] = []  # resident after the additions, before any cut
    cold: list[str] = []
    for t in tools:
        state = t.state
        if state is _RESIDENT:
            if t.pinned or t.in_phase or idle is None or _warm(t, idle, turn):
                shown.append(t)
            else:
                cold.append(t.name)
        elif state is _EVICTED and (t.pinned or (entered and t.in_phase)):
            shown.append(t)
    used = sum(t.tokens for t in shown)
    dropped: list[str] = []
    if used > budget.schema_ceiling:
        shown, dropped, used = _cut(shown, budget.schema_floor, fresh)
    restore = [t.name for t in shown if t.state is _EVICTED]
    over_budget = used > budget.schema_ceiling  # pinned tools alone: a cut keeps every one
    # Calls make tools warmer and change no token count, so with nothing to restore, prune
    # or cut this holds until the first warm-only tool would go cold.
    warm = [t.last_turn for t in shown if not (t.pinned or t.in_phase)] if idle is not None else []
    return _Schemas(
        restore=restore,
        prune=cold + dropped,
        resident=[t.name for t in shown],
        used=used,
        over_budget=over_budget,
        settled=not (restore or cold or dropped or over_budget),
        warm_until=min(warm) + idle if warm and idle is not None else None,
    )


def _cut(
    shown: list[ToolStanding], floor: int, fresh: Collection[str]
) -> tuple[list[ToolStanding], list[str], int]:
    """Cut ``shown`` down to ``floor`` tokens in one step: what stays, what goes (resident
    tools only: an evicted tool that does not stay just is not restored), and the tokens kept.

    Only tools with a reason to stay (pinned, just asked for, in the phase, used before) are
    ranked; the rest leave whatever their rank, so a cold plan over a large catalog (every tool
    only registered) sorts the few that can stay, not the catalog. The leavers are dropped in
    registration order, after the ranked tools that did not fit.
    """
    reasoned: list[ToolStanding] = []
    idle: list[ToolStanding] = []
    place: dict[str, int] = {}  # a reasoned tool's place in registration order
    for i, t in enumerate(shown):
        if t.pinned or t.uses or t.in_phase or t.name in fresh:
            reasoned.append(t)
            place[t.name] = i
        elif t.state is _RESIDENT:
            idle.append(t)
    ranked = sorted(
        reasoned,
        key=lambda t: (
            not t.pinned,
            t.name not in fresh,
            not t.in_phase,
            -t.last_turn,
            -t.uses,
            t.name,
        ),
    )
    kept: list[ToolStanding] = []
    dropped: list[str] = []
    used = 0
    for t in ranked:
        # A tool stays for a reason and only while it fits (pinned: always).
        if t.pinned or used + t.tokens <= floor:
            kept.append(t)
            used += t.tokens
        elif t.state is _RESIDENT:
            dropped.append(t.name)
    # One that was only registered leaves at the first cut.
    dropped.extend(map(_NAME, idle))
    kept.sort(key=lambda t: place[t.name])  # back in registration order
    return kept, dropped, used


def _greedy_schemas(budget: Budget, tools: Sequence[ToolStanding], turn: int) -> _Schemas:
    # One pass: candidates (resident and warm, pinned or in phase; evicted and pinned or in
    # phase) and the cold resident tools. This runs every turn over every tool it is given.
    idle = budget.idle_turns
    candidates: list[ToolStanding] = []
    cold: list[str] = []
    for t in tools:
        state = t.state
        if state is _RESIDENT:
            if t.pinned or t.in_phase or idle is None or (t.last_turn >= 0 and turn - t.last_turn <= idle):
                candidates.append(t)
            else:
                cold.append(t.name)
        elif state is _EVICTED and (t.pinned or t.in_phase):
            candidates.append(t)
    just_used = turn - 1
    candidates.sort(
        key=lambda t: (not t.pinned, t.last_turn < just_used, not t.in_phase, -t.last_turn, -t.uses, t.name)
    )
    resident: list[str] = []
    dropped: list[str] = []
    used = 0
    over_budget = False
    for t in candidates:
        if t.pinned or used + t.tokens <= budget.schema_tokens:
            resident.append(t.name)
            used += t.tokens
            over_budget = over_budget or used > budget.schema_tokens
        else:
            dropped.append(t.name)
    by_name = {t.name: t for t in candidates}
    restore = [n for n in resident if by_name[n].state is _EVICTED]
    prune = cold + [n for n in dropped if by_name[n].state is _RESIDENT]
    # Calls only make tools warmer and everything fits in any order, so this holds until the
    # first warm-only tool would go cold.
    warm = [t.last_turn for t in candidates if not (t.pinned or t.in_phase)]
    return _Schemas(
        restore=restore,
        prune=prune,
        resident=resident,
        used=used,
        over_budget=over_budget,
        settled=not (restore or prune or dropped or over_budget),
        warm_until=min(warm) + idle if warm and idle is not None else None,
    )
