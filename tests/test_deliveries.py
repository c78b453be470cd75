"""Schemas delivered in results (``Session.record_delivery``), plans by reference, and ``via``."""

from __future__ import annotations

from typing import Any

import pytest

from residency import (
    ArgumentsInvalid,
    Budget,
    DeliveryRecord,
    IllegalTransition,
    InvalidInput,
    JournalEntry,
    MemoryStore,
    NotFound,
    Session,
    SQLiteStore,
    ToolNotResident,
    ToolState,
)
from residency._runtime._deliveries import DELIVERED, UNCARRIED

BUDGET = Budget(schema_tokens=10_000, argument_tokens=10_000)
TINY = Budget(schema_tokens=1, argument_tokens=10_000)


def _tool(name: str, description: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "description": description or f"{name} things",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }


TOOLS = [_tool(n) for n in ("pin", "a", "b", "c")]


def _session(store: Any = None, **kwargs: Any) -> Session:
    s = Session(store, session_id="s", pinned=["pin"], **kwargs)
    s.register_tools(TOOLS)
    s.plan_turn(BUDGET, by_reference=True)  # the list by reference: its pinned tools
    return s


def test_a_plan_by_reference_withholds_every_tool_but_the_pinned_ones() -> None:
    s = _session()
    assert s.resident_tools() == ["pin"]
    assert {n: s.state(n) for n in "abc"} == dict.fromkeys("abc", ToolState.EVICTED)
    s.register_tools([*TOOLS, _tool("d")])  # a tool registered since: the model was never shown it
    assert s.state("d") is ToolState.RESIDENT
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("d") is ToolState.EVICTED


def test_a_delivery_makes_its_tools_resident_and_names_its_id() -> None:
    s = _session()
    delivery = s.record_delivery(["a", "b", "a"])
    assert isinstance(delivery, DeliveryRecord)
    assert (delivery.id, delivery.tools) == ("r1", ("a", "b"))
    assert delivery.hashes == (s.tool("a").hash, s.tool("b").hash)
    assert s.state("a") is s.state("b") is ToolState.RESIDENT
    assert s.carried("a") and not s.carried("c")
    assert s.deliveries() == [delivery] and s.delivery("r1") == delivery
    assert [e.detail for e in s.events() if e.subject == "a"][-1] == DELIVERED
    s.plan_turn(BUDGET, by_reference=True)
    assert s.resident_tools() == ["pin", "a", "b"]


def test_a_carried_tool_stays_whatever_the_schema_budget() -> None:
    s = _session()
    s.record_delivery(["a", "b", "c"])
    for _ in range(3):
        plan = s.plan_turn(TINY, by_reference=True)
        assert plan.tool_names == ("pin", "a", "b", "c")
    # By list the same budget cuts them: the list carries tools there, not results.
    assert s.plan_turn(TINY).tool_names == ("pin",)


def test_idle_turns_do_not_demote_a_carried_tool() -> None:
    s = _session()
    s.record_delivery(["a"])
    idle = Budget(schema_tokens=10_000, argument_tokens=10_000, idle_turns=1)
    for _ in range(4):
        s.plan_turn(idle, by_reference=True)
    assert s.state("a") is ToolState.RESIDENT


def test_a_dropped_result_withholds_its_tools_tombstoning_those_with_visible_arguments() -> None:
    s = _session()
    delivery = s.record_delivery(["a", "b"])
    s.admit_call("a", {"n": 1})  # a's arguments are in the transcript now
    s.drop_deliveries(delivery.id)
    assert s.state("a") is ToolState.RESIDENT  # nothing leaves before the plan
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("a") is ToolState.TOMBSTONED
    assert s.state("b") is ToolState.EVICTED
    assert s.tombstones() == [s.tombstone_text("a")]
    assert s.deliveries() == []
    s.drop_deliveries(delivery.id)  # again: nothing changes
    assert s.delivery(delivery.id) == delivery


def test_withholding_at_once_refuses_a_call_rebuilt_after_its_schema_left() -> None:
    store = MemoryStore()
    s = _session(store)
    first = s.record_delivery(["a", "b"])
    s.record_delivery(["b"])
    s.admit_call("a", {"n": 1})
    s.drop_deliveries(first.id)
    before = len(store.load("s"))
    assert s.withhold_uncarried() == ["a"]  # b: another result still shows it; pin: pinned
    assert (s.state("a"), s.state("b"), s.state("pin")) == (
        ToolState.TOMBSTONED,
        ToolState.RESIDENT,
        ToolState.RESIDENT,
    )
    written = store.load("s")[before:]
    assert [(e.op, e.data["tool"], e.data["reason"]) for e in written] == [("transition", "a", UNCARRIED)]
    with pytest.raises(ToolNotResident):
        s.admit_call("a", {"n": 2})  # the ghost call: refused with its tombstone
    after = len(store.load("s"))
    assert s.withhold_uncarried() == []  # nothing left to withhold: nothing journaled
    assert len(store.load("s")) == after


def test_a_tool_carried_by_another_result_stays_when_one_is_dropped() -> None:
    s = _session()
    first = s.record_delivery(["a", "b"])
    s.record_delivery(["a"])
    s.drop_deliveries(first.id)
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("a") is ToolState.RESIDENT
    assert s.state("b") is ToolState.EVICTED


def test_arguments_evicted_first_let_a_dropped_tool_leave_without_a_tombstone() -> None:
    s = _session()
    delivery = s.record_delivery(["a"])
    call = s.admit_call("a", {"n": 1})
    s.evict_arguments(call.id)
    s.drop_deliveries(delivery.id)
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("a") is ToolState.EVICTED
    assert s.tombstones() == []


