"""The turn planner's rules, one at a time, on ``decide`` itself (pure: standings in, decision out)."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
from hypothesis import given

from residency import Budget, InvalidInput, ToolState
from residency._core._planner import (
    HIGH_WATER,
    LOW_WATER,
    PLANNERS,
    Planner,
    ResidentCall,
    ToolStanding,
    _cut,
    decide,
)

R, T, E, A = ToolState.RESIDENT, ToolState.TOMBSTONED, ToolState.EVICTED, ToolState.ARCHIVED


def tool(
    name: str,
    tokens: int = 100,
    *,
    state: ToolState = R,
    pinned: bool = False,
    in_phase: bool = False,
    last_turn: int = 0,
    uses: int = 0,
    resident_calls: int = 0,
) -> ToolStanding:
    return ToolStanding(name, state, tokens, pinned, in_phase, last_turn, uses, resident_calls)


def used(name: str, last_turn: int, tokens: int = 100, uses: int = 1) -> ToolStanding:
    """A resident tool the model called (its arguments are in the transcript)."""
    return tool(name, tokens, last_turn=last_turn, uses=uses, resident_calls=uses)


def test_the_stable_planner_is_the_default_with_documented_water_marks() -> None:
    budget = Budget(1000, 400)
    assert budget.planner == "stable" and budget.idle_turns is None
    assert (budget.high_water, budget.low_water) == (HIGH_WATER, LOW_WATER) == (1.5, 1.0)
    assert (budget.schema_ceiling, budget.schema_floor) == (1500, 1000)
    assert (budget.argument_ceiling, budget.argument_floor) == (600, 400)
    greedy = Budget.greedy(1000, 400)
    assert (greedy.planner, greedy.idle_turns) == ("greedy", 8)
    assert (greedy.schema_ceiling, greedy.schema_floor, greedy.argument_ceiling) == (1000, 1000, 400)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("planner", "lazy"),
        ("high_water", 0.9),
        ("high_water", math.nan),
        ("high_water", True),
        ("high_water", "2"),
        ("low_water", 1.5),
        ("low_water", -0.1),
        ("idle_turns", -1),
    ],
)
def test_a_bad_policy_is_invalid_input_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidInput) as info:
        Budget(100, 100, **{field: value})  # type: ignore[arg-type]
    assert info.value.where == field


def test_nothing_leaves_while_the_shown_tools_stay_within_the_margin() -> None:
    # 1,400 tokens shown against a 1,000-token budget: over it, but not past 1.5x.
    tools = [used(f"t{i}", last_turn=i) for i in range(14)]
    decision = decide(Budget(1000, 10_000), tools, [], 0, turn=20)
    assert decision.prune == () and decision.restore == ()
    assert decision.schema_tokens == 1400 and decision.steady


def test_past_the_margin_one_cut_goes_down_to_the_low_water_mark() -> None:
    tools = [used(f"t{i:02}", last_turn=i) for i in range(16)]  # 1,600 > 1,500
    decision = decide(Budget(1000, 10_000, low_water=0.6), tools, [], 0, turn=20)
    assert decision.schema_tokens == 600
    # The most recently used stay; the ten oldest leave in this one plan.
    assert set(decision.resident) == {f"t{i:02}" for i in range(10, 16)}
    assert set(decision.prune) == {f"t{i:02}" for i in range(10)}
    assert not decision.steady


def test_a_cut_keeps_pinned_then_just_asked_for_then_phase_then_recent_tools() -> None:
    tools = [
        tool("pin", 300, pinned=True, last_turn=0),
        tool("asked", 300, last_turn=9),  # re-expanded in the turn just ended, not called yet
        tool("phase", 300, in_phase=True, last_turn=0),
        used("recent", last_turn=8, tokens=300),
        used("older", last_turn=5, tokens=300),
        used("oldest", last_turn=1, tokens=300),
    ]
    decision = decide(Budget(1000, 10_000), tools, [], 0, turn=10, fresh={"asked"})
    assert set(decision.resident) == {"pin", "asked", "phase"}
    decision = decide(Budget(1200, 10_000, high_water=1.2), tools, [], 0, turn=10, fresh={"asked"})
    assert set(decision.resident) == {"pin", "asked", "phase", "recent"}
    assert set(decision.prune) == {"older", "oldest"}


def test_pinned_tools_stay_through_a_cut_even_past_the_budget() -> None:
    tools = [tool("pin", 500, pinned=True), used("a", last_turn=3)]
    decision = decide(Budget(200, 10_000), tools, [], 0, turn=5)
    assert decision.resident == ("pin",) and decision.prune == ("a",)
    assert decision.over_budget and not decision.steady


def test_a_tool_nobody_asked_for_leaves_at_the_first_cut_even_with_room() -> None:
    tools = [tool("registered", 50), tool("other", 2000), used("called", last_turn=1)]
    decision = decide(Budget(1000, 10_000), tools, [], 0, turn=2)
    assert decision.resident == ("called",)
    assert set(decision.prune) == {"registered", "other"}


def test_no_tool_is_demoted_for_being_idle_unless_idle_turns_is_set() -> None:
    tools = [used("a", last_turn=1), tool("b", last_turn=0)]
    quiet = decide(Budget(10_000, 10_000), tools, [], 0, turn=1000)
    assert quiet.prune == () and quiet.steady and quiet.warm_until is None
    idle = decide(Budget(10_000, 10_000, idle_turns=3), tools, [], 0, turn=1000)
    assert set(idle.prune) == {"a", "b"}


def test_entering_a_phase_brings_all_its_evicted_tools_back_in_one_plan() -> None:
    tools = [
        tool("p1", state=E, in_phase=True),
        tool("p2", state=E, in_phase=True),
        tool("p3", state=T, in_phase=True, resident_calls=1),  # tombstoned: re-expanded explicitly
        used("a", last_turn=3),
    ]
    entering = decide(Budget(1000, 10_000), tools, [], 0, turn=5, entered=True)
    assert entering.restore == ("p1", "p2") and entering.prune == ()
    # Within the phase, an evicted phase tool is not brought back turn after turn.
    within = decide(Budget(1000, 10_000), tools, [], 0, turn=6)
    assert within.restore == () and within.steady


def test_a_phase_that_overflows_the_margin_is_restored_and_cut_in_the_same_plan() -> None:
    phase = [tool(f"p{i}", 300, state=E, in_phase=True) for i in range(4)]
    tools = [*phase, used("a", last_turn=3, tokens=400)]
    decision = decide(Budget(1000, 10_000), tools, [], 0, turn=5, entered=True)
    # 1,600 tokens would be shown: one plan restores what fits under 1,000 and prunes the rest.
    assert decision.schema_tokens <= 1000
    assert set(decision.restore) <= {"p0", "p1", "p2", "p3"} and len(decision.restore) == 3
    assert decision.prune == ("a",)


def test_pinned_tools_always_come_back() -> None:
    tools = [tool("pin", state=E, pinned=True), used("a", last_turn=1)]
    assert decide(Budget(1000, 10_000), tools, [], 0, turn=3).restore == ("pin",)


def test_arguments_stay_until_past_the_margin_then_the_oldest_leave_down_to_the_low_water_mark() -> None:
    calls = [ResidentCall(f"c{i}", "a", 100) for i in range(14)]
    tools = [used("a", last_turn=3, uses=14)]
    within = decide(Budget(1000, 1000), tools, calls, 1400, turn=5)
    assert within.evict_calls == () and within.argument_tokens == 1400
    calls.append(ResidentCall("c14", "a", 200))
    past = decide(Budget(1000, 1000, low_water=0.5), tools, calls, 1600, turn=5)
    assert past.evict_calls == tuple(f"c{i}" for i in range(11))
    assert past.argument_tokens == 500


def test_a_tombstone_whose_arguments_all_left_is_evicted_in_the_same_plan() -> None:
    calls = [ResidentCall("c1", "gone", 900), ResidentCall("c2", "a", 100)]
    tools = [tool("gone", state=T, resident_calls=1, uses=1), used("a", last_turn=3)]
    decision = decide(Budget(1000, 500), tools, calls, 1000, turn=5)
    assert decision.evict_calls == ("c1",) and decision.cascade == ("gone",)


def test_the_greedy_planner_keeps_to_the_budget_every_turn() -> None:
    tools = [used(f"t{i}", last_turn=i) for i in range(12)]
    decision = decide(Budget.greedy(1000, 10_000, idle_turns=None), tools, [], 0, turn=12)
    assert decision.schema_tokens == 1000 and set(decision.prune) == {"t0", "t1"}
    calls = [ResidentCall(f"c{i}", "t0", 100) for i in range(11)]
    assert decide(Budget.greedy(10_000, 1000), tools, calls, 1100, turn=12).evict_calls == ("c0",)
    # Idle for more than 8 turns: cold, even with room.
    assert decide(Budget.greedy(10_000, 10_000), tools, [], 0, turn=12).prune == ("t0", "t1", "t2", "t3")


@st.composite
def _standings(draw: st.DrawFn) -> tuple[list[ToolStanding], list[ResidentCall]]:
    count = draw(st.integers(0, 16))
    tools: list[ToolStanding] = []
    calls: list[ResidentCall] = []
    for i in range(count):
        state = draw(st.sampled_from([R, T, E, A]))
        resident_calls = draw(st.integers(0, 2)) if state is not E else 0
        last_turn = draw(st.integers(-1, 12))
        standing = ToolStanding(
            f"t{i}",
            state,
            draw(st.integers(0, 400)),
            draw(st.booleans()),
            draw(st.booleans()),
            last_turn,
            draw(st.integers(0, 3)) if last_turn >= 0 else 0,
            resident_calls,
        )
        tools.append(standing)
        calls += [
            ResidentCall(f"c{i}.{k}", standing.name, draw(st.integers(1, 300))) for k in range(resident_calls)
        ]
    return tools, draw(st.permutations(calls))


@given(
    standings=_standings(),
    schema=st.integers(0, 3000),
    arguments=st.integers(0, 1000),
    idle=st.sampled_from([None, 0, 2, 5]),
    planner=st.sampled_from(PLANNERS),
    entered=st.booleans(),
    fresh=st.sets(st.sampled_from([f"t{i}" for i in range(16)])),
)
def test_leaving_out_the_tools_that_cannot_matter_decides_the_same(
    standings: tuple[list[ToolStanding], list[ResidentCall]],
    schema: int,
    arguments: int,
    idle: int | None,
    planner: Planner,
    entered: bool,
    fresh: set[str],
) -> None:
    # An evicted or archived tool that is neither pinned nor in the phase changes nothing: the
    # session plans a turn from the others only (``residency._runtime._plans``).
    tools, calls = standings
    budget = Budget(schema, arguments, idle, planner)
    total = sum(c.tokens for c in calls)
    matter = [t for t in tools if t.state in (R, T) or t.pinned or t.in_phase]
    every = decide(budget, tools, calls, total, 13, entered=entered, fresh=fresh)
    assert decide(budget, matter, calls, total, 13, entered=entered, fresh=fresh) == every


def _cut_by_ranking_everything(
    shown: list[ToolStanding], floor: int, fresh: set[str]
) -> tuple[set[str], set[str], int]:
    """The cut's rule read literally: rank every shown tool, keep the pinned ones and those with
    a reason that still fit. What stays, what leaves (resident only) and the tokens kept."""
    ranked = sorted(
        shown,
        key=lambda t: (not t.pinned, t.name not in fresh, not t.in_phase, -t.last_turn, -t.uses, t.name),
    )
    kept: set[str] = set()
    dropped: set[str] = set()
    used = 0
    for t in ranked:
        if t.pinned or ((t.uses or t.in_phase or t.name in fresh) and used + t.tokens <= floor):
            kept.add(t.name)
            used += t.tokens
        elif t.state is R:
            dropped.add(t.name)
    return kept, dropped, used


@given(
    standings=_standings(),
    schema=st.integers(0, 3000),
    fresh=st.sets(st.sampled_from([f"t{i}" for i in range(16)])),
)
def test_a_cut_keeps_what_ranking_every_tool_would_keep(
    standings: tuple[list[ToolStanding], list[ResidentCall]], schema: int, fresh: set[str]
) -> None:
    # The planner ranks only the tools with a reason to stay (a cold plan at 10,000 tools sorts
    # the few, not the catalog); the outcome is the literal rule's.
    tools, _ = standings
    shown = [t for t in tools if t.state is R or (t.state is E and t.pinned)]
    budget = Budget(schema, 10_000)
    kept, dropped, used = _cut_by_ranking_everything(shown, budget.schema_floor, fresh)
    got, left, tokens = _cut(shown, budget.schema_floor, fresh)
    assert {t.name for t in got} == kept and set(left) == dropped and tokens == used
    assert [t.name for t in got] == [t.name for t in shown if t.name in kept]  # registration order


def test_tools_only_registered_leave_a_cut_in_registration_order_after_the_ranked_ones() -> None:
    tools = [tool(f"r{i}", 100, last_turn=0) for i in (3, 1, 2)] + [
        used("old", last_turn=1, tokens=700),  # 1,600 tokens: past the margin
        used("new", last_turn=4, tokens=600),
    ]
    decision = decide(Budget(1000, 10_000), tools, [], 0, turn=5)
    assert decision.resident == ("new",)
    assert decision.prune == ("old", "r3", "r1", "r2")
