"""``python -m benchmarks search``: its metrics, its synthetic catalog and a small run."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench import search as bench
from benchmarks.bench.search import (
    Query,
    corpus_catalog,
    default_queries,
    half,
    label_names,
    quality,
    scores,
    seed_copies,
    synthetic_servers,
)
from residency._search import (
    RANKER_ENV,
    IndexedTool,
    ToolIndex,
    clear_shared_indexes,
    default_embedder,
    embedding_cache,
)
from tests.conftest import CORPUS, load_corpus

pytestmark = pytest.mark.embeddings  # the benchmark ranks with the model as users get it


def test_recall_and_mrr_count_the_first_labelled_tool_within_the_first_ten() -> None:
    names = {("s", "a"): "a", ("s", "b"): "b", ("s", "c"): "c"}
    queries = [
        Query("first", (("s", "a"),)),
        Query("third", (("s", "c"), ("s", "b"))),  # b at rank 3 counts, c is not ranked
        Query("missed", (("s", "c"),)),
    ]
    rankings = {"first": ["a", "x"], "third": ["x", "y", "b"], "missed": ["x"] * 10 + ["c"]}
    result = quality(lambda q: rankings[q], queries, names)
    assert result["r1"] == pytest.approx(1 / 3)
    assert result["r5"] == pytest.approx(2 / 3)
    assert result["mrr"] == pytest.approx((1 + 1 / 3) / 3)
    assert result["misses"] == ["missed"]


def test_the_query_set_splits_into_two_fixed_halves_of_similar_size() -> None:
    queries = bench.load_queries(default_queries())
    halves = [half(q.text) for q in queries]
    assert set(halves) == {"tune", "held-out"}
    assert abs(halves.count("tune") - halves.count("held-out")) < len(queries) // 5


def test_held_out_figures_score_the_same_rankings_on_a_subset() -> None:
    assert scores([0, 1, None, 7]) == {
        "r1": 0.25,
        "r5": 0.5,
        "mrr": pytest.approx((1 + 1 / 2 + 1 / 8) / 4),
        "queries": 4,
    }
    assert scores([]) == {"r1": 0.0, "r5": 0.0, "mrr": 0.0, "queries": 0}


def test_the_synthetic_catalog_repeats_the_corpus_with_unique_names() -> None:
    servers = {"a": [{"name": "x"}, {"name": "y"}], "b": [{"name": "z"}]}
    out = synthetic_servers(servers, 7)
    names = [t["name"] for tools in out.values() for t in tools]
    assert len(names) == len(set(names)) == 7
    assert [t["name"] for t in out["b"]] == ["z", "z_1"]


class Counting:
    """The installed model, counting the texts it embeds."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = model.name
        self.dimension = model.dimension
        self.own = 0
        if hasattr(model, "parts"):  # a model of two: each counted, cached under its own name
            self.parts = tuple(Counting(p) for p in model.parts)
            self.embed_query = model.embed_query

    @property
    def embedded(self) -> int:
        return self.own + sum(int(p.embedded) for p in getattr(self, "parts", ()))

    def embed(self, texts: Sequence[str]) -> Any:
        self.own += len(texts)
        return self.model.embed(texts)


def test_renamed_copies_reuse_their_originals_vectors_instead_of_being_embedded() -> None:
    model = default_embedder()
    if model is None:
        pytest.skip("the embedding model is not installed")
    clear_shared_indexes()
    embedding_cache().clear()
    servers = {
        "s": [{"name": "get_time", "description": "Get the time", "inputSchema": {"type": "object"}},
              {"name": "post_message", "description": "Post a message", "inputSchema": {"type": "object"}}],
    }  # fmt: skip
    original = corpus_catalog(servers)
    ToolIndex([entry(e) for e in original.entries()], embedder=model).embed()
    big = corpus_catalog(synthetic_servers(servers, 6))
    assert seed_copies(big, original) == 4 * len(getattr(model, "parts", (model,)))  # per model
    counting = Counting(model)
    index = ToolIndex([entry(e) for e in big.entries()], embedder=counting)
    index.embed()
    assert counting.embedded == 0
    assert index.search("post a message", limit=1, ranker="semantic")[0].name.startswith("post_message")


def entry(e: Any) -> IndexedTool:
    return IndexedTool(e.name, e.hash, e.definition, e.server)


@pytest.mark.slow
def test_a_small_run_reports_quality_and_latency_against_the_old_search(tmp_path: Path) -> None:
    load_corpus()  # skips without the corpus
    clear_shared_indexes()
    some = json.loads(default_queries().read_text())
    some["queries"] = some["queries"][::12]
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(some))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    argv = ["--corpus", str(CORPUS), "--queries", str(queries), "--big", "600", "--baseline-queries", "2"]
    before = os.environ.get(RANKER_ENV)
    report = bench.run(parser.parse_args([*argv, "--no-semantic"]))
    assert os.environ.get(RANKER_ENV) == before
    figures = {f.name: f.value for f in report.figures}
    assert figures["bm25 MRR"] > figures["baseline MRR"]
    assert 0 < figures["bm25 MRR, held-out half"] <= 1
    assert figures["search_tools new / old, 405 tools"] < 1
    assert "search_tools per query, 600 tools" in figures
    names = label_names(corpus_catalog(bench.load_corpus(CORPUS)))
    assert len(names) == 405


def test_parts_and_sample_pick_what_a_quick_run_measures() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert parser.parse_args([]).parts == bench.PARTS
    assert parser.parse_args(["--parts", "learned, public"]).parts == ("learned", "public")
    with pytest.raises(SystemExit):  # argparse's usage error names the parts to pick from
        parser.parse_args(["--parts", "learned,speed"])
    assert bench.sampled(list(range(10)), 3) == [0, 3, 6, 9]
    assert bench.sampled([1, 2], 0) == [1, 2]


def test_p50_can_time_the_calling_threads_cpu_rather_than_the_wall_clock() -> None:
    ticks = iter(range(100))
    seconds = bench.p50_per_query(lambda q: None, ["a", "b", "c"], rounds=1, clock=lambda: float(next(ticks)))
    assert seconds == 1.0  # each query read the clock twice, one tick apart
