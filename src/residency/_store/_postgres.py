"""The PostgreSQL store: journals and content in a database that several gateways can share.

The tables live in one PostgreSQL schema of their own (``residency`` by default; see
``_postgres_schema`` for the layout). The store creates the schema on first open and migrates
it forward, under an advisory lock so that replicas starting together do not race. A schema
that holds tables of another application, or that a newer residency has migrated past this
version, is refused with a ``StoreError`` before anything is written to it. Pick the schema
with the ``schema`` argument or a ``?schema=NAME`` query parameter in the URL (several stores,
e.g. tests, can share one database that way).

Adding a chain to an archive scope also sends ``NOTIFY`` on the schema's channel
(``channel_of``), in the transaction that adds it: gateway replicas listening there have their
sessions of the scope adopt the chain (see ``residency._gateway._fanout``). An append sends one
too (``j:`` and the session's id, in the append's statement, so it is delivered exactly when the
entries are visible): dashboards listening there show the change without polling. Each schema
has its own channel, so two stores in one database do not hear each other.

Appends and conflicts
---------------------
An append is one statement (one round trip, its own transaction): it reads the session's last
``seq`` through the primary-key index and inserts the entries after it. Two writers that read
the same end both try to insert the same ``(session_id, seq)``; the primary key rejects the
loser. With ``after`` (the last entry the writer has applied) the loser gets ``StoreConflict``,
and so does a writer whose ``after`` is already stale when it reads the end; without ``after``
the store reads the new end and tries again, as SQLite's write lock would have made it wait.

Durability
----------
Every transaction commits with the server's ``synchronous_commit`` (``on`` by default): an
acknowledged append is on the server's disk. ``append_relaxed`` is an ordinary append here.
An asynchronous commit (``synchronous_commit = off``) would save one WAL flush, but PostgreSQL
shows a transaction to every other connection as soon as it commits, before that flush: another
replica could act on a relaxed entry that a server crash then takes back, and its view would be
ahead of the journal. SQLite's relaxed commit has no such reader, so it stays an SQLite
optimisation.

When PostgreSQL is away
-----------------------
A lost connection is told apart from a refusal: reads, ``put_content`` and ``save_checkpoint``
are retried once on a fresh connection (they are idempotent). An append that loses its
connection may or may not have committed: with ``after`` the store looks (our entries are
there: done; the journal still ends at ``after``: append again; anything else:
``StoreConflict``); without ``after`` it raises ``StoreUnavailable`` saying so, and the caller
must reload (a ``Session``'s next catch-up applies the entries if they were committed).

Every wait is bounded: one connection attempt by ``connect_timeout`` (default 5 s), and a
statement's wait for a pooled connection by ``timeout`` (URL ``pool_timeout``, default 10 s).
A server that is down, restarting or unreachable, or that dropped our connections
(``pg_terminate_backend``), gives ``StoreUnavailable``, a ``StoreError`` that names the store
and changes nothing. There is nothing to restart when it returns: the pool replaces dead
connections, retrying in the background with a growing delay for up to ``timeout`` seconds and
again at the next statement after that, so the first statements after the server's return
succeed.

The URL's password (in the user part or a ``password`` parameter) never appears in an error,
a log line or ``repr``: the store names itself by its redacted URL. Prefer ``PGPASSWORD`` or a
``~/.pgpass`` file, which libpq reads, over a password in the URL.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from residency._errors import (
    ConfigError,
    InvalidInput,
    StoreConflict,
    StoreError,
    StoreUnavailable,
)
from residency._store._postgres_schema import SCHEMA_VERSION, migrate, statements
from residency._store._postgres_url import DEFAULT_SCHEMA, scrub, setting, split_url
from residency._store._protocol import (
    JournalEntry,
    check_archive_record,
    check_scope,
    check_search_label,
    content_key,
    entries_from_rows,
    last_entries_from_rows,
    positioned_records,
    verified_content,
)

__all__ = [
    "ARCHIVE_NOTICE",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SCHEMA",
    "DEFAULT_TIMEOUT",
    "JOURNAL_NOTICE",
    "SCHEMA_VERSION",
    "SESSION_NOTICE",
    "PostgresStore",
    "channel_of",
    "journal_notice",
]

DEFAULT_POOL_SIZE = 4
"""Connections a store opens at most (URL parameter ``pool_size``)."""
DEFAULT_TIMEOUT = 10.0
"""Seconds a statement waits for a pooled connection (URL parameter ``pool_timeout``)."""
DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds one connection attempt may take (libpq's ``connect_timeout``)."""
_SCHEMES = ("postgresql://", "postgres://")
SESSION_NOTICE = "s"
"""Payload prefix of a notice that a session's view changed (``s:SESSION_ID``)."""
ARCHIVE_NOTICE = "a"
"""Payload prefix of a notice that an archive scope gained a chain (``a:SCOPE``)."""
_RACES = 8  # appends without ``after`` that lose a race retry this often before giving up
_PART = 64 << 20  # checkpoint part size, as in SQLite (one bytea value may not exceed 1 GB)


