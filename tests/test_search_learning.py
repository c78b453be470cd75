"""Search learns from use: a query followed by a successful call of a tool it found is a label,
kept in the store per archive scope, ranked for every session of the scope, capped and decaying,
and an operator lists and resets it (``residency admin learned``).

BM25 alone (``RESIDENCY_SEARCH_RANKER=bm25``) in these tests: the labels' lexical similarity is
the subject, and the figures with the embedding model are the benchmark's
(``python -m benchmarks search``, "learned" in its report).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import InvalidInput, MemoryStore, Session, SQLiteStore
from residency._cli import main
from residency._runtime import _learning
from residency._search import ToolIndex
from residency._search._learned import (
    HALF_LIFE_DAYS,
    PER_SESSION,
    SATURATION,
    LearnedLabels,
    SearchLabel,
)
from residency._store._protocol import Store
from tests.postgres import drop_schema, new_schema, pg_url, with_params

TOOLS: list[dict[str, Any]] = [
    {
        "name": "send_message",
        "description": "Post a message to a Slack channel.",
        "inputSchema": {
            "type": "object",
            "properties": {"channel": {"type": "string"}, "text": {"type": "string"}},
        },
    },
    {
        "name": "create_issue",
        "description": "Open a new GitHub issue.",
        "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}},
    },
    {
        "name": "list_pods",
        "description": "List the pods of a Kubernetes namespace.",
        "inputSchema": {"type": "object", "properties": {"namespace": {"type": "string"}}},
    },
]
UNFOUND = "tell the team we are done"  # no word in common with any tool above
FOUND = "slack the team we are done"  # "slack": send_message


@pytest.fixture(autouse=True)
def bm25_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESIDENCY_SEARCH_RANKER", "bm25")


def withheld(store: Store, **options: Any) -> Session:
    """A new session of ``store`` over ``TOOLS``, every tool withheld (so search finds them)."""
    session = Session(store, **options)
    session.register_tools(TOOLS)
    for tool in TOOLS:
        session.evict(tool["name"])
    return session


def names(session: Session, query: str) -> list[str]:
    return [hit.name for hit in session.search(query)]


def test_a_rephrased_search_that_led_to_a_call_teaches_the_next_session() -> None:
    store = MemoryStore()
    first = withheld(store)
    assert names(first, UNFOUND) == []
    assert names(first, FOUND)[0] == "send_message"
    assert first.call_succeeded("send_message") == [UNFOUND, FOUND]
    assert first.call_succeeded("send_message") == []  # each query once per tool and session
    stored = [label for _, label in store.search_labels("default")]
    assert [(label["query"], label["tool"]) for label in stored] == [
        (UNFOUND, "send_message"),
        (FOUND, "send_message"),
    ]
    assert {label["session"] for label in stored} == {first.session_id}
    # Another session of the scope: the phrasing no tool's text matched now finds the tool, and
    # so does another phrasing of the same need; an unrelated query ranks as before.
    second = withheld(store)
    assert names(second, UNFOUND) == ["send_message"]
    assert names(second, "tell the whole team that we are done")[0] == "send_message"
    assert names(second, "kubernetes pods")[0] == "list_pods"


def test_only_a_tool_a_recent_search_found_is_learned() -> None:
    store = MemoryStore()
    session = withheld(store)
    assert session.call_succeeded("send_message") == []  # no search at all
    names(session, "kubernetes pods")
    assert session.call_succeeded("create_issue") == []  # not among that search's hits
    assert session.call_succeeded("list_pods") == ["kubernetes pods"]
    # After a labelled call, earlier searches are not rephrasings of the next need.
    names(session, "open a github issue")
    assert session.call_succeeded("create_issue") == ["open a github issue"]
    assert len(store.search_labels("default")) == 2


def test_a_search_too_old_for_its_call_is_not_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    session = withheld(store)
    names(session, FOUND)
    monkeypatch.setattr(_learning, "RECENT_SECONDS", 0.0)
    assert session.call_succeeded("send_message") == []
    assert store.search_labels("default") == []


def test_scopes_keep_their_labels_apart_and_no_scope_learns_nothing() -> None:
    store = MemoryStore()
    team = withheld(store, archive_scope="team-a")
    names(team, UNFOUND)
    names(team, FOUND)
    team.call_succeeded("send_message")
    assert names(withheld(store, archive_scope="team-b"), UNFOUND) == []
    assert names(withheld(store, archive_scope="team-a"), UNFOUND) == ["send_message"]
    alone = withheld(store, archive_scope=None)
    names(alone, "open a github issue")
    assert alone.call_succeeded("create_issue") == []
    assert [label["tool"] for _, label in store.search_labels("team-a")] == ["send_message"] * 2


def _index() -> ToolIndex:
    from residency._core._tools import definition_hash
    from residency._search import IndexedTool

    return ToolIndex([IndexedTool(t["name"], definition_hash(t), t) for t in TOOLS], embedder=None)


def test_one_session_cannot_capture_the_ranking() -> None:
    index = _index()
    positions = {tool.name: i for i, tool in enumerate(index.tools)}
    now = 1_000_000.0
    spam = [SearchLabel(f"{UNFOUND} {i}", "create_issue", "spammer", now) for i in range(500)]
    learned = LearnedLabels(spam, now=now)
    assert learned.tools() == {"create_issue": 64}  # a tool's most recent labels only
    scores = learned.scores(UNFOUND, positions, len(index.tools))
    assert scores is not None
    assert scores.max() == pytest.approx(PER_SESSION / SATURATION)  # one session: half the signal
    # A query the tool's own text matches still finds that tool first.
    assert index.search("kubernetes pods", learned=learned)[0].name == "list_pods"
    many = LearnedLabels(
        [SearchLabel(UNFOUND, "create_issue", f"s{i}", now) for i in range(int(SATURATION) + 3)], now=now
    )
    again = many.scores(UNFOUND, positions, len(index.tools))
    assert again is not None and again.max() == pytest.approx(1.0)  # capped, however many sessions


def test_labels_fade_with_age_and_unrelated_queries_get_nothing() -> None:
    index = _index()
    positions = {tool.name: i for i, tool in enumerate(index.tools)}
    now = 1_000_000_000.0
    fresh = LearnedLabels([SearchLabel(UNFOUND, "send_message", "a", now)], now=now)
    old = LearnedLabels([SearchLabel(UNFOUND, "send_message", "a", now - HALF_LIFE_DAYS * 86_400)], now=now)
    fresh_scores = fresh.scores(UNFOUND, positions, 3)
    old_scores = old.scores(UNFOUND, positions, 3)
    assert fresh_scores is not None and old_scores is not None
    assert old_scores.max() == pytest.approx(fresh_scores.max() / 2)
    assert fresh.scores("kubernetes namespace", positions, 3) is None


def test_a_process_drops_what_an_operator_reset_at_its_next_full_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    session = withheld(store)
    names(session, UNFOUND)
    names(session, FOUND)
    session.call_succeeded("send_message")
    assert names(withheld(store), UNFOUND) == ["send_message"]  # read, and kept by the process
    store.forget_search_labels("default")  # as `residency admin learned reset` does
    assert names(withheld(store), UNFOUND) == ["send_message"]  # until the next full read
    monkeypatch.setattr(_learning, "RELOAD_SECONDS", 0.0)
    assert names(withheld(store), UNFOUND) == []


# -- the stores ------------------------------------------------------------------------------


def _label(query: str, tool: str, session: str = "s") -> dict[str, Any]:
    return {"query": query, "tool": tool, "session": session, "at": 1.0}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        with SQLiteStore(tmp_path / "r.db") as sqlite:
            yield sqlite
    else:
        from residency._store._postgres import PostgresStore

        url, schema = pg_url(), new_schema()
        pg = PostgresStore(with_params(url, schema=schema))
        try:
            yield pg
        finally:
            pg.close()
            drop_schema(url, schema)


def test_a_store_keeps_reads_and_forgets_labels_per_scope(store: Any) -> None:
    assert store.search_labels("default") == []
    assert store.forget_search_labels("default") == 0
    store.learn_searches("default", [_label("q1", "a"), _label("q2", "b")])
    store.learn_searches("other", [_label("q3", "a")])
    rows = store.search_labels("default")
    assert [label["query"] for _, label in rows] == ["q1", "q2"]
    assert store.search_labels("default", rows[0][0]) == rows[1:]  # resumes after a position
    assert store.forget_search_labels("default", "a") == 1
    assert [label["tool"] for _, label in store.search_labels("default")] == ["b"]
    assert store.forget_search_labels("default") == 1
    assert store.search_labels("default") == []
    assert [label["query"] for _, label in store.search_labels("other")] == ["q3"]


@pytest.mark.parametrize(
    "bad",
    [
        {"query": "", "tool": "a", "session": "s", "at": 1.0},
        {"query": "q", "tool": 3, "session": "s", "at": 1.0},
        {"query": "q" * 501, "tool": "a", "session": "s", "at": 1.0},
        {"query": "q", "tool": "a", "session": "s", "at": float("nan")},
        {"query": "q", "tool": "a", "session": "s"},
        ["not", "an", "object"],
    ],
)
def test_a_malformed_label_is_refused_and_nothing_is_added(store: Any, bad: Any) -> None:
    with pytest.raises(InvalidInput):
        store.learn_searches("default", [_label("fine", "a"), bad])
    assert store.search_labels("default") == []
    with pytest.raises(InvalidInput):
        store.learn_searches("", [_label("fine", "a")])


# -- the operator ------------------------------------------------------------------------------


def test_an_operator_lists_and_resets_what_a_scope_learned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.db"
    with SQLiteStore(db) as sqlite:
        session = withheld(sqlite)
        names(session, UNFOUND)
        names(session, FOUND)
        session.call_succeeded("send_message")
        names(session, "kubernetes pods")
        session.call_succeeded("list_pods")
    assert main(["admin", str(db), "learned", "list"]) == 0
    out = capsys.readouterr().out
    assert "send_message: 2 label(s) from 1 session(s)" in out and repr(UNFOUND) in out
    assert "3 label(s) over 2 tool(s) in scope 'default'" in out
    assert main(["admin", str(db), "learned", "list", "--json", "--tool", "list_pods"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [label["query"] for label in shown["labels"]] == ["kubernetes pods"]
    assert main(["admin", str(db), "learned", "reset", "--tool", "send_message"]) == 0
    assert "forgot 2 label(s) of send_message" in capsys.readouterr().out
    with SQLiteStore(db) as sqlite:
        assert [label["tool"] for _, label in sqlite.search_labels("default")] == ["list_pods"]
        assert names(withheld(sqlite), UNFOUND) == []
    assert main(["admin", str(db), "learned", "reset"]) == 0
    assert "forgot 1 label(s) in scope 'default'" in capsys.readouterr().out
    assert main(["admin", str(tmp_path / "missing.db"), "learned", "list"]) == 2
    assert "no such store file" in capsys.readouterr().err
