"""Model-based test: random sessions against a plain reference model of the tool lifecycle."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from residency import (
    Budget,
    GhostToolError,
    IllegalTransition,
    MemoryStore,
    Session,
    ToolArchived,
    ToolNotResident,
    ToolState,
)
from tests._tiers import examples

R, T, E, A = ToolState.RESIDENT, ToolState.TOMBSTONED, ToolState.EVICTED, ToolState.ARCHIVED
NAMES = [f"tool_{i}" for i in range(6)]
PINNED = "tool_0"


def _tool(name: str, i: int) -> dict[str, Any]:
    props = {f"field_{k}": {"type": "integer", "minimum": 0} for k in range(i + 1)}
    tool: dict[str, Any] = {
        "name": name,
        "description": f"Tool number {i}. " * (i + 1),
        "inputSchema": {"type": "object", "properties": props, "required": ["field_0"]},
    }
    if i % 2:
        tool["annotations"] = {"readOnlyHint": True}
    return tool


TOOLS = [_tool(n, i) for i, n in enumerate(NAMES)]


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.session = Session(self.store, pinned=[PINNED])
        self.session.register_tools(TOOLS)
        self.states: dict[str, ToolState] = dict.fromkeys(NAMES, R)
        self.resident_calls: dict[str, str] = {}  # call id -> tool
        self.last_plan: Any = None
        self.last_budget: Budget | None = None

    def args_resident(self, name: str) -> bool:
        return name in self.resident_calls.values()

    @rule(name=st.sampled_from(NAMES), value=st.integers(0, 5))
    def call(self, name: str, value: int) -> None:
        args = {"field_0": value}
        if self.states[name] is R:
            self.session.authorize_call(name, args)
            record = self.session.record_call(name, args)
            self.resident_calls[record.id] = name
        else:
            expected = ToolArchived if self.states[name] is A else ToolNotResident
            with pytest.raises(expected):
                self.session.authorize_call(name, args)
            with pytest.raises(expected):
                self.session.record_call(name, args)

    @precondition(lambda self: bool(self.resident_calls))
    @rule(data=st.data())
    def evict_arguments(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.resident_calls)))
        self.session.evict_arguments(call_id)
        del self.resident_calls[call_id]

    def _expect(self, name: str, trigger: str, dest: ToolState | None, ghost: bool = False) -> None:
        before = self.session.snapshot()
        if dest is None:
            with pytest.raises(GhostToolError if ghost else IllegalTransition):
                getattr(self.session, trigger)(name)
            assert self.session.snapshot() == before
        else:
            getattr(self.session, trigger)(name)
            self.states[name] = dest

    @rule(name=st.sampled_from(NAMES))
    def prune(self, name: str) -> None:
        dest = (T if self.args_resident(name) else E) if self.states[name] is R else None
        self._expect(name, "prune", dest)

    @rule(name=st.sampled_from(NAMES))
    def evict(self, name: str) -> None:
        movable = self.states[name] in (R, T)
        ghost = movable and self.args_resident(name)
        self._expect(name, "evict", E if movable and not ghost else None, ghost=ghost)

    @rule(name=st.sampled_from(NAMES))
    def reexpand(self, name: str) -> None:
        self._expect(name, "reexpand", None if self.states[name] is A else R)

    @rule(name=st.sampled_from(NAMES))
    def archive(self, name: str) -> None:
        self._expect(name, "archive", None if self.states[name] is A else A)

    @rule(name=st.sampled_from(NAMES))
    def readmit(self, name: str) -> None:
        dest = (T if self.args_resident(name) else E) if self.states[name] is A else None
        self._expect(name, "readmit", dest)

    @rule(schema=st.integers(0, 400), arguments=st.integers(0, 60))
    def plan(self, schema: int, arguments: int) -> None:
        before = dict(self.states)
        budget = Budget(schema_tokens=schema, argument_tokens=arguments)
        plan = self.session.plan_turn(budget)
        for call_id in plan.evictions:
            del self.resident_calls[call_id]
        for name in NAMES:
            now = self.session.state(name)
            if before[name] is R and now is not R:
                assert now is (T if self.args_resident(name) else E)
            if before[name] is A:
                assert now is A
            if name == PINNED and before[name] in (R, E):
                assert now is R
            self.states[name] = now
        self.last_plan, self.last_budget = plan, budget

    @invariant()
    def states_match_the_model(self) -> None:
        assert {n: self.session.state(n) for n in NAMES} == self.states
        assert {c.id for c in self.session.resident_calls()} == set(self.resident_calls)

    @invariant()
    def no_ghost_tool(self) -> None:
        for name in NAMES:
            if self.session.arguments_resident(name):
                assert self.session.state(name) is not E

    @invariant()
    def every_withheld_tool_with_resident_arguments_has_a_tombstone(self) -> None:
        lines = self.session.tombstones()
        for name in NAMES:
            state, args = self.session.state(name), self.session.arguments_resident(name)
            has_line = any(line.startswith(f"{name}:") for line in lines)
            if state is not R and args:
                assert has_line
            assert has_line == (state is T or (state is A and args))

    @invariant()
    def withheld_tools_are_never_authorized(self) -> None:
        for name in NAMES:
            if self.states[name] is not R:
                with pytest.raises((ToolNotResident, ToolArchived)):
                    self.session.authorize_call(name, {"field_0": 1})

    @invariant()
    def plans_respect_both_budgets(self) -> None:
        plan, budget = self.last_plan, self.last_budget
        if plan is None or budget is None:
            return
        # The default (stable) planner lets both run up to the budget's margin before it cuts.
        assert plan.argument_tokens <= budget.argument_ceiling
        pinned_tokens = self.session.tool(PINNED).tokens if PINNED in plan.tool_names else 0
        assert plan.schema_tokens <= max(budget.schema_ceiling, pinned_tokens)

    def teardown(self) -> None:
        # The journal alone reproduces the session, and replaying twice equals replaying once.
        once = Session(self.store, session_id=self.session.session_id, pinned=[PINNED]).snapshot()
        assert once == self.session.snapshot()
        assert Session(self.store, session_id=self.session.session_id, pinned=[PINNED]).snapshot() == once


TestSession = SessionMachine.TestCase
TestSession.settings = settings(
    max_examples=examples(500),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
