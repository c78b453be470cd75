"""The tool index: built once per catalog, shared by every session, filtered per query.

Theory of operation:

- A :class:`ToolIndex` covers a whole catalog (every tool a gateway aggregates, or every tool a
  session registered). Building it tokenizes each definition (terms are cached per definition
  hash, so a rebuild after a small catalog change re-tokenizes only what changed) and builds a
  BM25 index (bm25s: term scores precomputed in sparse arrays, so a query costs the postings of
  its terms, not a pass over every document).
- Indexes are shared through :func:`shared_index`, keyed by the catalog's identity: the
  (name, definition hash, server) of every tool. Sessions over the same catalog get the same
  index; a changed catalog gets a new one, and the last few are kept.
- A query ranks the whole catalog and keeps only the tools it is told to (``among``: a session's
  withheld tools), read off the top of the ranking, so one index serves every session whatever
  their tools' states, and a query costs what it reads, not a pass over every name.
- With a semantic ranker (:mod:`residency._search._semantic`), each tool also has a vector
  (cached per definition hash), and the two rankings are fused: each score scaled to [0, 1]
  over the catalog, the semantic one weighted 2.5 times. A query is embedded as a want
  (``I want to`` before it, see ``_text.QUERY_PREFIX``); the tools' texts are not reworded. A
  query of several sentences (several requests in one, as StableToolBench's are) is compared
  by the best of its sentences too (weighted 0.75 against the whole query's 0.25): each
  request meets its own tool. On the public set's tune half this took the fusion from MRR
  0.748 / R@5 0.915 to 0.775 / 0.933 (0.5 and 1.0 did no better); one-sentence queries are
  untouched. A general-purpose tool (``_capabilities``) is also compared by its task words
  alone, with a bonus (see ``_similarities``).
  On the tune half of the labelled query set this beat reciprocal rank fusion (k from 5 to 60),
  z-scores, scaling between the top k, other weights and either ranking alone; other texts of a
  tool (several vectors with the best taken, sentences, argument names, the server), BM25
  field weights and parameters, and query words expanded by their nearest corpus words did no
  better than the noise (docs: how-to, search). Vectors are computed on first use, in a
  background thread by default (BM25 alone answers until they are ready) or at once with
  :meth:`ToolIndex.embed` (a gateway starts them as soon as it builds its catalog), and kept on
  disk too where the embedding cache has a directory (``RESIDENCY_SEARCH_CACHE``, or the one a
  gateway sets beside its store).
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from residency._core._tools import definition_hash
from residency._search._capabilities import capabilities, vocabulary
from residency._search._learned import WEIGHT as LEARNED_WEIGHT
from residency._search._learned import LearnedLabels
from residency._search._semantic import (
    EXITING,
    NUMERIC_IMPORTS,
    Embedder,
    EmbeddingStopped,
    Vectors,
    default_embedder,
    embedding_cache,
    query_vector,
)
from residency._search._text import (
    EMBEDDING_VERSION,
    document_terms,
    embedding_texts,
    query_terms,
    sentences,
    summary_line,
    tokenize,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Among",
    "IndexedTool",
    "Ranker",
    "SearchHit",
    "TASK_BONUS",
    "ToolIndex",
    "ToolLike",
    "clear_shared_indexes",
    "search",
    "shared_index",
    "vector_key",
]

Among: TypeAlias = Collection[str] | Callable[[str], bool] | None
"""The tools a query may return: names, a test on a name, or None for every tool."""

Ranker: TypeAlias = Literal["auto", "bm25", "semantic", "fusion"]
"""``auto``: fusion when vectors are ready, else BM25; the others force one ranking."""

_log = logging.getLogger("residency.search")

_K1 = 1.2
_B = 0.75
_NAMED_TERMS = 16  # query terms looked at for tool names (runs of them: quadratic)
_SEMANTIC_WEIGHT = 2.5  # the semantic ranking's weight in the fusion (BM25's is 1)
_EMBED_CHUNK = 64
_SENTENCE_WEIGHT = 0.75  # a request of several sentences: weight of its best sentence's cosine
TASK_BONUS = 0.15
"""Added to a general-purpose tool's cosine with its task words alone (see ``_similarities``)."""
_SHARED = 4  # indexes kept by shared_index (the current catalog and a few before it)
_TERMS_LIMIT = 50_000  # definitions whose terms are kept for the next rebuild


