"""``python -m benchmarks minify``: what minification keeps and cuts, on real MCP tool lists.

For every top-level file of the corpus (default ``../shared/corpora/dev``), every tool, at
every level, and for the seed-003 pruner (re-implemented for comparison only):

* constraints lost: the original's validation constraints the result no longer asserts
  (``residency._core._minify_constraints``); target 0 at every level;
* verdict disagreements: instances (drawn by hypothesis-jsonschema, derandomized, plus
  mutations aimed at every constraint) judged differently by the original and the result;
  target 0 at every level;
* token cut: tokens of name+description+inputSchema (what a model is sent), cl100k_base;
  targets: compact >= 40%, minimal >= 55%;
* time to minify the whole corpus (compact) as a ratio to a ``json.loads`` + ``json.dumps``
  round trip of the same files, measured in the same run; target <= 20x.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.bench._corpus import default_corpus
from benchmarks.bench._seed003 import seed003_prune
from residency._bench._report import BenchReport, time_per_call
from residency._core._minify import LEVELS, minify_tool, model_view
from residency._core._minify_constraints import constraint_atoms
from residency._tokens import count_tokens, tokenizer_name
from residency._verify import verify_levels

__all__ = ["SMALL_ARGS", "add_arguments", "run"]

SMALL_ARGS = ["--examples", "2", "--quiet"]

SEED = "seed-003"
_CUT_TARGETS = {"full-text": None, "compact": 0.40, "minimal": 0.55}
_TIME_TARGET = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="folder of {server, tools} JSON files (default: the dev corpus)",
    )
    parser.add_argument(
        "--examples",
        type=int,
        default=10,
        help="instances drawn per tool by hypothesis-jsonschema (default 10)",
    )
    parser.add_argument(
        "--time-limit", type=float, default=5.0, help="seconds of drawing per tool (default 5)"
    )
    parser.add_argument("--quiet", action="store_true", help="no issue-shaped table and no progress bar")


def _files(corpus: Path) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """file stem -> (its text, its tools), top-level files only (``variants/`` excluded)."""
    if not corpus.is_dir():
        raise FileNotFoundError(f"corpus folder not found: {corpus} (pass --corpus DIR)")
    out = {}
    for path in sorted(corpus.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        out[path.stem] = (text, list(json.loads(text)["tools"]))
    return out


def run(args: argparse.Namespace) -> BenchReport:
    corpus = args.corpus or default_corpus()
    files = _files(corpus)
    labels: list[str] = [*LEVELS, SEED]
    totals: dict[str, Counter[str]] = {label: Counter() for label in labels}
    per_server: dict[str, dict[str, dict[str, int]]] = {}
    fallbacks: list[str] = []
    timed_out: list[str] = []
    n_tools = sum(len(tools) for _, tools in files.values())
    console = Console(stderr=True)
    with Progress(console=console, transient=True, disable=args.quiet or not console.is_terminal) as progress:
        task = progress.add_task("minify bench", total=n_tools)
        for server, (_, tools) in files.items():
            rows: dict[str, Counter[str]] = {label: Counter() for label in labels}
            for tool in tools:
                results: dict[str, dict[str, Any]] = {lv: minify_tool(tool, lv) for lv in LEVELS}
                results[SEED] = seed003_prune(tool)
                original = constraint_atoms(tool["inputSchema"], tool=tool["name"])
                before = count_tokens(model_view(tool))
                verdicts = verify_levels(
                    tool, results, max_examples=args.examples, time_limit=args.time_limit
                )
                first = next(iter(verdicts.values()))
                if "mutations only" in first.generator:
                    fallbacks.append(f"{server}/{tool['name']}: {first.generator}")
                if first.timed_out:
                    timed_out.append(f"{server}/{tool['name']}")
                for label, result in results.items():
                    atoms = constraint_atoms(result["inputSchema"], tool=tool["name"])
                    row = rows[label]
                    row["tools"] += 1
                    row["constraints"] += sum(original.values())
                    row["lost"] += sum((original - atoms).values())
                    row["added"] += sum((atoms - original).values())
                    row["disagreements"] += len(verdicts[label].disagreements)
                    row["tools with disagreements"] += bool(verdicts[label].disagreements)
                    row["instances"] += verdicts[label].instances
                    row["tokens before"] += before
                    row["tokens after"] += count_tokens(model_view(result))
                progress.advance(task)
            per_server[server] = {label: dict(row) for label, row in rows.items()}
            for label in labels:
                totals[label].update(rows[label])

    report = BenchReport("minify")
    for label in labels:
        t = totals[label]
        cut = 1 - t["tokens after"] / t["tokens before"] if t["tokens before"] else 0.0
        if label == SEED:
            lost_share = t["lost"] / t["constraints"] if t["constraints"] else 0.0
            report.add(f"{label} constraints lost", 100 * lost_share, "%", "report")
            report.add(f"{label} verdict disagreements", t["disagreements"], "", "report")
            report.add(f"{label} token cut", 100 * cut, "%", "report")
            continue
        report.add(f"{label} constraints lost", t["lost"], "", "= 0", t["lost"] == 0)
        report.add(f"{label} verdict disagreements", t["disagreements"], "", "= 0", t["disagreements"] == 0)
        target = _CUT_TARGETS[label]
        if target is None:
            report.add(f"{label} token cut", 100 * cut, "%", "report")
        else:
            report.add(f"{label} token cut", 100 * cut, "%", f">= {100 * target:.0f}%", cut >= target)

    texts = [text for text, _ in files.values()]
    all_tools = [tool for _, tools in files.values() for tool in tools]

    def round_trip() -> None:
        for text in texts:
            json.dumps(json.loads(text))

    def minify_all() -> None:
        for tool in all_tools:
            minify_tool(tool, "compact")

    baseline = time_per_call(round_trip, repeat=5)
    spent = time_per_call(minify_all, repeat=5)
    ratio = spent / baseline
    report.add("minify time vs json round trip", ratio, "x", f"<= {_TIME_TARGET:.0f}x", ratio <= _TIME_TARGET)
    report.data = {
        "corpus": str(corpus),
        "files": len(files),
        "tools": n_tools,
        "tokenizer": tokenizer_name(),
        "tokens counted on": "name+description+inputSchema",
        "examples per tool": args.examples,
        "totals": {label: dict(t) for label, t in totals.items()},
        "per server": per_server,
        "hypothesis fallbacks": fallbacks,
        "drawing timed out": timed_out,
        "round trip seconds": baseline,
        "minify seconds (compact)": spent,
    }
    if not args.quiet:
        Console().print(_issue_table(totals, ratio, n_tools, len(files)))
        if fallbacks:
            Console(stderr=True).print(
                f"mutations only for {len(fallbacks)} tool(s): {fallbacks}", markup=False
            )
    return report


def _issue_table(totals: dict[str, Counter[str]], ratio: float, tools: int, files: int) -> Table:
    table = Table(
        title=f"minify on {files} corpus files, {tools} tools",
        caption=f"tokens of name+description+inputSchema, {tokenizer_name()}; minify (compact) "
        f"takes {ratio:.1f}x a json.loads+json.dumps round trip",
    )
    for col in ("level", "constraints lost", "verdict disagreements", "token cut", "instances judged"):
        table.add_column(col, justify="left" if col == "level" else "right")
    for label, t in totals.items():
        share = t["lost"] / t["constraints"] if t["constraints"] else 0.0
        cut = 1 - t["tokens after"] / t["tokens before"] if t["tokens before"] else 0.0
        lost = f"{t['lost']:,} of {t['constraints']:,} ({100 * share:.0f}%)" if t["lost"] else "0"
        bad = f"{t['disagreements']:,} ({t['tools with disagreements']} tools)" if t["disagreements"] else "0"
        table.add_row(label, lost, bad, f"{100 * cut:.1f}%", f"{t['instances']:,}")
    return table
