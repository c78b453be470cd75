"""The SQLite store's file: how one is recognised, created whole, and opened at its schema.

A store file carries ``PRAGMA application_id`` (``APPLICATION_ID``) and ``user_version``
(``SCHEMA_VERSION``), and a ``residency_meta`` table saying the same. ``check_header`` refuses
what is not an SQLite file (or is empty: a store is never 0 bytes on disk, since
``create_file`` builds it under a temporary name and links it into place whole);
``open_schema`` refuses a database of another application, a newer schema or a broken one,
and upgrades schema 1 (no checkpoints table) in place; it also adds the index of archive scopes
(``CHAIN_ARCHIVE_INDEX``) to a file whose ``chain_archive`` table lacks it. Every refusal is a
``StoreError`` naming the file, raised before anything is written. See ``_sqlite`` for the layout
and durability.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from residency._errors import StoreError

__all__ = [
    "APPLICATION_ID",
    "CHAIN_ARCHIVE",
    "CHAIN_ARCHIVE_INDEX",
    "SCOPE_MEMBERS",
    "SEARCH_LABELS",
    "SEARCH_LABELS_INDEX",
    "SCHEMA_VERSION",
    "check_header",
    "create_file",
    "create_schema",
    "open_schema",
    "sync_folder",
    "translated",
]

APPLICATION_ID = 0x52534459
"""``PRAGMA application_id`` of a residency store (ASCII "RSDY")."""
SCHEMA_VERSION = 2
"""The layout this module writes and reads (version 1 files are upgraded on open)."""

_MAGIC = b"SQLite format 3\x00"
_CHECKPOINTS = (
    "CREATE TABLE checkpoints (session_id TEXT NOT NULL, part INTEGER NOT NULL, seq INTEGER NOT NULL, "
    "bytes BLOB NOT NULL, PRIMARY KEY (session_id, part))"
)
_SCHEMA = (
    "CREATE TABLE residency_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE sessions (session_id TEXT PRIMARY KEY)",
    # Rowid tables: journal data and content rows are often a kilobyte or more, which
    # WITHOUT ROWID tables store poorly.
    "CREATE TABLE journal (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "op TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL, UNIQUE (session_id, seq))",
    "CREATE TABLE content (key TEXT PRIMARY KEY, bytes BLOB NOT NULL)",
    _CHECKPOINTS,
)
# Created on first use (IF NOT EXISTS), so files without archive scopes keep schema 2 and stay
# readable by versions that do not know the table. ``pos`` orders a scope's records.
CHAIN_ARCHIVE = (
    "CREATE TABLE IF NOT EXISTS chain_archive (pos INTEGER PRIMARY KEY, scope TEXT NOT NULL, "
    "digest TEXT NOT NULL, record TEXT NOT NULL, UNIQUE (scope, digest))"
)
# A scope read resumes after the last position it saw (``WHERE scope = ? AND pos > ?``); without
# this index every read scans the whole table. Created with the table; a file whose table
# predates the index gets it when opened (an index changes no layout: schema 2 stays).
CHAIN_ARCHIVE_INDEX = "CREATE INDEX IF NOT EXISTS chain_archive_scope_pos ON chain_archive (scope, pos)"
# Which sessions belong to which archive scope (``join_scope``), created on first use like
# ``chain_archive``. A scope's recent calls are read from the journal through it.
SCOPE_MEMBERS = (
    "CREATE TABLE IF NOT EXISTS scope_members (scope TEXT NOT NULL, session_id TEXT NOT NULL, "
    "PRIMARY KEY (scope, session_id)) WITHOUT ROWID"
)
# Queries that led to successful calls, per archive scope (``learn_searches``), created on first
# use like ``chain_archive``; ``pos`` orders a scope's labels, and reads resume after it.
SEARCH_LABELS = (
    "CREATE TABLE IF NOT EXISTS search_labels (pos INTEGER PRIMARY KEY, scope TEXT NOT NULL, "
    "record TEXT NOT NULL)"
)
SEARCH_LABELS_INDEX = "CREATE INDEX IF NOT EXISTS search_labels_scope_pos ON search_labels (scope, pos)"
_TABLES_V1 = frozenset({"residency_meta", "sessions", "journal", "content"})
_TABLES = _TABLES_V1 | {"checkpoints"}


@contextmanager
def translated(path: str, what: str) -> Iterator[None]:
    """Turn an ``sqlite3`` error into a ``StoreError`` naming the file and what failed."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: {what} failed: {exc}; the store file may be damaged") from None


