"""The session state as a pure value: the table of operations, replay and checkpoints, no store.

``SessionState.apply`` is the only way a state changes, so a journal (a list of entries) can be
replayed, compared and checkpointed here without a store, a clock or a session.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import residency
from residency import Budget, ChainCollision, JournalEntry, MemoryStore, Session, StoreError
from residency._core._invariants import state_problem
from residency._core._lifecycle import SpanState, ToolState
from residency._core._state import OPERATIONS, SessionState
from residency._core._state_format import FIELDS, state_data, state_from_data
from residency._core._tools import JSONObject, ToolSpec, definition_hash, is_mutation
from residency._store._checkpoint import decode_checkpoint, encode_checkpoint

RUNTIME = Path(residency.__file__).parent / "_runtime"


def _spec(tool: JSONObject) -> ToolSpec:
    """A pure definition -> spec function (shown as registered, one token a tool)."""
    return ToolSpec(tool["name"], tool, definition_hash(tool), is_mutation(tool), tool, 1)


def _restore(
    name: str, definition: JSONObject, digest: str, shown: JSONObject | None, tokens: int
) -> ToolSpec:
    return _spec(definition)


def _tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} things",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }


def _written_operations() -> set[str]:
    """Every journal operation name the runtime's source writes: ``("op", {...})`` items."""
    found: set[str] = set()
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Tuple)
                and len(node.elts) == 2
                and isinstance(node.elts[0], ast.Constant)
                and isinstance(node.elts[0].value, str)
                and isinstance(node.elts[1], ast.Dict | ast.Name)
            ):
                found.add(node.elts[0].value)
    return found


def test_the_table_holds_every_operation_the_runtime_writes() -> None:
    written = _written_operations()
    assert len(written) > 10  # the scan sees the runtime's items
    assert written <= set(OPERATIONS), f"no reducer for {sorted(written - set(OPERATIONS))}"


def _scenario() -> list[JournalEntry]:
    """A session that writes every operation of the table; its journal."""
    store = MemoryStore()
    s = Session(store, session_id="all", revoke=lambda ref: ref == "good", chain_policy="warn", pinned=["p"])
    s.register_tools([_tool(n) for n in ("p", "a", "b", "c", "d", "e")])
    s.register_tools([{**_tool("e"), "description": "changed"}])
    call = s.admit_call("a", {"n": 1})
    s.admit_call("b", {"n": 2})
    with pytest.raises(residency.ArgumentsInvalid):
        s.authorize_call("a", {"n": "not a number"})  # refuse
    s.evict_arguments(call.id)
    s.prune("c")  # transition
    delivered = s.record_delivery(["c", "d"])  # deliver (c is re-expanded: a transition)
    s.admit_call("c", {"n": 6}, via="call_tool")
    s.drop_deliveries(delivered.id)
    s.plan_turn(Budget(schema_tokens=1, argument_tokens=1_000))  # turn, budget, transitions
    s.reexpand("a")
    s.reexpand("b")
    s.admit_call("a", {"n": 3})
    s.archive_chain(["a", "b"], "b fails after a", {"all": []}, credentials=["good", "bad"])  # + revocation
    s.mark_shared("d")
    for name in ("a", "b"):
        if s.state(name) is ToolState.ARCHIVED:
            s.readmit(name)
        if s.state(name) is not ToolState.RESIDENT:
            s.reexpand(name)
    s.admit_call("a", {"n": 4})
    s.admit_call("b", {"n": 5})  # re-assembles the chain: a warning, as the policy is warn
    first = s.add_span("first")
    offloaded = s.offload_span("large text")
    s.externalize(first.id)
    summary = s.summarize([first.id, offloaded.id], "both")
    s.reground(summary.id)
    return store.load("all")


