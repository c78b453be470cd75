"""``python -m benchmarks``: run the repository's benchmarks and print their figures.

``python -m benchmarks`` alone runs every benchmark with small defaults and prints one summary
table; ``python -m benchmarks NAME`` runs one with its own options (``NAME --help``). Run it from
a checkout: the benchmarks read its data (``benchmarks/traces``, ``queries``, ``catalogs``, the dev
corpus).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import NamedTuple

if __package__ in (None, ""):  # python benchmarks/run.py: the checkout on the path
    sys.path[:1] = [str(Path(__file__).resolve().parents[1])]

from residency._bench._report import BenchReport, show, write_json
from residency._cli import lazy_subparsers

__all__ = ["BENCHES", "Bench", "main"]


class Bench(NamedTuple):
    """A benchmark: the module that runs it and its one-line summary (what ``--help`` lists)."""

    module: str
    summary: str


# Every module exposes add_arguments(parser), run(args) -> BenchReport and SMALL_ARGS; it is
# imported only when its bench runs.
BENCHES: dict[str, Bench] = {
    "lifecycle": Bench(
        "benchmarks.bench.lifecycle",
        "plan_turn cost vs json.dumps of the tool list, memory per recorded call, transition cost",
    ),
    "chains": Bench(
        "benchmarks.bench.chains",
        "check_chain against 100/1k/10k archived chains vs a naive scan of every chain",
    ),
    "spans": Bench(
        "benchmarks.bench.spans",
        "externalize, restore and reopen of SQLite-backed spans vs raw sqlite3 on the same bytes",
    ),
    "session": Bench(
        "benchmarks.bench.session",
        "tool tokens, prompt-cache cost, ghost calls and re-expansions over agent sessions, "
        "seven strategies side by side",
    ),
    "minify": Bench(
        "benchmarks.bench.minify",
        "constraints lost, verdict disagreements and token cut per minify level, vs the seed-003 pruner",
    ),
    "gateway": Bench(
        "benchmarks.bench.gateway",
        "gateway overhead: tools/call p50/p99 against the upstream direct, 1 and 10 sessions; tools/list",
    ),
    "offload": Bench(
        "benchmarks.bench.offload", "gateway tools/call latency for a 1 MB result, span offloading on vs off"
    ),
    "search": Bench(
        "benchmarks.bench.search",
        "search_tools: R@1/R@5/MRR on labelled task queries (BM25, semantic, fusion) and latency vs before",
    ),
    "catalog": Bench(
        "benchmarks.bench.catalog",
        "memory and time of one more session registering an already-known 405-tool catalog",
    ),
    "fleet": Bench(
        "benchmarks.bench.fleet",
        "replicas: calls/s and p50/p99 for 1 and 2 replicas on PostgreSQL against 1 on SQLite; catch-up cost",
    ),
    "serving": Bench(
        "benchmarks.bench.serving",
        "residency serve at scale: first tools/list over stdio at 10,000 tools, "
        "memory per HTTP client session",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run the repository's benchmarks (from a checkout). "
        "Figures are ratios against a baseline measured in the same run.",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    p.set_defaults(run=run_all, bench=None)
    names = lazy_subparsers(p, dest="bench", metavar="NAME")
    for name, bench in BENCHES.items():
        names.add_lazy(name, bench.summary, partial(_configure_one, bench))
    return p


def _configure_one(bench: Bench, parser: argparse.ArgumentParser) -> None:
    module = importlib.import_module(bench.module)
    parser.description = bench.summary
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    module.add_arguments(parser)
    parser.set_defaults(run=_run_one, module=module)


def _run_one(args: argparse.Namespace) -> int:
    from rich.console import Console

    report: BenchReport = args.module.run(args)
    show([report], Console(), title="python -m benchmarks")
    write_json(args.json, [report])
    return 0 if report.ok else 1


def run_all(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    reports = []
    for name, bench in BENCHES.items():
        module = importlib.import_module(bench.module)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        sub_args = parser.parse_args(getattr(module, "SMALL_ARGS", []))
        console.print(f"[bold]bench {name}[/bold] ...", highlight=False)
        reports.append(module.run(sub_args))
    show(reports, console, title="python -m benchmarks")
    write_json(args.json, reports)
    print("all targets met" if all(r.ok for r in reports) else "some targets missed", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks' command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