def check_header(path: str) -> bool:
    """Refuse a file that is not a store; True if there is no file yet."""
    if path == ":memory:":
        return False
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"{path}: is a directory, not a store file")
    try:
        with p.open("rb") as f:
            head = f.read(len(_MAGIC))
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store file: {exc.strerror}") from None
    if not head:
        # A store is never empty on disk (see ``create_file``): this one lost its bytes.
        raise StoreError(
            f"{path}: the store file is empty (0 bytes), as a truncated store would be; "
            f"restore it from a backup, or delete it (or point at a new path) to start a new store"
        )
    if head != _MAGIC:
        raise StoreError(
            f"{path}: not a residency store (not an SQLite database); "
            f"point the store at a new file or at one residency created"
        )
    return False


def create_file(path: str) -> None:
    """Create the store beside its path, whole, then link it in place.

    SQLite creates a database lazily: a process that dies between creating the file and
    writing its first page leaves 0 bytes, which the next open could not tell from a
    truncated store. Built under a temporary name and linked into place (which fails if
    the path appeared meanwhile: another process created it, and that one is used), the
    path only ever names a complete store, so an empty file is always refused.
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.creating")
    try:
        with translated(path, "create"):
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")  # persistent: kept in the header
                conn.execute("PRAGMA synchronous = FULL")
                create_schema(conn)
            finally:
                conn.close()  # checkpoints the WAL into the file and removes it
        try:
            os.link(tmp, p)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not p.exists():
                os.replace(tmp, p)
        sync_folder(p.parent)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the store: {exc.strerror or exc}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()


def open_schema(conn: sqlite3.Connection, path: str, durability: str) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise StoreError(
            f"{path}: an SQLite database of another application "
            f"(application_id {app_id:#x}, tables {', '.join(sorted(tables)) or 'none'}); "
            f"a residency store needs its own file"
        )
    if path != ":memory:":
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: cannot switch the database to WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous = {durability.upper()}")
    if app_id == 0:
        create_schema(conn)
        return
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: written by a newer residency (store schema {version}; this version "
            f"reads {SCHEMA_VERSION}); upgrade residency to open it"
        )
    if version == 1 and tables >= _TABLES_V1:
        _upgrade_from_1(conn)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = _TABLES - tables
    meta = dict(conn.execute("SELECT key, value FROM residency_meta").fetchall()) if not missing else {}
    if missing or version != SCHEMA_VERSION or meta.get("schema_version") != str(SCHEMA_VERSION):
        raise StoreError(
            f"{path}: a broken residency store (schema version {version}, "
            f"missing tables: {', '.join(sorted(missing)) or 'none'}); restore it from a backup"
        )
    if "chain_archive" in tables:
        conn.execute(CHAIN_ARCHIVE_INDEX)  # a no-op (and no write lock) once the index exists


def create_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO residency_meta (key, value) VALUES (?, ?)",
            [("application", "residency"), ("schema_version", str(SCHEMA_VERSION))],
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _upgrade_from_1(conn: sqlite3.Connection) -> None:
    """Schema 1 -> 2: add the checkpoints table. Another process may be doing the same."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        (meta,) = conn.execute(
            "SELECT COALESCE(MAX(value), '') FROM residency_meta WHERE key = 'schema_version'"
        ).fetchone()
        if version == 1 and meta == "1":
            conn.execute(_CHECKPOINTS)
            conn.execute("UPDATE residency_meta SET value = '2' WHERE key = 'schema_version'")
            conn.execute("PRAGMA user_version = 2")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def sync_folder(folder: Path) -> None:
    """Make a new directory entry durable (POSIX; elsewhere a no-op)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
