"""``residency bench``: what residency would do for your own tools, measured on them.

``residency bench`` alone runs every bench with its defaults (on the bundled demo desk);
``residency bench NAME`` runs one with its own options. The project's development benchmarks
(gateway overhead, fleets, search quality, ...) run from a checkout: ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import importlib
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from residency._cli import lazy_subparsers

if TYPE_CHECKING:
    from residency._bench._report import BenchReport


class Bench(NamedTuple):
    """A benchmark: the module that runs it and its one-line summary (what ``--help`` lists)."""

    module: str
    summary: str


# Every module exposes add_arguments(parser), run(args) -> BenchReport (it prints its own
# tables) and SMALL_ARGS; it is imported only when its bench runs.
BENCHES: dict[str, Bench] = {
    "cost": Bench(
        "residency._bench.cost",
        "what your tool catalog costs per turn (full, minified) and what residency would save, "
        "with prompt caching priced",
    ),
}


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Measure what residency would do for your own tools. Figures are ratios against a baseline "
        "measured in the same run."
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    p.set_defaults(run=run_all, bench=None)
    names = lazy_subparsers(p, dest="bench", metavar="NAME")
    for name, bench in BENCHES.items():
        names.add_lazy(name, bench.summary, partial(_configure_one, bench))


def _configure_one(bench: Bench, parser: argparse.ArgumentParser) -> None:
    module = importlib.import_module(bench.module)
    parser.description = bench.summary[:1].upper() + bench.summary[1:] + "."
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    module.add_arguments(parser)
    parser.set_defaults(run=_run_one, module=module)


def _run_one(args: argparse.Namespace) -> int:
    from residency._bench._report import write_json

    report: BenchReport = args.module.run(args)
    write_json(args.json, [report])
    return 0 if report.ok else 1


def run_all(args: argparse.Namespace) -> int:
    from residency._bench._report import write_json

    reports = []
    for bench in BENCHES.values():
        module = importlib.import_module(bench.module)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        reports.append(module.run(parser.parse_args(getattr(module, "SMALL_ARGS", []))))
    write_json(args.json, reports)
    return 0 if all(r.ok for r in reports) else 1
