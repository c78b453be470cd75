"""``python -m benchmarks session``: the schema tax, measured over whole agent sessions.

Each trace (``benchmarks/traces/*.json``) is replayed under seven strategies with the same
simulated model (see ``_simulate`` and ``_strategies``): ``all-full`` (every tool, full schema,
every turn: the baseline), ``seed-003`` (seed 003's pruner plus phase subsetting), ``minify``
(every tool, compact level), ``defer`` (a fixed list of pinned tools plus search; schemas
arrive in search results), ``residency`` (minify + ``Session.plan_turn`` with the stable
planner + tombstones in results + meta-tools: the gateway's semantics, a tool is callable by
being listed), ``residency-greedy`` (the same with the planner and listing before the stable
planner), ``residency-adapter`` (``residency.adapters.anthropic``: a constant block,
schemas loaded as ``tool_reference`` blocks in the transcript) and ``residency-reference``
(the gateway delivering by reference: a fixed list, schemas in search and re-expansion
results, calls through ``call_tool``).

Figures per trace, all measured in the same run:

* residency's total tool tokens as a ratio to ``all-full`` (target <= 0.15, i.e. >= 85% cut)
  and to ``seed-003`` (target < 1);
* ghost calls and invalid calls residency forwards (target 0), with the default model and with
  a careless model that ignores tombstones; failed calls (target 0);
* re-expansions per session (the pruner-aggressiveness signal) and the others' ghost counts;
* the median ``plan_turn`` time as a ratio to ``json.dumps`` of the full tool list it
  replaces (target <= 1x);
* the bill (``_pricing``), per result regime (``--result-scale``: the traces' own result
  sizes, and the same four times larger): each strategy's effective input cost under every
  pricing profile and as a ratio to ``all-full``'s, its tool-list changes, raw input tokens
  and peak context. Residency's targets, per regime, on ``--profile`` (default
  ``anthropic-5m``): cost <= 1.0x all-full (aim 0.6x) and tool-list changes <= phases entered
  + 3 on a trace that enters phases (delivery by list is for such sessions; without phases
  both are reported only), no ghost, invalid or failed call with the heeding and the careless
  model, raw tool-token cut >= 85%, and the adapter path's cost <= ``defer``'s. Delivery by reference,
  per regime: cost <= 1.1x ``defer``'s, at most one tool-list change beyond those of pinned
  tools redefined upstream, and no ghost, invalid or failed call with either model.

``python -m benchmarks.bench.session --readme-table RESULTS.json`` prints the README table;
``--write benchmarks/README.md`` puts it in the README's generated block.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from benchmarks.bench._corpus import default_corpus
from benchmarks.bench._session_report import (
    BESIDE,
    GENERATED_END,
    GENERATED_START,
    plot,
    print_tables,
    readme_table,
    write_readme,
)
from residency._bench._pricing import DEFAULT_PROFILE, PROFILES, summarize
from residency._bench._report import BenchReport, machine, time_per_call
from residency._bench._simulate import Minifier, Model, model_view, replay
from residency._bench._strategies import RESIDENCY_STRATEGIES, STRATEGIES, make_strategy
from residency._bench._trace import Toolset, Trace, bind, load_corpus, load_trace
from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import InvalidInput
from residency._tokens import tokenizer_name

__all__ = [
    "GENERATED_END",
    "GENERATED_START",
    "SMALL_ARGS",
    "add_arguments",
    "main",
    "plot",
    "readme_table",
    "regime",
    "run",
    "run_trace",
    "write_readme",
]

SMALL_ARGS = ["--quiet"]

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "benchmarks" / "traces"

TARGET_CUT = 0.85
TARGET_COST = 1.0  # residency's effective cost / all-full's, on --profile
AIM_COST = 0.6
LIST_CHANGE_SLACK = 3  # tool-list changes allowed beyond the phases a trace enters
NO_PHASES = "none: a trace without phases"
REFERENCE_VS_DEFER = 1.1  # delivery by reference: effective cost / defer's, on --profile
REFERENCE_LIST_CHANGES = 1  # allowed beyond the changes of pinned tools redefined upstream


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
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=DEFAULT_PROFILE,
        help=f"pricing profile the cost targets are checked on (default {DEFAULT_PROFILE}); "
        "every profile is in the JSON",
    )
    parser.add_argument(
        "--result-scale",
        type=_scales,
        metavar="X,X,...",
        default=(1.0, 4.0),
        help="replay with the traces' result sizes times each factor (default 1,4)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary figures")


def _scales(text: str) -> tuple[float, ...]:
    try:
        values = tuple(dict.fromkeys(float(v) for v in text.split(",") if v.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated factors, got {text!r}") from None
    if not values or any(not v > 0 or v == float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"expected positive factors, got {text!r}")
    return values


def regime(scale: float) -> str:
    """The name of a result regime: ``x1``, ``x4``, ``x0.5``."""
    return f"x{scale:g}"


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
    from benchmarks.bench._seed003 import seed003_prune

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
    profile: str = DEFAULT_PROFILE,
    result_scales: Sequence[float] = (1.0, 4.0),
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
        profile: the pricing profile the cost targets are checked on.
        result_scales: result regimes: every strategy is replayed with the trace's result
            sizes times each factor; the tool-token figures come from the first.
        on_turn: called after every replayed turn (progress).

    Raises:
        ValueError: an unknown profile or no result scale.
    """
    if profile not in PROFILES or not result_scales:
        raise ValueError(f"need a profile of {sorted(PROFILES)} and at least one result scale")
    minify = minify or _minify()
    prune = prune or _seed003()
    out: JSONObject = {
        "trace": trace.name,
        "description": trace.description,
        "servers": list(trace.servers),
        "tools": len(toolset.initial),
        "turns": len(trace.turns),
        "calls": trace.calls,
        "phases_entered": trace.phases_entered,
        "pinned_upgrades": sum(name in trace.pinned for turn in trace.turns for name in turn.upgrade),
        "unsized_calls": trace.unsized_calls,
        "budget": {
            "schema_tokens": trace.budget.schema_tokens,
            "argument_tokens": trace.budget.argument_tokens,
        },
        "model": model,
        "tokenizer": tokenizer_name(),
        "strategies": {},
    }
    plan_seconds: list[float] = []
    regimes: JSONObject = {}
    for scale in result_scales:
        bills: JSONObject = {}
        for name in STRATEGIES:
            strategy = make_strategy(name, toolset, trace, minify=minify, prune=prune)
            tally = replay(trace, toolset, strategy, model=model, result_scale=scale, on_turn=on_turn)
            if not out["strategies"].get(name):
                out["strategies"][name] = tally.to_json()
            if name == "residency" and not plan_seconds:
                plan_seconds = tally.plan_seconds
            bills[name] = {
                "tool_tokens": sum(tally.per_turn_tokens),
                "ghost_calls_forwarded": tally.ghost_calls_forwarded,
                "invalid_calls_forwarded": tally.invalid_calls_forwarded,
                "failed_calls": tally.failed_calls,
                **summarize(strategy.prompt.requests, PROFILES, per_turn=PROFILES[profile]),
            }
        base = bills["all-full"]["effective_cost"]
        for bill in bills.values():
            bill["cost_vs_all_full"] = {
                p: round(v / base[p], 4) if base[p] else 0.0 for p, v in bill["effective_cost"].items()
            }
        regimes[regime(scale)] = {"result_scale": scale, "strategies": bills}
    out["cost"] = {"profile": profile, "regimes": regimes}
    if model == "heeding":
        careless = {}
        for name in ("seed-003", *RESIDENCY_STRATEGIES):
            strategy = make_strategy(name, toolset, trace, minify=minify, prune=prune)
            careless[name] = replay(trace, toolset, strategy, model="careless", on_turn=on_turn).to_json()
        out["careless_model"] = careless
    out["targets"] = _targets(out)
    base_tokens = out["strategies"]["all-full"]["total_tokens"]
    for figures in out["strategies"].values():
        figures["reduction_vs_all_full"] = (
            round(1 - figures["total_tokens"] / base_tokens, 4) if base_tokens else 0.0
        )
    if sweep:
        out["budget_sweep"] = []
        first = regimes[regime(result_scales[0])]["strategies"]["all-full"]["effective_cost"][profile]
        for budget in sweep:
            swept = replace(trace, budget=Budget(budget, trace.budget.argument_tokens))
            strategy = make_strategy("residency", toolset, swept, minify=minify, prune=prune)
            f = replay(
                swept, toolset, strategy, model=model, result_scale=result_scales[0], on_turn=on_turn
            ).to_json()
            bill = summarize(strategy.prompt.requests, {profile: PROFILES[profile]})
            f["schema_tokens"] = budget
            f["reduction_vs_all_full"] = round(1 - f["total_tokens"] / base_tokens, 4) if base_tokens else 0.0
            f["cost_vs_all_full"] = round(bill["effective_cost"][profile] / first, 4) if first else 0.0
            f["list_changes"] = bill["list_changes"]
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