class ToolLike(Protocol):
    """What an index entry needs: ``CatalogEntry`` and ``ToolSpec`` both have it."""

    @property
    def name(self) -> str: ...

    @property
    def hash(self) -> str: ...

    @property
    def definition(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class IndexedTool:
    """One tool to index: its listed name, definition hash, definition and server (if any)."""

    name: str
    hash: str
    definition: Mapping[str, Any]
    server: str = ""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked tool. ``score`` is BM25's, the cosine similarity (for a query in another
    language under two models, their blend on the English model's scale, which can pass 1), or
    the fused score (0 to 3.5, 4.5 with learned labels)."""

    name: str
    summary: str
    score: float


# Background embedding threads run native code; one still running when the interpreter
# finalizes aborts the process. At exit they are told to stop and joined: a packaged model stops
# between two batches of texts (``EXITING``), any model between two chunks of tools.
_stopping = EXITING
_background: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


@atexit.register
def _stop_background() -> None:
    _stopping.set()
    for thread in list(_background):
        thread.join()


_terms_cache: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
_terms_lock = threading.Lock()


def vector_key(tool: IndexedTool) -> str:
    """The key of a tool's vector in the embedding cache: its definition hash, server (the
    server is part of the embedded text) and the version of the embedded texts."""
    return f"{tool.hash}:{tool.server}:{EMBEDDING_VERSION}"


def _terms(tool: IndexedTool) -> list[str]:
    key = (tool.hash, tool.server)
    with _terms_lock:
        found = _terms_cache.get(key)
    if found is None:
        # Interned: the same few thousand words recur across every definition.
        found = [sys.intern(t) for t in document_terms(tool.definition, tool.server)]
        with _terms_lock:
            _terms_cache[key] = found
            while len(_terms_cache) > _TERMS_LIMIT:
                _terms_cache.popitem(last=False)
    return found


class ToolIndex:
    """BM25 (and, when available, vectors) over one catalog; immutable once built.

    Args:
        tools: the catalog (names must be unique).
        embedder: the semantic model; ``"default"`` for the installed one (or none), None for
            BM25 only.
    """

    def __init__(
        self, tools: Iterable[IndexedTool], embedder: Embedder | Literal["default"] | None = "default"
    ):
        with NUMERIC_IMPORTS:
            import bm25s
            import numpy  # noqa: F401  (first, under the lock)

        # bm25s sets its own logger to DEBUG when imported: its chatter is not ours to show.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.tools: tuple[IndexedTool, ...] = tuple(tools)
        self._position = {t.name: i for i, t in enumerate(self.tools)}
        if len(self._position) != len(self.tools):
            raise ValueError("tool names in an index must be unique")
        # The installed model is loaded on first need (in the background thread, usually), so
        # that building an index never waits for it.
        self._embedder: Embedder | None = None if embedder == "default" else embedder
        self._resolved = embedder != "default"
        self._summaries: dict[int, str] = {}
        # Tool names by their terms, for queries that name a tool (see ``_named``).
        self._by_name: dict[tuple[str, ...], list[int]] = {}
        for i, t in enumerate(self.tools):
            key = tuple(tokenize(t.name))
            if key:
                self._by_name.setdefault(key, []).append(i)
        corpus = [_terms(t) or [""] for t in self.tools]
        self._bm25 = bm25s.BM25(k1=_K1, b=_B, method="lucene")
        if corpus:
            self._bm25.index(corpus, show_progress=False)
        # The tools' vectors, one contiguous block of columns per model the embedder combines
        # (see ``_blocks``), and the general-purpose tools' positions with the vectors of their
        # task words alone, in the same blocks.
        self._vectors: tuple[Vectors, ...] | None = None
        self._task_rows: npt.NDArray[np.intp] | None = None
        self._task_vectors: tuple[Vectors, ...] | None = None
        self._embedding: threading.Thread | None = None
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._query_vectors: OrderedDict[str, Vectors] = OrderedDict()

    def __len__(self) -> int:
        return len(self.tools)

    def _model(self) -> Embedder | None:
        with self._embed_lock:
            if not self._resolved:
                self._embedder = default_embedder()
                self._resolved = True
            return self._embedder

    @property
    def semantic(self) -> bool:
        """Whether a semantic ranker is configured (its vectors may still be on their way)."""
        return self._model() is not None

    @property
    def vectors_ready(self) -> bool:
        return self._vectors is not None

    # -- vectors ---------------------------------------------------------------------------

    def embed(self) -> None:
        """Compute the tools' vectors now (cached per definition hash); no-op without a model."""
        embedder = self._model()
        with self._embed_lock:
            if embedder is None or self._vectors is not None:
                return
            by_key = {vector_key(t): t for t in self.tools}
            keys = list(by_key)

            def texts(key: str) -> tuple[str, ...]:
                return embedding_texts(by_key[key].definition, by_key[key].server)

            tasks = {f"{vector_key(t)}:tasks": (i, words) for i, t in enumerate(self.tools)
                     if (words := vocabulary(capabilities(t.definition)))}  # fmt: skip

            def task_words(key: str) -> tuple[str]:
                return (tasks[key][1],)

            cache = embedding_cache()
            try:
                # In chunks, so that a background run stops between two when the process exits.
                for start in range(0, len(keys), _EMBED_CHUNK):
                    if _stopping.is_set():
                        return
                    cache.vectors(embedder, keys[start : start + _EMBED_CHUNK], texts)
                import numpy as np

                self._task_vectors = _blocks(embedder, cache.vectors(embedder, list(tasks), task_words))
                self._task_rows = np.array([i for i, _ in tasks.values()], dtype=np.intp)
                self._vectors = _blocks(embedder, cache.vectors(embedder, keys, texts))
            finally:
                cache.flush()  # to disk, where the cache has a directory (what was done is kept)

    def _embed_quietly(self) -> None:
        try:
            self.embed()
        except EmbeddingStopped:  # the process is exiting: the vectors are not needed
            pass
        except Exception:  # the model failed: this index stays on BM25, and says why once
            _log.warning("tool search: computing vectors failed; BM25 alone is used", exc_info=True)

    def embed_in_background(self) -> None:
        """Start computing the vectors in a thread (once); searches use BM25 until they are ready."""
        if (self._resolved and self._embedder is None) or self._vectors is not None or _stopping.is_set():
            return
        with self._lock:
            if self._embedding is None:
                thread = threading.Thread(target=self._embed_quietly, name="residency-embed", daemon=True)
                self._embedding = thread
                _background.add(thread)
                thread.start()

    def wait_for_vectors(self, timeout: float | None = None) -> bool:
        """Wait, at most ``timeout`` seconds (None: no limit), for the computation
        :meth:`embed_in_background` started; whether the vectors are ready.

        Returns at once when none was started (no model, or not asked for yet).
        """
        with self._lock:
            thread = self._embedding
        if thread is not None:
            thread.join(timeout)
        return self._vectors is not None

    def _query_vector(self, query: str) -> Vectors:
        assert self._embedder is not None  # vectors exist only where a model made them
        with self._lock:
            found = self._query_vectors.get(query)
        if found is None:
            found = query_vector(self._embedder, query)
            with self._lock:
                self._query_vectors[query] = found
                while len(self._query_vectors) > 256:
                    self._query_vectors.popitem(last=False)
        return found

    def forget_queries(self) -> None:
        """Drop the cached query vectors (the last 256 queries are kept otherwise)."""
        with self._lock:
            self._query_vectors.clear()

    # -- ranking ---------------------------------------------------------------------------

    def _keep(self, among: Among) -> Callable[[int], bool] | None:
        if among is None:
            return None
        tools = self.tools
        if callable(among):
            test = among
            return lambda i: test(tools[i].name)
        names = among
        return lambda i: tools[i].name in names

    def _walk(
        self, scores: npt.NDArray[Any], keep: Callable[[int], bool] | None, limit: int, *, matched: bool
    ) -> list[tuple[int, float]]:
        """The first ``limit`` kept positions by descending score (ties by position).

        The filter is applied while walking the ranking, so a query costs what it reads from
        the top rather than a pass over every eligible name; the candidates examined grow
        eightfold whenever the kept ones run out. ``matched``: only positive scores count.
        """
        import numpy as np

        n = len(scores)
        size = min(n, max(4 * limit, 32))
        while True:
            if size < n:
                # Everything at least as good as the size-th best, so ties at the cut stay exact.
                floor = np.partition(scores, n - size)[n - size]
                candidates = np.flatnonzero(scores >= floor)
            else:
                candidates = np.arange(n)
            if matched:
                candidates = candidates[scores[candidates] > 0]
            order = candidates[np.lexsort((candidates, -scores[candidates]))]
            out: list[tuple[int, float]] = []
            for i in order.tolist():
                if keep is None or keep(i):
                    out.append((i, float(scores[i])))
                    if len(out) == limit:
                        return out
            if size >= n or (matched and len(candidates) < size):
                return out
            size = min(n, size * 8)

    def _bm25_scores(self, query: str) -> npt.NDArray[np.float32] | None:
        ids = self._bm25.get_tokens_ids(query_terms(query)) if self.tools else []
        if not ids:
            return None
        scores: npt.NDArray[np.float32] = self._bm25.get_scores_from_ids(ids)
        return scores

    def rank(
        self,
        query: str,
        *,
        limit: int = 5,
        among: Among = None,
        ranker: Ranker = "auto",
        learned: LearnedLabels | None = None,
    ) -> list[tuple[int, float]]:
        """Positions in ``tools`` and scores, best first (see :meth:`search`)."""
        import numpy as np

        if limit <= 0 or not self.tools:
            return []
        mode = ranker
        if mode == "auto":
            mode = "fusion" if self._vectors is not None else "bm25"
            if mode == "bm25":
                self.embed_in_background()  # for the next queries (no-op without a model)
        elif mode != "bm25":
            if self._model() is None:
                raise ValueError(f"ranker {ranker!r} needs a semantic model, and none is installed")
            self.embed()
        keep = self._keep(among)
        lexical = self._bm25_scores(query)
        named = self._named(query)
        use = self._learned_scores(query, learned, semantic=mode == "fusion") if mode != "semantic" else None
        if mode == "bm25":
            if use is not None:  # on BM25's scale of [0, 1], so that the two add up
                base = _unit(lexical) if lexical is not None else np.zeros(len(self.tools))
                return self._walk(self._boost(base + LEARNED_WEIGHT * use, named), keep, limit, matched=True)
            if lexical is None:
                return []
            return self._walk(self._boost(lexical, named), keep, limit, matched=True)
        assert self._vectors is not None
        sims = self._cosines(query)
        if mode == "semantic" or lexical is None:
            return self._walk(self._boost(sims, named), keep, limit, matched=False)
        # Each ranking scaled to [0, 1] over the whole catalog, then weighted: the two disagree
        # in scale (BM25 is unbounded, cosine is not), and the model reads paraphrases better.
        # The catalog, not the eligible tools, sets the scale, so a session's filter only
        # removes tools from the ranking and never reorders the rest.
        fused = _unit(sims)
        fused *= _SEMANTIC_WEIGHT
        fused += _unit(lexical)
        if use is not None:
            fused += LEARNED_WEIGHT * use
        return self._walk(self._boost(fused, named), keep, limit, matched=False)

    def _cosines(self, query: str) -> npt.NDArray[np.float32]:
        """Each tool's cosine similarity to ``query``; for a query of several requests (two or
        more sentences), blended with the best of its sentences' (see ``_SENTENCE_WEIGHT``)."""
        import numpy as np

        sims = self._similarities(query)
        parts = sentences(query)
        if len(parts) < 2:
            return sims
        best = np.max([self._similarities(p) for p in parts], axis=0)
        blended: npt.NDArray[np.float32] = (1 - _SENTENCE_WEIGHT) * sims + _SENTENCE_WEIGHT * best
        return blended

    def _similarities(self, text: str) -> npt.NDArray[np.float32]:
        """Each tool's cosine similarity to ``text``; a general-purpose tool's is the larger of
        its vector's and its task words' alone plus ``TASK_BONUS``.

        A general-purpose tool's own prose (a shell's usage notes) says little of the tasks that
        need it, and its task words are a third of its mean vector, so the model ranked such
        tools low for the tasks they serve (semantic MRR 0.31 on the tune half's
        general-purpose tasks). Compared by its task words too, and given the bonus (0, 0.05,
        ..., 0.3 compared on the tune half, 0.15 best), the fusion went from MRR 0.715 to 0.735
        on the tune half (general-purpose tasks: 0.54 to 0.77); the public set, with 10 such
        tools among 2,479, did not move.

        A query with both halves of a two-model vector (``DualEmbedder``: a query in another
        language) is scored by the embedder's ``blend`` of the two models' cosines, not by
        their sum; a model whose cosines spread narrower than MiniLM's says its own bonus
        (``task_bonus``)."""
        import numpy as np

        assert self._vectors is not None
        vector = self._query_vector(text)
        rows, tasks = self._task_rows, self._task_vectors
        if rows is None or tasks is None or not len(rows):
            rows = tasks = None
        parts = _dots(self._vectors, vector)
        blend = getattr(self._embedder, "blend", None)
        sims: npt.NDArray[np.float32]
        by_tasks: npt.NDArray[np.float32] | None
        if len(parts) == 2 and blend is not None:
            sims, by_tasks = blend(tuple(parts), tuple(_dots(tasks, vector)) if tasks is not None else None)
        else:
            sims = _total(parts)
            by_tasks = _total(_dots(tasks, vector)) if tasks is not None else None
        if rows is not None and by_tasks is not None:
            bonus = getattr(self._embedder, "task_bonus", TASK_BONUS)
            sims[rows] = np.maximum(sims[rows], by_tasks + np.float32(bonus))
        return sims

    def _learned_scores(
        self, query: str, learned: LearnedLabels | None, *, semantic: bool
    ) -> npt.NDArray[np.float64] | None:
        """The learned signal of ``query`` over this catalog (see ``_learned``), or None."""
        if learned is None or not len(learned):
            return None
        embedder = self._embedder
        if not semantic or embedder is None:
            return learned.scores(query, self._position, len(self.tools))
        model = embedder
        return learned.scores(
            query, self._position, len(self.tools), lambda: (model, self._query_vector(query))
        )

    def _named(self, query: str) -> dict[int, int]:
        """Tools the query names: position -> the number of name terms it spells out.

        A tool is named when its name's terms (``search_papers``: ``search``, ``paper``) appear
        in the query in order and side by side, and there are two or more of them; a one-word
        name (``fetch``) only when it is the whole query, since such words also just describe
        tasks. A caller that knows the tool it wants (a model coming back for a tool it has seen)
        then finds it first, whatever the descriptions say. On the labelled task queries this
        changes one rank. Costs one lookup per run of query terms, not a pass over the catalog.
        """
        terms = tuple(tokenize(query))[:_NAMED_TERMS]
        found: dict[int, int] = {}
        for start in range(len(terms)):
            for end in range(start + 2 if len(terms) > 1 else start + 1, len(terms) + 1):
                for i in self._by_name.get(terms[start:end], ()):
                    found[i] = max(found.get(i, 0), end - start)
        return found

    @staticmethod
    def _boost(scores: npt.NDArray[Any], named: Mapping[int, int]) -> npt.NDArray[Any]:
        """``scores`` with the named tools above every other, longer names first."""
        if not named:
            return scores
        boosted = scores.astype("float64")
        top = float(boosted.max()) - min(0.0, float(boosted.min()))
        for i, length in named.items():
            boosted[i] = max(float(boosted[i]), 0.0) + top + length
        return boosted

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        among: Among = None,
        ranker: Ranker = "auto",
        learned: LearnedLabels | None = None,
    ) -> list[SearchHit]:
        """The tools that best match ``query``.

        Args:
            query: what the caller wants to do, in its own words.
            limit: at most this many hits.
            among: which tools are eligible (e.g. a session's withheld ones): a collection of
                names, or a test on a name (asked only of the best-ranked tools, so a query
                does not pay for every name), or None for all.
            ranker: ``auto`` fuses BM25 with the semantic ranker when its vectors are ready
                (and starts computing them otherwise); ``bm25``, ``semantic`` or ``fusion``
                force one (the last two compute the vectors first, if needed).
            learned: the queries that led to successful calls in the caller's scope (see
                ``_learned``), added to the BM25 and fused rankings as one more signal; a query
                near none of them ranks as without it.

        Returns:
            Hits, best first. BM25 leaves out tools that share no term with the query.

        Raises:
            ValueError: ``semantic`` or ``fusion`` asked for with no model installed.
        """
        hits = []
        for i, score in self.rank(query, limit=limit, among=among, ranker=ranker, learned=learned):
            summary = self._summaries.get(i)
            if summary is None:
                summary = self._summaries[i] = summary_line(self.tools[i].definition)
            hits.append(SearchHit(self.tools[i].name, summary, round(score, 6)))
        return hits