def test_a_pinned_tool_stays_when_its_result_is_dropped() -> None:
    s = _session()
    delivery = s.record_delivery(["pin", "a"])
    s.drop_deliveries(delivery.id)
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("pin") is ToolState.RESIDENT and s.state("a") is ToolState.EVICTED


def test_a_redefined_tool_is_carried_by_no_earlier_result() -> None:
    s = _session()
    s.record_delivery(["a", "b"])
    s.register_tools([TOOLS[0], _tool("a", "changed upstream"), *TOOLS[2:]])
    assert not s.carried("a") and s.carried("b")
    s.plan_turn(BUDGET, by_reference=True)
    assert s.state("a") is ToolState.EVICTED  # the model's copy is stale
    assert s.state("b") is ToolState.RESIDENT
    s.record_delivery(["a"])  # a result showing the new definition carries it
    assert s.carried("a")
    s.check_invariants()


def test_a_refused_delivery_changes_nothing() -> None:
    s = _session()
    s.record_delivery(["c"])
    s.archive("c", "abandoned chain")
    before, seq = s.snapshot(), s.seq
    with pytest.raises(IllegalTransition):
        s.record_delivery(["a", "c"])
    with pytest.raises(NotFound):
        s.record_delivery(["a", "nope"])
    for bad in ("a", [], [1], None):
        with pytest.raises(InvalidInput):
            s.record_delivery(bad)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        s.drop_deliveries("r1", "r99")
    assert (s.snapshot(), s.seq) == (before, seq)
    assert s.state("a") is ToolState.EVICTED


def test_deliveries_change_nothing_for_a_plan_by_list() -> None:
    s = Session(pinned=["pin"])
    s.register_tools(TOOLS)
    delivery = s.record_delivery(["a"])
    s.drop_deliveries(delivery.id)
    assert s.plan_turn(BUDGET).tool_names == ("pin", "a", "b", "c")


def test_by_reference_must_be_a_bool() -> None:
    s = _session()
    with pytest.raises(InvalidInput) as raised:
        s.plan_turn(BUDGET, by_reference="yes")  # type: ignore[arg-type]
    assert raised.value.where == "by_reference"


def test_a_steady_plan_by_reference_still_sees_a_dropped_result() -> None:
    s = _session()
    delivery = s.record_delivery(["a"])
    assert s.plan_turn(BUDGET, by_reference=True).steady
    assert s.plan_turn(BUDGET, by_reference=True).steady  # the O(1) shortcut
    s.drop_deliveries(delivery.id)
    assert s.plan_turn(BUDGET, by_reference=True).tool_names == ("pin",)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_deliveries_and_via_survive_a_reopen_and_a_checkpoint(kind: str, tmp_path: Any) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    s = _session(store)
    kept = s.record_delivery(["a"])
    dropped = s.record_delivery(["b"])
    call = s.admit_call("a", {"n": 1}, via="call_tool")
    s.drop_deliveries(dropped.id)
    s.plan_turn(BUDGET, by_reference=True)
    replayed = Session(store, session_id="s")
    assert replayed.snapshot() == s.snapshot()
    assert replayed.call(call.id).via == "call_tool"
    assert replayed.deliveries() == [kept] and replayed.carried("a")
    if kind == "sqlite":
        s.checkpoint()
        restored = Session(store, session_id="s")
        assert restored.restored_from == s.seq
        assert restored.snapshot() == s.snapshot()
        assert restored.deliveries() == [kept]
        restored.check_invariants()


def test_via_is_journaled_only_for_a_call_that_came_through_a_proxy() -> None:
    store = MemoryStore()
    s = Session(store, session_id="v")
    s.register_tools(TOOLS)
    direct = s.admit_call("a", {"n": 1})
    proxied = s.admit_call("b", {"n": 2}, via="call_tool")
    recorded = s.record_call("c", {"n": 3}, via="call_tool")
    calls = [e.data for e in store.load("v") if e.op == "call"]
    assert "via" not in calls[0] and calls[1]["via"] == calls[2]["via"] == "call_tool"
    assert (direct.via, proxied.via, recorded.via) == ("", "call_tool", "call_tool")
    assert s.snapshot()["calls"][proxied.id]["via"] == "call_tool"
    with pytest.raises(InvalidInput) as raised:
        s.admit_call("a", {"n": 1}, via=7)  # type: ignore[arg-type]
    assert raised.value.where == "via"


def test_a_refusal_through_a_proxy_journals_its_via() -> None:
    store = MemoryStore()
    s = Session(store, session_id="v")
    s.register_tools(TOOLS)
    with pytest.raises(ArgumentsInvalid):
        s.admit_call("a", {"n": "one"}, via="call_tool")
    (refusal,) = [e.data for e in store.load("v") if e.op == "refuse"]
    assert refusal["via"] == "call_tool"


def test_a_journal_written_before_via_and_deliveries_replays() -> None:
    store = MemoryStore()
    old = [
        JournalEntry("register", {"tools": TOOLS}, 1.0),
        JournalEntry("call", {"id": "c1", "tool": "a", "arguments": {"n": 1}, "tokens": 3}, 2.0),
        JournalEntry("turn", {"turn": 1, "phase": None}, 3.0),
    ]
    store.append("old", old)
    s = Session(store, session_id="old")
    assert s.call("c1").via == ""
    assert s.deliveries() == []
    s.check_invariants()


def test_show_schema_gives_the_full_schema_in_an_invalid_arguments_refusal() -> None:
    s = Session()
    s.register_tools(TOOLS)
    with pytest.raises(ArgumentsInvalid) as plain:
        s.admit_call("a", {"n": "one"})
    assert '"required"' not in str(plain.value)
    with pytest.raises(ArgumentsInvalid) as shown:
        s.admit_call("a", {"n": "one"}, show_schema=True)
    assert 'Its full input schema: {"type":"object"' in str(shown.value)
