"""Session tool operations one at a time, and what bad input gets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from residency import (
    ArgumentsInvalid,
    Budget,
    EventKind,
    GhostToolError,
    IllegalTransition,
    InvalidInput,
    JournalEntry,
    MemoryStore,
    NotFound,
    SchemaError,
    Session,
    ToolArchived,
    ToolNotResident,
    ToolState,
    is_mutation,
)

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read",
        "annotations": {"readOnlyHint": True},
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "write",
        "inputSchema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            },
            "required": ["path"],
        },
    },
]


@pytest.fixture
def s() -> Session:
    session = Session()
    session.register_tools(TOOLS)
    return session


def test_tools_without_annotations_are_mutations() -> None:
    assert is_mutation({"name": "x"})
    assert not is_mutation({"name": "x", "annotations": {"readOnlyHint": True}})
    assert is_mutation({"name": "x", "annotations": {"readOnlyHint": True, "destructiveHint": True}})
    assert is_mutation({"name": "x", "annotations": {"title": "X"}})


def test_registered_tools_start_resident_and_registering_again_changes_nothing(s: Session) -> None:
    assert s.tools() == ["read", "write"]
    assert s.state("write") is ToolState.RESIDENT
    journal = len(s.store.load(s.session_id))
    assert s.register_tools(TOOLS) == []
    assert len(s.store.load(s.session_id)) == journal


@pytest.mark.parametrize(
    "bad",
    [
        [{"description": "no name"}],
        [{"name": ""}],
        [{"name": "x", "inputSchema": "not an object"}],
        ["not a tool"],
        [{"name": "x"}, {"name": "x"}],
    ],
)
def test_malformed_tool_definitions_are_refused_and_nothing_is_registered(s: Session, bad: list[Any]) -> None:
    before = s.snapshot()
    with pytest.raises(InvalidInput):
        s.register_tools([{"name": "fine"}, *bad])
    assert s.snapshot() == before


def test_an_invalid_json_schema_is_a_schema_error(s: Session) -> None:
    with pytest.raises(SchemaError) as info:
        s.register_tools(
            [{"name": "x", "inputSchema": {"type": "object", "properties": {"a": {"type": 12}}}}]
        )
    assert "inputSchema" in info.value.where


def test_unknown_names_and_ids_are_not_found(s: Session) -> None:
    for action in (
        lambda: s.state("nope"),
        lambda: s.prune("nope"),
        lambda: s.reexpand("nope"),
        lambda: s.authorize_call("nope", {}),
        lambda: s.evict_arguments("c999"),
    ):
        with pytest.raises(NotFound):
            action()


def test_pruning_a_called_mutation_tool_leaves_a_tombstone(s: Session) -> None:
    s.record_call("write", {"path": "a"})
    assert s.prune("write") is ToolState.TOMBSTONED
    assert s.tombstones() == [s.tombstone_text("write")]
    assert "mutation tool" in s.tombstone_text("write")


def test_pruning_an_uncalled_tool_evicts_it_silently(s: Session) -> None:
    assert s.prune("read") is ToolState.EVICTED
    assert s.tombstones() == []


def test_explicit_eviction_with_resident_arguments_is_a_ghost_error_and_changes_nothing(s: Session) -> None:
    s.record_call("write", {"path": "a"})
    before = s.snapshot()
    with pytest.raises(GhostToolError) as info:
        s.evict("write")
    assert info.value.state == "resident" and info.value.trigger == "evict"
    assert s.snapshot() == before


def test_recording_a_call_to_a_withheld_tool_is_refused(s: Session) -> None:
    s.prune("read")
    with pytest.raises(ToolNotResident):
        s.record_call("read", {"path": "a"})
    assert not s.arguments_resident("read")


def test_invalid_arguments_name_the_field_and_the_refusal_is_logged(s: Session) -> None:
    with pytest.raises(ArgumentsInvalid) as info:
        s.authorize_call("write", {"path": "a", "lines": [1, 0]})
    assert info.value.path == "$.lines[1]"
    assert s.events(EventKind.REFUSED)[-1].subject == "write"
    with pytest.raises(ArgumentsInvalid) as missing:
        s.authorize_call("write", {})
    assert missing.value.path == "$.path"


def test_non_json_arguments_are_invalid_input(s: Session) -> None:
    with pytest.raises(InvalidInput):
        s.record_call("write", {"path": object()})
    assert s.resident_calls() == []


def test_an_archived_tool_is_refused_and_not_reexpandable_until_readmitted(s: Session) -> None:
    s.archive("write")
    with pytest.raises(ToolArchived):
        s.authorize_call("write", {"path": "a"})
    with pytest.raises(IllegalTransition):
        s.reexpand("write")
    assert s.readmit("write") is ToolState.EVICTED
    assert s.reexpand("write")["name"] == "write"


def test_reexpand_returns_a_private_copy_of_the_full_definition(s: Session) -> None:
    definition = s.reexpand("write")
    definition["inputSchema"]["required"].append("mutated")
    assert s.tool("write").definition["inputSchema"]["required"] == ["path"]


def test_the_argument_budget_evicts_oldest_first_and_cascades_tombstones(s: Session) -> None:
    first = s.record_call("write", {"path": "a" * 40})
    s.prune("write")
    second = s.record_call("read", {"path": "b"})
    plan = s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=second.argument_tokens))
    assert plan.evictions == (first.id,)
    assert s.state("write") is ToolState.EVICTED  # cascade: its tombstone is no longer needed
    assert plan.tombstones == ()
    assert [c.id for c in s.resident_calls()] == [second.id]


def test_bad_budgets_and_phases_are_invalid_input(s: Session) -> None:
    with pytest.raises(InvalidInput):
        Budget(schema_tokens=-1, argument_tokens=0)
    with pytest.raises(InvalidInput):
        Budget(schema_tokens=1.5, argument_tokens=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        s.plan_turn(Budget(schema_tokens=1, argument_tokens=1), phase="nope")


def test_phase_tools_are_brought_back_and_ranked_first() -> None:
    s = Session(phases={"edit": ["write"]})
    s.register_tools(TOOLS)
    s.prune("write")
    budget = Budget(schema_tokens=s.tool("write").tokens, argument_tokens=0)
    plan = s.plan_turn(budget, phase="edit")
    assert plan.tool_names == ("write",)
    assert s.state("read") is ToolState.EVICTED


def test_greedy_a_re_expanded_tool_outranks_the_phase_until_the_agent_had_a_turn_to_call_it() -> None:
    s = Session(phases={"edit": ["write"]})
    s.register_tools(TOOLS)
    budget = Budget.greedy(schema_tokens=s.tool("write").tokens, argument_tokens=0)
    s.plan_turn(budget, phase="edit")
    assert s.state("read") is ToolState.EVICTED
    s.reexpand("read")
    plan = s.plan_turn(budget, phase="edit")
    assert plan.tool_names == ("read",)  # asked for in the turn just ended: kept over the phase
    plan = s.plan_turn(budget, phase="edit")
    assert plan.tool_names == ("write",)  # not called: the phase wins again


def test_the_revision_moves_when_what_is_shown_may_change_and_only_then() -> None:
    s = Session()
    s.register_tools(TOOLS)
    budget = Budget(schema_tokens=10_000, argument_tokens=10_000)
    s.plan_turn(budget)
    quiet = s.revision
    record = s.admit_call("write", {"path": "x"})
    with pytest.raises(ArgumentsInvalid):
        s.authorize_call("write", {"path": 1})
    s.plan_turn(budget)
    assert s.revision == quiet  # a call, a refusal and a turn that changes nothing
    s.prune("write")
    assert s.revision > quiet
    moved = s.revision
    s.evict_arguments(record.id)
    assert s.revision > moved


def test_turn_plans_are_journaled_relaxed_and_calls_durably() -> None:
    class Recording(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[tuple[str, list[str]]] = []

        def append(
            self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
        ) -> int:
            self.writes.append(("durable", [e.op for e in entries]))
            return super().append(session_id, entries, after=after)

        def append_relaxed(
            self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
        ) -> int:
            self.writes.append(("relaxed", [e.op for e in entries]))
            return MemoryStore.append(self, session_id, entries, after=after)

    store = Recording()
    s = Session(store)
    s.register_tools(TOOLS)
    s.admit_call("write", {"path": "x"})
    s.plan_turn(Budget(schema_tokens=0, argument_tokens=0))  # prunes and evicts: a full plan
    s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=10_000))
    relaxed = [ops for how, ops in store.writes if how == "relaxed"]
    durable = [ops for how, ops in store.writes if how == "durable"]
    assert relaxed and all(ops[0] == "turn" for ops in relaxed)
    assert any("evict_arguments" in ops for ops in relaxed)
    assert ["register"] in durable and ["call"] in durable
    assert all("call" not in ops for ops in relaxed)


def test_pinned_tools_stay_even_over_budget_and_the_excess_is_an_event() -> None:
    s = Session(pinned=["write"])
    s.register_tools(TOOLS)
    plan = s.plan_turn(Budget(schema_tokens=0, argument_tokens=0))
    assert plan.tool_names == ("write",)
    assert [e.kind for e in plan.events].count(EventKind.BUDGET_EXCEEDED) == 1


def test_a_reopened_session_replays_its_journal() -> None:
    store = MemoryStore()
    s = Session(store, session_id="a")
    s.register_tools(TOOLS)
    s.record_call("write", {"path": "x"})
    s.plan_turn(Budget(schema_tokens=0, argument_tokens=10_000))
    assert Session(store, session_id="a").snapshot() == s.snapshot()
    assert Session(store, session_id="b").tools() == []


def test_plan_tools_are_the_shown_form() -> None:
    s = Session(minify=lambda tool: {"name": tool["name"], "inputSchema": tool["inputSchema"]})
    s.register_tools(TOOLS)
    plan = s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=0, idle_turns=None))
    assert plan.tool_names == ("read", "write")
    assert all(set(t) == {"name", "inputSchema"} for t in plan.tools)


def test_tools_nobody_asked_for_leave_even_when_the_budget_has_room(s: Session) -> None:
    roomy = Budget(schema_tokens=10_000, argument_tokens=10_000, idle_turns=2)
    plan = s.plan_turn(roomy)  # turn 1: both were registered at turn 0, both warm
    assert plan.tool_names == ("read", "write")
    s.record_call("read", {"path": "a"})
    s.plan_turn(roomy)  # turn 2
    plan = s.plan_turn(roomy)  # turn 3: write idle for 3 turns, read for 2
    assert plan.tool_names == ("read",)
    assert s.state("write") is ToolState.EVICTED
    s.plan_turn(roomy)  # turn 4: read idle for 3 turns, its arguments still visible
    assert s.state("read") is ToolState.TOMBSTONED


def test_a_reexpanded_tool_is_warm_for_the_next_plan(s: Session) -> None:
    s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=0, idle_turns=0))
    assert s.state("write") is ToolState.EVICTED
    s.reexpand("write")
    plan = s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=0))
    assert plan.tool_names == ("write",)


def test_deeply_nested_arguments_are_refused_without_exhausting_the_stack(s: Session) -> None:
    hostile: dict[str, Any] = {"path": "a"}
    inner = hostile
    for _ in range(100_000):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(ArgumentsInvalid) as info:
        s.authorize_call("write", hostile)
    assert info.value.path == "$"
    with pytest.raises(InvalidInput):
        s.record_call("write", hostile)
    assert s.resident_calls() == []
    s.authorize_call("write", {"path": "a", "lines": [1, 2]})  # still serving


# -- the stable planner, through the session ----------------------------------------------------


def _tools(*names: str, words: int = 10) -> list[dict[str, Any]]:
    return [
        {
            "name": n,
            "description": " ".join([n] * words),
            "annotations": {"readOnlyHint": True},
            "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}},
        }
        for n in names
    ]


def test_a_stable_plan_lists_tools_in_the_order_they_became_resident() -> None:
    store = MemoryStore()
    s = Session(store, session_id="order")
    s.register_tools(_tools("a", "b", "c"))
    roomy = Budget(10_000, 10_000)
    assert s.plan_turn(roomy).tool_names == ("a", "b", "c")
    s.prune("a")
    assert s.plan_turn(roomy).tool_names == ("b", "c")
    s.reexpand("a")
    s.register_tools(_tools("d"))
    plan = s.plan_turn(roomy)
    assert plan.tool_names == ("b", "c", "a", "d")  # arrivals at the end, the others in place
    assert s.resident_tools() == ["b", "c", "a", "d"]
    s.reexpand("b")  # already resident: it keeps its place
    assert s.plan_turn(roomy).tool_names == ("b", "c", "a", "d")
    # The order is read from the journal: a reopened session lists the same.
    assert Session(store, session_id="order").resident_tools() == ["b", "c", "a", "d"]
    # The greedy planner lists in registration order, as it always did.
    assert s.plan_turn(Budget.greedy(10_000, 10_000)).tool_names == ("a", "b", "c", "d")


def test_entering_a_phase_adds_all_its_tools_in_one_plan_and_then_the_list_holds() -> None:
    s = Session(phases={"fix": ["f1", "f2", "f3"]})
    s.register_tools(_tools("a", "f1", "f2", "f3", "z"))
    each = max(s.tool(n).tokens for n in s.tools())
    budget = Budget(each * 3, 10_000)
    s.admit_call("a", {"x": 1})
    first = s.plan_turn(budget)  # five tools are past 1.5x three: only the called one stays
    assert first.tool_names == ("a",)
    entering = s.plan_turn(budget, phase="fix")
    assert entering.tool_names == ("a", "f1", "f2", "f3")
    assert [e.kind for e in entering.events] == [EventKind.REEXPANDED] * 3
    lists = {s.plan_turn(budget, phase="fix").tool_names for _ in range(20)}
    assert lists == {entering.tool_names}


def test_no_tool_leaves_for_being_idle_unless_idle_turns_is_set(s: Session) -> None:
    s.record_call("write", {"path": "a"})
    roomy = Budget(10_000, 10_000)
    plans = [s.plan_turn(roomy) for _ in range(50)]
    assert {p.tool_names for p in plans} == {("read", "write")}
    assert all(p.events == () for p in plans)
    s.plan_turn(Budget(10_000, 10_000, idle_turns=3))
    assert s.state("write") is ToolState.TOMBSTONED and s.state("read") is ToolState.EVICTED


def test_a_plan_gives_the_tombstones_it_created_for_the_host_to_show_once() -> None:
    s = Session()
    s.register_tools(_tools("old", "a", "b", "c", "d"))
    each = max(s.tool(n).tokens for n in s.tools())
    budget = Budget(each * 2, 10_000)
    s.admit_call("old", {"x": 1})
    assert s.plan_turn(budget).tool_names == ("old",)
    for name in ("a", "b"):
        s.reexpand(name)
        s.admit_call(name, {"x": 2})
        plan = s.plan_turn(budget)
        assert plan.new_tombstones == ()
    s.reexpand("c")  # four shown: past 1.5x two, cut down to two
    s.admit_call("c", {"x": 3})
    plan = s.plan_turn(budget)
    assert plan.tool_names == ("b", "c")
    assert plan.new_tombstones == (s.tombstone_text("a"), s.tombstone_text("old"))
    assert plan.tombstones == plan.new_tombstones
    later = s.plan_turn(budget)
    assert later.new_tombstones == () and later.tombstones == plan.tombstones
