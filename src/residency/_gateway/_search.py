"""``search_tools``' index: one per catalog, shared by every client session of the gateway.

The ranking itself lives in :mod:`residency._search` (BM25 over names, titles, descriptions,
argument names and argument descriptions, fused with an offline embedding model when one is
installed). The gateway's catalog changes rarely (a reload, an upstream's ``list_changed``), so
its index is looked up once per ``Catalog`` object and shared by content with any other catalog
of the same tools; each query is then filtered to the asking session's withheld tools.
"""

from __future__ import annotations

import threading
import weakref

from residency._gateway._aggregate import Catalog
from residency._search import SearchHit, ToolIndex, search, shared_index, summary_line, tokenize

__all__ = ["SearchHit", "catalog_index", "search", "summary_line", "tokenize"]

_by_catalog: weakref.WeakKeyDictionary[Catalog, ToolIndex] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def catalog_index(catalog: Catalog) -> ToolIndex:
    """The search index of ``catalog``: built on its first search, then kept with it.

    Two catalog objects with the same tools (a reload that changed nothing) share one index.
    """
    with _lock:
        found = _by_catalog.get(catalog)
    if found is None:
        found = shared_index(catalog.entries())
        with _lock:
            _by_catalog[catalog] = found
    return found
