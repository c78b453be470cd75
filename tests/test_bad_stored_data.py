"""Bad stored data: malformed journal entries, an emptied store file, forged checkpoints.

Whatever the store holds, opening a session either gives the state its journal describes or
raises ``StoreError``: never a raw ``KeyError``, never a fresh store in place of a truncated one,
never a state no journal can lead to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import (
    JournalEntry,
    MemoryStore,
    Session,
    SQLiteStore,
    StoreError,
    ToolState,
    open_store,
)
from residency._store._checkpoint import decode_checkpoint, encode_checkpoint

SID = "stored"
TOOLS = [
    {"name": "read", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "write", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
        return
    with SQLiteStore(tmp_path / "stored.db") as s:
        yield s


# -- malformed journal entries -----------------------------------------------------------------

MALFORMED: dict[str, tuple[str, Any]] = {
    "call without tool": ("call", {"id": "c1", "arguments": {}, "tokens": 1}),
    "transition without dest": ("transition", {"tool": "read", "trigger": "prune"}),
    "transition to no state": ("transition", {"tool": "read", "trigger": "prune", "dest": "gone"}),
    "register without name": ("register", {"tools": [{"inputSchema": {"type": "object"}}]}),
    "evicting an unknown call": ("evict_arguments", {"ids": ["c9"]}),
    "span without text": ("span_add", {"id": "s1", "key": "sha256:00", "tags": []}),
    "turn without number": ("turn", {"phase": None}),
    "data that is a list": ("turn", ["not", "an", "object"]),
    "refusal without reason": ("refuse", {"tool": "read"}),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_journal_entry_missing_a_key_is_a_store_error_on_open(store: Any, case: str) -> None:
    Session(store, session_id=SID).register_tools(TOOLS)
    op, data = MALFORMED[case]
    store.append(SID, [JournalEntry(op, data, 0.0)])  # valid JSON, written by a broken writer
    with pytest.raises(StoreError) as raised:
        Session(store, session_id=SID)
    assert not isinstance(raised.value, LookupError | TypeError | ValueError)


def test_a_malformed_entry_after_a_checkpoint_is_a_store_error_too(store: Any) -> None:
    s = Session(store, session_id=SID)
    s.register_tools(TOOLS)
    s.checkpoint()
    store.append(SID, [JournalEntry("call", {"id": "c1"}, 0.0)])
    with pytest.raises(StoreError):
        Session(store, session_id=SID)


# -- an emptied store file ---------------------------------------------------------------------


def test_a_store_file_truncated_to_zero_bytes_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        Session(store, session_id=SID).register_tools(TOOLS)
    path.write_bytes(b"")
    openings: list[Callable[[], object]] = [
        lambda: SQLiteStore(path),
        lambda: open_store(f"sqlite:///{path}"),
    ]
    for opening in openings:
        with pytest.raises(StoreError):
            opening()
    assert path.read_bytes() == b""  # nothing was written to it: it is still there to restore
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]


def test_an_absent_store_file_is_created_whole_with_nothing_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with SQLiteStore(path) as store:
        assert path.stat().st_size > 0  # never an empty file, even before the first write
        Session(store, session_id=SID).register_tools(TOOLS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.db"]
    with SQLiteStore(path) as store:
        assert Session(store, session_id=SID).tools() == ["read", "write"]


def test_two_stores_creating_one_file_at_once_both_open_it(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    first = SQLiteStore(path)
    second = SQLiteStore(path)  # the file exists now: opened, not created again
    try:
        Session(first, session_id=SID).register_tools(TOOLS)
        assert Session(second, session_id=SID).tools() == ["read", "write"]
    finally:
        first.close()
        second.close()


# -- forged checkpoints ------------------------------------------------------------------------


def _session_with_history(store: Any) -> Session:
    s = Session(store, session_id=SID)
    s.register_tools(TOOLS)
    s.admit_call("read", {"n": 1})
    s.admit_call("write", {"n": 2})
    s.evict_arguments("c2")
    s.prune("write")  # no arguments left: evicted
    kept = s.add_span("must not be lost", tags=["invariant"])
    s.externalize(kept.id)
    s.add_span("plain")
    s.checkpoint()
    return s


# Each forgery edits the checkpoint's saved state (``residency._core._state_format``) as an
# attacker with write access to the store could, keeping it well-formed.


def _ghost(state: dict[str, Any]) -> None:
    state["states"] = {**state["states"], "read": "evicted"}  # c1's arguments stay visible


def _gap_in_call_ids(state: dict[str, Any]) -> None:
    ids = list(state["calls"][0])
    ids[ids.index("c2")] = "c3"
    state["calls"] = (ids, *state["calls"][1:])


def _counts_disagree(state: dict[str, Any]) -> None:
    state["resident_by_tool"] = {**state["resident_by_tool"], "read": 0}


def _argument_total_off(state: dict[str, Any]) -> None:
    state["argument_total"] = state["argument_total"] + 7


def _precondition_evicted(state: dict[str, Any]) -> None:
    state["span_states"] = {**state["span_states"], "s1": "evicted"}


def _left_without_a_copy(state: dict[str, Any]) -> None:
    state["span_states"] = {**state["span_states"], "s2": "evicted"}


def _pinned_to_another_definition(state: dict[str, Any]) -> None:
    rows = []
    for name, definition, digest, shown, tokens in state["tools"]:
        if name == "read":
            definition = {**definition, "description": "now it deletes things"}
        rows.append((name, definition, digest, shown, tokens))
    state["tools"] = rows


FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "ghost tool": _ghost,
    "gap in call ids": _gap_in_call_ids,
    "resident counts disagree": _counts_disagree,
    "argument total off": _argument_total_off,
    "precondition span evicted": _precondition_evicted,
    "span left with no stored copy": _left_without_a_copy,
    "definition not its pinned hash": _pinned_to_another_definition,
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_well_formed_checkpoint_is_not_used(
    store: Any, forgery: str, caplog: pytest.LogCaptureFixture
) -> None:
    honest = _session_with_history(store)
    seq, blob = store.load_checkpoint(SID)
    state = decode_checkpoint(blob, SID, seq)
    assert state is not None
    FORGERIES[forgery](state)
    store.save_checkpoint(SID, seq, encode_checkpoint(SID, seq, state))
    with caplog.at_level(logging.WARNING, logger="residency"):
        reopened = Session(store, session_id=SID)
    assert reopened.restored_from == 0  # replayed the journal instead
    assert reopened.snapshot() == honest.snapshot()
    assert any("invariant" in r.getMessage() for r in caplog.records)


def test_an_honest_checkpoint_passes_the_invariants_and_is_used(store: Any) -> None:
    honest = _session_with_history(store)
    reopened = Session(store, session_id=SID)
    assert reopened.restored_from == store.load_checkpoint(SID)[0]
    assert reopened.snapshot() == honest.snapshot()


def test_a_journal_that_leads_to_a_ghost_opens_as_written_and_says_so(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The journal is the source of truth: a forged one is reported, not refused (a refusal would
    lock the session out for good)."""
    s = Session(store, session_id=SID)
    s.register_tools(TOOLS)
    s.admit_call("read", {"n": 1})
    store.append(
        SID, [JournalEntry("transition", {"tool": "read", "trigger": "evict", "dest": "evicted"}, 0.0)]
    )
    with caplog.at_level(logging.WARNING, logger="residency"):
        reopened = Session(store, session_id=SID)
    assert reopened.state("read") is ToolState.EVICTED
    assert any("ghost" in r.getMessage() for r in caplog.records)
