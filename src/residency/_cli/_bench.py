"""``residency bench``: run the project's benchmarks and print their figures.

``residency bench`` alone runs every benchmark with small defaults and prints one summary
table; ``residency bench NAME`` runs one with its own options.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from residency._cli import lazy_subparsers

if TYPE_CHECKING:
    from rich.console import Console

    from residency._bench._report import BenchReport


class Bench(NamedTuple):
    """A benchmark: the module that runs it and its one-line summary (what ``--help`` lists)."""

    module: str
    summary: str


# Every module exposes add_arguments(parser), run(args) -> BenchReport and SMALL_ARGS; it is
# imported only when its bench runs.
BENCHES: dict[str, Bench] = {
    "lifecycle": Bench(
        "residency._bench.lifecycle",
        "plan_turn cost vs json.dumps of the tool list, memory per recorded call, transition cost",
    ),
    "chains": Bench(
        "residency._bench.chains",
        "check_chain against 100/1k/10k archived chains vs a naive scan of every chain",
    ),
    "spans": Bench(
        "residency._bench.spans",
        "externalize, restore and reopen of SQLite-backed spans vs raw sqlite3 on the same bytes",
    ),
    "session": Bench(
        "residency._bench.session",
        "tool tokens, prompt-cache cost, ghost calls and re-expansions over agent sessions, "
        "seven strategies side by side",
    ),
    "minify": Bench(
        "residency._bench.minify",
        "constraints lost, verdict disagreements and token cut per minify level, vs the seed-003 pruner",
    ),
    "gateway": Bench(
        "residency._bench.gateway",
        "gateway overhead: tools/call p50/p99 against the upstream direct, 1 and 10 sessions; tools/list",
    ),
    "offload": Bench(
        "residency._bench.offload", "gateway tools/call latency for a 1 MB result, span offloading on vs off"
    ),
    "search": Bench(
        "residency._bench.search",
        "search_tools: R@1/R@5/MRR on labelled task queries (BM25, semantic, fusion) and latency vs before",
    ),
    "catalog": Bench(
        "residency._bench.catalog",
        "memory and time of one more session registering an already-known 405-tool catalog",
    ),
    "fleet": Bench(
        "residency._bench.fleet",
        "replicas: calls/s and p50/p99 for 1 and 2 replicas on PostgreSQL against 1 on SQLite; catch-up cost",
    ),
    "serving": Bench(
        "residency._bench.serving",
        "residency serve at scale: first tools/list over stdio at 10,000 tools, "
        "memory per HTTP client session",
    ),
}


def configure(p: argparse.ArgumentParser) -> None:
    p.description = "Run benchmarks. Figures are ratios against a baseline measured in the same run."
    p.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    p.set_defaults(run=run_all, bench=None)
    names = lazy_subparsers(p, dest="bench", metavar="NAME")
    for name, bench in BENCHES.items():
        names.add_lazy(name, bench.summary, partial(_configure_one, bench))


def _configure_one(bench: Bench, parser: argparse.ArgumentParser) -> None:
    module = importlib.import_module(bench.module)
    parser.description = bench.summary
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    module.add_arguments(parser)
    parser.set_defaults(run=_run_one, module=module)


def _print(reports: list[BenchReport], console: Console) -> None:
    from rich.table import Table

    from residency._bench._report import machine

    table = Table(title="residency bench", show_lines=False)
    for col in ("bench", "figure", "value", "target", "ok"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for report in reports:
        for f in report.figures:
            verdict = "" if f.ok is None else ("yes" if f.ok else "NO")
            table.add_row(report.name, f.name, f"{f.value:,.3g} {f.unit}".strip(), f.target, verdict)
    console.print(table)
    m = machine()
    console.print(f"measured on {m['platform']}, {m['cpus']} CPUs, Python {m['python']}")


def _write(path: Path | None, reports: list[BenchReport]) -> None:
    if path is not None:
        path.write_text(json.dumps([r.to_json() for r in reports], indent=2, sort_keys=True) + "\n")


def _run_one(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=False)
    report: BenchReport = args.module.run(args)
    _print([report], console)
    _write(args.json, [report])
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
    _print(reports, console)
    _write(args.json, reports)
    print("all targets met" if all(r.ok for r in reports) else "some targets missed", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1
