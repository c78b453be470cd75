"""Model-based test of the stable planner through a session: the list changes only when worth it.

Random calls, re-expansions, host prunes, upgrades and phase changes; after every plan:

- the shown schemas keep to the ceiling (the budget times ``high_water``; pinned tools aside);
- a tool leaves the list only in a plan where the tools to show were past that ceiling;
- the tools of the last list that are still listed keep their order and come first; what
  arrived since comes after them;
- the ghost invariant holds: a withheld tool with visible arguments has a tombstone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from residency import Budget, MemoryStore, ResidencyError, Session, ToolState
from tests._tiers import examples

NAMES = [f"tool_{i}" for i in range(7)]
PINNED = "tool_0"
PHASES = {"read": ["tool_1", "tool_2"], "write": ["tool_3", "tool_4"]}


def _tool(name: str, i: int, version: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Tool {i}, version {version}. " * (i % 3 + 1),
        "inputSchema": {"type": "object", "properties": {"field": {"type": "integer", "minimum": 0}}},
    }


class StablePlans(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.session = Session(MemoryStore(), pinned=[PINNED], phases=PHASES)
        self.session.register_tools([_tool(n, i) for i, n in enumerate(NAMES)])
        self.budget = Budget(120, 1_000_000)
        self.phase: str | None = None
        self.listed: tuple[str, ...] | None = None  # the last plan's list
        self.left: set[str] = set()  # tools that left residency since the last plan

    def _track(self, op: Any, *args: Any) -> None:
        before = set(self.session.tools(ToolState.RESIDENT))
        with contextlib.suppress(ResidencyError):
            op(*args)
        self.left |= before - set(self.session.tools(ToolState.RESIDENT))

    @rule(name=st.sampled_from(NAMES), value=st.integers(0, 5))
    def call(self, name: str, value: int) -> None:
        self._track(self.session.admit_call, name, {"field": value})

    @rule(name=st.sampled_from(NAMES))
    def reexpand(self, name: str) -> None:
        self._track(self.session.reexpand, name)

    @rule(name=st.sampled_from(NAMES))
    def prune(self, name: str) -> None:
        self._track(self.session.prune, name)

    @rule(i=st.integers(0, len(NAMES) - 1), version=st.integers(1, 2))
    def upgrade(self, i: int, version: int) -> None:
        self._track(self.session.register_tools, [_tool(NAMES[i], i, version)])

    @rule(phase=st.sampled_from([None, "read", "write"]))
    def change_phase(self, phase: str | None) -> None:
        self.phase = phase

    @rule(schema=st.sampled_from([60, 120, 300, 10_000]), high=st.sampled_from([1.0, 1.5, 2.0]))
    def change_budget(self, schema: int, high: float) -> None:
        self.budget = Budget(schema, 1_000_000, high_water=high)

    @rule()
    def plan(self) -> None:
        s = self.session
        states = {n: s.state(n) for n in NAMES}
        entering = self.phase is not None and self.phase != s.phase
        coming = [
            n
            for n in NAMES
            if states[n] is ToolState.RESIDENT
            or (
                states[n] is ToolState.EVICTED
                and (n == PINNED or (entering and n in PHASES.get(self.phase or "", ())))
            )
        ]
        wanted = sum(s.tool(n).tokens for n in coming)
        plan = s.plan_turn(self.budget, phase=self.phase)
        now = plan.tool_names
        ceiling = self.budget.schema_ceiling
        pinned = s.tool(PINNED).tokens if PINNED in now else 0
        assert plan.schema_tokens <= max(ceiling, pinned)
        removed = [n for n in NAMES if states[n] is ToolState.RESIDENT and n not in now]
        if removed:
            assert wanted > ceiling, (removed, wanted, ceiling)
        if self.listed is not None:
            kept = [n for n in self.listed if n in now and n not in self.left]
            assert list(now[: len(kept)]) == kept
        self.listed, self.left = now, set()

    @invariant()
    def no_ghost_tool(self) -> None:
        lines = self.session.tombstones()
        for name in NAMES:
            if self.session.arguments_resident(name) and self.session.state(name) is not ToolState.RESIDENT:
                assert any(line.startswith(f"{name}:") for line in lines)


TestStablePlans = StablePlans.TestCase
TestStablePlans.settings = settings(
    max_examples=examples(300),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
