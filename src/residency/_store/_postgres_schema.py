"""The PostgreSQL store's tables and statements: created, migrated and recognised here.

Layout (schema version 5), in one PostgreSQL schema of the store's own::

    residency_version(version PRIMARY KEY, application, applied_at)  one row per applied migration
    sessions(session_id PRIMARY KEY)                 one row per session with a journal
    journal(session_id, seq, op, data, at)           primary key (session_id, seq)
    content(key PRIMARY KEY, bytes)                  key = "sha256:" + hex digest of bytes
    checkpoints(session_id, part, seq, bytes)        primary key (session_id, part)
    chain_archive(pos, scope, digest, record)        (version 2) archive scopes; unique (scope, digest)
                                                     (version 3) index (scope, pos)
    scope_members(scope, session_id)                 (version 4) the sessions of each archive scope
    journal_calls (index)                            (version 4) journal (at) of ``call`` entries
    search_labels(pos, scope, record)                (version 5) queries that led to calls; index (scope, pos)

``migrate`` runs in one transaction under an advisory lock named after the schema, so that
replicas starting together create or upgrade it once. A new version adds its statements to
``_MIGRATIONS`` and bumps ``SCHEMA_VERSION``; an older residency refuses a newer schema.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import sql

from residency._errors import StoreError

__all__ = ["APPLICATION", "SCHEMA_VERSION", "migrate", "statements"]

SCHEMA_VERSION = 5
"""The newest layout this module writes and reads."""
APPLICATION = "residency"
"""What ``residency_version.application`` says in a schema of ours."""

_TABLES = frozenset(
    {
        "residency_version",
        "sessions",
        "journal",
        "content",
        "checkpoints",
        "chain_archive",
        "scope_members",
        "search_labels",
    }
)

# Each version's statements, applied in order; ``{s}`` is the schema. Text columns are
# "C"-collated: ids and keys compare by bytes, as in SQLite and in Python.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        'CREATE TABLE {s}.sessions (session_id text COLLATE "C" PRIMARY KEY)',
        # JSON as text, not jsonb: the data comes back exactly as written (key order, numbers).
        'CREATE TABLE {s}.journal (session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, '
        "op text NOT NULL, data text NOT NULL, at double precision NOT NULL, "
        "PRIMARY KEY (session_id, seq))",
        'CREATE TABLE {s}.content (key text COLLATE "C" PRIMARY KEY, bytes bytea NOT NULL)',
        'CREATE TABLE {s}.checkpoints (session_id text COLLATE "C" NOT NULL, part integer NOT NULL, '
        "seq bigint NOT NULL, bytes bytea NOT NULL, PRIMARY KEY (session_id, part))",
    ),
    # Archive scopes. Writers of one scope take an advisory lock, so positions are committed in
    # order and a reader that resumes after the last position it saw misses nothing.
    2: (
        'CREATE TABLE {s}.chain_archive (pos bigserial PRIMARY KEY, scope text COLLATE "C" NOT NULL, '
        'digest text COLLATE "C" NOT NULL, record text NOT NULL, UNIQUE (scope, digest))',
    ),
    # A scope read resumes after the last position it saw (scope = %s AND pos > %s ORDER BY pos).
    3: ("CREATE INDEX IF NOT EXISTS chain_archive_scope_pos ON {s}.chain_archive (scope, pos)",),
    # A scope's recent calls: its sessions, and their call entries newest first (``at`` orders
    # entries across sessions; the journal has no global position).
    4: (
        'CREATE TABLE {s}.scope_members (scope text COLLATE "C" NOT NULL, '
        'session_id text COLLATE "C" NOT NULL, PRIMARY KEY (scope, session_id))',
        "CREATE INDEX IF NOT EXISTS journal_calls ON {s}.journal (at) WHERE op = 'call'",
    ),
    # Search labels, per scope; writers take the scope's advisory lock, as for chain_archive.
    5: (
        'CREATE TABLE {s}.search_labels (pos bigserial PRIMARY KEY, scope text COLLATE "C" NOT NULL, '
        "record text NOT NULL)",
        "CREATE INDEX IF NOT EXISTS search_labels_scope_pos ON {s}.search_labels (scope, pos)",
    ),
}


def migrate(conn: psycopg.Connection[Any], schema: str, where: str, *, create: bool) -> None:
    """Create or upgrade the store's tables in ``schema``, or refuse the schema.

    Args:
        conn: an autocommit connection.
        schema: the PostgreSQL schema (a plain, already checked name).
        where: how errors name the store (never with a password).
        create: False changes nothing: only a current store is accepted.

    Raises:
        StoreError: the schema holds tables of another application, was written by a newer
            residency, is missing tables, or (``create=False``) holds no current store.
    """
    s = sql.Identifier(schema)
    digest = hashlib.sha256(f"residency:{schema}".encode()).digest()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (int.from_bytes(digest[:8], "big", signed=True),))
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                (schema,),
            )
        }
        version = 0
        if "residency_version" in tables:
            rows = conn.execute(sql.SQL("SELECT version, application FROM {}.residency_version").format(s))
            found = rows.fetchall()
            apps = {str(r[1]) for r in found}
            if apps - {APPLICATION}:
                raise StoreError(
                    f"{where}: a schema of another application ({', '.join(sorted(apps))}); "
                    f"a residency store needs a schema of its own: add ?schema=NAME to the URL"
                )
            version = max((int(r[0]) for r in found), default=0)
        elif not create:
            raise StoreError(f"{where}: no residency store there")
        elif tables:
            raise StoreError(
                f"{where}: holds tables of another application ({', '.join(sorted(tables)[:8])}); "
                f"a residency store needs a schema of its own: add ?schema=NAME to the URL"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{where}: written by a newer residency (store schema {version}; this version "
                f"reads {SCHEMA_VERSION}); upgrade residency to open it"
            )
        if version < SCHEMA_VERSION and not create:
            raise StoreError(
                f"{where}: store schema {version} needs an upgrade to {SCHEMA_VERSION}; open it "
                f"once with the gateway to upgrade it"
            )
        if version == 0:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.residency_version (version integer PRIMARY KEY, "
                    "application text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(s)
            )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(sql.SQL(statement).format(s=s))
            conn.execute(
                sql.SQL("INSERT INTO {}.residency_version (version, application) VALUES (%s, %s)").format(s),
                (step, APPLICATION),
            )
            tables |= _TABLES
        missing = _TABLES - tables
        if missing:
            raise StoreError(
                f"{where}: a broken residency store (schema version {version}, missing tables: "
                f"{', '.join(sorted(missing))}); restore it from a backup"
            )


_APPEND = """
WITH head AS (
    SELECT COALESCE(MAX(seq), 0) AS last FROM {s}.journal WHERE session_id = %(sid)s
), ok AS (
    SELECT last FROM head WHERE %(after)s::bigint IS NULL OR last = %(after)s::bigint
), new_session AS (
    INSERT INTO {s}.sessions (session_id) SELECT %(sid)s FROM ok WHERE last = 0
    ON CONFLICT DO NOTHING
), added AS (
    INSERT INTO {s}.journal (session_id, seq, op, data, at)
    SELECT %(sid)s, ok.last + r.n, r.op, r.data, r.at
    FROM ok, unnest(%(ops)s::text[], %(data)s::text[], %(at)s::float8[]) WITH ORDINALITY AS r(op, data, at, n)
    RETURNING seq
), noticed AS (
    SELECT pg_notify(%(channel)s, %(notice)s) FROM ok
)
SELECT head.last, (SELECT count(*) FROM added), (SELECT count(*) FROM noticed) FROM head
"""

# The store's statements; ``{s}`` is the schema.
_STATEMENTS = {
    "append": _APPEND,
    "last": "SELECT COALESCE(MAX(seq), 0) FROM {s}.journal WHERE session_id = %s",
    "raw": "SELECT op, data, at FROM {s}.journal WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
    "load": "SELECT seq, op, data, at FROM {s}.journal WHERE session_id = %s AND seq > %s ORDER BY seq",
    "last_entries": "SELECT w.sid, j.seq, j.op, j.data, j.at FROM unnest(%s::text[]) AS w(sid) "
    "CROSS JOIN LATERAL (SELECT seq, op, data, at FROM {s}.journal WHERE session_id = w.sid "
    "ORDER BY seq DESC LIMIT 1) AS j",
    "last_op_entries": "SELECT w.sid, j.seq, j.op, j.data, j.at FROM unnest(%s::text[]) AS w(sid) "
    "CROSS JOIN LATERAL (SELECT seq, op, data, at FROM {s}.journal WHERE session_id = w.sid AND op = %s "
    "ORDER BY seq DESC LIMIT 1) AS j",
    "lock_session": "SELECT 1 FROM {s}.sessions WHERE session_id = %s FOR UPDATE",
    "checkpoint_seq": "SELECT COALESCE(MAX(seq), 0) FROM {s}.checkpoints WHERE session_id = %s",
    "drop_checkpoint": "DELETE FROM {s}.checkpoints WHERE session_id = %s",
    "put_checkpoint": "INSERT INTO {s}.checkpoints (session_id, part, seq, bytes) VALUES (%s, %s, %s, %s)",
    "get_checkpoint": "SELECT part, seq, bytes FROM {s}.checkpoints WHERE session_id = %s ORDER BY part",
    "sessions": "SELECT session_id FROM {s}.sessions",
    "put_content": "INSERT INTO {s}.content (key, bytes) VALUES (%s, %s) ON CONFLICT DO NOTHING",
    "get_content": "SELECT bytes FROM {s}.content WHERE key = %s",
    "lock_scope": "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
    "archive_chain": "INSERT INTO {s}.chain_archive (scope, digest, record) VALUES (%s, %s, %s) "
    "ON CONFLICT DO NOTHING RETURNING pos",
    "notify": "SELECT pg_notify(%s, %s)",
    "archived_chains": "SELECT pos, record FROM {s}.chain_archive WHERE scope = %s AND pos > %s ORDER BY pos",
    "join_scope": "INSERT INTO {s}.scope_members (scope, session_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
    "learn_search": "INSERT INTO {s}.search_labels (scope, record) VALUES (%s, %s)",
    "search_labels": "SELECT pos, record FROM {s}.search_labels WHERE scope = %s AND pos > %s ORDER BY pos",
    "forget_search_labels": "DELETE FROM {s}.search_labels WHERE scope = %s",
    "forget_tool_labels": "DELETE FROM {s}.search_labels WHERE scope = %s AND record::json->>'tool' = %s",
    "scope_calls": "SELECT session_id, data::json->>'tool' FROM {s}.journal WHERE op = 'call' "
    "AND session_id IN (SELECT session_id FROM {s}.scope_members WHERE scope = %s) "
    "AND session_id IS DISTINCT FROM %s ORDER BY at DESC, seq DESC LIMIT %s",
}


def statements(schema: str) -> dict[str, sql.Composed]:
    """The store's statements, by name, for the tables in ``schema`` (a plain, checked name)."""
    s = sql.Identifier(schema)
    return {name: sql.SQL(text).format(s=s) for name, text in _STATEMENTS.items()}
