"""Checkpoints: a reopen restores the saved state, replays only the tail, and equals a replay.

Every way a checkpoint can be unusable (damaged, foreign, of another version, session or
state format, naming a forbidden class, disagreeing with the journal after it) must lead to a full
replay with the same result, never to an error or a different state.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import residency._store._sqlite as sqlite_module
from residency import (
    Budget,
    ChainCollision,
    ConfigError,
    InvalidInput,
    JournalEntry,
    MemoryStore,
    Session,
    SessionConflict,
    SQLiteStore,
    StoreError,
)
from residency._core._state import SessionState
from residency._core._state_format import FIELDS, STATE_VERSION, state_data
from residency._runtime._tool_cache import SpecSource
from residency._store._checkpoint import FORMAT, decode_checkpoint, encode_checkpoint

from .incident_tools import incident_tools

SID = "agent"
CHAIN_TOOLS = [
    {
        "name": name,
        "description": f"{name} tool",
        "inputSchema": {"type": "object", "properties": props},
        "annotations": {"readOnlyHint": True},
    }
    for name, props in (
        ("search_api_v2", {"q": {"type": "string"}}),
        ("html_parser", {"url": {"type": "string"}, "payload_bytes": {"type": "integer"}}),
        ("llm_extractor", {"schema": {"type": "string"}}),
    )
]
BIG = {"tool": "html_parser", "argument": "payload_bytes", "op": ">", "value": 5_000_000}


class Tick:
    def __init__(self) -> None:
        self.t = 1_000.0

    def now(self) -> float:
        self.t += 0.5
        return self.t


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore | SQLiteStore]:
    made: MemoryStore | SQLiteStore = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "c.db")
    )
    yield made
    made.close()


def _busy(s: Session) -> None:
    """Tools, calls, tombstones, spans of every state, summaries, a chain, revocations, turns."""
    s.register_tools([*incident_tools(), *CHAIN_TOOLS])
    call = s.record_call("create_incident", {"title": "db down", "severity": "SEV-1"})
    s.prune("create_incident")  # tombstoned: its arguments are resident
    s.plan_turn(Budget(schema_tokens=900, argument_tokens=400), phase=None)
    schema = s.add_span("amount numeric(12,2) not null", tags={"constraint"}, source="tool:describe_table")
    diff = s.add_span("+ALTER TABLE payments")
    kept = s.add_span("a plan that stays resident", tags={"plan"})
    s.externalize(schema.id)
    summary = s.summarize([schema.id, diff.id], "constraints checked")
    s.reground(summary.id)
    s.evict_span(kept.id)
    s.restore(kept.id)
    s.record_call("search_api_v2", {"q": "prices"})
    s.record_call("html_parser", {"url": "u", "payload_bytes": 8_000_000})
    s.record_call("llm_extractor", {"schema": "offer"})
    s.archive_chain(
        ["search_api_v2", "html_parser", "llm_extractor"],
        "timeout on payload",
        BIG,
        credentials=["scraper-key"],
    )
    s.evict_arguments(call.id)
    s.plan_turn(Budget(schema_tokens=300, argument_tokens=50))


def _revoke(ref: str) -> bool:
    return ref == "scraper-key"


def _open(store: Any, **kw: Any) -> Session:
    return Session(store, session_id=SID, clock=Tick(), revoke=_revoke, **kw)


def _copy(store: Any, *, checkpoint: bool) -> MemoryStore:
    """A store of its own holding the session's journal and content, and its checkpoint if asked."""
    fresh = MemoryStore()
    fresh.append(SID, store.load(SID))
    if isinstance(store, MemoryStore):
        blobs = list(store._content.values())
    else:
        with sqlite3.connect(store.path) as raw:
            blobs = [bytes(r[0]) for r in raw.execute("SELECT bytes FROM content")]
        raw.close()
    for blob in blobs:
        fresh.put_content(blob)
    found = store.load_checkpoint(SID) if checkpoint else None
    if found is not None:
        fresh.save_checkpoint(SID, *found)
    return fresh


def _replayed(store: Any) -> Session:
    """The same session replayed from its whole journal, with no checkpoint to start from."""
    return Session(_copy(store, checkpoint=False), session_id=SID, clock=Tick(), revoke=_revoke)


