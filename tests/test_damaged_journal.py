"""A damaged journal is a ``StoreError``, not a conflict to retry: real SQLite files and PostgreSQL.

A true conflict is another writer's: catching up applies its entries, numbered on from the
session's last one, and a retry succeeds. A journal that lost entries under a live session (rows
deleted, the store rolled back or restored from an older backup), entries that are not numbered
on from it, or an index that numbers a row as another entry, can never be caught up with: each
retry would conflict again. Those are refused as ``StoreError`` with nothing written or applied.
The damage is done as an operator's mistake or a broken disk would do it: with ``sqlite3`` and
``psycopg`` on the store's own tables, and by rewriting the SQLite index's bytes in the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from residency import Session, SessionConflict, SQLiteStore, StoreConflict, StoreError
from residency._store._protocol import Store
from tests.damage import KINDS, Execute, damageable

SID = "damaged"


@pytest.fixture(params=KINDS)
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Execute]]:
    """A store and a way to damage it from outside: SQLite in a real file, or PostgreSQL."""
    with damageable(request.param, tmp_path) as found:
        yield found


def _session_with_spans(store: Store, n: int = 4) -> Session:
    session = Session(store, session_id=SID)
    for i in range(n):
        session.add_span(f"span {i}")
    return session


def _numbers(store: Store) -> list[int]:
    return [e.seq for e in store.load(SID)]


@pytest.mark.parametrize("kept", [3, 0], ids=["its-last-entry", "every-entry"])
def test_a_journal_that_lost_entries_under_a_live_session_is_a_store_error_every_time(
    damaged: tuple[Store, Execute], kept: int
) -> None:
    store, execute = damaged
    session = _session_with_spans(store)
    execute(f"DELETE FROM {{journal}} WHERE session_id = '{SID}' AND seq > {kept}")
    for _ in range(3):  # a retry never succeeds, so it is never called a conflict
        with pytest.raises(StoreError) as raised:
            session.add_span("one more")
        assert type(raised.value) is StoreError  # not StoreConflict, not SessionConflict
        assert "entries were removed" in str(raised.value)
    assert _numbers(store) == list(range(1, kept + 1))  # nothing written
    assert len(session.spans()) == 4  # nothing applied
    reopened = Session(store, session_id=SID)  # what the store holds is the session now
    assert len(reopened.spans()) == kept
    reopened.add_span("one more")
    assert _numbers(store) == list(range(1, kept + 2))


def test_a_catch_up_whose_entries_skip_a_number_applies_nothing(damaged: tuple[Store, Execute]) -> None:
    store, execute = damaged
    behind = _session_with_spans(store, 2)
    ahead = Session(store, session_id=SID)
    for i in range(3):
        ahead.add_span(f"ahead {i}")  # entries 3, 4, 5
    execute(f"DELETE FROM {{journal}} WHERE session_id = '{SID}' AND seq = 3")
    for attempt in (behind.catch_up, lambda: behind.add_span("late")):
        with pytest.raises(StoreError) as raised:
            attempt()
        assert not isinstance(raised.value, StoreConflict)
        assert "numbered 4, 5" in str(raised.value)
    assert len(behind.spans()) == 2
    assert _numbers(store) == [1, 2, 4, 5]


def test_a_true_conflict_is_still_a_session_conflict_that_a_retry_resolves(
    damaged: tuple[Store, Execute],
) -> None:
    store, _ = damaged
    behind = _session_with_spans(store, 2)
    Session(store, session_id=SID).add_span("another writer")
    with pytest.raises(SessionConflict):
        behind.add_span("late")
    behind.add_span("late")
    assert _numbers(store) == [1, 2, 3, 4]
    assert len(behind.spans()) == 4


# -- SQLite: an entry number that is not one, an index that disagrees with its rows ----------


@pytest.mark.parametrize("number", ["4.5", "'four'"])
def test_an_entry_number_that_is_not_a_whole_number_is_a_store_error(tmp_path: Path, number: str) -> None:
    path = tmp_path / "numbers.db"
    with SQLiteStore(path) as store:
        session = _session_with_spans(store)
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(f"UPDATE journal SET seq = {number} WHERE session_id = '{SID}' AND seq = 4")
        with pytest.raises(StoreError) as raised:
            session.add_span("one more")
        assert not isinstance(raised.value, StoreConflict)
        assert len(session.spans()) == 4
        with pytest.raises(StoreError) as reopening:
            Session(store, session_id=SID)
        assert "whole number" in str(reopening.value)


def _varint(data: bytes | bytearray, i: int) -> tuple[int, int]:
    value = 0
    for k in range(9):
        byte = data[i + k]
        if k == 8:
            return (value << 8) | byte, i + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, i + k + 1
    raise AssertionError("unreachable")


def _renumber_in_index(path: Path, old: int, new: int) -> None:
    """Rewrite, in the file's bytes, the journal index's entry number ``old`` as ``new``.

    The unique index ``(session_id, seq)`` of a small journal is one leaf page; each cell is a
    record ``(session_id TEXT, seq INT, rowid)``, and a ``seq`` from 2 to 127 is one byte. Only
    the index changes: the row still says ``old``. Another connection's write afterwards makes
    live connections drop their cached pages, as a real damage would be seen.
    """
    with closing(sqlite3.connect(path)) as conn, conn:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_journal_1'"
        ).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = (root - 1) * page_size
    header = page + (100 if root == 1 else 0)
    assert data[header] == 0x0A, "the journal index is not a single leaf page"
    changed = 0
    for k in range(int.from_bytes(data[header + 3 : header + 5], "big")):
        cell = page + int.from_bytes(data[header + 8 + 2 * k : header + 10 + 2 * k], "big")
        _, record = _varint(data, cell)  # past the payload size
        size, at = _varint(data, record)
        kinds = []
        while at < record + size:
            kind, at = _varint(data, at)
            kinds.append(kind)
        number = record + size + (kinds[0] - 13) // 2  # past the session id's text
        if kinds[1] == 1 and data[number] == old:  # an 8-bit integer
            data[number] = new
            changed += 1
    assert changed == 1
    path.write_bytes(bytes(data))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE residency_meta SET value = value WHERE key = 'application'")


@pytest.mark.parametrize(("old", "new"), [(4, 5), (4, 2)], ids=["ahead-of-its-row", "behind-its-row"])
def test_a_journal_index_that_numbers_a_row_as_another_entry_is_a_store_error(
    tmp_path: Path, old: int, new: int
) -> None:
    path = tmp_path / "index.db"
    with SQLiteStore(path) as store:
        session = _session_with_spans(store)
        _renumber_in_index(path, old, new)
        with closing(sqlite3.connect(path)) as conn, conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok"
        for _ in range(2):
            with pytest.raises(StoreError) as raised:
                session.add_span("one more")
            assert not isinstance(raised.value, StoreConflict)
            assert "index" in str(raised.value) and "REINDEX" in str(raised.value)
        assert len(session.spans()) == 4  # entry 4 was not applied a second time
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("REINDEX")
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        session.add_span("one more")  # what the message says to do is enough
        assert [e.seq for e in store.load(SID)] == [1, 2, 3, 4, 5]
