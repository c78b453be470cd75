"""What ``python -m benchmarks session`` shows: its console tables, its plot and its README tables.

Everything here reads the JSON figures ``session.run_trace`` returns (or a ``--json`` file of
them), so a README table can be rebuilt from a stored result without replaying anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from residency._bench._strategies import STRATEGIES
from residency._core._tools import JSONObject
from residency._errors import InvalidInput

__all__ = [
    "BESIDE",
    "GENERATED_END",
    "GENERATED_START",
    "plot",
    "print_tables",
    "readme_table",
    "verdict",
    "write_readme",
]

BESIDE = "openai"  # the pricing profile reported beside the one the targets are checked on

# -- console -----------------------------------------------------------------------------------

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


def _table(title: str, caption: str) -> Table:
    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), pad_edge=False)


def print_tables(results: Mapping[str, JSONObject], console: Console) -> None:
    """Per trace: the tool-token table, then one cost table per result regime with verdicts."""
    for name, r in results.items():
        title = f"{name}: {r['turns']} turns, {r['calls']} calls, {r['tools']} tools"
        table = _table(
            f"{title} ({r['tokenizer']} tokens)",
            "ghost/invalid/stale: calls forwarded so; re-exp: re-expansions",
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
        _print_costs(name, r, console)


def _print_costs(name: str, r: Mapping[str, Any], console: Console) -> None:
    profile = r["cost"]["profile"]
    for key, reg in r["cost"]["regimes"].items():
        table = _table(
            f"{name}, results {key}: input cost with a prompt cache ({profile})",
            f"cost in uncached input tokens (= 1.0 each); {r['phases_entered']} phases entered",
        )
        for label in ("strategy", "cost", "vs all-full", f"{BESIDE} vs", "list changes", "raw input", "peak"):
            table.add_column(label, justify="left" if label == "strategy" else "right", no_wrap=True)
        for strategy, bill in reg["strategies"].items():
            table.add_row(
                strategy,
                f"{bill['effective_cost'][profile]:,.0f}",
                f"{bill['cost_vs_all_full'][profile]:.2f}x",
                f"{bill['cost_vs_all_full'].get(BESIDE, 0.0):.2f}x",
                str(bill["list_changes"]),
                f"{bill['raw_input_tokens']:,}",
                f"{bill['peak_context_tokens']:,}",
            )
        console.print(table)
        verdicts = "; ".join(_verdicts(r["targets"][key]))
        console.print(f"residency, results {key}: {verdicts}", highlight=False)


_TARGET_LABELS = {
    "cost_vs_all_full": "by list {value:.2f}x all-full's cost",
    "list_changes": "by list {value} tool-list changes",
    "ghost_invalid_failed": "{value} ghost+invalid+failed calls",
    "raw_tool_token_cut": "raw tool-token cut {value:.1%}",
    "adapter_cost_vs_defer": "adapter path {value:.2f}x defer's cost",
    "reference_cost_vs_defer": "by reference {value:.2f}x defer's cost",
    "reference_list_changes": "by reference {value} tool-list changes",
    "reference_ghost_invalid_failed": "by reference {value} ghost+invalid+failed calls",
}


def _verdicts(targets: Mapping[str, Any]) -> list[str]:
    return [verdict(k, targets[k]) for k in _TARGET_LABELS if k in targets]


def verdict(key: str, target: Mapping[str, Any]) -> str:
    """One target as text: the figure, the target and whether it is met."""
    figure = _TARGET_LABELS[key].format(value=target["value"])
    if target["ok"] is None:
        return f"{figure} (target {target['target']})"
    return f"{figure} (target {target['target']}: {'met' if target['ok'] else 'MISSED'})"


# -- plot --------------------------------------------------------------------------------------


def plot(results: Mapping[str, JSONObject], path: Path) -> None:
    """Write a PNG: per trace, tool tokens per turn (log scale) and, per result regime, the
    cumulative effective cost per strategy with its tool-list changes marked (x)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    regimes = max(len(r["cost"]["regimes"]) for r in results.values())
    fig = Figure(figsize=(6 + 5.5 * regimes, 3.6 * len(results)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(results), 1 + regimes, squeeze=False)
    for row, (name, r) in zip(axes, results.items(), strict=True):
        ax = row[0]
        for strategy, figures in r["strategies"].items():
            turns = range(1, len(figures["per_turn_tokens"]) + 1)
            ax.plot(
                turns, figures["per_turn_tokens"], label=f"{strategy} ({figures['total_tokens']:,})", lw=1.2
            )
        ax.set_yscale("log")
        ax.set_title(f"{name}: tool tokens per turn ({r['tokenizer']})")
        ax.set_xlabel("turn")
        ax.set_ylabel("tokens")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        profile = r["cost"]["profile"]
        for ax, (key, reg) in zip(row[1:], r["cost"]["regimes"].items(), strict=False):
            for i, (strategy, bill) in enumerate(reg["strategies"].items()):
                total, series = 0.0, []
                for value in bill["per_turn_cost"]:
                    total += value
                    series.append(total)
                label = (
                    f"{strategy} ({bill['cost_vs_all_full'][profile]:.2f}x, {bill['list_changes']} changes)"
                )
                color = f"C{i}"
                ax.plot(range(1, len(series) + 1), series, label=label, color=color, lw=1.2)
                marks = bill["list_change_turns"]
                ax.plot([t + 1 for t in marks], [series[t] for t in marks], "x", color=color, ms=5)
            ax.set_title(f"{name}, results {key}: cumulative input cost ({profile})")
            ax.set_xlabel("turn (x: the tool list changed)")
            ax.set_ylabel("uncached input tokens")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small", loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


# -- README ------------------------------------------------------------------------------------


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


def _order(strategies: Mapping[str, Any]) -> list[str]:
    return sorted(strategies, key=lambda k: STRATEGIES.index(k) if k in STRATEGIES else 99)


def readme_table(loaded: Any) -> str:
    """The README's results tables (Markdown) from a session benchmark JSON result."""
    data = _payload(loaded)
    lines = [
        "| trace | strategy | tool tokens | cut vs all-full | ghost fwd | invalid fwd | stale fwd "
        "| refused | re-expansions | searches | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, r in data["traces"].items():
        strategies = r["strategies"]
        for strategy in _order(strategies):
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
            f"{res['total_tokens'] / seed['total_tokens']:.2f}x the tokens of seed-003",
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
    m = data.get("machine", {})
    notes.append(
        f"- Tokens: {data.get('tokenizer', '?')}. Measured on {m.get('platform', '?')}, "
        f"{m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}."
    )
    return "\n".join([*lines, "", *notes, *_cost_tables(data), *_sweep_table(data)]) + "\n"


def _cost_tables(data: Mapping[str, Any]) -> list[str]:
    traces = [(name, r) for name, r in data["traces"].items() if "cost" in r]
    if not traces:
        return []
    profile = traces[0][1]["cost"]["profile"]
    lines = [
        "",
        f"Input cost with a prompt cache (profile `{profile}`, `{BESIDE}` beside; cost in uncached "
        "input tokens, every request of the session):",
        "",
        f"| trace | results | strategy | cost | vs all-full | {BESIDE} vs all-full | tool-list changes "
        "| tool tokens | raw input tokens | peak context | requests |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # The README states figures; the targets and their verdicts are the benchmark's own output.
    verdicts = ["", "Residency's figures, per trace and result regime:", ""]
    for name, r in traces:
        for key, reg in sorted(r["cost"]["regimes"].items(), key=lambda kv: kv[1]["result_scale"]):
            for strategy in _order(reg["strategies"]):
                b = reg["strategies"][strategy]
                lines.append(
                    f"| {name} | {key} | {strategy} | {b['effective_cost'][profile]:,.0f} "
                    f"| {b['cost_vs_all_full'][profile]:.2f}x "
                    f"| {b['cost_vs_all_full'].get(BESIDE, 0.0):.2f}x "
                    f"| {b['list_changes']} | {b['tool_tokens']:,} | {b['raw_input_tokens']:,} "
                    f"| {b['peak_context_tokens']:,} | {b['requests']} |"
                )
            targets = r["targets"][key]
            met = [
                _TARGET_LABELS[k].format(value=targets[k]["value"]) for k in _TARGET_LABELS if k in targets
            ]
            beside = targets.get(f"{BESIDE}_cost_vs_all_full", {}).get("value")
            extra = f"; {BESIDE}: {beside:.2f}x all-full" if beside is not None else ""
            verdicts.append(
                f"- {name}, results {key} ({r['phases_entered']} phases): " + "; ".join(met) + extra + "."
            )
    return [*lines, *verdicts]


def _sweep_table(data: Mapping[str, Any]) -> list[str]:
    rows = [
        f"| {name} | {f['schema_tokens']:,} | {f['total_tokens']:,} | {f['reduction_vs_all_full']:.1%} "
        f"| {f.get('cost_vs_all_full', 0.0):.2f}x | {f.get('list_changes', '')} "
        f"| {f['reexpansions']} | {f['searches']} | {f['refused_calls']} | {f['ghost_calls_forwarded']} "
        f"| {f['invalid_calls_forwarded']} | {f['failed_calls']} |"
        for name, r in data["traces"].items()
        for f in r.get("budget_sweep", ())
    ]
    if not rows:
        return []
    return [
        "",
        "`residency` at other schema budgets (same traces, same model; cost at the first result regime):",
        "",
        "| trace | schema budget | tool tokens | cut vs all-full | cost vs all-full | tool-list changes "
        "| re-expansions | searches | refused | ghost fwd | invalid fwd | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


GENERATED_START = "<!-- generated: python -m benchmarks.bench.session --readme-table"
GENERATED_END = "<!-- end generated -->"


def _opens_block(line: str) -> bool:
    # Any "<!-- generated: ... --readme-table ..." line: a block written by an earlier spelling
    # of the command is still found.
    return line.startswith(GENERATED_START) or (
        line.startswith("<!-- generated: ") and "--readme-table" in line
    )


def write_readme(readme: Path, table: str) -> None:
    """Replace the generated block of ``readme`` (between the two marker lines) with ``table``.

    Raises:
        InvalidInput: the file has no generated block.
    """
    lines = readme.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _opens_block(line)), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(GENERATED_END)), None)
    if start is None or end is None or end < start:
        raise InvalidInput(
            f"{readme}: no generated block ({GENERATED_START} ... {GENERATED_END})", where=str(readme)
        )
    readme.write_text("".join([*lines[: start + 1], table, *lines[end:]]))