def test_a_session_writes_every_operation_and_its_journal_replays_purely() -> None:
    entries = _scenario()
    assert {e.op for e in entries} == set(OPERATIONS)
    once, twice = SessionState(_spec), SessionState(_spec)
    for entry in entries:
        once.apply(entry)
    for entry in entries:
        twice.apply(entry)
    assert state_problem(once) is None
    assert state_data(once, None) == state_data(twice, None)
    assert once.revocations == {"good": True, "bad": False}
    assert once.span_states == {"s1": SpanState.EVICTED, "s2": SpanState.EVICTED, "s3": SpanState.RESIDENT}


@pytest.mark.parametrize("cut", [1, 5, 12, -3])
def test_a_checkpoint_at_any_entry_then_its_tail_equals_the_whole_replay(cut: int) -> None:
    entries = _scenario()
    whole = SessionState(_spec)
    for entry in entries:
        whole.apply(entry)
    head = SessionState(_spec)
    for entry in entries[:cut]:
        head.apply(entry)
    seq = len(entries[:cut])
    blob = encode_checkpoint("all", seq, state_data(head, "pure"))
    data = decode_checkpoint(blob, "all", seq)
    assert data is not None and list(data) == list(FIELDS)
    restored = state_from_data(data, _spec, _restore, "pure")
    assert state_problem(restored) is None
    for entry in entries[cut:]:
        restored.apply(entry)
    assert state_data(restored, None) == state_data(whole, None)


def test_hand_written_entries_replay_with_no_store() -> None:
    state = SessionState(_spec)
    entries: list[tuple[str, dict[str, Any]]] = [
        ("register", {"tools": [_tool("x"), _tool("y")]}),
        ("turn", {"turn": 1, "phase": None}),
        ("call", {"id": "c1", "tool": "x", "arguments": {"n": 1}, "tokens": 4}),
        ("transitions", {"tools": ["x", "y"], "trigger": "prune", "dest": "tombstoned", "reason": "r"}),
        ("evict_arguments", {"ids": ["c1"]}),
    ]
    for op, data in entries:
        state.apply(JournalEntry(op, data, 7.0))
    assert state.turn == 1 and state.argument_total == 0 and state.resident == {}
    assert state.states == {"x": ToolState.TOMBSTONED, "y": ToolState.TOMBSTONED}
    assert [e.at for e in state.events] == [7.0] * len(state.events)  # time comes from the entry
    assert state_problem(state) is None


def test_an_unknown_operation_or_a_transition_of_an_unknown_tool_is_refused() -> None:
    state = SessionState(_spec)
    with pytest.raises(StoreError, match="unknown operation"):
        state.apply(JournalEntry("teleport", {}, 0.0))
    with pytest.raises(KeyError):
        state.apply(
            JournalEntry("transitions", {"tools": ["ghost"], "trigger": "prune", "dest": "evicted"}, 0.0)
        )
    assert state.states == {}


def test_a_state_two_sessions_reach_agrees_and_stores_agree_with_it(tmp_path: Path) -> None:
    entries = _scenario()
    pure = SessionState(_spec)
    for entry in entries:
        pure.apply(entry)
    stored = MemoryStore()
    stored.append("all", entries)
    for content in ("first", "large text", "both"):
        stored.put_content(content.encode())
    reopened = Session(stored, session_id="all")
    snapshot = reopened.snapshot()
    assert {n: v["state"] for n, v in snapshot["tools"].items()} == {
        n: s.value for n, s in pure.states.items()
    }
    assert [(e.turn, e.kind.value, e.subject, e.detail) for e in pure.events] == snapshot["events"]


def test_a_chain_collision_under_refuse_journals_a_refusal_not_a_call() -> None:
    s = Session()
    s.register_tools([_tool("a"), _tool("b")])
    s.admit_call("a", {"n": 1})
    s.archive_chain(["a", "b"], "b fails after a", {"all": []})
    s.mark_shared("a")
    with pytest.raises((ChainCollision, residency.ToolArchived)):
        s.admit_call("b", {"n": 2})
    assert [e.op for e in s.store.load(s.session_id)][-1] == "refuse"