def _same(a: Session, b: Session) -> None:
    assert a.snapshot() == b.snapshot()
    assert a.tombstones() == b.tombstones()
    assert [(i.span_id, i.kind, i.key) for i in a.window()] == [
        (i.span_id, i.kind, i.key) for i in b.window()
    ]
    assert a.events() == b.events()
    assert a.chains() == b.chains()
    assert a.pending_revocations() == b.pending_revocations()
    assert [a.tool(n) for n in a.tools()] == [b.tool(n) for n in b.tools()]
    assert a.resident_calls() == b.resident_calls()
    candidate = (["search_api_v2", "html_parser"], [{}, {"payload_bytes": 9_000_000}])
    assert a.check_chain(*candidate) == b.check_chain(*candidate)


# -- restore equals replay --------------------------------------------------------------------


def test_reopening_from_a_checkpoint_and_its_tail_equals_the_live_session_and_a_replay(store: Any) -> None:
    live = _open(store, checkpoint_every=0)
    _busy(live)
    covered = live.checkpoint()
    assert covered == len(store.load(SID))
    live.add_span("after the checkpoint", tags={"invariant"})  # the tail
    live.externalize("s5")
    live.revoke_pending()

    reopened = _open(store)
    assert reopened.restored_from == covered
    assert reopened.seq == len(store.load(SID))
    _same(reopened, live)
    _same(reopened, _replayed(store))


def test_a_session_restored_from_a_checkpoint_goes_on_like_a_replayed_one(store: Any) -> None:
    live = _open(store, checkpoint_every=0)
    _busy(live)
    live.checkpoint()
    live.add_span("tail")
    restored = Session(_copy(store, checkpoint=True), session_id=SID, clock=Tick(), revoke=_revoke)
    replayed = _replayed(store)
    assert restored.restored_from and not replayed.restored_from
    for budget in (Budget(schema_tokens=250, argument_tokens=10), Budget(schema_tokens=0, argument_tokens=0)):
        a, b = restored.plan_turn(budget), replayed.plan_turn(budget)
        assert (a.tools, a.tombstones, a.evictions, a.events) == (
            b.tools,
            b.tombstones,
            b.evictions,
            b.events,
        )
    for s in (restored, replayed):
        for name in ("search_api_v2", "html_parser"):  # archived with the chain: an operator's call
            s.readmit(name)
            s.reexpand(name)
        s.record_call("search_api_v2", {"q": "again"})
    with pytest.raises(ChainCollision):
        restored.authorize_call("html_parser", {"url": "u", "payload_bytes": 9_000_000})
    with pytest.raises(ChainCollision):
        replayed.authorize_call("html_parser", {"url": "u", "payload_bytes": 9_000_000})
    _same(restored, replayed)


def test_a_checkpoint_at_the_journal_end_restores_with_no_tail(store: Any) -> None:
    live = _open(store, checkpoint_every=0)
    _busy(live)
    covered = live.checkpoint()
    reopened = _open(store)
    assert reopened.restored_from == covered == reopened.seq
    _same(reopened, live)


def test_a_reopened_session_goes_on_journaling_and_checkpointing(store: Any) -> None:
    live = _open(store, checkpoint_every=0)
    _busy(live)
    live.checkpoint()
    reopened = _open(store, checkpoint_every=2)
    reopened.add_span("one")
    reopened.add_span("two")
    assert store.load_checkpoint(SID)[0] == reopened.seq == len(store.load(SID))
    _same(_open(store), _replayed(store))


def test_restored_resident_text_is_read_back_from_the_store_like_after_a_replay(store: Any) -> None:
    live = _open(store, checkpoint_every=0)
    span = live.add_span("restored text")
    live.evict_span(span.id)
    assert live.restore(span.id) == "restored text"
    kept = live.add_span("never left")
    live.checkpoint()
    reopened = _open(store)
    assert reopened.restored_from
    # Only text held nowhere else is saved; the restored span's text is read back from the store.
    seq, blob = store.load_checkpoint(SID)
    saved = decode_checkpoint(blob, SID, seq)
    assert saved is not None and saved["texts"] == {kept.id: "never left"}
    assert [i.text for i in reopened.window()] == ["restored text", "never left"]


