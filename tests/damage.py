"""Stores the tests damage from outside, as an operator's mistake or a broken disk would.

``damageable(kind, folder)`` opens a store (SQLite in a real file, or PostgreSQL on a schema of
its own, skipped without ``RESIDENCY_PG_URL``) together with ``execute``, which runs one SQL
statement on the store's database through a connection of its own; ``{journal}`` in the
statement names the store's journal table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from residency._store import open_store
from residency._store._protocol import Store
from residency._store._sqlite import SQLiteStore
from tests.postgres import drop_schema, new_schema, pg_url, with_params

__all__ = ["KINDS", "Execute", "damageable"]

KINDS = ("sqlite", "postgresql")

Execute = Callable[[str], None]
"""Runs one SQL statement on the store's database, outside the store."""


@contextmanager
def damageable(kind: str, folder: Path) -> Iterator[tuple[Store, Execute]]:
    """A store of ``kind`` (one of ``KINDS``) and a way to change its tables behind its back."""
    if kind == "sqlite":
        path = folder / "damaged.db"

        def execute(statement: str) -> None:
            with closing(sqlite3.connect(path)) as conn, conn:
                conn.execute(statement.format(journal="journal"))

        with SQLiteStore(path) as store:
            yield store, execute
        return
    import psycopg

    base = pg_url()
    schema = new_schema()
    pg = open_store(with_params(base, schema=schema))

    def execute_pg(statement: str) -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(statement.format(journal=f'"{schema}".journal'))

    try:
        yield pg, execute_pg
    finally:
        close = getattr(pg, "close", None)
        if callable(close):
            close()
        drop_schema(base, schema)
