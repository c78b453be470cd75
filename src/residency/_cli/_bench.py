"""``residency bench``: run the project's benchmarks and print their figures.

``residency bench`` alone runs every benchmark with small defaults and prints one summary
table; ``residency bench NAME`` runs one with its own options.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from residency._bench._report import BenchReport, machine

# name -> module; every module exposes SUMMARY, add_arguments(parser) and run(args).
BENCHES: dict[str, str] = {
    "lifecycle": "residency._bench.lifecycle",
    "chains": "residency._bench.chains",
    "spans": "residency._bench.spans",
    "session": "residency._bench.session",
    "minify": "residency._bench.minify",
    "gateway": "residency._bench.gateway",
    "offload": "residency._bench.offload",
    "search": "residency._bench.search",
    "catalog": "residency._bench.catalog",
    "fleet": "residency._bench.fleet",
    "serving": "residency._bench.serving",
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="run benchmarks (all of them, small, when no name is given)",
        description="Run benchmarks. Figures are ratios against a baseline measured in the same run.",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    p.set_defaults(run=run_all, bench=None)
    names = p.add_subparsers(dest="bench", metavar="NAME")
    for name, module_name in BENCHES.items():
        module = importlib.import_module(module_name)
        q = names.add_parser(name, help=module.SUMMARY, description=module.SUMMARY)
        q.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
        module.add_arguments(q)
        q.set_defaults(run=_run_one, module=module)


def _print(reports: list[BenchReport], console: Console) -> None:
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
    console = Console(stderr=False)
    report: BenchReport = args.module.run(args)
    _print([report], console)
    _write(args.json, [report])
    return 0 if report.ok else 1


def run_all(args: argparse.Namespace) -> int:
    console = Console()
    reports = []
    for name, module_name in BENCHES.items():
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        sub_args = parser.parse_args(getattr(module, "SMALL_ARGS", []))
        console.print(f"[bold]bench {name}[/bold] ...", highlight=False)
        reports.append(module.run(sub_args))
    _print(reports, console)
    _write(args.json, reports)
    print("all targets met" if all(r.ok for r in reports) else "some targets missed", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1