def _unit(scores: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``scores`` mapped linearly onto [0, 1] by their range (all 0 if they are all equal)."""
    import numpy as np

    values: npt.NDArray[np.float64] = scores.astype(np.float64)  # a copy: changed in place below
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros(len(values), dtype=np.float64)
    values -= low
    values /= high - low
    return values


def _blocks(embedder: Embedder, vectors: Vectors) -> tuple[Vectors, ...]:
    """``vectors`` split by columns into one C-contiguous block per model ``embedder`` combines
    (``DualEmbedder.parts``; one block for a single model)."""
    import numpy as np

    blocks = []
    start = 0
    for part in getattr(embedder, "parts", (embedder,)):
        blocks.append(np.ascontiguousarray(vectors[:, start : start + part.dimension]))
        start += part.dimension
    if start != vectors.shape[1]:  # not the widths its parts say: one block, as computed
        return (np.ascontiguousarray(vectors),)
    return tuple(blocks)


def _dots(blocks: tuple[Vectors, ...], vector: Vectors) -> list[npt.NDArray[np.float32]]:
    """Each row's dot product with ``vector``, one array per block whose part of ``vector`` is
    not all zeros (the first block always counts): an English query's vector has no
    multilingual half (``DualEmbedder``), so it reads half the memory.

    einsum: a plain loop over the rows on the calling thread; a BLAS call for one vector starts
    threads on large catalogs, and on a busy machine waits for them.
    """
    import numpy as np

    out: list[npt.NDArray[np.float32]] = []
    start = 0
    for block in blocks:
        part = vector[start : start + block.shape[1]]
        start += block.shape[1]
        if out and not part.any():
            continue
        out.append(np.einsum("ij,j->i", block, part))
    assert out  # an index has at least one block
    return out


def _total(parts: list[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """The sum of ``parts`` (a vector's dot products, block by block), in the first one."""
    total = parts[0]
    for part in parts[1:]:
        total += part
    return total


_shared: OrderedDict[tuple[tuple[str, str, str], ...], ToolIndex] = OrderedDict()
_shared_lock = threading.Lock()


def _indexed(tool: ToolLike | IndexedTool) -> IndexedTool:
    if isinstance(tool, IndexedTool):
        return tool
    return IndexedTool(tool.name, tool.hash, tool.definition, str(getattr(tool, "server", "") or ""))


def shared_index(tools: Iterable[ToolLike | IndexedTool]) -> ToolIndex:
    """The index of this catalog, built on first use and shared by every caller after that.

    Keyed by the (name, definition hash, server) of every tool, in order; the last few catalogs'
    indexes are kept, so sessions moving between two catalogs do not rebuild either.
    """
    entries = [_indexed(t) for t in tools]
    key = tuple((t.name, t.hash, t.server) for t in entries)
    with _shared_lock:
        found = _shared.get(key)
        if found is not None:
            _shared.move_to_end(key)
            return found
    index = ToolIndex(entries)
    with _shared_lock:
        found = _shared.setdefault(key, index)
        _shared.move_to_end(key)
        while len(_shared) > _SHARED:
            _shared.popitem(last=False)
    return found


def clear_shared_indexes() -> None:
    """Forget every shared index and cached term list (vectors stay in the embedding cache)."""
    with _shared_lock:
        _shared.clear()
    with _terms_lock:
        _terms_cache.clear()


def search(
    query: str,
    candidates: Iterable[Mapping[str, Any]],
    limit: int = 5,
    *,
    ranker: Ranker = "auto",
) -> list[SearchHit]:
    """Rank candidate tool definitions against ``query`` (the embedded API's entry point).

    The index of the candidate set is shared and kept (see :func:`shared_index`), so asking
    again over the same definitions costs one query. When the eligible tools change often but
    the catalog does not, index the catalog once and pass ``among`` to :meth:`ToolIndex.search`.

    Args:
        query: what the caller wants to do, in its own words.
        candidates: tool definitions (``tools/list`` entries) with unique names.
        limit: at most this many hits.
        ranker: as for :meth:`ToolIndex.search`.
    """
    tools = [IndexedTool(str(t["name"]), definition_hash(t), t) for t in candidates]
    if not tools or limit <= 0:
        return []
    return shared_index(tools).search(query, limit=limit, ranker=ranker)
