"""Tool search beyond one short English request: the labelled non-English query set, the
glossary that reads other languages, and requests of several sentences."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from residency._bench._report import BenchReport
from residency._search import IndexedTool, ToolIndex, embedding_query, query_terms, tokenize
from residency._search._lexicon import glosses, lexicon
from residency._search._text import sentences
from tests.conftest import ROOT, load_corpus
from tests.test_search import BagOfWords, indexed, tool

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


# -- the glossary --------------------------------------------------------------------------------

FILE_TOOLS = [
    tool("read_file", "Read the contents of a file"),
    tool("delete_file", "Delete a file from the repository", path="Path of the file"),
    tool("create_directory", "Create a new directory", path="Where"),
    tool("list_users", "List the users of the organization"),
    tool("stop_process", "Stop a running process", pid="Process id"),
]


def _first(query: str) -> str:
    hits = ToolIndex(indexed(FILE_TOOLS), embedder=None).search(query, limit=1, ranker="bm25")
    assert hits, query
    return hits[0].name


def test_a_task_asked_in_another_language_finds_the_tool_through_the_glossary() -> None:
    assert _first("lösche die alte Datei aus dem Repository") == "delete_file"
    assert _first("elimina el archivo viejo del repositorio") == "delete_file"
    assert _first("crée un nouveau dossier pour le build") == "create_directory"
    assert _first("liste os usuários da organização") == "list_users"
    assert _first("为构建输出创建一个文件夹") == "create_directory"  # a folder, not a file
    assert _first("プロセス 4312 を停止して") == "stop_process"


def test_the_glossary_reads_only_queries_in_other_languages() -> None:
    assert glosses("beende den hängenden Prozess") == ["stop", "process"]
    assert glosses("delete the important file") == []  # "important" is English, not "import..."
    assert query_terms("list the files") == tokenize("list the files")
    for name in ("corpus.json", "public-stabletoolbench.json"):
        assert not [q["query"] for q in _load(name)["queries"] if glosses(q["query"])], name


def test_the_semantic_ranker_reads_a_glossed_query_in_english() -> None:
    assert embedding_query("delete the file") == "I want to delete the file"
    assert embedding_query("lösche die Datei") == "I want to lösche die Datei (delete file)"
    # The model reads no Chinese: the English words and the query's ASCII words are embedded.
    assert embedding_query("删除 main.py 文件") == "I want to delete file main.py"


def test_the_glossary_has_a_form_of_each_word_in_every_language() -> None:
    stems, exact, cjk = lexicon()
    assert len(stems) + len(exact) > 400
    assert len(cjk) > 250
    assert all(len(stem) >= 4 for stem in stems)


# -- requests of several sentences ----------------------------------------------------------------


def test_a_query_of_several_requests_is_split_into_its_sentences() -> None:
    query = "I'm planning a trip. Can you find flights to Lisbon? Also check the weather there."
    assert sentences(query) == [
        "I'm planning a trip.",
        "Can you find flights to Lisbon?",
        "Also check the weather there.",
    ]
    assert sentences("find the pod. ok") == ["find the pod. ok"]  # a fragment is no request
    assert sentences("restart the pod") == ["restart the pod"]
    assert sentences("把这个页面移到归档部分下面。然后通知团队里的所有成员。") == [
        "把这个页面移到归档部分下面。",
        "然后通知团队里的所有成员。",
    ]


def test_each_sentence_of_a_request_is_embedded_and_a_one_sentence_query_once() -> None:
    model = BagOfWords()
    index = ToolIndex(indexed(FILE_TOOLS), embedder=model)
    index.embed()
    model.embedded.clear()
    index.search("stop the process", ranker="semantic")
    assert len(model.embedded) == 1
    index.search("I am cleaning up. Stop the stuck process. Then delete the old file.", ranker="semantic")
    assert len(model.embedded) == 1 + 4  # the whole query and its three sentences


@pytest.mark.slow
def test_the_search_bench_scores_each_non_english_query_against_the_english_one_it_mirrors() -> None:
    from benchmarks.bench import search as bench

    catalog = bench.corpus_catalog(load_corpus())
    index = ToolIndex(
        [IndexedTool(e.name, e.hash, e.definition, e.server) for e in catalog.entries()], embedder=None
    )
    report = BenchReport("search")
    figures = bench.multilingual_figures(report, index, bench.label_names(catalog), ("bm25",))
    pairs = figures["bm25"]
    assert figures["pairs"] == pairs["all"]["english"]["queries"] == pairs["all"]["non_english"]["queries"]
    assert pairs["held-out"]["english"]["queries"] < figures["pairs"]
    assert {"de", "es", "fr", "pt", "zh", "ja"} <= set(pairs)
    # The glossary reaches tools the English-only ranking would miss, but not all of them.
    assert 0.3 < pairs["all"]["non_english"]["r5"] < pairs["all"]["english"]["r5"]
    assert any("non-English pairs" in f.name for f in report.figures)
