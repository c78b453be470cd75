"""The PostgreSQL store on a real server: reopen, conflicts, foreign and newer schemas, hashes.

Every test gets a schema of its own (dropped afterwards) in the database ``RESIDENCY_PG_URL``
names; without it the tests skip, or fail when ``CI`` is set.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from psycopg import sql

from residency import (
    Budget,
    ConfigError,
    IntegrityError,
    InvalidInput,
    JournalEntry,
    MemoryStore,
    NotFound,
    Session,
    StoreConflict,
    StoreError,
    StoreUnavailable,
)
from residency._cli import main
from residency._store import open_store, redact_url
from residency._store._postgres import SCHEMA_VERSION, PostgresStore
from tests._timing import scaled

from .incident_tools import incident_tools
from .postgres import Relay, drop_schema, new_schema, pg_url, terminate, with_params, with_password

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "s3cret-Pw"  # trust auth accepts any password: this one must never be shown


@pytest.fixture
def base() -> str:
    return pg_url()


@pytest.fixture
def schema(base: str) -> Iterator[str]:
    name = new_schema()
    yield name
    drop_schema(base, name)


@pytest.fixture
def url(base: str, schema: str) -> str:
    # The application name lets a test find (and kill) exactly this store's connections.
    return with_params(base, schema=schema, application_name=schema)


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(url)
    yield s
    s.close()


@pytest.fixture
def admin(base: str) -> Iterator[Any]:
    with psycopg.connect(base, autocommit=True) as conn:
        yield conn


def _entry(n: int, op: str = "turn") -> JournalEntry:
    return JournalEntry(op, {"n": n}, float(n))


def _busy_session(store: Any, session_id: str) -> Session:
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


def _kill_connections(admin: Any, application: str) -> int:
    # Waits (up to 30 s) until each killed server process has exited, as tests/postgres.py's
    # ``terminate`` does: a connection whose process is still dying passes the pool's check, then
    # fails mid-request, which is another test's subject.
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity WHERE application_name = %s "
        "AND pid <> pg_backend_pid()",
        (application,),
    ).fetchall()
    return len(rows)


# -- round trips ---------------------------------------------------------------------------------


def test_a_reopened_store_has_the_same_sessions_as_a_memory_store(url: str) -> None:
    store = PostgresStore(url)
    expected = _busy_session(MemoryStore(), "agent-1").snapshot()
    assert _busy_session(store, "agent-1").snapshot() == expected
    store.close()
    with PostgresStore(url) as reopened:
        s = Session(reopened, session_id="agent-1")
        assert s.snapshot() == expected
        assert s.restore("s1") == "amount numeric(12,2) not null"
        assert reopened.sessions() == ["agent-1"]


def test_the_journal_round_trips_in_order_and_loads_after_a_position(store: PostgresStore) -> None:
    data = {"z": 1, "a": [1.5, None, True], "ünï": "côdé \u0000 \U0001f600", "big": 2**62}
    assert store.append("s", [JournalEntry("call", data, 1.25)]) == 1
    assert store.append_relaxed("s", [_entry(2), _entry(3)]) == 3
    assert store.append("s", []) == 3
    loaded = store.load("s")
    assert [(e.seq, e.op, e.at) for e in loaded] == [(1, "call", 1.25), (2, "turn", 2.0), (3, "turn", 3.0)]
    assert loaded[0].data == data and list(loaded[0].data) == ["z", "a", "ünï", "big"]
    assert [e.seq for e in store.load("s", 2)] == [3]
    assert store.load("s", 3) == [] and store.load("other") == []


def test_sessions_are_listed_in_code_point_order(store: PostgresStore) -> None:
    ids = ["b", "B", "a", "é", "a-2", "Z", "ä"]
    for sid in ids:
        store.append(sid, [_entry(1)])
    store.append("b", [_entry(2)])
    assert store.sessions() == sorted(ids)


def test_an_append_is_all_or_nothing(store: PostgresStore) -> None:
    store.append("s", [_entry(1)])
    for bad in ({"x": object()}, {"x": float("nan")}, {"x": "\ud800"}):
        with pytest.raises(StoreError):
            store.append("s", [_entry(2), JournalEntry("bad", bad, 2.0)])
    with pytest.raises(StoreError):  # PostgreSQL text cannot hold NUL: refused, not a raw error
        store.append("nul\x00id", [_entry(1)])
    assert [e.data for e in store.load("s")] == [{"n": 1}]
    assert store.sessions() == ["s"]


# -- conflicts -----------------------------------------------------------------------------------


def test_an_append_after_a_stale_position_is_a_conflict_and_appends_nothing(store: PostgresStore) -> None:
    assert store.append("s", [_entry(1)], after=0) == 1
    assert store.append("s", [_entry(2), _entry(3)], after=1) == 3
    for after in (0, 1, 2, 4):
        with pytest.raises(StoreConflict) as caught:
            store.append("s", [_entry(9)], after=after)
        assert (caught.value.session_id, caught.value.after, caught.value.last) == ("s", after, 3)
        with pytest.raises(StoreConflict):
            store.append_relaxed("s", [_entry(9)], after=after)
    with pytest.raises(StoreConflict):
        store.append("s", [], after=2)
    with pytest.raises(StoreConflict):
        store.append("new", [_entry(1)], after=1)
    assert [e.seq for e in store.load("s")] == [1, 2, 3]
    assert store.sessions() == ["s"]
    with pytest.raises(InvalidInput):
        store.append("s", [_entry(4)], after="3")  # type: ignore[arg-type]


def test_two_stores_racing_on_one_session_never_fork_the_journal(url: str) -> None:
    """Two writers (two pools, two connections) append after the same position, 15 times."""
    stores = [PostgresStore(url), PostgresStore(url)]
    wins: list[list[int]] = [[], []]
    conflicts = [0, 0]
    barrier = threading.Barrier(2, timeout=60)

    def writer(i: int) -> None:
        for round_ in range(15):
            barrier.wait()
            after = len(stores[i].load("race"))  # both read the same end between the barriers
            barrier.wait()
            try:
                stores[i].append(
                    "race", [JournalEntry("w", {"writer": i, "round": round_}, 0.0)], after=after
                )
            except StoreConflict:
                conflicts[i] += 1
            else:
                wins[i].append(round_)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    journal = stores[0].load("race")
    assert [e.seq for e in journal] == list(range(1, 16))  # gap-free: exactly one winner a round
    assert sorted(wins[0] + wins[1]) == list(range(15)) and sum(conflicts) == 15
    assert [(e.data["writer"], e.data["round"]) for e in journal] == sorted(
        [(0, r) for r in wins[0]] + [(1, r) for r in wins[1]], key=lambda w: w[1]
    )
    for s in stores:
        s.close()


def _blocked_on_a_lock(admin: Any, application: str) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (application,),
    ).fetchone()
    return bool(row[0])


@pytest.mark.parametrize("after", [1, None])
def test_the_unique_key_decides_a_race_the_end_of_the_journal_did_not(
    store: PostgresStore, admin: Any, schema: str, after: int | None
) -> None:
    """A rival's uncommitted entry 2 is invisible when the append reads the end: the key decides.

    With ``after`` the loser gets ``StoreConflict``; without it the store appends after the
    rival's entry, as a serialized writer would.
    """
    store.append("s", [_entry(1)])
    rival = psycopg.connect(pg_url())
    rival.execute(
        sql.SQL(
            "INSERT INTO {}.journal (session_id, seq, op, data, at) VALUES ('s', 2, 'rival', '{{}}', 0)"
        ).format(sql.Identifier(schema))
    )
    outcome: list[Any] = []

    def append() -> None:
        try:
            outcome.append(store.append("s", [_entry(2)], after=after))
        except StoreError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    try:
        for _ in range(100_000):  # bounded: the append blocks on the rival's key within moments
            if _blocked_on_a_lock(admin, schema) or not thread.is_alive():
                break
        assert _blocked_on_a_lock(admin, schema)
    finally:
        rival.commit()
        rival.close()
        thread.join(timeout=scaled(60))
    if after is None:
        assert outcome == [3]
        assert [e.op for e in store.load("s")] == ["turn", "rival", "turn"]
    else:
        assert len(outcome) == 1 and isinstance(outcome[0], StoreConflict)
        assert (outcome[0].after, outcome[0].last) == (1, 2)
        assert [e.op for e in store.load("s")] == ["turn", "rival"]


# -- checkpoints ---------------------------------------------------------------------------------


def test_a_checkpoint_never_moves_backwards_and_must_name_an_entry(store: PostgresStore) -> None:
    assert store.load_checkpoint("s") is None
    store.append("s", [_entry(1), _entry(2), _entry(3)])
    store.save_checkpoint("s", 2, b"after two")
    assert store.load_checkpoint("s") == (2, b"after two")
    store.save_checkpoint("s", 1, b"older")
    assert store.load_checkpoint("s") == (2, b"after two")
    store.save_checkpoint("s", 3, b"")
    assert store.load_checkpoint("s") == (3, b"")
    for bad in (0, 4, -1, True, "3", 2.0):
        with pytest.raises(InvalidInput) as caught:
            store.save_checkpoint("s", bad, b"x")  # type: ignore[arg-type]
        assert caught.value.where == "seq"
    with pytest.raises(InvalidInput):
        store.save_checkpoint("unknown", 1, b"x")
    assert store.load_checkpoint("s") == (3, b"")


def test_a_checkpoint_whose_parts_disagree_is_ignored(store: PostgresStore, admin: Any, schema: str) -> None:
    store.append("s", [_entry(1), _entry(2)])
    store.save_checkpoint("s", 2, b"whole")
    admin.execute(
        sql.SQL("INSERT INTO {}.checkpoints VALUES ('s', 1, 1, 'torn')").format(sql.Identifier(schema))
    )
    assert store.load_checkpoint("s") is None


def test_a_session_reopens_from_its_checkpoint_and_the_tail(url: str) -> None:
    with PostgresStore(url) as store:
        s = Session(store, session_id="cp", checkpoint_every=3)
        s.register_tools(incident_tools())
        for i in range(5):
            s.add_span(f"span {i}")
        expected = s.snapshot()
        saved = store.load_checkpoint("cp")
        assert saved is not None
    with PostgresStore(url) as store:
        reopened = Session(store, session_id="cp", checkpoint_every=3)
        assert reopened.restored_from == saved[0] > 0
        assert reopened.snapshot() == expected


# -- content -------------------------------------------------------------------------------------


def test_content_is_immutable_addressed_by_its_hash_and_verified(
    store: PostgresStore, admin: Any, schema: str
) -> None:
    blob = bytes(range(256)) * 3
    key = store.put_content(blob)
    assert store.put_content(blob) == key and store.get_content(key) == blob
    assert store.get_content(store.put_content(b"")) == b""
    with pytest.raises(NotFound):
        store.get_content("sha256:" + "0" * 64)
    admin.execute(
        sql.SQL("UPDATE {}.content SET bytes = 'a forgery' WHERE key = %s").format(sql.Identifier(schema)),
        (key,),
    )
    with pytest.raises(IntegrityError):
        store.get_content(key)


# -- opening: new, foreign, newer, broken --------------------------------------------------------


def test_a_new_schema_is_created_with_its_version_and_opened_by_two_stores_at_once(
    url: str, admin: Any, schema: str
) -> None:
    opened: list[Any] = []

    def open_one() -> None:
        try:
            opened.append(PostgresStore(url))
        except StoreError as exc:
            opened.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(opened) == 2 and all(isinstance(s, PostgresStore) for s in opened)
    rows = admin.execute(
        sql.SQL("SELECT version, application FROM {}.residency_version").format(sql.Identifier(schema))
    ).fetchall()
    assert rows == [(v, "residency") for v in range(1, SCHEMA_VERSION + 1)]  # one row per migration
    for s in opened:
        s.close()


def test_a_version_2_schema_gets_the_scope_index_when_a_gateway_opens_it(
    url: str, admin: Any, schema: str
) -> None:
    ident = sql.Identifier(schema)
    first = PostgresStore(url)
    assert first.archive_chain("default", {"digest": "d1"}) is True
    first.close()
    # Back to what version 2 wrote: no scope index (3), no scope members or call index (4), no
    # search labels (5).
    admin.execute(sql.SQL("DROP TABLE {}.search_labels").format(ident))
    admin.execute(sql.SQL("DROP INDEX {}.chain_archive_scope_pos").format(ident))
    admin.execute(sql.SQL("DROP TABLE {}.scope_members").format(ident))
    admin.execute(sql.SQL("DROP INDEX {}.journal_calls").format(ident))
    admin.execute(sql.SQL("DELETE FROM {}.residency_version WHERE version >= 3").format(ident))
    with pytest.raises(StoreError, match="needs an upgrade"):
        PostgresStore(url, create=False)  # a read-only open never upgrades
    upgraded = PostgresStore(url)
    try:
        assert [r["digest"] for _, r in upgraded.archived_chains("default")] == ["d1"]
    finally:
        upgraded.close()
    (found,) = admin.execute(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = %s "
        "AND indexname IN ('chain_archive_scope_pos', 'journal_calls')",
        (schema,),
    ).fetchone()
    assert found == 2
    upgraded = PostgresStore(url)
    try:
        upgraded.join_scope("default", "s1")  # the members table is back
        assert upgraded.scope_calls("default", 10) == []
        upgraded.learn_searches("default", [{"query": "q", "tool": "t", "session": "s1", "at": 1.0}])
        assert [r["tool"] for _, r in upgraded.search_labels("default")] == ["t"]  # labels too
    finally:
        upgraded.close()
    versions = admin.execute(sql.SQL("SELECT version FROM {}.residency_version").format(ident)).fetchall()
    assert sorted(v for (v,) in versions) == list(range(1, SCHEMA_VERSION + 1))


def test_a_schema_of_another_application_is_refused_and_left_alone(url: str, admin: Any, schema: str) -> None:
    ident = sql.Identifier(schema)
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
    admin.execute(sql.SQL("CREATE TABLE {}.accounts (id int PRIMARY KEY)").format(ident))
    with pytest.raises(StoreError) as caught:
        PostgresStore(url)
    assert "accounts" in str(caught.value)
    tables = admin.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    ).fetchall()
    assert tables == [("accounts",)]


def test_a_version_table_of_another_application_is_refused(url: str, admin: Any, schema: str) -> None:
    ident = sql.Identifier(schema)
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
    admin.execute(
        sql.SQL(
            "CREATE TABLE {}.residency_version (version int, application text, applied_at timestamptz)"
        ).format(ident)
    )
    admin.execute(sql.SQL("INSERT INTO {}.residency_version VALUES (1, 'other', now())").format(ident))
    with pytest.raises(StoreError):
        PostgresStore(url)


def test_a_schema_written_by_a_newer_version_is_refused_untouched(url: str, admin: Any, schema: str) -> None:
    PostgresStore(url).close()
    ident = sql.Identifier(schema)
    admin.execute(
        sql.SQL("INSERT INTO {}.residency_version (version, application) VALUES (%s, 'residency')").format(
            ident
        ),
        (SCHEMA_VERSION + 1,),
    )
    with pytest.raises(StoreError) as caught:
        PostgresStore(url)
    assert f"store schema {SCHEMA_VERSION + 1}" in str(caught.value)
    (count,) = admin.execute(sql.SQL("SELECT count(*) FROM {}.residency_version").format(ident)).fetchone()
    assert count == SCHEMA_VERSION + 1  # one row per migration, and the newer one: nothing added


def test_a_read_only_open_creates_nothing(url: str, admin: Any, schema: str) -> None:
    with pytest.raises(StoreError):
        PostgresStore(url, create=False)
    assert admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
    PostgresStore(url).close()
    with PostgresStore(url, create=False) as store:
        assert store.sessions() == []


def test_a_schema_missing_a_table_is_refused(url: str, admin: Any, schema: str) -> None:
    PostgresStore(url).close()
    admin.execute(sql.SQL("DROP TABLE {}.checkpoints").format(sql.Identifier(schema)))
    with pytest.raises(StoreError) as caught:
        PostgresStore(url)
    assert "checkpoints" in str(caught.value)


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://h/db?schema=Has-Caps",
        "postgresql://h/db?schema=1x",
        "postgresql://h:notaport/db",
        "postgresql://h/db?nonsense=1",
    ],
)
def test_a_malformed_url_or_schema_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        PostgresStore(bad)
    with pytest.raises(ConfigError):
        PostgresStore("sqlite:///x.db")
    with pytest.raises(ConfigError):
        PostgresStore("postgresql://h/db", pool_size=0)


def test_a_closed_store_raises_store_error(url: str) -> None:
    store = PostgresStore(url)
    store.close()
    store.close()
    with pytest.raises(StoreError):
        store.load("s")
    with pytest.raises(StoreError):
        store.append("s", [_entry(1)])


# -- open_store and the command line -------------------------------------------------------------


def test_open_store_opens_postgresql_and_postgres_urls(url: str) -> None:
    for scheme_url in (url, url.replace("postgresql://", "postgres://", 1)):
        store = open_store(scheme_url)
        assert isinstance(store, PostgresStore)
        store.close()
    for bad in ("mysql://user:hunter2@db/x", "sqlite:///", "residency.db", ""):
        with pytest.raises(ConfigError) as caught:
            open_store(bad)
        assert "hunter2" not in str(caught.value)


# -- lost connections ----------------------------------------------------------------------------


def test_reads_and_conditional_appends_survive_killed_connections(
    store: PostgresStore, admin: Any, schema: str
) -> None:
    assert store.append("s", [_entry(1)], after=0) == 1
    assert _kill_connections(admin, schema) >= 1
    assert [e.seq for e in store.load("s")] == [1]
    assert _kill_connections(admin, schema) >= 1
    assert store.append("s", [_entry(2)], after=1) == 2  # nothing was sent: appended once
    assert _kill_connections(admin, schema) >= 1
    key = store.put_content(b"still here")
    assert store.get_content(key) == b"still here"
    assert [e.seq for e in store.load("s")] == [1, 2]


def test_an_unconditional_append_on_a_killed_connection_fails_clearly_then_recovers(
    store: PostgresStore, admin: Any, schema: str
) -> None:
    store.append("s", [_entry(1)])
    assert _kill_connections(admin, schema) >= 1
    with pytest.raises(StoreError) as caught:
        store.append("s", [_entry(2)])
    assert not isinstance(caught.value, StoreConflict)
    assert store.append("s", [_entry(2)]) == 2
    assert [e.seq for e in store.load("s")] == [1, 2]


def test_an_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/test", timeout=5)
    assert caught.value.store == "postgresql://postgres:***@127.0.0.1:1/test"
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ("pool_size=0", "pool_size"),
        ("pool_size=2.5", "pool_size"),
        ("pool_size=many", "pool_size"),
        ("pool_timeout=0", "pool_timeout"),
        ("pool_timeout=nan", "pool_timeout"),
        ("pool_timeout=-1", "pool_timeout"),
        ("connect_timeout=soon", "connect_timeout"),
    ],
)
def test_bad_pool_settings_in_the_url_are_config_errors(query: str, where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        PostgresStore(f"postgresql://h/db?{query}")
    assert caught.value.where == where


def test_pool_settings_come_from_the_url_and_the_arguments_win(url: str) -> None:
    with PostgresStore(with_params(url, pool_size="2", pool_timeout="3")) as store:
        assert store._timeout == 3.0
        assert store._live().max_size == 2
        assert store.append("s", [_entry(1)]) == 1  # libpq never saw the store's own parameters
    with PostgresStore(with_params(url, pool_size="2"), pool_size=3, timeout=4) as store:
        assert (store._live().max_size, store._timeout) == (3, 4.0)


def test_killed_connections_are_replaced_without_an_error(url: str, schema: str, base: str) -> None:
    with PostgresStore(url) as store:
        store.append("s", [_entry(1)])
        assert terminate(base, schema) >= 1
        assert [e.seq for e in store.load("s")] == [1]  # a read on a fresh connection
        assert terminate(base, schema) >= 1
        assert store.append("s", [_entry(2)], after=1) == 2  # an append checks what was committed


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_store_cut_off_from_its_server_is_unavailable_then_recovers_by_itself(
    base: str, schema: str
) -> None:
    async with Relay(base) as relay:
        url = relay.url_via(with_params(with_password(base, PASSWORD), schema=schema))
        store = await anyio.to_thread.run_sync(lambda: PostgresStore(url, timeout=1))
        try:
            await anyio.to_thread.run_sync(lambda: store.append("s", [_entry(1)]))
            relay.cut()
            for work in (
                lambda: store.load("s"),
                lambda: store.append("s", [_entry(2)], after=1),
                lambda: store.append("s", [_entry(2)]),
                lambda: store.put_content(b"x"),
            ):
                with pytest.raises(StoreUnavailable) as caught:
                    await anyio.to_thread.run_sync(work)
                assert PASSWORD not in str(caught.value)
                assert f"127.0.0.1:{relay.port}" in str(caught.value)
            await relay.restore()
            with anyio.fail_after(scaled(60)):
                while True:
                    try:
                        await anyio.to_thread.run_sync(lambda: store.load("s"))
                        break
                    except StoreUnavailable:
                        await anyio.sleep(0.2)
            # Nothing the refused appends tried was written; the journal goes on from 1.
            assert await anyio.to_thread.run_sync(lambda: store.append("s", [_entry(2)], after=1)) == 2
            # (In a thread: the relay runs on this event loop.)
            assert [e.seq for e in await anyio.to_thread.run_sync(lambda: store.load("s"))] == [1, 2]
        finally:
            store.close()


# -- the password is never shown -----------------------------------------------------------------


def test_the_password_never_appears_in_errors_repr_or_logs(
    base: str, schema: str, admin: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_params(with_password(base, PASSWORD), schema=schema, application_name=schema)
    shown: list[str] = []
    store = PostgresStore(url)
    shown += [repr(store), store.url, redact_url(url)]
    store.append("s", [_entry(1)])
    with pytest.raises(StoreConflict) as conflict:
        store.append("s", [_entry(2)], after=0)
    shown.append(str(conflict.value))
    _kill_connections(admin, schema)
    with pytest.raises(StoreError) as lost:
        store.append("s", [_entry(2)])
    shown.append(str(lost.value))
    store.close()
    with pytest.raises(StoreError) as closed:
        store.load("s")
    shown.append(str(closed.value))
    for bad in (
        f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/test",
        f"postgresql://postgres@127.0.0.1:1/test?password={PASSWORD}",
    ):
        with pytest.raises(StoreError) as unreachable:
            PostgresStore(bad, timeout=5)
        shown.append(str(unreachable.value))
    for bad in (with_params(url, schema="Bad-Name"), url.replace("5432", "notaport")):
        with pytest.raises(ConfigError) as malformed:
            PostgresStore(bad)
        shown.append(str(malformed.value))
    admin.execute(
        sql.SQL("INSERT INTO {}.residency_version VALUES (99, 'residency')").format(sql.Identifier(schema))
    )
    with pytest.raises(StoreError) as newer:
        PostgresStore(url)
    shown.append(str(newer.value))
    shown += [r.getMessage() for r in caplog.records]
    assert all(PASSWORD not in text for text in shown), [t for t in shown if PASSWORD in t]
    assert "postgres:***@" in store.url


def test_inspect_takes_a_postgresql_url_and_never_shows_its_password(
    base: str, schema: str, admin: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = with_params(with_password(base, PASSWORD), schema=schema)
    with PostgresStore(url) as store:
        _busy_session(store, "desk")
    nothing = new_schema()  # holds no store: inspecting it must not create one
    empty = with_params(url, schema=nothing)
    runs = []
    for argv in (
        [url],
        [url, "--json"],
        [url, "--session", "desk", "--json"],
        [url, "--session", "x"],
        [empty],
    ):
        code = main(["inspect", *argv])
        out, err = capsys.readouterr()
        runs.append((code, out, err))
    assert [r[0] for r in runs] == [0, 0, 0, 2, 2], runs
    assert runs[0][1].split() == ["desk"]
    assert json.loads(runs[1][1]) == {"sessions": ["desk"]} and "tools" in json.loads(runs[2][1])
    assert all(PASSWORD not in out + err for _, out, err in runs)
    assert "postgres:***@" in runs[3][2] + runs[4][2]
    assert admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (nothing,)).fetchone() is None


@pytest.mark.slow
@pytest.mark.anyio
async def test_serve_journals_to_postgresql_and_never_shows_the_password(
    base: str, schema: str, tmp_path: Path
) -> None:
    """``residency serve --store postgresql://...``: a re-expansion outlives the process."""
    url = with_params(with_password(base, PASSWORD), schema=schema)
    params = StdioServerParameters(
        command=sys.executable,
        # by list: the re-expansion that outlives the process is probed through the list
        args=["-m", "residency", "serve", "--store", url, "--session", "desk-k", "--delivery", "list"],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    with anyio.fail_after(scaled(180)):
        for run in range(2):
            with (tmp_path / f"stderr-{run}").open("w") as errlog:
                async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                    names = [t.name for t in (await client.list_tools()).tools]
                    if run == 0:
                        assert "update_incident" not in names  # withheld by the demo budget
                        result = await client.call_tool("reexpand_tools", {"names": ["update_incident"]})
                        assert not result.is_error
                    else:
                        assert "update_incident" in names
    with PostgresStore(url) as store:
        assert any("desk-k" in sid for sid in store.sessions())
    stderr = "".join((tmp_path / f"stderr-{run}").read_text() for run in range(2))
    assert PASSWORD not in stderr
    assert "postgres:***@" in stderr
