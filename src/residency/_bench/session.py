"""``residency bench session``: the schema tax, measured over whole agent sessions.

Each trace (``benchmarks/traces/*.json``) is replayed under four strategies with the same
simulated model (see ``_simulate``): ``all-full`` (every tool, full schema, every turn: the
baseline), ``seed-003`` (seed 003's pruner plus phase subsetting), ``minify`` (every tool,
compact level) and ``residency`` (minify + ``Session.plan_turn`` + tombstones + meta-tools).

Figures per trace, all measured in the same run:

* residency's total tool tokens as a ratio to ``all-full`` (target <= 0.15, i.e. >= 85% cut)
  and to ``seed-003`` (target < 1);
* ghost calls and invalid calls residency forwards (target 0), with the default model and with
  a careless model that ignores tombstones; failed calls (target 0);
* re-expansions per session (the pruner-aggressiveness signal) and the others' ghost counts;
* the median ``plan_turn`` time as a ratio to ``json.dumps`` of the full tool list it
  replaces (target <= 1x).

``python -m residency._bench.session --readme-table RESULTS.json`` prints the README table;
``--write benchmarks/README.md`` puts it in the README's generated block.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from residency._bench._corpus import default_corpus
from residency._bench._report import BenchReport, machine, time_per_call
from residency._bench._simulate import STRATEGIES, Minifier, Model, make_strategy, model_view, replay
from residency._bench._trace import Toolset, Trace, bind, load_corpus, load_trace
from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import InvalidInput
from residency._tokens import tokenizer_name

__all__ = [
    "SMALL_ARGS",
    "SUMMARY",
    "add_arguments",
    "main",
    "plot",
    "readme_table",
    "run",
    "run_trace",
    "write_readme",
]

SUMMARY = "tool tokens, ghost calls and re-expansions over agent sessions, four strategies side by side"
SMALL_ARGS = ["--quiet"]

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO / "benchmarks" / "traces"

TARGET_CUT = 0.85


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="folder of server files (default: the dev corpus + incident desk)",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=None,
        help="a trace file (repeatable; default: every shipped trace)",
    )
    parser.add_argument(
        "--plot", type=Path, metavar="OUT.png", help="plot tokens per turn per strategy (needs matplotlib)"
    )
    parser.add_argument(
        "--model",
        choices=("heeding", "careless"),
        default="heeding",
        help="the simulated model: heeding re-expands on a tombstone, careless rebuilds the call anyway",
    )
    parser.add_argument(
        "--schema-budget", type=int, metavar="TOKENS", help="replace every trace's schema budget (residency)"
    )
    parser.add_argument(
        "--sweep",
        type=_budgets,
        metavar="N,N,...",
        default=(),
        help="also replay residency at these schema budgets (tokens vs re-expansions)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary figures")


def _budgets(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative token counts, got {text!r}")
    return values


def _minify() -> Minifier:
    from residency._core._minify import minify_tool

    return functools.partial(minify_tool, level="compact")


def _seed003() -> Minifier:
    from residency._bench._seed003 import seed003_prune

    prune: Minifier = seed003_prune
    return prune


def run_trace(
    trace: Trace,
    toolset: Toolset,
    *,
    model: Model = "heeding",
    minify: Minifier | None = None,
    prune: Minifier | None = None,
    sweep: Sequence[int] = (),
    on_turn: Callable[[], None] | None = None,
) -> JSONObject:
    """Replay one trace under every strategy and return its JSON figures.

    Args:
        trace: the trace.
        toolset: the trace bound to a corpus (``bind``).
        model: the simulated model's behaviour on a tombstone.
        minify: the compact minifier (the project's own when omitted).
        prune: seed 003's pruner (its re-implementation when omitted).
        sweep: schema budgets to replay ``residency`` at as well.
        on_turn: called after every replayed turn (progress).
    """
    minify = minify or _minify()
    prune = prune or _seed003()
    out: JSONObject = {
        "trace": trace.name,
        "description": trace.description,
        "servers": list(trace.servers),
        "tools": len(toolset.initial),
        "turns": len(trace.turns),
        "calls": trace.calls,
        "budget": {
            "schema_tokens": trace.budget.schema_tokens,
            "argument_tokens": trace.budget.argument_tokens,
        },
        "model": model,
        "tokenizer": tokenizer_name(),
        "strategies": {},
    }
    plan_seconds: list[float] = []
    for name in STRATEGIES:
        strategy = make_strategy(name, toolset, trace, minify=minify, prune=prune)
        tally = replay(trace, toolset, strategy, model=model, on_turn=on_turn)
        out["strategies"][name] = tally.to_json()
        if name == "residency":
            plan_seconds = tally.plan_seconds
    if model == "heeding":
        careless = {}
        for name in ("seed-003", "residency"):
            strategy = make_strategy(name, toolset, trace, minify=minify, prune=prune)
            careless[name] = replay(trace, toolset, strategy, model="careless", on_turn=on_turn).to_json()
        out["careless_model"] = careless
    base = out["strategies"]["all-full"]["total_tokens"]
    for figures in out["strategies"].values():
        figures["reduction_vs_all_full"] = round(1 - figures["total_tokens"] / base, 4) if base else 0.0
    if sweep:
        out["budget_sweep"] = []
        for budget in sweep:
            swept = replace(trace, budget=Budget(budget, trace.budget.argument_tokens))
            strategy = make_strategy("residency", toolset, swept, minify=minify, prune=prune)
            f = replay(swept, toolset, strategy, model=model, on_turn=on_turn).to_json()
            f["schema_tokens"] = budget
            f["reduction_vs_all_full"] = round(1 - f["total_tokens"] / base, 4) if base else 0.0
            del f["per_turn_tokens"]
            out["budget_sweep"].append(f)
    full_list = [model_view(t) for t in toolset.initial.values()]
    dumps = time_per_call(lambda: json.dumps(full_list))
    plan = statistics.median(plan_seconds) if plan_seconds else 0.0
    out["planning"] = {
        "plan_turn_seconds_median": plan,
        "json_dumps_full_list_seconds": dumps,
        "planning_cost_ratio": plan / dumps if dumps else 0.0,
    }
    return out


def run(args: argparse.Namespace) -> BenchReport:
    """The ``residency bench session`` entry point (see the module docstring)."""
    console = Console(stderr=True)
    if args.plot is not None:
        _need_matplotlib()
    try:
        corpus = load_corpus(args.corpus or default_corpus())
        paths = args.trace or sorted(TRACES.glob("*.json"))
        if not paths:
            raise InvalidInput(f"no trace given and none shipped in {TRACES}", where="--trace")
        bound = []
        for path in paths:
            trace = load_trace(path)
            if args.schema_budget is not None:
                if args.schema_budget < 0:
                    raise InvalidInput("must be a non-negative token count", where="--schema-budget")
                trace = replace(trace, budget=Budget(args.schema_budget, trace.budget.argument_tokens))
            try:
                bound.append((trace, bind(trace, corpus)))
            except InvalidInput as exc:
                raise InvalidInput(f"trace {path}: {exc}", where=exc.where) from None
    except InvalidInput as exc:
        console.print(f"[red]residency bench session: {exc}[/red]", highlight=False)
        raise SystemExit(2) from None
    results: dict[str, JSONObject] = {}
    work = sum(len(t.turns) for t, _ in bound) * (len(STRATEGIES) + 2 + len(args.sweep))
    with Progress(console=console, transient=True, disable=args.quiet or work < 400) as progress:
        task = progress.add_task("replaying traces", total=work)
        for trace, toolset in bound:
            results[trace.name] = run_trace(
                trace, toolset, model=args.model, sweep=args.sweep, on_turn=lambda: progress.advance(task)
            )
    data: JSONObject = {"tokenizer": tokenizer_name(), "machine": machine(), "traces": results}
    report = BenchReport("session", data=data)
    for name, result in results.items():
        _figures(report, name, result)
    if not args.quiet:
        out = Console()
        _print_tables(results, out if out.is_terminal else Console(width=100))
    if args.plot is not None:
        plot(results, args.plot)
    return report


def _figures(report: BenchReport, name: str, r: JSONObject) -> None:
    s = r["strategies"]
    full, seed, res = s["all-full"]["total_tokens"], s["seed-003"]["total_tokens"], s["residency"]
    ratio = res["total_tokens"] / full if full else 0.0
    report.add(
        f"{name}: residency tokens / all-full",
        ratio,
        "x",
        f"<= {1 - TARGET_CUT:.2f}",
        ratio <= 1 - TARGET_CUT,
    )
    vs_seed = res["total_tokens"] / seed if seed else float("inf")
    report.add(f"{name}: residency tokens / seed-003", vs_seed, "x", "< 1", vs_seed < 1)
    report.add(
        f"{name}: residency ghost calls forwarded",
        res["ghost_calls_forwarded"],
        "",
        "0",
        res["ghost_calls_forwarded"] == 0,
    )
    report.add(
        f"{name}: residency invalid calls forwarded",
        res["invalid_calls_forwarded"],
        "",
        "0",
        res["invalid_calls_forwarded"] == 0,
    )
    report.add(f"{name}: residency failed calls", res["failed_calls"], "", "0", res["failed_calls"] == 0)
    report.add(f"{name}: residency re-expansions", res["reexpansions"], "")
    careless = r.get("careless_model", {}).get("residency")
    if careless is not None:
        bad = careless["ghost_calls_forwarded"] + careless["invalid_calls_forwarded"]
        report.add(f"{name}: residency ghost+invalid forwarded, careless model", bad, "", "0", bad == 0)
    report.add(f"{name}: seed-003 ghost calls forwarded", s["seed-003"]["ghost_calls_forwarded"], "")
    report.add(f"{name}: seed-003 failed calls", s["seed-003"]["failed_calls"], "")
    p = r["planning"]["planning_cost_ratio"]
    report.add(f"{name}: plan_turn / json.dumps(full list)", p, "x", "<= 1x", p <= 1)


_COLUMNS: tuple[tuple[str, str], ...] = (
    ("total_tokens", "tokens"),
    ("reduction_vs_all_full", "cut"),
    ("ghost_calls_forwarded", "ghost"),
    ("invalid_calls_forwarded", "invalid"),
    ("stale_calls_forwarded", "stale"),
    ("refused_calls", "refused"),
    ("reexpansions", "re-exp"),
    ("searches", "search"),
    ("failed_calls", "failed"),
)


def _cell(key: str, value: Any) -> str:
    if key == "reduction_vs_all_full":
        return f"{value:.1%}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _print_tables(results: Mapping[str, JSONObject], console: Console) -> None:
    for name, r in results.items():
        title = f"{name}: {r['turns']} turns, {r['calls']} calls, {r['tools']} tools"
        table = Table(
            title=f"{title} ({r['tokenizer']} tokens)",
            caption="ghost/invalid/stale: calls forwarded so; re-exp: re-expansions",
            box=box.SIMPLE_HEAD,
            padding=(0, 0, 0, 1),
            pad_edge=False,
        )
        table.add_column("strategy", no_wrap=True)
        for _, label in _COLUMNS:
            table.add_column(label, justify="right", no_wrap=True)
        for strategy, figures in r["strategies"].items():
            table.add_row(strategy, *(_cell(k, figures[k]) for k, _ in _COLUMNS))
        console.print(table)
        p = r["planning"]
        console.print(
            f"plan_turn median {p['plan_turn_seconds_median'] * 1e6:,.0f} µs = "
            f"{p['planning_cost_ratio']:.2f}x json.dumps of the full tool list",
            highlight=False,
        )


# -- plot and README table ---------------------------------------------------------------------


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "residency bench session: --plot needs matplotlib; "
            "install it with: pip install 'residency[plot]'",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def plot(results: Mapping[str, JSONObject], path: Path) -> None:
    """Write a PNG of tool tokens per turn per strategy, one panel per trace (log scale)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2 * len(results)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    for ax, (name, r) in zip(axes, results.items(), strict=True):
        for strategy, figures in r["strategies"].items():
            turns = range(1, len(figures["per_turn_tokens"]) + 1)
            label = f"{strategy} ({figures['total_tokens']:,})"
            ax.plot(turns, figures["per_turn_tokens"], label=label, marker=".", linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(f"{name}: tool tokens per turn ({r['tokenizer']})")
        ax.set_xlabel("turn")
        ax.set_ylabel("tokens")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _payload(loaded: Any) -> JSONObject:
    """The session payload from a ``--json`` file (a list of bench reports) or the payload itself."""
    if isinstance(loaded, list):
        for report in loaded:
            if isinstance(report, dict) and report.get("name") == "session":
                return report["data"]  # type: ignore[no-any-return]
        raise InvalidInput("no 'session' report in the JSON file", where="$")
    if isinstance(loaded, dict) and "traces" in loaded:
        return loaded
    raise InvalidInput("not a session benchmark result", where="$")


def readme_table(loaded: Any) -> str:
    """The README's results table (Markdown) from a session benchmark JSON result."""
    data = _payload(loaded)
    lines = [
        "| trace | strategy | tool tokens | cut vs all-full | ghost fwd | invalid fwd | stale fwd "
        "| refused | re-expansions | searches | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, r in data["traces"].items():
        strategies = r["strategies"]
        for strategy in sorted(strategies, key=lambda k: STRATEGIES.index(k) if k in STRATEGIES else 99):
            f = strategies[strategy]
            lines.append(
                f"| {name} | {strategy} | {f['total_tokens']:,} | {f['reduction_vs_all_full']:.1%} "
                f"| {f['ghost_calls_forwarded']} | {f['invalid_calls_forwarded']} "
                f"| {f['stale_calls_forwarded']} | {f['refused_calls']} | {f['reexpansions']} "
                f"| {f['searches']} | {f['failed_calls']} |"
            )
        p = r["planning"]
        res, seed = strategies["residency"], strategies["seed-003"]
        verdicts = [
            f"cut {res['reduction_vs_all_full']:.1%} vs all-full (target >= {TARGET_CUT:.0%}: "
            f"{'met' if res['reduction_vs_all_full'] >= TARGET_CUT else 'MISSED'})",
            f"{res['total_tokens'] / seed['total_tokens']:.2f}x the tokens of seed-003 (target < 1: "
            f"{'met' if res['total_tokens'] < seed['total_tokens'] else 'MISSED'})",
            f"{res['ghost_calls_forwarded']} ghost and {res['invalid_calls_forwarded']} invalid calls "
            "forwarded",
        ]
        notes.append(f"- {name}, residency: " + "; ".join(verdicts) + ".")
        careless = r.get("careless_model", {}).get("residency")
        if careless is not None:
            notes.append(
                f"- {name}, careless model (rebuilds calls despite tombstones): residency refused "
                f"{careless['refused_calls']}, forwarded {careless['ghost_calls_forwarded']} ghost and "
                f"{careless['invalid_calls_forwarded']} invalid calls, failed {careless['failed_calls']}."
            )
        notes.append(
            f"- {name}: {r['turns']} turns, {r['calls']} calls, {r['tools']} tools; plan_turn median "
            f"{p['plan_turn_seconds_median'] * 1e6:,.0f} µs = {p['planning_cost_ratio']:.2f}x "
            f"json.dumps of the full tool list."
        )
    sweep = _sweep_table(data)
    m = data.get("machine", {})
    notes.append(
        f"- Tokens: {data.get('tokenizer', '?')}. Measured on {m.get('platform', '?')}, "
        f"{m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}."
    )
    return "\n".join([*lines, "", *notes, *sweep]) + "\n"


def _sweep_table(data: Mapping[str, Any]) -> list[str]:
    rows = [
        f"| {name} | {f['schema_tokens']:,} | {f['total_tokens']:,} | {f['reduction_vs_all_full']:.1%} "
        f"| {f['reexpansions']} | {f['searches']} | {f['refused_calls']} | {f['ghost_calls_forwarded']} "
        f"| {f['invalid_calls_forwarded']} | {f['failed_calls']} |"
        for name, r in data["traces"].items()
        for f in r.get("budget_sweep", ())
    ]
    if not rows:
        return []
    return [
        "",
        "`residency` at other schema budgets (same traces, same model):",
        "",
        "| trace | schema budget | tool tokens | cut vs all-full | re-expansions | searches | refused "
        "| ghost fwd | invalid fwd | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


GENERATED_START = "<!-- generated: python -m residency._bench.session --readme-table"
GENERATED_END = "<!-- end generated -->"


def write_readme(readme: Path, table: str) -> None:
    """Replace the generated block of ``readme`` (between the two marker lines) with ``table``.

    Raises:
        InvalidInput: the file has no generated block.
    """
    lines = readme.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(GENERATED_START)), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(GENERATED_END)), None)
    if start is None or end is None or end < start:
        raise InvalidInput(
            f"{readme}: no generated block ({GENERATED_START} ... {GENERATED_END})", where=str(readme)
        )
    readme.write_text("".join([*lines[: start + 1], table, *lines[end:]]))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m residency._bench.session``: ``--readme-table FILE [--write README]``, or the benchmark."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--readme-table"]:
        if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--write"):
            print(
                "usage: python -m residency._bench.session --readme-table RESULTS.json [--write README.md]",
                file=sys.stderr,
            )
            return 2
        try:
            text = readme_table(json.loads(Path(argv[1]).read_text()))
            if len(argv) == 4:
                write_readme(Path(argv[3]), text)
                return 0
        except (OSError, ValueError, KeyError) as exc:
            print(f"--readme-table {argv[1]}: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(text)
        return 0
    from residency._cli import main as cli_main

    return cli_main(["bench", "session", *argv])


if __name__ == "__main__":
    sys.exit(main())
