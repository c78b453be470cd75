"""Tool search: BM25 over tool definitions, fused with an optional offline embedding model.

One index per catalog, shared by every session and filtered per query; see ``_index``.
"""

from __future__ import annotations

from residency._search._index import (
    Among,
    IndexedTool,
    Ranker,
    SearchHit,
    ToolIndex,
    ToolLike,
    clear_shared_indexes,
    search,
    shared_index,
)
from residency._search._semantic import (
    CACHE_ENV,
    RANKER_ENV,
    Embedder,
    EmbeddingCache,
    default_embedder,
    embedding_cache,
    model_expected,
)
from residency._search._text import (
    document_terms,
    embedding_query,
    embedding_texts,
    query_terms,
    summary_line,
    tokenize,
)

__all__ = (
    "CACHE_ENV",
    "RANKER_ENV",
    "Among",
    "Embedder",
    "EmbeddingCache",
    "IndexedTool",
    "Ranker",
    "SearchHit",
    "ToolIndex",
    "ToolLike",
    "clear_shared_indexes",
    "default_embedder",
    "document_terms",
    "embedding_cache",
    "model_expected",
    "embedding_query",
    "embedding_texts",
    "query_terms",
    "search",
    "shared_index",
    "summary_line",
    "tokenize",
)
