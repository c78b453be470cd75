"""Archive scopes: chains archived by one session reach every session of the scope (issue #15.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import (
    ChainCollision,
    InvalidInput,
    MemoryStore,
    Session,
    SQLiteStore,
    ToolArchived,
    ToolState,
)
from tests.postgres import pg_url, schema_url
from tests.test_chain_session import BIG, CHAIN, FAILURE, LARGE, SMALL, TOOLS, abandon, use

TWO: tuple[list[str], str, dict[str, Any]] = (
    ["summarize", "send_report"],
    "422 report too long",
    {"all": []},
)


def opened(store: Any, session_id: str, **kw: Any) -> Session:
    s = Session(store, session_id=session_id, **kw)
    s.register_tools(TOOLS)
    return s


def sqlite(path: Path) -> SQLiteStore:
    return SQLiteStore(path / "r.db")


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL store URL in a throwaway schema (skips without ``RESIDENCY_PG_URL``)."""
    with schema_url() as url:
        yield url


@pytest.fixture
def postgres(pg_schema_url: str) -> Iterator[Any]:
    from residency._store._postgres import PostgresStore

    store = PostgresStore(pg_schema_url)
    yield store
    store.close()


STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return sqlite(tmp_path)
    return request.getfixturevalue("postgres")


# -- the store API ----------------------------------------------------------------------------


def test_a_scope_is_append_only_ordered_and_keyed_by_digest(any_store: Any) -> None:
    store = any_store
    assert store.archived_chains("default") == []
    assert store.archive_chain("default", {"digest": "a", "x": 1}) is True
    assert store.archive_chain("default", {"digest": "a", "x": 2}) is False  # the first stays
    assert store.archive_chain("other", {"digest": "a", "x": 3}) is True
    assert store.archive_chain("default", {"digest": "b"}) is True
    rows = store.archived_chains("default")
    assert [r["digest"] for _, r in rows] == ["a", "b"]
    assert rows[0][1]["x"] == 1
    first = rows[0][0]
    assert [r["digest"] for _, r in store.archived_chains("default", first)] == ["b"]
    assert store.archived_chains("default", rows[-1][0]) == []
    assert [r["x"] for _, r in store.archived_chains("other")] == [3]


@pytest.mark.parametrize(
    ("scope", "record", "where"),
    [
        ("", {"digest": "a"}, "scope"),
        (3, {"digest": "a"}, "scope"),
        ("x" * 201, {"digest": "a"}, "scope"),
        ("s", {"nodigest": 1}, "record"),
        ("s", ["digest"], "record"),
        ("s", {"digest": "a", "bad": object()}, "record"),
    ],
)
def test_a_bad_scope_or_record_is_refused_and_nothing_is_kept(
    any_store: Any, scope: Any, record: Any, where: str
) -> None:
    store = any_store
    with pytest.raises(InvalidInput) as exc:
        store.archive_chain(scope, record)
    assert exc.value.where == where
    assert store.archived_chains("s") == []


# -- sessions sharing a scope -----------------------------------------------------------------


def test_a_new_session_starts_with_the_scope_s_chains_and_their_retirements() -> None:
    store = MemoryStore()
    a = opened(store, "a")
    use(a, "search_api_v2", {"q": "news"})
    use(a, "summarize", {"text": "..."})  # search is reused elsewhere in a
    record = abandon(a)
    assert a.tools(ToolState.ARCHIVED) == ["html_parser"]

    b = opened(store, "b")  # a successor: a fresh session id on the same store
    assert b.chains() == [record]
    assert b.archive_digest() == a.archive_digest()
    # b has no calls of its own, but a's search outside the run is a use in the scope: only
    # html_parser leaves b's active index.
    assert b.tools(ToolState.ARCHIVED) == ["html_parser"]
    with pytest.raises(ToolArchived):
        b.authorize_call("html_parser", SMALL)
    assert not b.check_chain(["search_api_v2", "html_parser"], [{}, LARGE]).safe
    # The inheritance is journaled: a reopen of b replays to the same state.
    assert Session(store, session_id="b").snapshot() == b.snapshot()


