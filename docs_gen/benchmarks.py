"""Benchmark tables built from ``benchmarks/results/*.json`` when the site is built.

Figures only: each bench's measured values with their units and the machine they were measured
on. What a bench checks its figures against stays in the bench's own output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = (
    "RESULTS",
    "audit_table",
    "bench_figures",
    "http_flood_table",
    "isolation_table",
    "oauth_table",
    "otel_instructions_text",
    "otel_table",
    "savings_table",
    "session_table",
)

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
REFERENCE = "residency-reference"
NOT_SHOWN = re.compile(r"\bmeets\b|\bold\b|^baseline\b|\btarget\b")
"""Figures that check a value against a target, or compare with an earlier implementation of the
project (``old``, search's ``baseline``): the bench's own output keeps them, the docs do not."""


def _load(name: str) -> Any:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def number(value: float) -> str:
    """A figure with as many digits as a shared machine's noise leaves meaningful."""
    if isinstance(value, bool) or value is None:
        return str(value)
    size = abs(value)
    if size >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _machine(machine: dict[str, Any]) -> str:
    cpus, python, platform = (machine.get(k, "?") for k in ("cpus", "python", "platform"))
    return f"Measured on {cpus} CPUs, Python {python}, {platform}."


def bench_figures(name: str) -> str:
    """Every figure of one bench's result file, in the order it reports them."""
    parts = []
    for report in _load(name):
        rows = ["| figure | value | unit |", "|---|---:|---|"]
        for figure in report["figures"]:
            if NOT_SHOWN.search(figure["name"]):
                continue
            rows.append(f"| {figure['name']} | {number(figure['value'])} | {figure['unit']} |")
        parts.append("\n".join(rows) + f"\n\n{_machine(report.get('machine', {}))}")
    return "\n\n".join(parts)


def _session() -> dict[str, Any]:
    [report] = _load("session")
    data: dict[str, Any] = report["data"]
    return data


def session_table() -> str:
    """Per trace and strategy: tool tokens, calls gone wrong, and the cached cost of the session."""
    data = _session()
    regimes = sorted(next(iter(data["traces"].values()))["cost"]["regimes"])
    head = (
        "| trace | strategy | tool tokens | cut vs all-full | "
        + " | ".join(f"cost vs all-full, results {r}" for r in regimes)
        + " | tool-list changes | ghost fwd | invalid fwd | failed | re-expansions | searches |"
    )
    rows = [head, "|---|---|" + "---:|" * (len(regimes) + 8)]
    for trace, t in data["traces"].items():
        for strategy, s in t["strategies"].items():
            costs = [t["cost"]["regimes"][r]["strategies"][strategy] for r in regimes]
            rows.append(
                f"| {trace} | {strategy} | {s['total_tokens']:,} | {s['reduction_vs_all_full']:.1%} | "
                + " | ".join(f"{c['cost_vs_all_full'][t['cost']['profile']]:.2f}x" for c in costs)
                + f" | {costs[0]['list_changes']} | {s['ghost_calls_forwarded']} | "
                f"{s['invalid_calls_forwarded']} | {s['failed_calls']} | "
                f"{s['reexpansions']} | {s['searches']} |"
            )
    profile = next(iter(data["traces"].values()))["cost"]["profile"]
    return "\n".join(rows) + (
        f"\n\nCost: every model request of the session priced with the `{profile}` prompt cache, "
        f"against sending every schema every turn (`all-full`). Tokens: {data['tokenizer']}. "
        + _machine(data["machine"])
    )


def savings_table() -> str:
    """What delivery by reference (the default) saves on each shipped session."""
    data = _session()
    rows = [
        "| session | tools | tool tokens cut | cost vs every schema every turn | "
        "provider tool search's cost | ghost or invalid calls forwarded |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for trace, t in data["traces"].items():
        mine = t["strategies"][REFERENCE]
        profile = t["cost"]["profile"]
        x1 = t["cost"]["regimes"]["x1"]["strategies"]
        wrong = mine["ghost_calls_forwarded"] + mine["invalid_calls_forwarded"]
        rows.append(
            f"| {trace} | {t['tools']} | {mine['reduction_vs_all_full']:.1%} | "
            f"{x1[REFERENCE]['cost_vs_all_full'][profile]:.2f}x | "
            f"{x1['defer']['cost_vs_all_full'][profile]:.2f}x | {wrong} |"
        )
    return "\n".join(rows)


def isolation_table() -> str:
    d = _load("isolation")
    return "\n".join(
        [
            "| figure | value |",
            "|---|---:|",
            f"| rounds | {d['rounds']} |",
            f"| probe calls, alone / under hostile load | {d['probe_calls_alone']} / "
            f"{d['probe_calls_loaded']} |",
            f"| hostile requests per round | {d['hostile_requests']} |",
            f"| probe p99 alone | {number(d['p99_alone_ms'])} ms |",
            f"| probe p99 under hostile load | {number(d['p99_loaded_ms'])} ms |",
            f"| probe max under hostile load | {number(d['max_loaded_ms'])} ms |",
            f"| time to parse the costliest hostile message | {number(d['parse_floor_ms'])} ms |",
            f"| p99 loaded / p99 alone (alone floored at the parse time) | {number(d['ratio'])}x |",
        ]
    )


def http_flood_table() -> str:
    d = _load("http_flood")
    rows = [
        "| scenario | another client's calls, p50 / max at rest | p50 / max under attack "
        "| RSS growth | log lines |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in d["scenarios"].items():
        rest, attacked = s.get("at_rest", {}), s.get("attacked", {})
        rows.append(
            f"| {name} | {number(rest.get('p50_s', 0))} s / {number(rest.get('max_s', 0))} s | "
            f"{number(attacked.get('p50_s', 0))} s / {number(attacked.get('max_s', 0))} s | "
            f"{number(s.get('rss_growth_mb', 0))} MB | {s.get('stderr_lines', '')} |"
        )
    args = d["args"]
    return "\n".join(rows) + (
        f"\n\n{args['connections']:,} idle or slow connections from one address, {args['bodies']} "
        f"stalled bodies, held {number(args['hold'])} s, the gateway on its default limits."
    )


def oauth_table() -> str:
    """What checking a request's credentials adds to it, per kind of credential."""
    d = _load("oauth_validation")
    cpu, wall = d["cpu"]["added_ms"], d["wall"]["added_ms"]
    rows = ["| credential | CPU added per request | wall time added per request |", "|---|---:|---:|"]
    for kind in cpu:
        label = kind.replace("oauth_", "OAuth ").replace("_first_sight", ", first sight of the token")
        rows.append(f"| {label.replace('_', ' ')} | {number(cpu[kind])} ms | {number(wall[kind])} ms |")
    return "\n".join(rows) + (
        f"\n\nAgainst the same request with no credential, {d['rounds']} rounds of "
        f"{d['requests_per_round']:,} requests ({d['machine']}). A token seen before is remembered "
        "by digest, with its expiry and key checked again on reuse."
    )


def audit_table() -> str:
    """What the audit log and a rate limit add to a request on the gateway's path."""
    d = _load("audit_cost")
    per, added, ratio = d["cpu_per_request_ms"], d["added_ms"], d["ratio"]
    labels = {
        "off": "neither (baseline)",
        "audit": "audit log",
        "audit_and_limit": "audit log and rate limit",
    }
    rows = ["| gateway | CPU per request | added | against the baseline |", "|---|---:|---:|---:|"]
    for kind, label in labels.items():
        more = f"{number(added[kind])} ms" if kind in added else ""
        times = f"{ratio[kind]:.3f}x" if kind in ratio else "1x"
        rows.append(f"| {label} | {number(per[kind])} ms | {more} | {times} |")
    parts = d["parts_us"]
    return "\n".join(rows) + (
        f"\n\n{d['rounds']} rounds of {d['requests_per_round']:,} requests per gateway (three in four a "
        f"forwarded call, one a `tools/list`), in-process clients, CPU time of the event loop's thread "
        f"(client, gateway and desk together; {d['machine']}). Alone, writing one audit line took "
        f"{number(parts['audit_record'])} µs and one rate-limit take {number(parts['rate_limit_take'])} µs: "
        "the differences between the rows above are mostly the machine's noise (added: the difference "
        "of the medians; against the baseline: the median of each round's ratio)."
    )


def otel_table() -> str:
    """A gateway call's latency and CPU time with OpenTelemetry on, off, and before its hooks:
    called by an in-process client with its upstream in the same process and, when measured,
    with its upstream over stdio, and by a real client over streamable HTTP."""
    d = _load("otel_overhead")
    http = d.get("http")
    labels = {
        "on": "telemetry on (exporting)",
        "off": "telemetry off, beside it in the same process",
        "off_alone": "telemetry off, in a process of its own",
        "before": "before the telemetry hooks, in a process of its own",
    }
    stdio = d.get("stdio")
    header, rule = "| gateway | in-process upstream: p50 latency | CPU |", "|---|---:|---:|"
    if stdio is not None:
        header, rule = header + " stdio upstream: p50 latency | CPU |", rule + "---:|---:|"
    if http is not None:
        header, rule = header + " HTTP client: p50 latency | gateway CPU |", rule + "---:|---:|"
    rows = [header, rule]
    for key, label in labels.items():
        row = f"| {label} | {number(d['p50_ms'][key])} ms | {number(d['cpu_ms_per_call'][key])} ms |"
        if stdio is not None:
            row += f" {number(stdio['p50_ms'][key])} ms | {number(stdio['cpu_ms_per_call'][key])} ms |"
        if http is not None:
            row += f" {number(http['p50_ms'][key])} ms | {number(http['gateway_cpu_ms_per_call'][key])} ms |"
        rows.append(row)
    r = d["ratios"]
    floor = ""
    if "sdk_span_floor_ms_per_call" in d:
        floor = (
            f" The OpenTelemetry SDK's own work for a call's three spans (which the gateway's "
            f"span records replace), timed alone in the same process, is "
            f"{number(d['sdk_span_floor_ms_per_call'])} ms: "
            f"{number(d['sdk_span_floor_ratio'])}x off by itself."
        )
    text = (
        f"\n\nIn-process upstream and client: on over off {number(r['on_over_off_p50'])}x the p50 latency "
        f"({number(r['on_over_off_p50_paired'])}x round by round), "
        f"{number(r['on_over_off_cpu'])}x the CPU time; off over before: "
        f"{number(r['off_over_before_p50'])}x the p50 latency, {number(r['off_over_before_cpu'])}x "
        f"the CPU time. Medians of {d['rounds']} alternating rounds of {d['calls_per_round']:,} "
        f"calls per variant ({d['machine']}); on and off ran side by side in one process, off "
        "and before each in one of their own, each with an in-process client (the CPU time is "
        "the client's and the gateway's together)." + floor
    )
    if "context_floor_ms_per_call" in d:
        text += (
            f" The upstream shares the gateway's process here, so what the `mcp` SDK does with "
            f"the trace context the gateway sends it (its client writes it into `_meta`, the "
            f"upstream's server reads it) is counted too: timed alone in the same process, a bare "
            f"client calling the same upstream with that context and without, it is "
            f"{number(d['context_floor_ms_per_call'])} ms a call, {number(d['context_floor_ratio'])}x "
            f"off by itself; without it, on over off is "
            f"{number(d['on_over_off_p50_without_context_floor'])}x."
        )
    if stdio is not None:
        sr = stdio["ratios"]
        text += (
            f"\n\nStdio upstream (the same upstream as a process of its own, started by each "
            f"gateway and spoken to over its stdio, as an `mcp.json` entry runs it; the same "
            f"in-process client and arrangements): on over off {number(sr['on_over_off_p50'])}x "
            f"the p50 latency ({number(sr['on_over_off_p50_paired'])}x round by round), "
            f"{number(sr['on_over_off_cpu'])}x the CPU time of the gateway's process; off over "
            f"before: {number(sr['off_over_before_p50'])}x the p50 latency, "
            f"{number(sr['off_over_before_cpu'])}x the CPU time. The receiver decoded "
            f"{stdio['spans_received']:,} spans, the request span of {stdio['calls_traced_on']:,} of "
            f"{stdio['calls_made_on']:,} calls."
        )
    if http is not None:
        h = http["ratios"]
        text += (
            f"\n\nHTTP client (the `mcp` SDK's streamable-HTTP client in another process, protocol "
            f"{', '.join(http['protocol_versions'])}; the gateways in the same three arrangements,"
            " served over the gateway's HTTP front): on over off "
            f"{number(h['on_over_off_p50'])}x the p50 latency ({number(h['on_over_off_p50_paired'])}x "
            f"round by round), {number(h['on_over_off_cpu'])}x "
            f"the gateway process's CPU time; off over before: {number(h['off_over_before_p50'])}x the "
            f"p50 latency, {number(h['off_over_before_cpu'])}x the CPU time. {http['calls_per_round']:,} "
            f"calls per variant in each of the same rounds. The receiver decoded "
            f"{http['spans_received']:,} spans from the gateway with telemetry on, the request span of "
            f"{http['calls_traced_on']:,} of its {http['calls_made_on']:,} calls."
        )
    return "\n".join(rows) + text


def otel_instructions_text() -> str:
    """What tracing costs a call in instructions (``benchmarks/otel_instructions.py``)."""
    d = _load("otel_instructions")
    per_call, r = d["instructions_per_call"], d["ratios"]
    rows = [
        "| gateway | instructions per call | without the garbage collector |",
        "|---|---:|---:|",
    ]
    labels = {
        "off": "telemetry off",
        "on": "telemetry on (exporting)",
        "on_unsent": "telemetry on, spans dropped at their end (not sent)",
    }
    for key, label in labels.items():
        rows.append(f"| {label} | {per_call[key]['gc']:,} | {per_call[key]['no_gc']:,} |")
    text = (
        f"\n\nOn over off: {number(r['on_over_off'])}x the instructions, "
        f"{number(r['on_over_off_no_gc'])}x without the collector's; the calls' own tracing work "
        f"(spans dropped at their end, over off, without the collector) "
        f"{number(r['on_unsent_over_off_no_gc'])}x. {d['calls']:,} calls per variant after "
        f"{d['warm_up_calls']} to warm up, in-process client, counted by valgrind's callgrind "
        f"({d['machine']})."
    )
    return "\n".join(rows) + text
