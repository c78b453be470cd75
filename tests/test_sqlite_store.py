"""The SQLite store: reopen, many sessions in one file, broken and foreign files, hashes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from residency import (
    Budget,
    ConfigError,
    IntegrityError,
    InvalidInput,
    JournalEntry,
    MemoryStore,
    NotFound,
    Session,
    SpanState,
    SQLiteStore,
    StoreError,
    ToolState,
    open_store,
)
from residency._store._sqlite import APPLICATION_ID, SCHEMA_VERSION

from .incident_tools import incident_tools


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "residency.db"


def _busy_session(store: SQLiteStore | MemoryStore, session_id: str) -> Session:
    s = Session(store, session_id=session_id)
    s.register_tools(incident_tools())
    call = s.record_call("create_incident", {"title": "db down", "severity": "SEV-1"})
    s.prune("create_incident")  # tombstoned: its arguments are resident
    s.evict_arguments(call.id)
    s.plan_turn(Budget(schema_tokens=400, argument_tokens=200))
    schema = s.add_span("amount numeric(12,2) not null", tags={"constraint"}, source="tool:describe_table")
    diff = s.add_span("+ALTER TABLE payments")
    s.externalize(schema.id)
    s.summarize([schema.id, diff.id], "constraints checked")
    return s


def test_a_reopened_store_has_the_same_tools_calls_spans_and_tombstones(db: Path) -> None:
    store = SQLiteStore(db)
    s = _busy_session(store, "agent-1")
    expected = s.snapshot()
    assert expected["spans"] and expected["calls"] and expected["tools"]
    store.close()

    reopened = Session(SQLiteStore(db), session_id="agent-1")
    assert reopened.snapshot() == expected
    assert reopened.tombstones() == s.tombstones()
    assert reopened.window() == s.window()
    assert reopened.restore("s1") == "amount numeric(12,2) not null"


def test_the_sqlite_store_and_the_memory_store_give_equal_sessions(db: Path) -> None:
    assert _busy_session(SQLiteStore(db), "a").snapshot() == _busy_session(MemoryStore(), "a").snapshot()


def test_one_file_holds_many_sessions(db: Path) -> None:
    store = SQLiteStore(db)
    for i in range(5):
        s = Session(store, session_id=f"agent-{i}")
        for k in range(i + 1):
            s.add_span(f"span {k} of agent {i}")
    store.close()
    store = SQLiteStore(db)
    assert store.sessions() == [f"agent-{i}" for i in range(5)]
    for i in range(5):
        assert len(Session(store, session_id=f"agent-{i}").spans()) == i + 1
    assert Session(store, session_id="new").spans() == []


def test_an_append_is_all_or_nothing(db: Path) -> None:
    store = SQLiteStore(db)
    store.append("s", [JournalEntry("turn", {"turn": 1}, 1.0)])
    with pytest.raises(StoreError):
        store.append("s", [JournalEntry("turn", {"turn": 2}, 2.0), JournalEntry("bad", {"x": object()}, 2.0)])
    assert [e.data for e in store.load("s")] == [{"turn": 1}]


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_a_relaxed_append_is_ordered_whole_and_leaves_the_durability_as_it_was(
    db: Path, durability: str
) -> None:
    store = SQLiteStore(db, durability=durability)  # type: ignore[arg-type]
    assert store.append("s", [JournalEntry("call", {"n": 1}, 1.0)]) == 1
    assert (
        store.append_relaxed("s", [JournalEntry("turn", {"n": 2}, 2.0), JournalEntry("turn", {"n": 3}, 2.0)])
        == 3
    )
    with pytest.raises(StoreError):
        store.append_relaxed(
            "s", [JournalEntry("turn", {"n": 4}, 3.0), JournalEntry("bad", {"x": object()}, 3.0)]
        )
    assert store.append("s", [JournalEntry("call", {"n": 4}, 4.0)]) == 4
    assert [(e.seq, e.data["n"]) for e in store.load("s")] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    conn = store._conn  # the setting is per connection: read it where the store writes
    assert conn is not None
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == {"full": 2, "normal": 1}[durability]
    store.close()


def test_content_is_immutable_and_addressed_by_its_hash(db: Path) -> None:
    store = SQLiteStore(db)
    key = store.put_content(b"original bytes")
    assert store.put_content(b"original bytes") == key
    assert store.get_content(key) == b"original bytes"
    with pytest.raises(NotFound):
        store.get_content("sha256:" + "0" * 64)


def test_tampered_content_raises_integrity_error(db: Path) -> None:
    store = SQLiteStore(db)
    s = Session(store)
    span = s.add_span("the original", tags={"constraint"})
    s.externalize(span.id)
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE content SET bytes = ? WHERE key = ?", (b"a forgery", span.key))
    with pytest.raises(IntegrityError):
        store.get_content(span.key)
    with pytest.raises(IntegrityError):
        s.restore(span.id)
    assert s.span_state(span.id) is SpanState.EXTERNALIZED


def test_a_file_that_is_not_sqlite_is_refused(db: Path) -> None:
    db.write_text("{'this': 'is a JSON config, not a store'}\n" * 100)
    with pytest.raises(StoreError):
        SQLiteStore(db)
    assert db.read_text().startswith("{'this'")


def test_an_sqlite_file_of_another_application_is_refused_and_left_alone(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE bookmarks (url TEXT)")
        raw.execute("INSERT INTO bookmarks VALUES ('https://example.org')")
    raw.close()
    with pytest.raises(StoreError):
        SQLiteStore(db)
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert raw.execute("SELECT count(*) FROM bookmarks").fetchone()[0] == 1
    raw.close()


def test_an_sqlite_file_with_another_application_id_is_refused(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA application_id = 1234")
        raw.execute("CREATE TABLE journal (x)")
    raw.close()
    with pytest.raises(StoreError):
        SQLiteStore(db)


def test_a_store_written_by_a_newer_version_is_refused(db: Path) -> None:
    SQLiteStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError):
        SQLiteStore(db)


def test_a_store_missing_a_table_is_refused(db: Path) -> None:
    SQLiteStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("DROP TABLE content")
    raw.close()
    with pytest.raises(StoreError):
        SQLiteStore(db)


def _filled(db: Path) -> None:
    store = SQLiteStore(db)
    s = Session(store)
    for i in range(300):
        span = s.add_span(f"span {i} " + "x" * 2000)
        s.externalize(span.id)
    store.close()  # the last connection checkpoints the WAL into the file


def _open_and_read_everything(db: Path) -> None:
    store = SQLiteStore(db)
    for session_id in store.sessions():
        session = Session(store, session_id=session_id)
        for span in session.spans():
            session.restore(span.id)


def test_a_truncated_store_gives_a_store_error(db: Path) -> None:
    _filled(db)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    with pytest.raises(StoreError):
        _open_and_read_everything(db)


@pytest.mark.parametrize("page", [1, 2, 5])
def test_a_store_with_overwritten_pages_gives_a_store_error(db: Path, page: int) -> None:
    _filled(db)
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    start = page * page_size + 8 if page else 100
    data[start : start + 512] = bytes(range(256)) * 2
    db.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        _open_and_read_everything(db)
        SQLiteStore(db).check()


def test_a_new_store_is_marked_as_residency_in_wal_mode(db: Path) -> None:
    SQLiteStore(db).close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_a_closed_store_raises_store_error(db: Path) -> None:
    store = SQLiteStore(db)
    store.close()
    store.close()
    with pytest.raises(StoreError):
        store.load("s")


def test_a_directory_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        SQLiteStore(tmp_path)


def test_an_unknown_durability_is_a_config_error(db: Path) -> None:
    with pytest.raises(ConfigError):
        SQLiteStore(db, durability="sometimes")  # type: ignore[arg-type]


def test_open_store_understands_memory_and_sqlite_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")
    assert isinstance(absolute, SQLiteStore) and Path(absolute.path) == tmp_path / "abs.db"
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db")
    assert isinstance(relative, SQLiteStore) and (tmp_path / "rel.db").exists()
    for bad in ("mysql://db", "sqlite:///", "residency.db", ""):
        with pytest.raises(ConfigError):
            open_store(bad)


def test_tombstones_and_tool_states_survive_a_reopen(db: Path) -> None:
    store = SQLiteStore(db)
    s = Session(store, session_id="t")
    s.register_tools(incident_tools())
    s.record_call("create_incident", {"title": "x", "severity": "SEV-2"})
    assert s.prune("create_incident") is ToolState.TOMBSTONED
    store.close()
    again = Session(SQLiteStore(db), session_id="t")
    assert again.state("create_incident") is ToolState.TOMBSTONED
    assert again.tombstones() == s.tombstones() != []


def test_a_store_in_a_missing_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore(tmp_path / "no-such-folder" / "r.db")
    assert not (tmp_path / "no-such-folder").exists()


def _as_version_1(db: Path) -> None:
    """Rewrite a store as schema version 1 wrote it: no checkpoints table."""
    with sqlite3.connect(db) as raw:
        raw.execute("DROP TABLE checkpoints")
        raw.execute("UPDATE residency_meta SET value = '1' WHERE key = 'schema_version'")
        raw.execute("PRAGMA user_version = 1")
    raw.close()


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_sessions(db: Path) -> None:
    store = SQLiteStore(db)
    expected = _busy_session(store, "agent-1").snapshot()
    store.close()
    _as_version_1(db)

    store = SQLiteStore(db)
    reopened = Session(store, session_id="agent-1")
    assert reopened.snapshot() == expected
    assert reopened.checkpoint() > 0
    assert Session(store, session_id="agent-1").restored_from == reopened.checkpoint()
    store.close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        meta = dict(raw.execute("SELECT key, value FROM residency_meta").fetchall())
        assert meta["schema_version"] == "2"
    raw.close()


def test_two_stores_opening_a_version_1_file_upgrade_it_once(db: Path) -> None:
    SQLiteStore(db).close()
    _as_version_1(db)
    first, second = SQLiteStore(db), SQLiteStore(db)
    assert first.load_checkpoint("s") is None and second.load_checkpoint("s") is None
    first.close()
    second.close()


def test_a_current_store_missing_its_checkpoints_table_is_refused(db: Path) -> None:
    SQLiteStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("DROP TABLE checkpoints")
    raw.close()
    with pytest.raises(StoreError):
        SQLiteStore(db)


def _scope_read_plan(db: Path) -> str:
    with sqlite3.connect(db) as raw:
        rows = raw.execute(
            "EXPLAIN QUERY PLAN SELECT pos, record FROM chain_archive "
            "WHERE scope = ? AND pos > ? ORDER BY pos",
            ("default", 0),
        ).fetchall()
    raw.close()
    return " | ".join(str(r[-1]) for r in rows)


def test_a_scope_read_uses_the_scope_index_and_an_older_file_gets_it_when_opened(db: Path) -> None:
    store = SQLiteStore(db)
    assert store.archive_chain("default", {"digest": "d1"}) is True
    store.close()
    assert "chain_archive_scope_pos" in _scope_read_plan(db)  # created with the table
    with sqlite3.connect(db) as raw:  # what a file archived before the index holds
        raw.execute("DROP INDEX chain_archive_scope_pos")
    raw.close()
    assert "chain_archive_scope_pos" not in _scope_read_plan(db)
    store = SQLiteStore(db)
    assert store.archive_chain("default", {"digest": "d2"}) is True
    assert [r["digest"] for _, r in store.archived_chains("default")] == ["d1", "d2"]
    store.close()
    assert "chain_archive_scope_pos" in _scope_read_plan(db)


def test_sessions_opened_without_an_id_never_share_a_journal_and_resuming_is_explicit(db: Path) -> None:
    store = SQLiteStore(db)
    first, second = Session(store), Session(store)
    assert first.session_id != second.session_id
    first.register_tools(incident_tools())
    assert second.tools() == []
    store.close()

    reopened = SQLiteStore(db)
    resumed = Session(reopened, session_id=first.session_id, resume=True)
    assert resumed.tools() == first.tools()
    with pytest.raises(NotFound):
        Session(reopened, session_id="never-opened", resume=True)
    assert Session(reopened, session_id="never-opened").tools() == []  # naming a new id starts it
    with pytest.raises(InvalidInput):
        Session(reopened, resume=True)  # resume what?
    reopened.close()