def test_the_live_guard_covers_chains_archived_by_another_open_session() -> None:
    store = MemoryStore()
    a, b = opened(store, "a"), opened(store, "b")
    b.mark_shared("summarize")
    use(b, "summarize", {"text": "draft"})
    a.archive_chain(*TWO)  # after b opened
    with pytest.raises(ChainCollision) as refused:
        b.authorize_call("send_report", {"to": "ops"})
    assert refused.value.expected_failure == TWO[1]
    assert b.archive_digest() == a.archive_digest()


def test_a_chain_naming_tools_a_session_lacks_waits_until_they_are_registered() -> None:
    store = MemoryStore()
    a = opened(store, "a")
    record = a.archive_chain(CHAIN, FAILURE, BIG)
    b = Session(store, session_id="b")
    b.register_tools(TOOLS[3:])  # summarize, send_report only
    assert b.chains() == [record]  # listed, not adopted
    assert not b.check_chain(CHAIN[:2], [{}, LARGE]).safe
    assert b.archive_digest() != a.archive_digest()
    b.register_tools(TOOLS)
    assert b.archive_digest() == a.archive_digest()
    assert b.state("html_parser") is ToolState.ARCHIVED


def test_check_chain_and_its_digest_follow_pending_chains_as_the_scope_and_the_archive_grow() -> None:
    from residency import Budget
    from residency._core._chains import ChainArchive

    store = MemoryStore()
    a = opened(store, "a")
    first = a.archive_chain(CHAIN, FAILURE, BIG)
    b = Session(store, session_id="b")
    b.register_tools(TOOLS[3:])  # summarize, send_report only: a's chains stay pending
    assert b.check_chain(["search_api_v2", "html_parser"], [{}, SMALL]).safe
    assert not b.check_chain(CHAIN[:2], [{}, LARGE]).safe
    assert b.chains_digest() == ChainArchive([first]).digest() != b.archive_digest()
    two = b.archive_chain(*TWO)  # the archive grows while chains are pending
    assert not b.check_chain(["summarize", "send_report"]).safe
    assert b.chains_digest() == ChainArchive([first, two]).digest() == a.chains_digest()
    later = a.archive_chain(["html_parser", "llm_extractor"], "400 schema mismatch", {"all": []})
    assert not b.check_chain(["search_api_v2", "html_parser", "llm_extractor"], [{}, SMALL, {}]).safe
    assert b.chains_digest() == ChainArchive([first, two, later]).digest()
    b.authorize_call("send_report", {"to": "ops"})  # looks at the pending chains: none is ready
    assert len(b.chains()) == 3 and b.archive_digest() == ChainArchive([two]).digest()
    c = opened(store, "c")
    ready = c.archive_chain(["send_report", "summarize"], "409 report locked", {"all": []})
    b.plan_turn(Budget(schema_tokens=100_000, argument_tokens=100_000))  # b has its tools: adopted
    assert b.archive_digest() == ChainArchive([two, ready]).digest()
    b.register_tools(TOOLS)  # adopts the rest: nothing pending any more
    assert b.chains_digest() == b.archive_digest() == c.chains_digest()
    assert len(b.chains()) == 4


def test_sessions_that_archive_different_chains_end_with_the_same_digest() -> None:
    store = MemoryStore()
    a, b = opened(store, "a"), opened(store, "b")
    a.archive_chain(CHAIN, FAILURE, BIG)
    b.archive_chain(*TWO)
    b.check_chain(["summarize"])  # reading sees a's chain
    assert len(b.chains()) == len(a.chains()) == 2
    a.register_tools(TOOLS)  # adoption points: register, authorize, archive
    b.register_tools(TOOLS)
    assert a.archive_digest() == b.archive_digest()
    assert sorted(r.digest for r in a.chains()) == sorted(r.digest for r in b.chains())


def test_scopes_are_separate_and_none_keeps_the_archive_to_the_session() -> None:
    store = MemoryStore()
    a = opened(store, "a", archive_scope="team-1")
    a.archive_chain(*TWO)
    assert opened(store, "b", archive_scope="team-2").chains() == []
    assert opened(store, "c", archive_scope=None).chains() == []
    assert opened(store, "d").chains() == []  # the default scope
    assert len(opened(store, "e", archive_scope="team-1").chains()) == 1
    private = opened(store, "f", archive_scope=None)
    private.archive_chain(CHAIN, FAILURE, BIG)
    assert len(opened(store, "g", archive_scope="team-1").chains()) == 1
    assert store.archived_chains("default") == []


