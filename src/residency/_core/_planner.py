"""The turn planner: which arguments leave, which schemas stay, which tombstones show.

Theory of operation
-------------------
Order matters, and it is the order that keeps ghost tools from being made:

1. Argument budget first. Resident call arguments are evicted oldest first until they fit.
2. Cascade in the same turn. A tombstoned tool whose last resident arguments just left needs
   no tombstone any more: it is evicted.
3. Schema budget. Pinned tools always stay (pinned or active-phase tools that were evicted
   come back). The other candidates are the warm tools: registered, called, re-expanded or
   found within the last ``idle_turns`` turns. They are ranked: first what the agent used or
   asked for in the turn just ended (a re-expanded tool must survive until it is called, or
   the agent re-expands it forever), then the active phase, recency, frequency; and kept
   while they fit. The budget is a ceiling, not a target: a tool nobody has asked
   for stays out (it is still found by search and re-expanded on demand), which is what
   deferred loading saves. The others are pruned.
4. A pruned tool whose arguments are still resident is tombstoned, never silently dropped. The
   session applies that through the lifecycle machine (``prune``), which cannot do otherwise.

The planner only decides: it is a pure function of the standings it is given and returns a
``PlanDecision``. The session fires the transitions, journals them and builds the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from residency._core._lifecycle import ToolState
from residency._errors import InvalidInput

__all__ = ["Budget", "PlanDecision", "ResidentCall", "ToolStanding", "decide"]

# Bound once: reading an enum member off its class costs a lookup each time, in a loop over
# every tool on every turn.
_RESIDENT = ToolState.RESIDENT
_EVICTED = ToolState.EVICTED
_TOMBSTONED = ToolState.TOMBSTONED


@dataclass(frozen=True, slots=True)
class Budget:
    """Token budgets for one turn.

    Attributes:
        schema_tokens: the most tokens of resident (minified) tool schemas to show.
        argument_tokens: the most tokens of earlier call arguments to keep in the transcript.
        idle_turns: a tool not registered, called, re-expanded or found for more than this
            many turns leaves even when the schema budget has room. ``None`` keeps every
            resident tool that fits (for hosts with no tool search).

    Raises:
        InvalidInput: a budget that is not a non-negative integer.
    """

    schema_tokens: int
    argument_tokens: int
    idle_turns: int | None = 8

    def __post_init__(self) -> None:
        for field in ("schema_tokens", "argument_tokens", "idle_turns"):
            value = getattr(self, field)
            if value is None and field == "idle_turns":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(
                    f"Budget.{field} must be a non-negative integer, got {value!r}", where=field
                )


class ToolStanding(NamedTuple):
    """What the planner knows of one tool this turn.

    A named tuple, not a frozen dataclass: one is built per registered tool on every turn, and
    a tuple is built about three times faster.
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
        resident: the resident set after the plan, best-ranked first.
        schema_tokens: tokens of the resident set.
        argument_tokens: tokens of the arguments still resident.
        over_budget: pinned tools alone exceed the schema budget.
        steady: nothing changes and every candidate fit: until a tool changes state, the
            phase or budget changes, arguments overflow their budget or ``warm_until`` passes,
            every later turn decides nothing as well (see ``ToolOps.plan_turn``).
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
) -> PlanDecision:
    """Plan one turn.

    Args:
        budget: the turn's budgets.
        tools: every registered tool.
        resident_calls: the calls whose arguments are resident, oldest first.
        argument_total: the sum of their tokens.
        turn: the turn being planned (for ``idle_turns``).

    Returns:
        The decision; nothing is changed here.
    """
    # 1. Argument budget first.
    evict_calls: list[str] = []
    left_by_tool: dict[str, int] = {}
    if argument_total > budget.argument_tokens:
        for call in resident_calls:
            if argument_total <= budget.argument_tokens:
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

    # 3. Schema budget. One pass: candidates (resident and warm, pinned or in phase; evicted
    # and pinned or in phase) and the cold resident tools. This runs every turn over every tool.
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
    steady = not (evict_calls or cascade or restore or prune or dropped or over_budget)
    warm = [t.last_turn for t in candidates if not (t.pinned or t.in_phase)]
    warm_until = min(warm) + idle if warm and idle is not None else None
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
