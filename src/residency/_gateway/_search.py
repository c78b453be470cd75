"""``search_tools``' index: one per catalog, shared by every client session of the gateway.

The ranking itself lives in :mod:`residency._search` (BM25 over names, titles, descriptions,
argument names and argument descriptions, fused with an offline embedding model when one is
installed). The gateway's catalog changes rarely (a reload, an upstream's ``list_changed``), so
its index is looked up once per ``Catalog`` object and shared by content with any other catalog
of the same tools; each query is then filtered to the asking session's withheld tools.

Every catalog the gateway builds is warmed at once (:class:`SearchWarmup`): a thread of its own
builds the index (BM25 over 10,000 tools takes seconds: never on the event loop) and starts
computing its vectors, so that searches are fused from the first one wherever the vectors are
ready in time (read from the cache, or a small catalog). Until they are, BM25 answers; each
result says which ranker did (``_meta["residency/search"]["ranker"]``). The vectors are kept
where the store is (:func:`vector_directory`) unless ``RESIDENCY_SEARCH_CACHE`` names a place.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from residency._gateway._aggregate import Catalog
from residency._search import (
    RANKER_ENV,
    SearchHit,
    ToolIndex,
    default_embedder,
    embedding_cache,
    model_expected,
    search,
    shared_index,
    summary_line,
    tokenize,
)
from residency._store._protocol import Store
from residency._store._sqlite import SQLiteStore

__all__ = [
    "QUIET_START",
    "SEARCH_META_KEY",
    "SearchHit",
    "SearchStatus",
    "SearchWarmup",
    "catalog_index",
    "ranker_now",
    "search",
    "summary_line",
    "tokenize",
    "user_vector_directory",
    "vector_directory",
]

SEARCH_META_KEY = "residency/search"
"""The ``_meta`` key of a ``search_tools`` result that says which ranker answered."""

_log = logging.getLogger("residency.search")

_by_catalog: weakref.WeakKeyDictionary[Catalog, ToolIndex] = weakref.WeakKeyDictionary()
_building: weakref.WeakKeyDictionary[Catalog, threading.Lock] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def catalog_index(catalog: Catalog) -> ToolIndex:
    """The search index of ``catalog``: built once (by its warm-up, or its first search), then kept
    with it; a search that arrives while the warm-up builds it waits for that build.

    Two catalog objects with the same tools (a reload that changed nothing) share one index, and
    a subset (one caller's part, ``Catalog.subset``) uses its source's: whoever searches it
    filters the hits to its own tools.
    """
    catalog = catalog.source
    with _lock:
        found = _by_catalog.get(catalog)
        if found is not None:
            return found
        building = _building.setdefault(catalog, threading.Lock())
    with building:
        with _lock:
            found = _by_catalog.get(catalog)
        if found is None:
            found = shared_index(catalog.entries())
            with _lock:
                _by_catalog[catalog] = found
    return found


def ranker_now(index: ToolIndex) -> Literal["bm25", "fusion"]:
    """The ranker ``index`` answers with now, to pass as ``ranker``: ``fusion`` once its vectors
    are ready, else ``bm25`` (and their computation is started, for the next searches). What
    ``ranker="auto"`` does, told to the caller."""
    if index.vectors_ready:
        return "fusion"
    index.embed_in_background()  # no-op once started, or without a model
    return "bm25"


# -- where vectors are kept -------------------------------------------------------------------


def user_vector_directory() -> Path | None:
    """``$XDG_CACHE_HOME/residency/vectors``, else ``~/.cache/residency/vectors`` (None without
    a home directory). A relative ``XDG_CACHE_HOME`` is ignored, as the XDG specification says."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory to be found
            return None
    return Path(base) / "residency" / "vectors"


def vector_directory(store: Store) -> Path | None:
    """Where a gateway on ``store`` keeps its catalog's vectors while ``RESIDENCY_SEARCH_CACHE``
    is unset: beside an SQLite file (``<file>.vectors``), else in the user cache directory
    (:func:`user_vector_directory`): PostgreSQL, the memory store and any store without a file.

    The memory store is the default, and a host that speaks stdio starts a gateway per
    connection (some per call): with its vectors in the user cache directory only the first
    start embeds the catalog. The files hold vectors under hashes of the definitions, no text.
    """
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return Path(os.path.abspath(f"{store.path}.vectors"))
    return user_vector_directory()


# -- the warm-up ------------------------------------------------------------------------------


QUIET_START = 2.0
"""Seconds, at most, a warm-up told to wait for a gateway's first answers waits."""

SearchState = Literal["ready", "computing", "failed", "off", "absent"]


@dataclass(frozen=True, slots=True)
class SearchStatus:
    """Which ranker answers a gateway's searches now, and what comes next.

    ``state``: ``ready`` (the vectors are ready: fusion answers), ``computing`` (BM25 answers
    until they are), ``failed`` (computing them failed: BM25 answers this catalog), ``off``
    (``RESIDENCY_SEARCH_RANKER=bm25``) or ``absent`` (no semantic model installed). ``tools``:
    the catalog's size; ``model``: the semantic model's name, once loaded; ``cache``: where the
    vectors are kept between runs (None: in memory only).
    """

    state: SearchState
    tools: int
    model: str | None
    cache: Path | None

    @property
    def ranker(self) -> Literal["bm25", "fusion"]:
        return "fusion" if self.state == "ready" else "bm25"


def _status(index: ToolIndex | None, settled: bool, tools: int) -> SearchStatus:
    cache = embedding_cache().directory()
    if os.environ.get(RANKER_ENV, "").strip().lower() == "bm25":
        return SearchStatus("off", tools, None, cache)
    if (index is not None and index.vectors_ready) or settled:
        model = default_embedder()  # loaded once per process (by the warm-up, which is done)
        if model is None:
            return SearchStatus("absent", tools, None, cache)
        state: SearchState = "ready" if index is not None and index.vectors_ready else "failed"
        return SearchStatus(state, tools, model.name, cache)
    # The warm-up may be loading the model meanwhile: told without waiting for it.
    if not model_expected():
        return SearchStatus("absent", tools, None, cache)
    return SearchStatus("computing", tools, None, cache)


def idle_status(tools: int) -> SearchStatus:
    """The status of a catalog no warm-up has started on (a gateway not entered yet)."""
    return _status(None, False, tools)


class SearchWarmup:
    """A catalog's search index, built beside the event loop, and its vectors computed after.

    Args:
        catalog: the catalog to index.
        on_ready: called (in the warm-up's thread, before :meth:`wait` returns) with the
            warm-up and the seconds since it started, once the vectors are ready, unless they
            were ready when the warm-up was created (two warm-ups of the same tools share an
            index, and may both call it). A search may have computed them meanwhile: a catalog
            searched before the warm-up began (it waits for the first list) is still told.
        after: when given, the thread waits until it is set, and at most ``QUIET_START``
            seconds, before it begins (a gateway's first answers go first).
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        on_ready: Callable[[SearchWarmup, float], None] | None = None,
        after: threading.Event | None = None,
    ) -> None:
        self.tools = len(catalog)
        self._index: ToolIndex | None = None
        self._settled = threading.Event()
        with _lock:
            built = _by_catalog.get(catalog.source)
        ready_at_once = built is not None and built.vectors_ready
        threading.Thread(
            target=self._run,
            args=(catalog, None if ready_at_once else on_ready, after),
            name="residency-search-warmup",
            daemon=True,
        ).start()

    def _run(
        self,
        catalog: Catalog,
        on_ready: Callable[[SearchWarmup, float], None] | None,
        after: threading.Event | None,
    ) -> None:
        if after is not None:
            after.wait(QUIET_START)
        started = time.monotonic()
        try:
            index = self._index = catalog_index(catalog)
            if not index.vectors_ready:
                # In the index's own thread, which loads the model (none: it ends at once) and
                # is stopped and joined at exit: native code must not run past the interpreter.
                index.embed_in_background()
                index.wait_for_vectors()  # a failure is logged by the index, once
            # The vectors in memory may be new to the cache's directory (a gateway on another
            # store ran before in this process): a no-op when the directory has them all.
            embedding_cache().flush()
            # Before the warm-up is settled: whoever waits for it reads what on_ready did.
            if on_ready is not None and index.vectors_ready:
                on_ready(self, time.monotonic() - started)
        except Exception:  # the search then builds the index itself, and says why
            _log.warning("tool search: warming the catalog's index failed", exc_info=True)
        finally:
            self._settled.set()

    @property
    def index(self) -> ToolIndex | None:
        """The catalog's index, once built."""
        return self._index

    def wait(self, timeout: float | None = None) -> bool:
        """Wait, at most ``timeout`` seconds, until the vectors are ready, failed or not to be
        computed (no model); whether that happened."""
        return self._settled.wait(timeout)

    def status(self) -> SearchStatus:
        """Which ranker answers this catalog's searches now (never blocks on the warm-up)."""
        return _status(self._index, self._settled.is_set(), self.tools)