@pytest.mark.parametrize("scope", ["", 7, "x" * 201])
def test_a_bad_scope_is_refused(scope: Any) -> None:
    with pytest.raises(InvalidInput) as exc:
        Session(MemoryStore(), archive_scope=scope)
    assert exc.value.where == "scope"


def test_the_scope_outlives_both_processes_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    first = SQLiteStore(path)
    a = opened(first, "a")
    record = abandon(a)
    first.close()
    second = SQLiteStore(path)
    b = opened(second, "b")
    assert b.chains() == [record]
    with pytest.raises(ToolArchived):
        b.authorize_call("html_parser", LARGE)
    second.close()
    third = SQLiteStore(path)
    assert Session(third, session_id="b").snapshot()["archive_digest"] == a.archive_digest()
    third.close()


def test_a_damaged_scope_record_is_skipped_not_fatal(tmp_path: Path) -> None:
    store = MemoryStore()
    store.archive_chain("default", {"digest": "forged", "topology": ["summarize"]})
    a = opened(store, "a")
    assert a.chains() == []
    a.archive_chain(*TWO)
    assert len(opened(store, "b").chains()) == 1


def test_sessions_on_two_stores_share_a_scope_on_postgres(postgres: Any, pg_schema_url: str) -> None:
    from residency._store._postgres import PostgresStore

    other = PostgresStore(pg_schema_url)
    try:
        a = opened(postgres, "a")
        record = abandon(a)
        b = opened(other, "b")
        assert b.chains() == [record]
        assert b.tools(ToolState.ARCHIVED) == ["search_api_v2", "html_parser"]
        b.archive_chain(*TWO)
        a.register_tools(TOOLS)
        assert a.archive_digest() == b.archive_digest()
    finally:
        other.close()


def test_a_version_1_postgres_schema_is_upgraded_and_keeps_its_sessions(pg_schema_url: str) -> None:
    import psycopg
    from psycopg import sql

    from residency import StoreError
    from residency._store._postgres import PostgresStore

    first = PostgresStore(pg_schema_url)
    opened(first, "old").record_call("summarize", {"text": "kept"})
    schema = first.schema
    first.close()
    with psycopg.connect(pg_url(), autocommit=True) as admin:  # back to what version 1 wrote
        s = sql.Identifier(schema)
        admin.execute(sql.SQL("DROP TABLE {}.chain_archive").format(s))
        admin.execute(sql.SQL("DROP TABLE {}.scope_members").format(s))
        admin.execute(sql.SQL("DROP TABLE {}.search_labels").format(s))
        admin.execute(sql.SQL("DROP INDEX {}.journal_calls").format(s))
        admin.execute(sql.SQL("DELETE FROM {}.residency_version WHERE version >= 2").format(s))
    with pytest.raises(StoreError):
        PostgresStore(pg_schema_url, create=False)  # a read-only open never upgrades
    upgraded = PostgresStore(pg_schema_url)
    try:
        assert len(Session(upgraded, session_id="old").snapshot()["calls"]) == 1
        assert upgraded.archive_chain("default", {"digest": "d"}) is True
    finally:
        upgraded.close()


def test_opening_a_session_writes_nothing_and_its_first_plan_adopts_the_scope() -> None:
    from residency import Budget

    store = MemoryStore()
    b = opened(store, "b")
    opened(store, "a").archive_chain(CHAIN, FAILURE, BIG)
    length = len(store.load("b"))
    reopened = Session(store, session_id="b")  # what ``residency inspect`` does
    assert len(store.load("b")) == length
    assert len(reopened.chains()) == 1  # listed, from the scope
    plan = reopened.plan_turn(Budget(schema_tokens=100_000, argument_tokens=100_000))
    assert "html_parser" not in plan.tool_names
    assert reopened.state("html_parser") is ToolState.ARCHIVED
    del b