def _unsafe(figures: Mapping[str, Any]) -> int:
    return int(
        figures["ghost_calls_forwarded"] + figures["invalid_calls_forwarded"] + figures["failed_calls"]
    )


def _targets(r: Mapping[str, Any]) -> JSONObject:
    """Residency's targets of the cost model, per result regime, each with its verdict.

    The safety figure counts the heeding model's calls in the regime and the careless model's
    (replayed once: what the model does never depends on result sizes).
    """
    profile = r["cost"]["profile"]
    limit = r["phases_entered"] + LIST_CHANGE_SLACK
    careless = r.get("careless_model", {}).get("residency")
    out: JSONObject = {}
    for key, reg in r["cost"]["regimes"].items():
        res, full = reg["strategies"]["residency"], reg["strategies"]["all-full"]
        ratio = res["cost_vs_all_full"][profile]
        bad = _unsafe(res) + (_unsafe(careless) if careless is not None else 0)
        cut = 1 - res["tool_tokens"] / full["tool_tokens"] if full["tool_tokens"] else 0.0
        adapter, defer = (
            reg["strategies"].get("residency-adapter"),
            reg["strategies"]["defer"]["effective_cost"],
        )
        # Delivery by list is for sessions whose phases name the tools of each stage up front;
        # on a trace without phases every tool the model finds is a list change, and the bill
        # is reported beside the default delivery's (by reference), not held to a target.
        phased = r["phases_entered"] > 0
        out[key] = {
            "cost_vs_all_full": {
                "value": ratio,
                "target": f"<= {TARGET_COST:.1f} (aim {AIM_COST:.1f}), {profile}" if phased else NO_PHASES,
                "ok": ratio <= TARGET_COST if phased else None,
            },
            "list_changes": {
                "value": res["list_changes"],
                "target": f"<= {limit}" if phased else NO_PHASES,
                "ok": res["list_changes"] <= limit if phased else None,
            },
            "ghost_invalid_failed": {"value": bad, "target": "0, heeding and careless", "ok": bad == 0},
            "raw_tool_token_cut": {
                "value": round(cut, 4),
                "target": f">= {TARGET_CUT:.0%}",
                "ok": cut >= TARGET_CUT,
            },
        }
        if adapter is not None:
            vs_defer = (
                round(adapter["effective_cost"][profile] / defer[profile], 4) if defer[profile] else 0.0
            )
            out[key]["adapter_cost_vs_defer"] = {
                "value": vs_defer,
                "target": f"<= 1.0, {profile}",
                "ok": vs_defer <= 1.0,
            }
        reference = reg["strategies"].get("residency-reference")
        if reference is not None:
            out[key] |= _reference_targets(r, reference, defer[profile], profile)
        out[key] |= {
            f"{BESIDE}_cost_vs_all_full": {
                "value": res["cost_vs_all_full"].get(BESIDE),
                "target": "",
                "ok": None,
            },
        }
    return out


