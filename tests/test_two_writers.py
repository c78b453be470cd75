"""Two writers of one session: conditional appends, catching up, and ids never issued twice.

Two ``Session`` objects opened on the same store and id (two processes, two gateways given one
key, or two objects in one process) used to each believe they were the only writer: both
issued call ``c1``, ``c2``, ... and a replay kept one of each pair. Now every commit says which
journal entry it follows; the store refuses a stale one (``StoreConflict``), and the session
catches up and raises ``SessionConflict`` without applying the operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import (
    Budget,
    JournalEntry,
    MemoryStore,
    Session,
    SessionConflict,
    SQLiteStore,
    StoreConflict,
    StoreError,
    ToolNotResident,
)

SID = "shared"
TOOLS = [
    {"name": "read", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "write", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
        return
    with SQLiteStore(tmp_path / "two.db") as s:
        yield s


def _entry(n: int) -> JournalEntry:
    return JournalEntry("turn", {"turn": n}, 0.0)


# -- the store ---------------------------------------------------------------------------------


def test_an_append_after_the_last_entry_succeeds_and_a_stale_one_appends_nothing(store: Any) -> None:
    assert store.append(SID, [_entry(1)], after=0) == 1
    assert store.append_relaxed(SID, [_entry(2), _entry(3)], after=1) == 3
    for append in (store.append, store.append_relaxed):
        with pytest.raises(StoreConflict) as conflict:
            append(SID, [_entry(9)], after=1)
        assert (conflict.value.session_id, conflict.value.after, conflict.value.last) == (SID, 1, 3)
        assert isinstance(conflict.value, StoreError)
    assert [e.seq for e in store.load(SID)] == [1, 2, 3]
    assert store.append(SID, [_entry(4)]) == 4  # no ``after``: unconditional, as before


def test_a_conflict_on_a_new_session_creates_nothing(store: Any) -> None:
    with pytest.raises(StoreConflict):
        store.append(SID, [_entry(1)], after=2)
    assert store.sessions() == []
    assert store.load(SID) == []


def test_an_sqlite_conflict_is_decided_inside_the_write_transaction(tmp_path: Path) -> None:
    """Two store objects (two processes' worth of connections) on one file."""
    path = tmp_path / "two.db"
    with SQLiteStore(path) as first, SQLiteStore(path) as second:
        first.append(SID, [_entry(1)], after=0)
        with pytest.raises(StoreConflict):
            second.append(SID, [_entry(1)], after=0)
        assert second.append(SID, [_entry(2)], after=1) == 2
        assert [e.data["turn"] for e in first.load(SID)] == [1, 2]


# -- sessions ----------------------------------------------------------------------------------


def test_two_sessions_on_one_sqlite_file_issuing_calls_alternately_lose_none(tmp_path: Path) -> None:
    path = tmp_path / "embedded.db"
    with SQLiteStore(path) as store_a, SQLiteStore(path) as store_b:
        a = Session(store_a, session_id=SID)
        a.register_tools(TOOLS)
        b = Session(store_b, session_id=SID)
        issued: list[tuple[str, int]] = []
        conflicts = 0
        for n in range(20):
            writer = (a, b)[n % 2]
            try:
                record = writer.admit_call("read", {"n": n})
            except SessionConflict:
                conflicts += 1
                record = writer.admit_call("read", {"n": n})  # caught up: retried on the new state
            issued.append((record.id, n))
        assert conflicts >= 19  # every hand-over found the other writer's call first
        ids = [call_id for call_id, _ in issued]
        assert len(set(ids)) == 20, f"call ids issued twice: {ids}"
    with SQLiteStore(path) as store:
        calls = Session(store, session_id=SID).snapshot()["calls"]
    assert {call_id: c["arguments"]["n"] for call_id, c in calls.items()} == dict(issued)


def test_a_conflict_applies_nothing_and_leaves_the_session_caught_up(store: Any) -> None:
    a = Session(store, session_id=SID)
    a.register_tools(TOOLS)
    b = Session(store, session_id=SID)
    a.admit_call("read", {"n": 1})
    a.prune("write")
    journal = store.load(SID)
    with pytest.raises(SessionConflict) as conflict:
        b.admit_call("write", {"n": 2})  # b still sees "write" resident
    assert conflict.value.session_id == SID
    assert store.load(SID) == journal  # nothing was written ...
    assert b.snapshot() == a.snapshot()  # ... and b now holds a's state
    # Retried on the new state, the call is refused for what it now is: its tool was pruned.
    with pytest.raises(ToolNotResident):
        b.admit_call("write", {"n": 2})
    assert b.admit_call("read", {"n": 3}).id == "c2"


def test_a_turn_plan_that_conflicts_is_planned_again_on_the_new_state(store: Any) -> None:
    a = Session(store, session_id=SID)
    a.register_tools(TOOLS)
    b = Session(store, session_id=SID)
    budget = Budget(schema_tokens=10_000, argument_tokens=10_000)
    a.plan_turn(budget)
    with pytest.raises(SessionConflict):
        b.plan_turn(budget)
    assert b.turn == a.turn == 1
    assert b.plan_turn(budget).turn == 2
    reopened = Session(store, session_id=SID)
    assert reopened.turn == 2
    assert reopened.snapshot() == b.snapshot()


def test_span_ids_are_never_issued_twice_either(store: Any) -> None:
    a = Session(store, session_id=SID)
    b = Session(store, session_id=SID)
    a.add_span("from a")
    with pytest.raises(SessionConflict):
        b.add_span("from b")
    assert b.add_span("from b").id == "s2"
    assert sorted(Session(store, session_id=SID).snapshot()["spans"]) == ["s1", "s2"]


def test_a_writer_that_catches_up_keeps_saving_checkpoints_of_the_journal(store: Any) -> None:
    a = Session(store, session_id=SID, checkpoint_every=2)
    b = Session(store, session_id=SID, checkpoint_every=2)
    a.add_span("one")
    with pytest.raises(SessionConflict):
        b.add_span("two")
    b.add_span("two")
    b.add_span("three")
    assert b.checkpoint() == 3
    reopened = Session(store, session_id=SID)
    assert reopened.restored_from == 3
    assert reopened.snapshot() == b.snapshot()


def test_catching_up_on_a_malformed_entry_is_a_store_error_and_the_session_stops(store: Any) -> None:
    a = Session(store, session_id=SID)
    a.register_tools(TOOLS)
    b = Session(store, session_id=SID)
    store.append(SID, [JournalEntry("call", {"id": "c1"}, 0.0)])  # written by a broken writer
    with pytest.raises(StoreError) as caught:
        b.admit_call("read", {})
    assert not isinstance(caught.value, SessionConflict)
    with pytest.raises(StoreError):
        b.admit_call("read", {})  # its state may be half-applied: it refuses to go on
    assert len(store.load(SID)) == 2