def test_sessions_checkpoint_every_n_entries_and_zero_disables_it(store: Any) -> None:
    s = _open(store, checkpoint_every=3)
    for i in range(7):
        s.add_span(f"span {i}")
    assert store.load_checkpoint(SID)[0] == 6
    other = Session(store, session_id="quiet", checkpoint_every=0)
    for i in range(7):
        other.add_span(f"span {i}")
    assert store.load_checkpoint("quiet") is None


@pytest.mark.parametrize("every", [-1, 1.5, True, "10"])
def test_a_bad_checkpoint_interval_is_a_config_error(every: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        Session(checkpoint_every=every)
    assert exc.value.where == "checkpoint_every"


def test_checkpointing_an_empty_session_saves_nothing(store: Any) -> None:
    assert _open(store).checkpoint() == 0
    assert store.load_checkpoint(SID) is None


def test_tools_shown_by_another_minifier_are_made_again_on_restore(store: Any) -> None:
    def shown_in_full(tool: dict[str, Any]) -> dict[str, Any]:
        return {**tool, "description": f"(shown in full) {tool.get('description', '')}"}

    live = Session(store, session_id=SID, minify=shown_in_full, checkpoint_every=0)
    live.register_tools(incident_tools())
    live.checkpoint()
    default = Session(store, session_id=SID)
    assert default.restored_from
    assert [default.tool(n) for n in default.tools()] == [_replayed(store).tool(n) for n in default.tools()]
    assert default.tool("create_incident").shown != live.tool("create_incident").shown

    default.checkpoint()  # at the same entry: nothing new is saved
    custom = Session(store, session_id=SID, minify=shown_in_full)
    assert custom.restored_from
    assert custom.tool("create_incident") == live.tool("create_incident")


# -- unusable checkpoints fall back to a full replay ------------------------------------------


def _checkpointed(store: Any) -> tuple[Session, int, bytes]:
    live = _open(store, checkpoint_every=0)
    _busy(live)
    covered = live.checkpoint()
    live.add_span("tail")
    found = store.load_checkpoint(SID)
    assert found is not None and found[0] == covered
    return live, covered, found[1]


def _replace(store: Any, seq: int, blob: bytes) -> None:
    """Overwrite the stored checkpoint as damage or an attacker would."""
    if isinstance(store, MemoryStore):
        store._checkpoints[SID] = (seq, blob)
        return
    with sqlite3.connect(store.path) as raw:
        raw.execute("DELETE FROM checkpoints WHERE session_id = ?", (SID,))
        raw.execute("INSERT INTO checkpoints VALUES (?, 0, ?, ?)", (SID, seq, blob))
    raw.close()


def _forge(seq: int, layout: list[str], payload: bytes, **header: Any) -> bytes:
    """A checkpoint with a well-formed header around any payload."""
    from residency import __version__

    fields = {
        "format": FORMAT,
        "residency": __version__,
        "session": SID,
        "seq": seq,
        "state": STATE_VERSION,
        "fields": layout,
    }
    fields.update(header, length=len(payload), crc32=zlib.crc32(payload))
    return b"residency-checkpoint\n" + json.dumps(fields).encode() + b"\n" + payload


def _flip(blob: bytes) -> bytes:
    middle = len(blob) * 2 // 3
    return blob[:middle] + bytes([blob[middle] ^ 0xFF]) + blob[middle + 1 :]


def _header(blob: bytes, **changes: Any) -> bytes:
    magic, header, payload = blob.split(b"\n", 2)
    return magic + b"\n" + json.dumps({**json.loads(header), **changes}).encode() + b"\n" + payload


BREAKAGES: dict[str, Callable[[bytes, int, list[str]], bytes]] = {
    "flipped payload byte": lambda blob, seq, layout: _flip(blob),
    "truncated": lambda blob, seq, layout: blob[: len(blob) // 2],
    "empty": lambda blob, seq, layout: b"",
    "not a checkpoint": lambda blob, seq, layout: b"PK\x03\x04 a zip file, say",
    "damaged header": lambda blob, seq, layout: blob.replace(b'"format"', b'"form', 1),
    "older residency": lambda blob, seq, layout: _header(blob, residency="0.0.1"),
    "newer format": lambda blob, seq, layout: _header(blob, format=FORMAT + 1),
    "another session": lambda blob, seq, layout: _header(blob, session="someone-else"),
    "another entry": lambda blob, seq, layout: _header(blob, seq=seq - 1),
    "another field list": lambda blob, seq, layout: _header(blob, fields=layout[:-1]),
    "older state format": lambda blob, seq, layout: _header(blob, state=STATE_VERSION - 1),
    "valid pickle of the wrong shape": lambda blob, seq, layout: _forge(seq, layout, pickle.dumps({"x": 1})),
    "wrong types": lambda blob, seq, layout: _forge(seq, layout, pickle.dumps([7] * len(layout))),
    "garbage payload": lambda blob, seq, layout: _forge(seq, layout, b"\x80\x05garbage"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_an_unusable_checkpoint_falls_back_to_a_full_replay(store: Any, breakage: str) -> None:
    live, covered, blob = _checkpointed(store)
    layout = list(FIELDS)
    _replace(store, covered, BREAKAGES[breakage](blob, covered, layout))
    reopened = _open(store)
    assert reopened.restored_from == 0
    _same(reopened, live)
    # The next write saves a good checkpoint over the bad one.
    reopened.add_span("heals")
    assert _open(store).restored_from == reopened.seq


def test_a_checkpoint_that_disagrees_with_the_journal_after_it_falls_back(store: Any) -> None:
    live, covered, _ = _checkpointed(store)
    live.evict_span("s3")  # the tail names span s3, which the forged state lacks
    empty = state_data(SessionState(SpecSource(lambda tool: tool).spec), None)
    _replace(store, covered, encode_checkpoint(SID, covered, empty))
    reopened = _open(store)
    assert reopened.restored_from == 0
    _same(reopened, live)


class _Tripwire:
    """Unpickling an instance calls ``_tripped``, which a safe decoder never does."""

    calls: ClassVar[list[str]] = []

    def __reduce__(self) -> tuple[Any, ...]:
        return (_tripped, ("the checkpoint ran code",))


def _tripped(message: str) -> int:
    _Tripwire.calls.append(message)
    return 0


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda n: pickle.dumps([_Tripwire()] * n, protocol=5), id="own function"),
        pytest.param(lambda n: pickle.dumps([print] * n, protocol=5), id="builtin"),
        pytest.param(lambda n: pickle.dumps([Path("/etc/passwd")] * n, protocol=2), id="stdlib class"),
    ],
)
def test_a_checkpoint_naming_a_forbidden_class_is_refused_and_falls_back(
    store: Any, payload: Callable[[int], bytes]
) -> None:
    live, covered, _ = _checkpointed(store)
    layout = list(FIELDS)
    forged = _forge(covered, layout, payload(len(layout)))
    with pytest.raises(StoreError):
        decode_checkpoint(forged, SID, covered)
    _replace(store, covered, forged)
    reopened = _open(store)
    assert _Tripwire.calls == []
    assert reopened.restored_from == 0
    _same(reopened, live)


def test_the_encoder_refuses_what_the_decoder_would_refuse() -> None:
    data = state_data(SessionState(SpecSource(lambda tool: tool).spec), None)
    with pytest.raises(StoreError):
        encode_checkpoint(SID, 1, {**data, "texts": {"s1": Path("/tmp")}})
    with pytest.raises(StoreError):
        encode_checkpoint(SID, 1, {k: v for k, v in data.items() if k != "texts"})


# -- the stores -------------------------------------------------------------------------------


def test_a_checkpoint_must_name_an_entry_of_the_journal(store: Any) -> None:
    store.append(SID, [JournalEntry("turn", {"turn": 1}, 1.0)] * 3)
    for seq in (0, 4, -1, True):
        with pytest.raises(InvalidInput) as exc:
            store.save_checkpoint(SID, seq, b"x")
        assert exc.value.where == "seq"
    assert store.load_checkpoint(SID) is None
    with pytest.raises(InvalidInput):
        store.save_checkpoint("no-such-session", 1, b"x")


def test_a_checkpoint_never_moves_backwards(store: Any) -> None:
    store.append(SID, [JournalEntry("turn", {"turn": 1}, 1.0)] * 5)
    store.save_checkpoint(SID, 4, b"at four")
    store.save_checkpoint(SID, 2, b"at two")
    assert store.load_checkpoint(SID) == (4, b"at four")
    store.save_checkpoint(SID, 5, b"at five")
    assert store.load_checkpoint(SID) == (5, b"at five")


def test_load_after_returns_the_tail_with_sequence_numbers(store: Any) -> None:
    assert store.append(SID, [JournalEntry("turn", {"turn": i}, float(i)) for i in range(1, 6)]) == 5
    assert store.append(SID, []) == 5
    tail = store.load(SID, after=3)
    assert [(e.seq, e.data["turn"]) for e in tail] == [(4, 4), (5, 5)]
    assert [e.seq for e in store.load(SID)] == [1, 2, 3, 4, 5]
    assert store.load(SID, after=5) == []


def test_another_writer_is_refused_then_caught_up_and_checkpoints_the_journal(store: Any) -> None:
    first = Session(store, session_id=SID, checkpoint_every=2)
    second = Session(store, session_id=SID, checkpoint_every=2)
    first.add_span("one")
    with pytest.raises(SessionConflict):
        second.add_span("two")  # checked against a state that misses "one": not applied
    assert [s.id for s in second.spans()] == ["s1"]  # caught up instead
    second.add_span("two")
    second.add_span("three")
    assert store.load_checkpoint(SID) is not None  # its state is the journal's: it may be saved
    assert Session(store, session_id=SID).snapshot() == second.snapshot()


def test_a_store_that_cannot_refuse_a_second_writer_stops_its_checkpoints() -> None:
    class Unconditional(MemoryStore):
        """A store written before ``append(after=...)``: it appends whatever it is given."""

        def append(self, session_id: str, entries: Any) -> int:  # type: ignore[override]
            return super().append(session_id, entries)

        def append_relaxed(self, session_id: str, entries: Any) -> int:  # type: ignore[override]
            return super().append(session_id, entries)

    store: Any = Unconditional()  # an older store: today's Store protocol it does not meet
    first = Session(store, session_id=SID, checkpoint_every=2)
    second = Session(store, session_id=SID, checkpoint_every=2)
    first.add_span("one")
    second.add_span("two")  # its state misses "one": it must never be saved
    second.add_span("three")
    assert store.load_checkpoint(SID) is None
    with pytest.raises(StoreError):
        second.checkpoint()


def test_a_store_without_checkpoints_still_replays() -> None:
    class JournalOnly:
        def __init__(self) -> None:
            self.inner = MemoryStore()

        def append(self, session_id: str, entries: Any) -> None:
            self.inner.append(session_id, entries)

        def load(self, session_id: str) -> list[JournalEntry]:
            return [JournalEntry(e.op, e.data, e.at) for e in self.inner.load(session_id)]

        def put_content(self, data: bytes) -> str:
            return self.inner.put_content(data)

        def get_content(self, key: str) -> bytes:
            return self.inner.get_content(key)

    store = JournalOnly()
    s = Session(store, session_id=SID, checkpoint_every=1)  # type: ignore[arg-type]
    s.add_span("kept in the journal only")
    s.add_span("and another")
    assert Session(store, session_id=SID).snapshot() == s.snapshot()  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        s.checkpoint()


def test_a_large_checkpoint_is_saved_in_parts_and_a_torn_one_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_PART", 1000)
    store = SQLiteStore(tmp_path / "parts.db")
    live = _open(store, checkpoint_every=0)
    _busy(live)
    covered = live.checkpoint()
    with sqlite3.connect(store.path) as raw:
        parts = raw.execute("SELECT count(*) FROM checkpoints WHERE session_id = ?", (SID,)).fetchone()[0]
    raw.close()
    assert parts > 2
    assert _open(store).restored_from == covered
    with sqlite3.connect(store.path) as raw:
        raw.execute("DELETE FROM checkpoints WHERE session_id = ? AND part = 1", (SID,))
    raw.close()
    assert store.load_checkpoint(SID) is None
    reopened = _open(store)
    assert reopened.restored_from == 0
    _same(reopened, live)