def _reference_targets(
    r: Mapping[str, Any], reference: Mapping[str, Any], defer_cost: float, profile: str
) -> JSONObject:
    """Delivery by reference's targets in one regime (see the module docstring)."""
    vs_defer = round(reference["effective_cost"][profile] / defer_cost, 4) if defer_cost else 0.0
    limit = REFERENCE_LIST_CHANGES + r["pinned_upgrades"]
    careless = r.get("careless_model", {}).get("residency-reference")
    bad = _unsafe(reference) + (_unsafe(careless) if careless is not None else 0)
    return {
        "reference_cost_vs_defer": {
            "value": vs_defer,
            "target": f"<= {REFERENCE_VS_DEFER:.1f}, {profile}",
            "ok": vs_defer <= REFERENCE_VS_DEFER,
        },
        "reference_list_changes": {
            "value": reference["list_changes"],
            "target": f"<= {limit}",
            "ok": reference["list_changes"] <= limit,
        },
        "reference_ghost_invalid_failed": {
            "value": bad,
            "target": "0, heeding and careless",
            "ok": bad == 0,
        },
    }


def run(args: argparse.Namespace) -> BenchReport:
    """The ``python -m benchmarks session`` entry point (see the module docstring)."""
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
        console.print(f"[red]python -m benchmarks session: {exc}[/red]", highlight=False)
        raise SystemExit(2) from None
    results: dict[str, JSONObject] = {}
    scales = args.result_scale
    careless = 1 + len(RESIDENCY_STRATEGIES) if args.model == "heeding" else 0
    work = sum(len(t.turns) for t, _ in bound) * (len(STRATEGIES) * len(scales) + careless + len(args.sweep))
    with Progress(console=console, transient=True, disable=args.quiet or work < 400) as progress:
        task = progress.add_task("replaying traces", total=work)
        for trace, toolset in bound:
            results[trace.name] = run_trace(
                trace,
                toolset,
                model=args.model,
                sweep=args.sweep,
                profile=args.profile,
                result_scales=scales,
                on_turn=lambda: progress.advance(task),
            )
    data: JSONObject = {
        "tokenizer": tokenizer_name(),
        "machine": machine(),
        "profiles": {p: asdict(v) for p, v in PROFILES.items()},
        "traces": results,
    }
    report = BenchReport("session", data=data)
    for name, result in results.items():
        _figures(report, name, result)
    if not args.quiet:
        out = Console()
        print_tables(results, out if out.is_terminal else Console(width=100))
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
        bad = _unsafe(careless)
        report.add(f"{name}: residency ghost+invalid+failed, careless model", bad, "", "0", bad == 0)
    report.add(f"{name}: seed-003 ghost calls forwarded", s["seed-003"]["ghost_calls_forwarded"], "")
    report.add(f"{name}: seed-003 failed calls", s["seed-003"]["failed_calls"], "")
    p = r["planning"]["planning_cost_ratio"]
    report.add(f"{name}: plan_turn / json.dumps(full list)", p, "x", "<= 1x", p <= 1)
    profile = r["cost"]["profile"]
    for key, targets in r["targets"].items():
        reg = r["cost"]["regimes"][key]["strategies"]
        t = targets["cost_vs_all_full"]
        report.add(
            f"{name} {key}: residency cost / all-full, {profile}", t["value"], "x", t["target"], t["ok"]
        )
        if profile != BESIDE and BESIDE in reg["residency"]["cost_vs_all_full"]:
            report.add(
                f"{name} {key}: residency cost / all-full, {BESIDE}",
                reg["residency"]["cost_vs_all_full"][BESIDE],
                "x",
            )
        report.add(
            f"{name} {key}: defer cost / all-full, {profile}", reg["defer"]["cost_vs_all_full"][profile], "x"
        )
        if "residency-greedy" in reg:
            report.add(
                f"{name} {key}: residency-greedy cost / all-full, {profile}",
                reg["residency-greedy"]["cost_vs_all_full"][profile],
                "x",
            )
        t = targets.get("adapter_cost_vs_defer")
        if t is not None:
            report.add(
                f"{name} {key}: residency-adapter cost / defer's", t["value"], "x", t["target"], t["ok"]
            )
        t = targets["list_changes"]
        report.add(f"{name} {key}: residency tool-list changes", t["value"], "", t["target"], t["ok"])
        for target, label, unit in (
            ("reference_cost_vs_defer", "residency-reference cost / defer's", "x"),
            ("reference_list_changes", "residency-reference tool-list changes", ""),
            ("reference_ghost_invalid_failed", "residency-reference ghost+invalid+failed, both models", ""),
        ):
            t = targets.get(target)
            if t is not None:
                report.add(f"{name} {key}: {label}", t["value"], unit, t["target"], t["ok"])


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "python -m benchmarks session: --plot needs matplotlib; "
            "install it with: pip install 'residency[plot]'",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.bench.session``: ``--readme-table FILE [--write README]``, or the benchmark."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--readme-table"]:
        if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--write"):
            print(
                "usage: python -m benchmarks.bench.session --readme-table RESULTS.json [--write README.md]",
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
    from benchmarks.run import main as run_main

    return run_main(["session", *argv])


if __name__ == "__main__":
    sys.exit(main())