def test_two_writers_of_one_session_adopt_a_scope_chain_once_without_failing() -> None:
    store = MemoryStore()
    first = opened(store, "shared")
    first.mark_shared("summarize")
    second = Session(store, session_id="shared")  # another writer of the same session
    opened(store, "other").archive_chain(*TWO)
    first.authorize_call("summarize", {"text": "x"})  # adopts: journals the chain
    # The second writer's adoption conflicts; it catches up, finds the chain adopted, goes on.
    second.authorize_call("summarize", {"text": "x"})
    second.record_call("summarize", {"text": "x"})
    with pytest.raises(ChainCollision):
        second.authorize_call("send_report", {"to": "ops"})
    assert [e.op for e in store.load("shared")].count("archive_chain") == 1
    first.catch_up()
    assert first.archive_digest() == second.archive_digest()


# -- uses elsewhere in the scope ----------------------------------------------------------------


def calls(store: Any, session_id: str, *tools: str, at: float) -> None:
    """Journal ``call`` entries straight into the store, one second apart from ``at``."""
    from residency import JournalEntry

    entries = [
        JournalEntry("call", {"id": f"c{i}", "tool": tool, "arguments": {}, "tokens": 1}, at + i)
        for i, tool in enumerate(tools)
    ]
    store.append(session_id, entries)


def test_scope_calls_are_the_members_most_recent_calls_oldest_first(any_store: Any) -> None:
    from residency import JournalEntry

    store = any_store
    assert store.scope_calls("default", 10) == []
    calls(store, "a", "t1", "t2", at=100)
    calls(store, "b", "t3", "t4", "t5", at=200)
    calls(store, "outsider", "t6", at=300)  # never joined: not the scope's
    store.append("b", [JournalEntry("turn", {}, 250)])  # not a call
    store.join_scope("default", "a")
    store.join_scope("default", "b")
    store.join_scope("default", "b")  # idempotent
    store.join_scope("other", "outsider")
    every = [("a", "t1"), ("a", "t2"), ("b", "t3"), ("b", "t4"), ("b", "t5")]
    assert store.scope_calls("default", 10) == every
    assert store.scope_calls("default", 2) == [("b", "t4"), ("b", "t5")]
    assert store.scope_calls("default", 10, exclude="b") == [("a", "t1"), ("a", "t2")]
    assert store.scope_calls("other", 10) == [("outsider", "t6")]
    assert store.scope_calls("default", 0) == []
    with pytest.raises(InvalidInput):
        store.scope_calls("", 10)
    with pytest.raises(InvalidInput):
        store.join_scope("", "a")


def test_a_tool_used_outside_every_run_elsewhere_in_the_scope_stays_active_and_guarded(
    any_store: Any,
) -> None:
    store = any_store
    other = opened(store, "other")
    use(other, "html_parser", SMALL)  # html_parser on a small payload: a use outside any run
    use(other, "summarize", {"text": "..."})
    stranger = opened(store, "stranger", archive_scope="elsewhere")
    use(stranger, "search_api_v2", {"q": "x"})  # another scope's use counts for nothing here

    a = opened(store, "a")  # fresh: its only html_parser call is inside the fatal run
    abandon(a)
    assert a.tools(ToolState.ARCHIVED) == ["search_api_v2"]
    assert a.state("html_parser") is not ToolState.ARCHIVED
    # Still guarded: the fatal run is refused, a small payload is not.
    assert not a.check_chain(["search_api_v2", "html_parser"], [{}, LARGE]).safe
    a.authorize_call("html_parser", SMALL)

    b = opened(store, "b")  # a successor adopts the chain with the same judgement
    assert b.tools(ToolState.ARCHIVED) == ["search_api_v2"]
    with pytest.raises(ToolArchived):
        b.authorize_call("search_api_v2", {"q": "prices"})
    b.authorize_call("html_parser", SMALL)


def test_uses_older_than_the_scope_window_do_not_count(
    any_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import residency._runtime._chains as chains

    monkeypatch.setattr(chains, "REUSE_WINDOW", 2)
    store = any_store
    other = opened(store, "other")
    use(other, "html_parser", SMALL)
    use(other, "summarize", {"text": "1"})
    use(other, "summarize", {"text": "2"})  # html_parser's use is now 3 calls back
    a = opened(store, "a")
    abandon(a)
    assert a.tools(ToolState.ARCHIVED) == ["search_api_v2", "html_parser"]