JOURNAL_NOTICE = "j"
"""Payload prefix of a notice that a session's journal grew (``j:SESSION_ID``; ``j:`` alone for an
id too long for a notice's payload)."""
_NOTICE_BYTES = 7000  # PostgreSQL refuses payloads of 8000 bytes or more
T = TypeVar("T")


def channel_of(schema: str) -> str:
    """The ``LISTEN/NOTIFY`` channel of a store schema (bounded to PostgreSQL's 63-byte names)."""
    return "residency_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


def journal_notice(session_id: str) -> str:
    """The payload of the notice an append to ``session_id`` sends (see ``JOURNAL_NOTICE``)."""
    shown = session_id if len(session_id.encode("utf-8", "replace")) <= _NOTICE_BYTES else ""
    return f"{JOURNAL_NOTICE}:{shown}"


class PostgresStore:
    """Journals and content in a PostgreSQL schema. Same contract as ``SQLiteStore``.

    Example:
        >>> from residency import PostgresStore, Session
        >>> store = PostgresStore("postgresql://residency@db.internal/agents")   # doctest: +SKIP
        >>> s = Session(store, session_id="agent-1")                           # doctest: +SKIP

    Args:
        url: a libpq URL, ``postgresql://user@host:port/database``, optionally with
            ``?schema=NAME`` and any libpq parameter (``sslmode``, ``connect_timeout``, ...).
        schema: the PostgreSQL schema holding the store's tables (default: the URL's
            ``schema`` parameter, else ``residency``); created if missing.
        pool_size: the most connections the store opens at once (one per concurrent
            statement; default: the URL's ``pool_size`` parameter, else 4).
        timeout: seconds a statement waits for a connection from the pool (a free one, or a
            new one while the server is away) before ``StoreUnavailable`` (default: the URL's
            ``pool_timeout`` parameter, else 10).
        connect_timeout: seconds one connection attempt may take (default: the URL's
            ``connect_timeout`` parameter, else 5).
        create: create (or upgrade) the schema if needed; False opens only a current store
            and changes nothing (``residency inspect``).

    Raises:
        ConfigError: a malformed URL, schema name, pool size or timeout.
        StoreUnavailable: the database server cannot be reached.
        StoreError: the schema belongs to another application, was written by a newer
            residency, or is broken.

    One store may be shared by many sessions and threads, and many processes (replicas) may
    open the same database and schema.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        create: bool = True,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(_SCHEMES):
            raise ConfigError("a PostgreSQL store URL starts with 'postgresql://'", where="store")
        self._conninfo, self._schema, self._url, self._secrets, params, ours = split_url(url, schema)
        size = setting(pool_size, ours.get("pool_size"), DEFAULT_POOL_SIZE, "pool_size", int)
        self._timeout = setting(timeout, ours.get("pool_timeout"), DEFAULT_TIMEOUT, "pool_timeout", float)
        connect = setting(
            connect_timeout, params.get("connect_timeout"), DEFAULT_CONNECT_TIMEOUT, "connect_timeout", float
        )
        # libpq counts whole seconds (and takes 1 as 2): round up, never below 2.
        self._connect_timeout = max(2, math.ceil(connect))
        # Keyword arguments override the URL's parameters: only fill in what it leaves out.
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": self._connect_timeout}
        if "application_name" not in params:
            kwargs["application_name"] = "residency"
        self._sql = statements(self._schema)
        with self._translate("open"):
            with psycopg.connect(self._conninfo, **kwargs) as conn:
                migrate(conn, self._schema, f"{self._url} (schema {self._schema!r})", create=create)
            pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                self._conninfo,
                kwargs=kwargs,
                min_size=1,
                max_size=size,
                open=False,
                name=f"residency-{self._schema}",
                timeout=self._timeout,
                # While the server is away the pool retries in the background with a growing
                # delay; it gives up after this long and tries again at the next statement, so
                # a server that returns is found within a few seconds, not minutes.
                reconnect_timeout=self._timeout,
            )
            try:
                pool.open(wait=True, timeout=self._timeout)
            except BaseException:
                pool.close()
                raise
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = pool

    @property
    def url(self) -> str:
        """The database URL, its password shown as ``***``."""
        return self._url

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
        return self._schema

    # -- running statements ------------------------------------------------------------------

    def _fail(self, what: str, exc: BaseException) -> StoreError:
        if isinstance(exc, PoolTimeout):
            detail = f"no database connection within {self._timeout:g} s"
        else:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, PoolTimeout | psycopg.OperationalError):
            # The server is away (down, restarting, unreachable, or it dropped our connections):
            # nothing about the data is wrong, and the pool reconnects by itself.
            return self._unavailable(f"{what} failed, nothing was changed: {detail}")
        return StoreError(scrub(f"{self._url}: {what} failed: {detail}", self._secrets))

    def _unavailable(self, detail: str) -> StoreUnavailable:
        return StoreUnavailable(
            scrub(
                f"store {self._url} is unavailable (PostgreSQL cannot be reached): {detail}. "
                f"Retry when the server is back; the store reconnects by itself",
                self._secrets,
            ),
            store=self._url,
        )

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._fail(what, exc) from None

    def _live(self) -> ConnectionPool[psycopg.Connection[Any]]:
        pool = self._pool
        if pool is None:
            raise StoreError(f"{self._url}: the store is closed")
        return pool

    def _on(self, what: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on a pooled connection; once more on a fresh one if the first was lost.

        Only for work that may safely run twice (reads, idempotent writes).
        """
        pool = self._live()
        try:
            with pool.connection() as conn:
                return work(conn)
        except psycopg.OperationalError as exc:
            first = exc
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._fail(what, exc) from None
        # The server restarted or dropped our connections: the pool still holds dead ones.
        with self._translate(what):
            pool.check()
        try:
            with pool.connection() as conn:
                return work(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._fail(what, exc if not isinstance(exc, PoolTimeout) else first) from None

    # -- the Store protocol ------------------------------------------------------------------

    def append(self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None) -> int:
        """Append entries to a session's journal in one transaction (durable on return).

        Args:
            session_id: the session.
            entries: the entries, in order.
            after: the seq of the last entry the writer has applied; if the journal ends
                elsewhere, nothing is appended.

        Returns:
            The sequence number of the session's last entry after the append.

        Raises:
            StoreConflict: ``after`` is given and the journal does not end there, or another
                writer appended at the same time. Nothing is appended.
            StoreError: an entry's data is not JSON, or the database cannot be written.
                Nothing is appended (when the connection is lost during the commit without
                ``after``, the message says the outcome is unknown).
        """
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise InvalidInput(f"after must be a journal position (an int), not {after!r}", where="after")
        ops, data, ats = [], [], []
        for entry in entries:
            try:
                text = json.dumps(entry.data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                text.encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise StoreError(f"journal entry {entry.op!r} has data that is not JSON: {exc}") from None
            ops.append(entry.op)
            data.append(text)
            ats.append(float(entry.at))
        if not ops:
            last = self._on("append", lambda conn: _one(conn, self._sql["last"], (session_id,)))
            if after is not None and last != after:
                raise self._conflict(session_id, after, last)
            return last
        return self._append_rows(session_id, ops, data, ats, after)

    def _append_rows(
        self,
        session_id: str,
        ops: list[str],
        data: list[str],
        ats: list[float],
        after: int | None,
        *,
        settling: bool = False,
    ) -> int:
        params = {
            "sid": session_id,
            "after": after,
            "ops": ops,
            "data": data,
            "at": ats,
            "channel": channel_of(self._schema),
            "notice": journal_notice(session_id),
        }
        for _ in range(_RACES):
            pool = self._live()
            try:
                with pool.connection() as conn:
                    row = conn.execute(self._sql["append"], params).fetchone()
            except pg_errors.UniqueViolation:
                if after is not None:
                    raise self._conflict(session_id, after) from None
                continue  # another writer took these numbers: read the new end and try again
            except psycopg.OperationalError as exc:
                # The connection died: the statement may or may not have committed.
                with self._translate("append"):
                    pool.check()
                if after is None or settling:
                    raise self._unavailable(
                        f"the connection was lost during an append to session {session_id!r}, "
                        f"which may or may not have been committed; reload the session "
                        f"({str(exc).strip() or type(exc).__name__})"
                    ) from None
                return self._settle(session_id, ops, data, ats, after)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._fail("append", exc) from None
            assert row is not None
            last, added = int(row[0]), int(row[1])
            if added != len(ops):
                assert after is not None  # without it every entry is inserted
                raise self._conflict(session_id, after, last)
            return last + added
        raise StoreError(f"{self._url}: an append to session {session_id!r} kept racing other writers")

    def _settle(self, session_id: str, ops: list[str], data: list[str], ats: list[float], after: int) -> int:
        """An append with ``after`` lost its connection: find out whether it was committed."""
        mine = list(zip(ops, data, ats, strict=True))

        def read(conn: psycopg.Connection[Any]) -> tuple[list[tuple[Any, ...]], int]:
            rows = conn.execute(self._sql["raw"], (session_id, after, len(mine))).fetchall()
            return rows, _one(conn, self._sql["last"], (session_id,))

        rows, last = self._on("append", read)
        if last == after:
            return self._append_rows(session_id, ops, data, ats, after, settling=True)
        if [(r[0], r[1], r[2]) for r in rows] == mine:
            return after + len(mine)
        raise self._conflict(session_id, after, last)

    def _conflict(self, session_id: str, after: int, last: int | None = None) -> StoreConflict:
        if last is None:  # lost the race for the key: the winner's entries are committed now
            last = self._on("append", lambda conn: _one(conn, self._sql["last"], (session_id,)))
        return StoreConflict(
            f"{self._url}: session {session_id!r}: the journal's last entry is {last}, not {after}: "
            f"another writer appended to it",
            session_id=session_id,
            after=after,
            last=last,
        )

    def append_relaxed(
        self, session_id: str, entries: Sequence[JournalEntry], *, after: int | None = None
    ) -> int:
        """``append``: on a shared database a relaxed commit could be seen, then lost (see above)."""
        return self.append(session_id, entries, after=after)

    def load(self, session_id: str, after: int = 0) -> list[JournalEntry]:
        """The session's journal entries with ``seq > after``, in append order.

        Raises:
            StoreError: the database cannot be read, or an entry is not valid JSON.
        """
        rows = self._on("load", lambda conn: conn.execute(self._sql["load"], (session_id, after)).fetchall())
        return entries_from_rows(rows, str(self._url), session_id)

    def last_entries(self, session_ids: Sequence[str], op: str | None = None) -> dict[str, JournalEntry]:
        """Each listed session's last journal entry (its last ``op`` entry, if given), in one
        statement (one round trip for a whole page of sessions).

        Sessions with no such entry are left out.

        Raises:
            StoreError: the database cannot be read, or an entry is not valid JSON.
        """
        if not session_ids:
            return {}
        query = self._sql["last_entries" if op is None else "last_op_entries"]
        params = (list(session_ids),) if op is None else (list(session_ids), op)
        rows = self._on("load", lambda conn: conn.execute(query, params).fetchall())
        return last_entries_from_rows(rows, str(self._url))

    def save_checkpoint(self, session_id: str, seq: int, blob: bytes) -> None:
        """Keep ``blob`` as the session's state after entry ``seq``, in one transaction.

        It replaces the session's checkpoint unless that one covers a later entry; concurrent
        saves for one session are serialized on its row. Durable on return like ``append``.

        Raises:
            InvalidInput: ``seq`` is not the number of an entry in the session's journal.
            StoreError: the database cannot be written.
        """
        data = memoryview(bytes(blob))
        parts = [bytes(data[i : i + _PART]) for i in range(0, len(data), _PART)] or [b""]

        def save(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute(self._sql["lock_session"], (session_id,))
                last = _one(conn, self._sql["last"], (session_id,))
                if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= last:
                    raise InvalidInput(
                        f"session {session_id!r}: a checkpoint must name an entry of its journal "
                        f"(1 to {last}), not {seq!r}",
                        where="seq",
                    )
                if _one(conn, self._sql["checkpoint_seq"], (session_id,)) <= seq:
                    conn.execute(self._sql["drop_checkpoint"], (session_id,))
                    with conn.cursor() as cur:
                        cur.executemany(
                            self._sql["put_checkpoint"],
                            [(session_id, i, seq, p) for i, p in enumerate(parts)],
                        )

        self._on("save checkpoint", save)

    def load_checkpoint(self, session_id: str) -> tuple[int, bytes] | None:
        """The session's checkpoint as ``(seq, blob)``, or None.

        A checkpoint whose parts disagree, or that names an entry the journal does not hold,
        is not returned: the session then replays its whole journal.

        Raises:
            StoreError: the database cannot be read.
        """

        def read(conn: psycopg.Connection[Any]) -> tuple[list[tuple[Any, ...]], int]:
            rows = conn.execute(self._sql["get_checkpoint"], (session_id,)).fetchall()
            return rows, (_one(conn, self._sql["last"], (session_id,)) if rows else 0)

        rows, last = self._on("load checkpoint", read)
        if not rows:
            return None
        seq = rows[0][1]
        if [r[0] for r in rows] != list(range(len(rows))) or any(r[1] != seq for r in rows):
            return None
        if not 1 <= seq <= last:
            return None
        return int(seq), b"".join(bytes(r[2]) for r in rows)

    def sessions(self) -> list[str]:
        """The ids of every session with a journal, sorted."""
        rows = self._on("list sessions", lambda conn: conn.execute(self._sql["sessions"]).fetchall())
        return sorted(str(r[0]) for r in rows)

    def put_content(self, data: bytes) -> str:
        """Store bytes immutably (durable on return); returns their key. Idempotent."""
        blob = bytes(data)
        key = content_key(blob)
        self._on("put content", lambda conn: conn.execute(self._sql["put_content"], (key, blob)))
        return key

    def get_content(self, key: str) -> bytes:
        """The bytes stored under ``key``, verified against it.

        Raises:
            NotFound: no content under that key.
            IntegrityError: the stored bytes no longer match the key.
        """
        row = self._on("get content", lambda conn: conn.execute(self._sql["get_content"], (key,)).fetchone())
        return verified_content(None if row is None else bytes(row[0]), key, self._url)

    def archive_chain(self, scope: str, record: Mapping[str, Any]) -> bool:
        """Add a chain record to an archive scope (durable on return); False if already there.

        Raises:
            InvalidInput: a malformed scope name or record.
        """
        check_scope(scope)
        digest, kept = check_archive_record(record)
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"))
        lock = f"residency:{self._schema}:chain_archive:{scope}"

        def add(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                conn.execute(self._sql["lock_scope"], (lock,))
                added = conn.execute(self._sql["archive_chain"], (scope, digest, text)).fetchone() is not None
                if added:  # sent at commit: every replica's sessions of the scope adopt it
                    conn.execute(self._sql["notify"], (channel_of(self._schema), f"{ARCHIVE_NOTICE}:{scope}"))
                return added

        return self._on("archive a chain", add)

    def archived_chains(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The scope's chain records added after position ``after``, oldest first.

        Raises:
            InvalidInput: a malformed scope name.
            StoreError: a stored record is not JSON.
        """
        check_scope(scope)
        rows = self._on(
            "read archived chains",
            lambda conn: conn.execute(self._sql["archived_chains"], (scope, after)).fetchall(),
        )
        return positioned_records(rows, self._url, "archived chain", scope)

    def join_scope(self, scope: str, session_id: str) -> None:
        """Note the session as one of the scope's (idempotent; durable on return).

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)
        self._on(
            "join an archive scope", lambda conn: conn.execute(self._sql["join_scope"], (scope, session_id))
        )

    def scope_calls(self, scope: str, limit: int, *, exclude: str | None = None) -> list[tuple[str, str]]:
        """``(session_id, tool)`` of the scope's ``limit`` most recent calls, oldest first.

        The calls are the ``call`` entries of the scope's sessions (``join_scope``) other than
        ``exclude``, ordered by the time their writers journaled them (one index scan).

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)
        rows = self._on(
            "read the scope's calls",
            lambda conn: conn.execute(self._sql["scope_calls"], (scope, exclude, max(limit, 0))).fetchall(),
        )
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
        lock = f"residency:{self._schema}:search_labels:{scope}"

        def add(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                # Positions committed in order, so a reader resuming after one misses nothing.
                conn.execute(self._sql["lock_scope"], (lock,))
                with conn.cursor() as cursor:
                    cursor.executemany(self._sql["learn_search"], [(scope, t) for t in texts])

        self._on("learn from searches", add)

    def search_labels(self, scope: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The scope's search labels added after position ``after``, oldest first.

        Raises:
            InvalidInput: a malformed scope name.
            StoreError: a stored label is not JSON.
        """
        check_scope(scope)
        rows = self._on(
            "read search labels",
            lambda conn: conn.execute(self._sql["search_labels"], (scope, after)).fetchall(),
        )
        return positioned_records(rows, self._url, "search label", scope)

    def forget_search_labels(self, scope: str, tool: str | None = None) -> int:
        """Delete the scope's search labels (only ``tool``'s, if given); how many were deleted.

        Raises:
            InvalidInput: a malformed scope name.
        """
        check_scope(scope)

        def forget(conn: psycopg.Connection[Any]) -> int:
            if tool is None:
                return int(conn.execute(self._sql["forget_search_labels"], (scope,)).rowcount)
            return int(conn.execute(self._sql["forget_tool_labels"], (scope, tool)).rowcount)

        return self._on("forget search labels", forget)

    def close(self) -> None:
        """Close the pool's connections. Further calls raise ``StoreError``; closing twice is fine."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._url!r}, schema={self._schema!r})"


def _one(conn: psycopg.Connection[Any], query: sql.Composed, params: tuple[Any, ...]) -> int:
    row = conn.execute(query, params).fetchone()
    return int(row[0]) if row is not None else 0
