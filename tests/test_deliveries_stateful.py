"""Random sessions delivered by reference, against a plain model of what the transcript carries.

The model keeps, per delivery still in the transcript, the tools and the definition each
showed; after every plan by reference a resident tool is pinned or carried by one of them,
and every withheld tool with visible arguments is tombstoned (never a ghost). A reopen from the
journal gives the same session.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from residency import Budget, MemoryStore, Session, ToolState
from tests._tiers import examples

NAMES = ("pin", "a", "b", "c", "d")


def _tool(name: str, version: int) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}, version {version}",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }


class DeliveryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.session = Session(self.store, session_id="m", pinned=["pin"])
        self.versions = dict.fromkeys(NAMES, 0)
        self.session.register_tools([_tool(n, 0) for n in NAMES])
        # The model: live delivery id -> {tool: the version it showed}.
        self.live: dict[str, dict[str, int]] = {}
        self.planned = False
        self.plan()

    def carried(self, name: str) -> bool:
        return any(shown.get(name) == self.versions[name] for shown in self.live.values())

    @rule(names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3))
    def deliver(self, names: list[str]) -> None:
        s = self.session
        if any(s.state(n) is ToolState.ARCHIVED for n in names):
            return
        delivery = s.record_delivery(names)
        self.live[delivery.id] = {n: self.versions[n] for n in names}
        assert all(s.state(n) is ToolState.RESIDENT for n in names)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        delivery_id = data.draw(st.sampled_from(sorted(self.live)))
        self.session.drop_deliveries(delivery_id)
        del self.live[delivery_id]

    @rule(name=st.sampled_from(NAMES))
    def call(self, name: str) -> None:
        if self.session.state(name) is ToolState.RESIDENT:
            self.session.admit_call(name, {"n": 1}, via="call_tool")

    @precondition(lambda self: bool(self.session.resident_calls()))
    @rule(data=st.data())
    def evict_arguments(self, data: st.DataObject) -> None:
        call = data.draw(st.sampled_from(self.session.resident_calls()))
        self.session.evict_arguments(call.id)

    @rule(name=st.sampled_from(NAMES))
    def redefine(self, name: str) -> None:
        self.versions[name] += 1
        self.session.register_tools([_tool(n, self.versions[n]) for n in NAMES])

    @rule(argument_tokens=st.sampled_from([0, 5, 10_000]))
    def plan(self, argument_tokens: int = 10_000) -> None:
        self.session.plan_turn(Budget(schema_tokens=1, argument_tokens=argument_tokens), by_reference=True)
        self.planned = True

    @rule()
    def reopen(self) -> None:
        reopened = Session(self.store, session_id="m", pinned=["pin"])
        assert reopened.snapshot() == self.session.snapshot()
        self.session = reopened

    @invariant()
    def agrees_with_the_model(self) -> None:
        s = self.session
        s.check_invariants()
        assert {d.id for d in s.deliveries()} == set(self.live)
        for name in NAMES:
            assert s.carried(name) == self.carried(name), name
            if s.state(name) is not ToolState.RESIDENT and s.arguments_resident(name):
                assert s.state(name) in (ToolState.TOMBSTONED, ToolState.ARCHIVED)

    @invariant()
    def a_plan_by_reference_leaves_only_pinned_or_carried_tools_resident(self) -> None:
        if not self.planned:
            return
        self.planned = False
        s = self.session
        for name in s.resident_tools():
            assert name == "pin" or self.carried(name), name


TestDeliveryMachine = DeliveryMachine.TestCase
TestDeliveryMachine.settings = settings(
    max_examples=examples(100),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
