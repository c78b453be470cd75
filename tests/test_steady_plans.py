"""A turn after a steady one is planned in O(1); it must plan exactly what the full planner does."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from residency import Budget, MemoryStore, ResidencyError, Session
from residency._core._planner import PLANNERS
from tests._tiers import examples

NAMES = [f"tool_{i}" for i in range(5)]
PHASES = {"read": ["tool_1", "tool_2"], "write": ["tool_3"]}


def _tool(name: str, i: int, version: int = 0) -> dict[str, Any]:
    props = {f"field_{k}": {"type": "integer", "minimum": 0} for k in range(i + 1)}
    return {
        "name": name,
        "description": f"Tool {i}, version {version}. " * (i + 1),
        "inputSchema": {"type": "object", "properties": props},
    }


class FixedClock:
    def now(self) -> float:
        return 0.0


class FullPlans(Session):
    """The same session with every turn planned in full."""

    _STEADY_PLANS = False


BUDGETS = st.builds(
    Budget,
    schema_tokens=st.sampled_from([60, 150, 400, 10_000]),
    argument_tokens=st.sampled_from([8, 40, 1_000_000]),
    idle_turns=st.sampled_from([None, 1, 3]),
    planner=st.sampled_from(PLANNERS),
    high_water=st.sampled_from([1.0, 1.5, 3.0]),
    low_water=st.sampled_from([0.4, 1.0]),
)


class SteadyAgainstFull(RuleBasedStateMachine):
    """Both sessions get every operation; their plans, errors and states must be equal."""

    def __init__(self) -> None:
        super().__init__()
        clock = FixedClock()
        self.fast = Session(MemoryStore(), clock=clock, pinned=["tool_0"], phases=PHASES)
        self.full = FullPlans(MemoryStore(), clock=clock, pinned=["tool_0"], phases=PHASES)
        for s in self.both:
            s.register_tools([_tool(n, i) for i, n in enumerate(NAMES)])
        self.budget = Budget(10_000, 1_000_000, None)
        self.phase: str | None = None

    @property
    def both(self) -> tuple[Session, Session]:
        return self.fast, self.full

    def _same(self, op: str, *args: Any) -> None:
        outcomes = []
        for s in self.both:
            try:
                outcomes.append(("ok", getattr(s, op)(*args)))
            except ResidencyError as exc:
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1]

    @rule(budget=BUDGETS)
    def change_budget(self, budget: Budget) -> None:
        self.budget = budget

    @rule(phase=st.sampled_from([None, "read", "write"]))
    def change_phase(self, phase: str | None) -> None:
        self.phase = phase

    @rule(turns=st.integers(1, 4))
    def plan(self, turns: int) -> None:
        for _ in range(turns):
            fast = self.fast.plan_turn(self.budget, phase=self.phase)
            full = self.full.plan_turn(self.budget, phase=self.phase)
            assert fast == full

    @rule(name=st.sampled_from(NAMES), value=st.integers(0, 10**6))
    def call(self, name: str, value: int) -> None:
        self._same("admit_call", name, {"field_0": value})

    @rule(name=st.sampled_from(NAMES), op=st.sampled_from(["prune", "tombstone", "evict", "reexpand"]))
    def transition(self, name: str, op: str) -> None:
        self._same(op, name)

    @rule(data=st.data())
    def evict_oldest_arguments(self, data: st.DataObject) -> None:
        resident = [c.id for c in self.fast.resident_calls()]
        if resident:
            self._same("evict_arguments", data.draw(st.sampled_from(resident)))

    @rule(i=st.integers(0, len(NAMES) - 1), version=st.integers(1, 2))
    def upgrade(self, i: int, version: int) -> None:
        self._same("register_tools", [_tool(NAMES[i], i, version)])

    @invariant()
    def same_state(self) -> None:
        assert self.fast.snapshot() == self.full.snapshot()


TestSteadyAgainstFull = SteadyAgainstFull.TestCase
TestSteadyAgainstFull.settings = settings(
    max_examples=examples(300),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_quiet_turns_under_budget_take_the_steady_path() -> None:
    s = Session(pinned=["tool_0"])
    s.register_tools([_tool(n, i) for i, n in enumerate(NAMES)])
    budget = Budget(10_000, 1_000_000, None)
    first = s.plan_turn(budget)
    assert first.steady
    s.admit_call("tool_1", {"field_0": 1})
    second = s.plan_turn(budget)
    assert second.steady and second.tools == first.tools and second.events == ()
    # A changed budget plans in full again.
    assert not s.plan_turn(Budget(10, 1_000_000, None)).steady


@pytest.mark.parametrize("idle", [1, 3])
def test_a_warm_tool_still_goes_cold_on_time(idle: int) -> None:
    s = Session(pinned=["tool_0"])
    s.register_tools([_tool(n, i) for i, n in enumerate(NAMES)])
    budget = Budget(10_000, 1_000_000, idle)
    s.admit_call("tool_2", {"field_0": 1})
    for _ in range(idle + 2):
        plan = s.plan_turn(budget)
    assert "tool_2" not in [t["name"] for t in plan.tools]
    assert "tool_2" in s.tombstone_text("tool_2")
