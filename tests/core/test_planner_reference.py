"""The planner by reference (``decide(by_reference=True)``): what the transcript carries stays."""

from __future__ import annotations

import pytest

from residency import Budget, ToolState
from residency._core._planner import PLANNERS, Planner, ResidentCall, ToolStanding, decide

R, T, E = ToolState.RESIDENT, ToolState.TOMBSTONED, ToolState.EVICTED


def tool(
    name: str,
    tokens: int = 100,
    *,
    state: ToolState = R,
    pinned: bool = False,
    in_phase: bool = False,
    resident_calls: int = 0,
) -> ToolStanding:
    return ToolStanding(name, state, tokens, pinned, in_phase, 0, resident_calls, resident_calls)


@pytest.mark.parametrize("planner", PLANNERS)
def test_pinned_and_carried_tools_stay_and_every_other_resident_tool_leaves(planner: Planner) -> None:
    tools = [tool("pin", pinned=True), tool("carried"), tool("shown_once"), tool("gone", state=E)]
    decision = decide(Budget(1, 0, planner=planner), tools, [], 0, 1, by_reference=True, carried={"carried"})
    assert decision.resident == ("pin", "carried")
    assert decision.prune == ("shown_once",)
    assert decision.restore == ()
    assert not decision.over_budget  # no schema budget applies by reference
    assert decision.schema_tokens == 200


def test_by_list_the_same_budget_cuts_the_carried_tool() -> None:
    tools = [tool("pin", pinned=True), tool("carried", resident_calls=1)]
    decision = decide(Budget(1, 0), tools, [], 0, 1, carried={"carried"})
    assert decision.prune == ("carried",)


def test_an_evicted_pinned_tool_comes_back_and_a_phase_brings_nothing_back() -> None:
    tools = [tool("pin", pinned=True, state=E), tool("phase_tool", state=E, in_phase=True)]
    decision = decide(Budget(10_000, 0), tools, [], 0, 1, entered=True, by_reference=True)
    assert decision.restore == ("pin",)
    assert decision.resident == ("pin",)


def test_the_argument_budget_and_the_cascade_apply_as_by_list() -> None:
    tools = [tool("old", state=T, resident_calls=1), tool("carried", resident_calls=1)]
    calls = [ResidentCall("c1", "old", 500), ResidentCall("c2", "carried", 500)]
    decision = decide(
        Budget(10_000, 500, high_water=1.0), tools, calls, 1000, 2, by_reference=True, carried={"carried"}
    )
    assert decision.evict_calls == ("c1",)
    assert decision.cascade == ("old",)
    assert decision.resident == ("carried",)


def test_a_plan_with_nothing_to_change_is_steady() -> None:
    tools = [tool("pin", pinned=True), tool("carried")]
    assert decide(Budget(1, 0), tools, [], 0, 1, by_reference=True, carried={"carried"}).steady
    assert not decide(Budget(1, 0), tools, [], 0, 1, by_reference=True).steady
