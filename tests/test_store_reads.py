"""Reads for readers of many sessions (``last_entries``), and the notices a PostgreSQL append sends.

Every store answers ``last_entries`` the same; the PostgreSQL store notifies its schema's channel
once per committed append (``j:`` and the session id), never for a refused one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import SQLiteStore
from residency._errors import StoreConflict
from residency._store._memory import MemoryStore
from residency._store._protocol import JournalEntry

from ._timing import NOTICE
from .postgres import drop_schema, new_schema, pg_url, with_params

STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        s = SQLiteStore(tmp_path / "r.db")
        yield s
        s.close()
    else:
        from residency._store._postgres import PostgresStore

        base, schema = pg_url(), new_schema()
        pg = PostgresStore(with_params(base, schema=schema))
        yield pg
        pg.close()
        drop_schema(base, schema)


def _e(op: str, turn: int, at: float) -> JournalEntry:
    return JournalEntry(op, {"turn": turn}, at)


def test_last_entries_gives_each_sessions_last_entry_and_last_entry_of_an_op(store: Any) -> None:
    store.append("a", [_e("turn", 1, 1.0), _e("call", 1, 2.0), _e("turn", 2, 3.0), _e("call", 2, 4.0)])
    store.append("b", [_e("call", 0, 5.0)])
    store.append("c 'quoted\"", [_e("turn", 7, 6.0)])
    ids = ["a", "b", "c 'quoted\"", "no-such-session"]

    last = store.last_entries(ids)
    assert {k: (e.seq, e.op, e.at) for k, e in last.items()} == {
        "a": (4, "call", 4.0),
        "b": (1, "call", 5.0),
        "c 'quoted\"": (1, "turn", 6.0),
    }
    turns = store.last_entries(ids, "turn")
    assert {k: (e.seq, dict(e.data)) for k, e in turns.items()} == {
        "a": (3, {"turn": 2}),
        "c 'quoted\"": (1, {"turn": 7}),
    }
    assert store.last_entries([]) == {}
    for sid, entry in last.items():  # the same entry load() gives
        assert store.load(sid)[-1] == entry


def test_a_postgresql_append_notifies_its_schemas_channel_once_committed() -> None:
    import psycopg
    from psycopg import sql

    from residency._store._postgres import PostgresStore, channel_of

    base = pg_url()
    mine, theirs = new_schema(), new_schema()
    store = PostgresStore(with_params(base, schema=mine))
    other = PostgresStore(with_params(base, schema=theirs))
    try:
        with psycopg.connect(base, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_of(mine))))
            other.append("s", [_e("turn", 1, 1.0)])  # another schema: another channel
            store.append("s", [_e("turn", 1, 1.0)])
            with pytest.raises(StoreConflict):
                store.append("s", [_e("turn", 2, 2.0)], after=0)  # refused: no notice
            long_id = "x" * 9000  # over a notice's payload limit: the append still succeeds
            store.append(long_id, [_e("turn", 1, 1.0)])
            store.append("s", [_e("turn", 2, 2.0)], after=1)
            got = [n.payload for n in listener.notifies(timeout=NOTICE, stop_after=3)]
        assert got == ["j:s", "j:", "j:s"]
        assert store.last_entries([long_id])[long_id].seq == 1
    finally:
        store.close()
        other.close()
        drop_schema(base, mine)
        drop_schema(base, theirs)
