"""Tool search in other languages: the labelled non-English query set and what the index does
with words of other languages."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests.conftest import ROOT, load_corpus

QUERIES = ROOT / "benchmarks" / "queries"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((QUERIES / name).read_text(encoding="utf-8"))
    return data


def test_every_non_english_query_mirrors_an_english_query_of_the_project_set_with_its_labels() -> None:
    english = {q["query"]: q for q in _load("corpus.json")["queries"]}
    data = _load("corpus-multilingual.json")
    languages = data["languages"]
    queries = data["queries"]
    assert len(queries) >= 60
    assert len({q["query"] for q in queries}) == len(queries)
    assert len({q["mirrors"] for q in queries}) == len(queries)  # one translation per English query
    corpus = {server: {t["name"] for t in tools} for server, tools in load_corpus().items()}
    for q in queries:
        source = english.get(q["mirrors"])
        assert source is not None, f"{q['query']!r} mirrors no query of corpus.json"
        assert q["relevant"] == source["relevant"], q["query"]
        assert q["lang"] in languages, q["query"]
        assert q["source"] == "written for this project"
        assert "non-English" in q["class"]
        assert q["query"] != q["mirrors"]
        for label in q["relevant"]:
            server, name = label.split(":", 1)
            assert name in corpus.get(server, set()), label
    per_language = Counter(q["lang"] for q in queries)
    assert set(per_language) == set(languages)
    assert min(per_language.values()) >= 10


def test_chinese_and_japanese_queries_are_written_in_their_own_scripts() -> None:
    for q in _load("corpus-multilingual.json")["queries"]:
        if q["lang"] in ("zh", "ja"):
            assert sum(not ch.isascii() for ch in q["query"]) >= 4, q["query"]
