"""A turn planned from the tools that can matter must plan exactly what reading every tool plans.

``PlanPart`` keeps the resident, tombstoned and archived tools, the registration order and the
residency order in a cache beside the state (``residency._runtime._plan_index``), caught up
from the event log, and decides from those few tools. Here one session does that and another
reads every tool on every turn (and takes no steady shortcut); random sequences of calls,
re-expansions, transitions, redefinitions, phases, budgets, reopens and checkpoints must leave
them with equal plans, equal states and equal reads. Before each plan, the incremental decision
is also compared with the full one on the same state.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from residency import Budget, MemoryStore, ResidencyError, Session, ToolState
from residency._core._planner import PLANNERS
from tests._tiers import examples

COUNT = 24
NAMES = [f"tool_{i}" for i in range(COUNT)]
LATE = [f"late_{i}" for i in range(4)]  # registered during the run
PINNED = ["tool_0", "tool_5", "late_0"]
PHASES = {"read": ["tool_1", "tool_2", "tool_7", "tool_9"], "write": ["tool_3", "tool_11", "late_1"]}


def _tool(name: str, size: int, version: int = 0) -> dict[str, Any]:
    props = {f"field_{k}": {"type": "integer", "minimum": 0} for k in range(size % 4 + 1)}
    return {
        "name": name,
        "description": f"Tool {name}, version {version}. " * (size % 5 + 1),
        "inputSchema": {"type": "object", "properties": props},
    }


TOOLS = [_tool(n, i) for i, n in enumerate(NAMES)]


class FixedClock:
    def now(self) -> float:
        return 0.0


class FullPlans(Session):
    """The same session reading every tool on every turn, with no steady shortcut."""

    _STEADY_PLANS = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plans.incremental = False


BUDGETS = st.builds(
    Budget,
    schema_tokens=st.sampled_from([0, 60, 150, 400, 10_000]),
    argument_tokens=st.sampled_from([8, 40, 1_000_000]),
    idle_turns=st.sampled_from([None, 1, 3]),
    planner=st.sampled_from(PLANNERS),
    high_water=st.sampled_from([1.0, 1.5, 3.0]),
    low_water=st.sampled_from([0.4, 1.0]),
)


def _open(kind: type[Session], store: MemoryStore, session_id: str | None = None) -> Session:
    return kind(
        store,
        session_id=session_id,
        resume=session_id is not None,
        clock=FixedClock(),
        pinned=PINNED,
        phases=PHASES,
    )


class IncrementalAgainstFull(RuleBasedStateMachine):
    """Both sessions get every operation; their plans, errors, states and reads must be equal."""

    def __init__(self) -> None:
        super().__init__()
        self.stores = (MemoryStore(), MemoryStore())
        self.fast = _open(Session, self.stores[0])
        self.full = _open(FullPlans, self.stores[1])
        for s in self.both:
            s.register_tools(TOOLS)
        self.budget = Budget(150, 40)
        self.phase: str | None = None
        self.late = 0

    @property
    def both(self) -> tuple[Session, Session]:
        return self.fast, self.full

    def _same(self, op: str, *args: Any, **kwargs: Any) -> None:
        outcomes = []
        for s in self.both:
            try:
                outcomes.append(("ok", getattr(s, op)(*args, **kwargs)))
            except ResidencyError as exc:
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1]

    @rule(budget=BUDGETS)
    def change_budget(self, budget: Budget) -> None:
        self.budget = budget

    @rule(phase=st.sampled_from([None, "read", "write"]))
    def change_phase(self, phase: str | None) -> None:
        self.phase = phase

    @rule(turns=st.integers(1, 3))
    def plan(self, turns: int) -> None:
        for _ in range(turns):
            # The decision from the index's few tools against the one over every tool, on the
            # same state, before the plan changes it.
            plans = self.fast._plans
            plans.incremental = False
            every_tool = plans._decide(self.budget, self.phase)
            plans.incremental = True
            assert plans._decide(self.budget, self.phase) == every_tool
            fast = self.fast.plan_turn(self.budget, phase=self.phase)
            full = self.full.plan_turn(self.budget, phase=self.phase)
            assert fast == full

    @rule(name=st.sampled_from(NAMES + LATE), value=st.integers(0, 10**6), implicit=st.booleans())
    def call(self, name: str, value: int, implicit: bool) -> None:
        self._same("admit_call", name, {"field_0": value}, reexpand_evicted=implicit)

    @rule(
        name=st.sampled_from(NAMES + LATE),
        op=st.sampled_from(["prune", "tombstone", "evict", "reexpand", "reexpand", "archive", "readmit"]),
    )
    def transition(self, name: str, op: str) -> None:
        self._same(op, name)

    @rule(data=st.data())
    def evict_some_arguments(self, data: st.DataObject) -> None:
        resident = [c.id for c in self.fast.resident_calls()]
        if resident:
            self._same("evict_arguments", data.draw(st.sampled_from(resident)))

    @rule(i=st.integers(0, COUNT - 1), version=st.integers(1, 3))
    def upgrade(self, i: int, version: int) -> None:
        self._same("register_tools", [_tool(NAMES[i], i + version, version)])

    @rule()
    def register_a_late_tool(self) -> None:
        if self.late < len(LATE):
            self._same("register_tools", [_tool(LATE[self.late], 30 + self.late)])
            self.late += 1

    @rule(checkpoint=st.booleans())
    def reopen(self, checkpoint: bool) -> None:
        """A reopened session (replayed, or restored from a checkpoint) starts with no cache."""
        if checkpoint:
            for s in self.both:
                s.checkpoint()
        self.fast = _open(Session, self.stores[0], self.fast.session_id)
        self.full = _open(FullPlans, self.stores[1], self.full.session_id)

    @invariant()
    def same_state_and_reads(self) -> None:
        assert self.fast.snapshot() == self.full.snapshot()
        assert self.fast.resident_tools() == self.full.resident_tools()
        assert self.fast.tombstones() == self.full.tombstones()


TestIncrementalAgainstFull = IncrementalAgainstFull.TestCase
TestIncrementalAgainstFull.settings = settings(
    max_examples=examples(200),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_turn_after_a_cold_plan_reads_only_the_tools_that_can_matter() -> None:
    tools = [_tool(f"t{i}", i) for i in range(400)]
    phases = {"p": ["t10", "t11"]}
    fast = Session(clock=FixedClock(), pinned=["t3"], phases=phases)
    full = FullPlans(clock=FixedClock(), pinned=["t3"], phases=phases)
    budget = Budget(schema_tokens=300, argument_tokens=1_000)
    for s in (fast, full):
        s.register_tools(tools)
        s.plan_turn(budget)  # cold: every tool is read, most leave
        s.reexpand("t200")
        s.record_call("t200", {"field_0": 1})
    index = fast._plans._index()
    deciding = index.deciding(fast._plans._tools.pinned, frozenset(phases["p"]))
    assert deciding == ["t3", "t10", "t11", "t200"]  # registration order
    plan = fast.plan_turn(budget, phase="p")
    assert plan == full.plan_turn(budget, phase="p")
    assert set(plan.tool_names) == {"t3", "t10", "t11", "t200"}
    # The index follows the plan's own changes.
    assert fast._plans._index().resident == set(full.tools(ToolState.RESIDENT))
    assert fast.resident_tools() == full.resident_tools()


def test_a_tool_archived_readmitted_and_reexpanded_shows_no_tombstone() -> None:
    phases = {"p": ["tool_1"]}
    fast = Session(clock=FixedClock(), phases=phases)
    full = FullPlans(clock=FixedClock(), phases=phases)
    budget = Budget(schema_tokens=10_000, argument_tokens=10_000)
    steps: list[tuple[str, tuple[Any, ...]]] = [
        ("register_tools", (TOOLS,)),
        ("plan_turn", (budget,)),
        ("record_call", ("tool_4", {"field_0": 1})),
        ("archive", ("tool_4",)),
        ("plan_turn", (budget,)),
        ("readmit", ("tool_4",)),
        ("plan_turn", (budget,)),
        ("reexpand", ("tool_4",)),
    ]
    for op, args in steps:
        assert getattr(fast, op)(*args) == getattr(full, op)(*args)
    assert fast.state("tool_4") is ToolState.RESIDENT and fast.arguments_resident("tool_4")
    plan = fast.plan_turn(budget)
    assert plan == full.plan_turn(budget)
    assert not any(line.startswith("tool_4:") for line in plan.tombstones)
