"""The SQLite store: every session's journal and the content store in one file.

Layout (schema version 2)::

    residency_meta(key PRIMARY KEY, value)           application name and schema version
    sessions(session_id PRIMARY KEY)                 one row per session with a journal
    journal(id, session_id, seq, op, data JSON, at)  unique (session_id, seq)
    content(key PRIMARY KEY, bytes)                  key = "sha256:" + hex digest of bytes
    checkpoints(session_id, part, seq, bytes)        primary key (session_id, part)
    chain_archive(pos, scope, digest, record)        archive scopes, created on first use;
                                                     unique (scope, digest), index (scope, pos)

A session's checkpoint is one blob, split into parts of at most 64 MiB (SQLite refuses a
single value over 1 GB). Saving one replaces all its parts in one transaction, so a crash
during a save leaves the previous checkpoint whole. Schema version 1 (no checkpoints table) is
upgraded in place when opened: the upgrade only adds the table.

The file also carries ``PRAGMA application_id`` and ``user_version``, so ``file(1)`` and
SQLite tools can tell it apart, and a file of another application (or a newer schema) is
refused with a ``StoreError`` before anything is written to it. A new store is built under a
temporary name and linked into place whole, so an empty (0-byte) file at the store's path is
never one residency is creating: it is what truncation leaves, and it is refused too. How a file
is recognised, created and opened at its schema is ``_sqlite_file``'s.

Durability
----------
The journal runs in WAL mode with ``synchronous=FULL`` by default: every transaction syncs the
WAL before ``append`` (or ``put_content``) returns. That is what the Store protocol promises
("durable on return"), and it matters here: an acknowledged operation is one the agent acts on
(it drops a span's text because it was externalized, it stops seeing a schema because a
tombstone was recorded). With ``synchronous=NORMAL`` the WAL is synced only at checkpoints: a
process crash (even SIGKILL) still loses nothing, because committed frames are in the OS page
cache, but a power loss or kernel crash can roll back the most recent acknowledged
transactions; the agent's transcript would then be ahead of the journal (e.g. arguments the
journal has forgotten beside a schema it may now prune: a ghost tool). Neither setting can
corrupt the file or tear a transaction: WAL recovery keeps a prefix of whole commits, so a
journal entry that survives always finds the content written before it. FULL costs one fsync
per operation (about 0.3 ms on the disk where it was measured: fine for a turn-paced agent,
measured by ``residency bench spans``); pass ``durability="normal"`` for bulk imports or
throwaway sessions where losing the last moments on power loss is acceptable.

``append_relaxed`` commits one transaction at ``synchronous=NORMAL`` on a FULL store: sessions
journal their turn plans that way, since losing a plan leaves a more cautious state (a tool
shown again, arguments thought still visible) and never a ghost tool. The next ordinary
``append`` syncs it with everything before it, so a gateway call costs one fsync, not two.

Every read of content verifies its sha256; every sqlite3 error is translated to a
``StoreError`` naming the file, so a broken, foreign or truncated file never surfaces a raw
sqlite3 traceback.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from residency._errors import ConfigError, InvalidInput, StoreConflict, StoreError
from residency._store._memory import MemoryStore
from residency._store._protocol import (
    JournalEntry,
    Store,
    check_archive_record,
    check_scope,
    check_search_label,
    content_key,
    entries_from_rows,
    last_entries_from_rows,
    positioned_records,
    verified_content,
)
from residency._store._sqlite_file import (
    APPLICATION_ID,
    CHAIN_ARCHIVE,
    CHAIN_ARCHIVE_INDEX,
    SCHEMA_VERSION,
    SCOPE_MEMBERS,
    SEARCH_LABELS,
    SEARCH_LABELS_INDEX,
    check_header,
    create_file,
    open_schema,
    translated,
)

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteStore", "open_sqlite"]

_PART = 64 << 20

_NUMBERING = (
    "SELECT j.id, j.seq, (SELECT t.seq FROM journal AS t WHERE t.id = j.id) FROM journal AS j "
    "WHERE j.session_id = ? AND j.seq >= ? ORDER BY j.seq LIMIT ?"
)
"""A session's entries from a position on, numbered as the index has them (``j.seq``, read from
the covering index) and as their rows have them (``t.seq``, looked up by rowid)."""
_CHECKED = 1000
"""How many entries a conflicting append compares that way (another writer's are a few)."""

Durability = Literal["full", "normal"]


class SQLiteStore:
    """Journals and content in one SQLite file (WAL). Same contract as ``MemoryStore``.

    Example:
        >>> from residency import Session, SQLiteStore
        >>> store = SQLiteStore("residency.db")            # doctest: +SKIP
        >>> s = Session(store, session_id="agent-1")       # doctest: +SKIP

    Args:
        path: the database file; created (with its schema) if missing. An existing empty
            (0-byte) file is refused: it is what truncation leaves of a store.
        durability: ``"full"`` (default: every operation is on disk when it returns) or
            ``"normal"`` (a power loss may lose the last operations; see the module docs).
        timeout: seconds to wait for another process's write lock.

    Raises:
        StoreError: the file is empty, is not a SQLite database, belongs to another
            application, has a newer or broken schema, or cannot be opened.

    One store may be shared by many sessions and threads (calls are serialized); several
    processes may open the same file (SQLite's locking keeps appends whole and ordered, and an
    ``append(..., after=seq)`` is checked inside its write transaction, so two writers of one
    session never fork its journal).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, durability: Durability = "full", timeout: float = 5.0
    ) -> None:
        if durability not in ("full", "normal"):
            raise ConfigError(
                f"durability must be 'full' or 'normal', not {durability!r}", where="durability"
            )
        self._path = str(path)
        self._durability = durability
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._tables: set[str] = set()  # tables created on first use, known to exist
        parent = Path(self._path).parent
        if self._path != ":memory:" and not parent.is_dir():
            raise StoreError(f"{self._path}: cannot create the store: folder {str(parent)!r} does not exist")
        if check_header(self._path):
            create_file(self._path)
        with self._translate("open"):
            conn = sqlite3.connect(self._path, timeout=timeout, isolation_level=None, check_same_thread=False)
            try:
                open_schema(conn, self._path, durability)
            except BaseException:
                conn.close()
                raise
            self._conn = conn

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        with translated(self._path, what):
            yield

    @contextmanager
    def _connection(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translate(what):
            if self._conn is None:
                raise StoreError(f"{self._path}: the store is closed")
            yield self._conn

    # -- the Store protocol ------------------------------------------------------------------

    def append(self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None) -> int:
        """Append entries to a session's journal in one transaction (durable on return).

        Args:
            session_id: the session.
            entries: the entries, in order.
            after: the seq of the last entry the writer has applied; checked inside the write
                transaction, so no other process can append in between. None: unconditional.

        Returns:
            The sequence number of the session's last entry after the append.

        Raises:
            StoreConflict: ``after`` is not the journal's last entry. Nothing is appended.
            StoreError: an entry's data is not JSON, the file cannot be written, or the
                journal's numbering is damaged (an entry number that is not a whole number, an
                index that disagrees with its rows). Nothing is appended.
        """
        return self._append(session_id, entries, after, relaxed=False)

    def append_relaxed(
        self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
    ) -> int:
        """``append`` without the fsync: committed to the WAL, synced by the next ``append``.

        WAL frames are written in order and a sync covers every frame before it, so a relaxed
        transaction is either lost whole, together with every relaxed one after it, or kept.

        Raises:
            StoreConflict, StoreError: as ``append``.
        """
        return self._append(session_id, entries, after, relaxed=True)

    def _last(self, conn: sqlite3.Connection, session_id: str) -> int:
        """The number of the session's last journal entry (0: none).

        Raises:
            StoreError: it is not a whole number (a row written by something other than this
                store): the journal can be neither appended to nor trusted.
        """
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM journal WHERE session_id = ?", (session_id,)
        ).fetchone()
        if type(last) is not int:
            raise StoreError(
                f"{self._path}: session {session_id!r}: the journal's last entry is numbered {last!r}, "
                f"not with a whole number: the file is damaged; restore it from a backup"
            )
        return last

    def _conflict(self, conn: sqlite3.Connection, session_id: str, after: int, last: int) -> StoreConflict:
        """The ``StoreConflict`` for an append whose ``after`` is not the journal's last entry.

        Checked first, on this path only and over a bounded number of entries: that the
        journal's index numbers its last entries as their rows do. If it does not, the numbers
        the conflict is about are wrong, and a catch-up that trusted them could apply an entry
        twice or never reach the end.

        Raises:
            StoreError: the index disagrees with the rows (it is damaged); it names a row.
        """
        found = conn.execute(_NUMBERING, (session_id, min(after, last), _CHECKED)).fetchall()
        for row, indexed, stored in found:
            if indexed != stored:
                raise StoreError(
                    f"{self._path}: session {session_id!r}: the journal's index numbers row {row} as "
                    f"entry {indexed!r}, but the row is entry {stored!r}: the index is damaged. Run "
                    f"REINDEX on the file (sqlite3 {self._path} REINDEX), or restore it from a backup, "
                    f"then reopen the session"
                )
        return StoreConflict(
            f"{self._path}: session {session_id!r}: the journal's last entry is {last}, not {after}: "
            f"another writer appended to it",
            session_id=session_id,
            after=after,
            last=last,
        )

    def _append(
        self, session_id: str, entries: Sequence[JournalEntry], after: int | None, *, relaxed: bool
    ) -> int:
        rows = []
        for entry in entries:
            try:
                data = json.dumps(entry.data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"journal entry {entry.op!r} has data that is not JSON: {exc}") from None
            rows.append((entry.op, data, float(entry.at)))
        with self._connection("append") as conn:
            if not rows:
                last = self._last(conn, session_id)
                if after is not None and after != last:
                    raise self._conflict(conn, session_id, after, last)
                return int(last)
            relax = relaxed and self._durability == "full"
            if relax:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    last = self._last(conn, session_id)
                    # Read and written under the one write lock: no writer can come in between.
                    if after is not None and after != last:
                        raise self._conflict(conn, session_id, after, last)
                    if last == 0:
                        conn.execute("INSERT OR IGNORE INTO sessions (session_id) VALUES (?)", (session_id,))
                    conn.executemany(
                        "INSERT INTO journal (session_id, seq, op, data, at) VALUES (?, ?, ?, ?, ?)",
                        [(session_id, last + i, op, data, at) for i, (op, data, at) in enumerate(rows, 1)],
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if relax:
                    conn.execute("PRAGMA synchronous = FULL")
        return int(last) + len(rows)

    def load(self, session_id: str, after: int = 0) -> list[JournalEntry]:
        """The session's journal entries with ``seq > after``, in append order.

        Raises:
            StoreError: the file cannot be read, or an entry is not valid JSON.
        """
        with self._connection("load") as conn:
            rows = conn.execute(
                "SELECT seq, op, data, at FROM journal WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after),
            ).fetchall()
        return entries_from_rows(rows, str(self._path), session_id)

    def last_entries(self, session_ids: Sequence[str], op: str | None = None) -> dict[str, JournalEntry]:
        """Each listed session's last journal entry (its last ``op`` entry, if given), in one read.

        Sessions with no such entry are left out.

        Raises:
            StoreError: the file cannot be read, or an entry is not valid JSON.
        """
        if not session_ids:
            return {}
        pick = "" if op is None else " AND op = ?"
        query = (
            "SELECT j.session_id, j.seq, j.op, j.data, j.at FROM json_each(?) AS w JOIN journal AS j "
            f"ON j.id = (SELECT id FROM journal WHERE session_id = w.value{pick} ORDER BY seq DESC LIMIT 1)"
        )
        params: tuple[Any, ...] = (json.dumps(list(session_ids)),) + (() if op is None else (op,))
        with self._connection("load") as conn:
            rows = conn.execute(query, params).fetchall()
        return last_entries_from_rows(rows, str(self._path))

    def save_checkpoint(self, session_id: str, seq: int, blob: bytes) -> None:
        """Keep ``blob`` as the session's state after entry ``seq``, in one transaction.

        It replaces the session's checkpoint unless that one covers a later entry. Durable on
        return like ``append``; a crash during the save leaves the previous checkpoint whole.

        Raises:
            InvalidInput: ``seq`` is not the number of an entry in the session's journal.
            StoreError: the file cannot be written.
        """
        data = memoryview(bytes(blob))
        parts = [data[i : i + _PART] for i in range(0, len(data), _PART)] or [data]
        with self._connection("save checkpoint") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                last = self._last(conn, session_id)
                if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= last:
                    raise InvalidInput(
                        f"session {session_id!r}: a checkpoint must name an entry of its journal "
                        f"(1 to {last}), not {seq!r}",
                        where="seq",
                    )
                (known,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM checkpoints WHERE session_id = ?", (session_id,)
                ).fetchone()
                if known <= seq:
                    conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
                    conn.executemany(
                        "INSERT INTO checkpoints (session_id, part, seq, bytes) VALUES (?, ?, ?, ?)",
                        [(session_id, i, seq, part) for i, part in enumerate(parts)],
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def load_checkpoint(self, session_id: str) -> tuple[int, bytes] | None:
        """The session's checkpoint as ``(seq, blob)``, or None.

        A checkpoint whose parts disagree, or that names an entry the journal does not hold,
        is not returned: the session then replays its whole journal.

        Raises:
            StoreError: the file cannot be read.
        """
        with self._connection("load checkpoint") as conn:
            rows = conn.execute(
                "SELECT part, seq, bytes FROM checkpoints WHERE session_id = ? ORDER BY part", (session_id,)
            ).fetchall()
            if not rows:
                return None
            last = self._last(conn, session_id)
        seq = rows[0][1]
        if [r[0] for r in rows] != list(range(len(rows))) or any(r[1] != seq for r in rows):
            return None
        if not isinstance(seq, int) or not 1 <= seq <= last:
            return None
        if len(rows) == 1:
            blob = rows[0][2]
            return seq, blob if isinstance(blob, bytes) else bytes(blob)
        return seq, b"".join(bytes(r[2]) for r in rows)

    def sessions(self) -> list[str]:
        """The ids of every session with a journal, sorted."""
        with self._connection("list sessions") as conn:
            return [r[0] for r in conn.execute("SELECT session_id FROM sessions ORDER BY session_id")]

    def put_content(self, data: bytes) -> str:
        """Store bytes immutably (durable on return); returns their key. Idempotent."""
        blob = bytes(data)
        key = content_key(blob)
        with self._connection("put content") as conn:
            conn.execute("INSERT OR IGNORE INTO content (key, bytes) VALUES (?, ?)", (key, blob))
        return key

    def get_content(self, key: str) -> bytes:
        """The bytes stored under ``key``, verified against it.

        Raises:
            NotFound: no content under that key.
            IntegrityError: the stored bytes no longer match the key.
        """
        with self._connection("get content") as conn:
            row = conn.execute("SELECT bytes FROM content WHERE key = ?", (key,)).fetchone()
        return verified_content(None if row is None else bytes(row[0]), key, str(self._path))

    def _create(self, conn: sqlite3.Connection, table: str, *statements: str) -> None:
        """Run a table's ``IF NOT EXISTS`` statements once per store object."""
        if table not in self._tables:
            for statement in statements:
                conn.execute(statement)
            self._tables.add(table)

    def _exists(self, conn: sqlite3.Connection, table: str) -> bool:
        """Whether a table created on first use exists (remembered once it does)."""
        if table not in self._tables:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            if found.fetchone() is None:
                return False
            self._tables.add(table)
        return True

    def archive_chain(self, scope: str, record: Mapping[str, Any]) -> bool:
        """Add a chain record to an archive scope (durable on return); False if already there.

        Raises:
            InvalidInput: a malformed scope name or record.
        """
        check_scope(scope)
        digest, kept = check_archive_record(record)
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"))
        with self._connection("archive a chain") as conn:
            self._create(conn, "chain_archive", CHAIN_ARCHIVE, CHAIN_ARCHIVE_INDEX)
            cursor = conn.execute(
                "INSERT OR IGNORE INTO chain_archive (scope, digest, record) VALUES (?, ?, ?)",
                (scope, digest, text),
            )
            return cursor.rowcount == 1

    def archived_chains(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The scope's chain records added after position ``after``, oldest first.

        Raises:
            InvalidInput: a malformed scope name.
            StoreError: a stored record is not JSON (the file is damaged).
        """
        check_scope(scope)
        with self._connection("read archived chains") as conn:
            if not self._exists(conn, "chain_archive"):
                return []
            rows = conn.execute(
                "SELECT pos, record FROM chain_archive WHERE scope = ? AND pos > ? ORDER BY pos",
                (scope, after),
            ).fetchall()
        return positioned_records(rows, str(self._path), "archived chain", scope)

    def join_scope(self, scope: str, session_id: str) -> None:
        """Note the session as one of the scope's (idempotent; durable on return).

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)
        with self._connection("join an archive scope") as conn:
            self._create(conn, "scope_members", SCOPE_MEMBERS)
            conn.execute(
                "INSERT OR IGNORE INTO scope_members (scope, session_id) VALUES (?, ?)", (scope, session_id)
            )

    def scope_calls(self, scope: str, limit: int, *, exclude: str | None = None) -> list[tuple[str, str]]:
        """``(session_id, tool)`` of the scope's ``limit`` most recent calls, oldest first.

        The calls are the ``call`` entries of the scope's sessions (``join_scope``) other than
        ``exclude``, in the order they were written. The journal is read backwards from its
        newest entry, so the cost grows with how far back the last ``limit`` calls lie.

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)
        with self._connection("read the scope's calls") as conn:
            if not self._exists(conn, "scope_members"):
                return []
            rows = conn.execute(
                "SELECT session_id, json_extract(data, '$.tool') FROM journal WHERE op = 'call' "
                "AND session_id IN (SELECT session_id FROM scope_members WHERE scope = ?) "
                "AND session_id IS NOT ? ORDER BY id DESC LIMIT ?",
                (scope, exclude, max(limit, 0)),
            ).fetchall()
        return [(str(session_id), str(tool)) for session_id, tool in reversed(rows)]

    def learn_searches(self, scope: str, labels: Sequence[Mapping[str, Any]]) -> None:
        """Add search labels to an archive scope (durable on return).

        Raises:
            InvalidInput: a malformed scope name or label; nothing is added.
        """
        check_scope(scope)
        texts = [json.dumps(check_search_label(label), sort_keys=True) for label in labels]
        if not texts:
            return
        with self._connection("learn from searches") as conn:
            self._create(conn, "search_labels", SEARCH_LABELS, SEARCH_LABELS_INDEX)
            conn.executemany(
                "INSERT INTO search_labels (scope, record) VALUES (?, ?)", [(scope, t) for t in texts]
            )

    def search_labels(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The scope's search labels added after position ``after``, oldest first.

        Raises:
            InvalidInput: a malformed scope name.
            StoreError: a stored label is not JSON (the file is damaged).
        """
        check_scope(scope)
        with self._connection("read search labels") as conn:
            if not self._exists(conn, "search_labels"):
                return []
            rows = conn.execute(
                "SELECT pos, record FROM search_labels WHERE scope = ? AND pos > ? ORDER BY pos",
                (scope, after),
            ).fetchall()
        return positioned_records(rows, str(self._path), "search label", scope)

    def forget_search_labels(self, scope: str, tool: str | None = None) -> int:
        """Delete the scope's search labels (only ``tool``'s, if given); how many were deleted.

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)
        with self._connection("forget search labels") as conn:
            if not self._exists(conn, "search_labels"):
                return 0
            if tool is None:
                cursor = conn.execute("DELETE FROM search_labels WHERE scope = ?", (scope,))
            else:
                cursor = conn.execute(
                    "DELETE FROM search_labels WHERE scope = ? AND json_extract(record, '$.tool') = ?",
                    (scope, tool),
                )
            return int(cursor.rowcount)

    def close(self) -> None:
        """Close the file. Further calls raise ``StoreError``; closing twice is fine."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with self._translate("close"):
                conn.close()

    # -- maintenance -------------------------------------------------------------------------

    def check(self) -> None:
        """Run SQLite's full integrity check.

        Raises:
            StoreError: the file is damaged; the message lists the first problems found.
        """
        with self._connection("integrity check") as conn:
            problems = [r[0] for r in conn.execute("PRAGMA integrity_check(10)")]
        if problems != ["ok"]:
            raise StoreError(f"{self._path}: integrity check failed: {'; '.join(problems)}")

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self._path!r})"


def open_sqlite(url: str) -> Store | None:
    """The store a ``memory:`` or ``sqlite:///path`` URL names, or None for any other URL.

    ``sqlite:///relative.db`` or ``sqlite:////abs.db``; ``residency._store.open_store`` reads
    every URL and calls this for these two.

    Raises:
        StoreError: the SQLite file cannot be opened (see ``SQLiteStore``).
    """
    if url in ("memory:", "memory://"):
        return MemoryStore()
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix) :]:
        return SQLiteStore(url[len(prefix) :])
    return None
