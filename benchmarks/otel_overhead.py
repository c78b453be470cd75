"""What OpenTelemetry costs a gateway request: tracing on, off, and a build without the hooks.

Run from the repository root, with the project's venv active (and the ``otel`` extra):

    python benchmarks/otel_overhead.py
    python benchmarks/otel_overhead.py --json benchmarks/results/otel_overhead.json

Each variant is a gateway with one in-process upstream (``tests/gateway/traced_upstream.py``)
and an in-process ``mcp.Client`` that calls the upstream's tool through it, one call at a time:

- ``on``: ``residency.telemetry`` set: a span per request, admission and upstream call, batched
  (the SDK's ``BatchSpanProcessor``) and exported over OTLP/HTTP to a receiver that runs in
  this (the parent) process, as a local collector would; metrics exported every second;
- ``off``: the same tree without the section (the hooks are there, ``tracing`` is None);
- ``before``: the source tree before the hooks were added (``--baseline``, by default the
  parent of the commit that added ``_tracing.py``), extracted with ``git archive``: the build
  without the hooks.

Three worker processes: ``on`` and ``off`` side by side in one (the same scheduling and
neighbours: on this shared machine a process's latency drifts by several times for minutes at
a time, so two processes are not comparable), and ``off`` (``off_alone``) and ``before`` each
alone (neither holds an exporter's threads). ``on`` over ``off`` compares the first two,
``off`` over ``before`` the last two. CPU time is the whole process's during a variant's
calls, so ``off`` beside ``on`` is charged whatever the exporter threads spend meanwhile.

Rounds alternate the workers, in a rotating order (the machine's noise hits all alike); a
worker's figure for a round is the median latency (p50) of its calls in that round, and its
figure for the run the median over rounds. Ratios are of those figures; ``paired`` ratios are
the median of the per-round ratios. Targets: ``on`` at most 1.05x ``off`` (p50), and ``off``
indistinguishable from ``before`` (within the spread of the rounds). The exit code is 1 when
the first is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_ON_OVER_OFF = 1.05

WORKER = r"""
import json, statistics, sys, time
from contextlib import AsyncExitStack
import anyio
from mcp import Client
from residency._gateway import Gateway, parse_config
from tests.gateway import traced_upstream

async def main(endpoint, *variants):
    endpoint = "" if endpoint == "-" else endpoint
    meta = {"residency/session": "bench"}
    async with AsyncExitStack() as stack:
        clients = {}
        for variant in variants:
            # Pinned, so it is listed: the client knows the tool it calls (as an agent's does).
            residency = {"ready_wait": 60, "pinned": ["echo_meta"]}
            if variant == "on":
                residency["telemetry"] = {"otlp": {"endpoint": endpoint}, "metric_interval": 1}
            cfg = parse_config(json.dumps({"mcpServers": {}, "residency": residency}))
            gw = await stack.enter_async_context(Gateway(cfg, upstreams={"up": traced_upstream.server()}))
            client = await stack.enter_async_context(Client(gw.server, mode="legacy"))
            await client.list_tools(meta=meta)
            clients[variant] = client
        async def call(client):
            result = await client.call_tool("echo_meta", {"text": "x"}, meta=meta)
            assert not result.is_error, result
        for client in clients.values():
            for _ in range(200):
                await call(client)
        print(json.dumps({"ready": True}), flush=True)
        turn = 0
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line.strip():
                break
            figures = {}
            order = list(clients)[turn % len(clients):] + list(clients)[:turn % len(clients)]
            turn += 1
            for variant in order:
                times = []
                cpu = time.process_time()
                for _ in range(int(line)):
                    started = time.perf_counter()
                    await call(clients[variant])
                    times.append(time.perf_counter() - started)
                cpu = time.process_time() - cpu
                figures[variant] = {"p50_ms": statistics.median(times) * 1000,
                                    "mean_ms": statistics.fmean(times) * 1000,
                                    "cpu_ms": cpu / len(times) * 1000}
            print(json.dumps(figures), flush=True)

anyio.run(main, *sys.argv[1:])
"""


def baseline_commit(given: str | None) -> str:
    if given:
        return given
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "src/residency/_gateway/_tracing.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("no commit adds src/residency/_gateway/_tracing.py: pass --baseline")
    return f"{added[-1]}^"


def extract(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "src/residency"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


class Worker:
    """A worker process running the gateways ``variants`` (``on``, ``off``) side by side; its
    figures are kept under ``names`` (the same order)."""

    def __init__(self, src: Path, endpoint: str, variants: list[str], names: list[str]) -> None:
        self.names = dict(zip(variants, names, strict=True))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, endpoint or "-", *variants],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
        )

    def ready(self) -> None:
        assert self.process.stdout is not None
        if not self.process.stdout.readline():
            raise SystemExit(f"the worker of {list(self.names.values())} did not start")

    def round(self, calls: int, rounds: dict[str, list[dict[str, float]]]) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        for variant, figures in json.loads(self.process.stdout.readline()).items():
            rounds.setdefault(self.names[variant], []).append(figures)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)


def measure(rounds: int, calls: int, baseline: str) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests._otlp import OTLPReceiver

    current = ROOT / "src"
    figures: dict[str, list[dict[str, float]]] = {}
    with OTLPReceiver() as rx, tempfile.TemporaryDirectory() as tmp:
        before_src = extract(baseline, Path(tmp))
        workers = [
            # On and off side by side in one process: the same scheduling, the same neighbours.
            Worker(current, rx.endpoint, ["on", "off"], ["on", "off"]),
            # Off and before each alone: neither process holds an exporter's threads.
            Worker(current, "", ["off"], ["off_alone"]),
            Worker(before_src, "", ["off"], ["before"]),
        ]
        try:
            for w in workers:
                w.ready()
            started = time.perf_counter()
            for n in range(rounds):
                for w in workers[n % 3 :] + workers[: n % 3]:
                    w.round(calls, figures)
            seconds = time.perf_counter() - started
        finally:
            for w in workers:
                w.close()
        spans = len(rx.spans())
        metric_exports = len(rx.metrics)

    def figure(name: str, key: str) -> float:
        return statistics.median(r[key] for r in figures[name])

    def ratio(a: str, b: str, key: str = "p50_ms") -> float:
        return round(figure(a, key) / figure(b, key), 4)

    def paired(a: str, b: str) -> float:
        pairs = zip(figures[a], figures[b], strict=True)
        return round(statistics.median(x["p50_ms"] / y["p50_ms"] for x, y in pairs), 4)

    def spread(name: str) -> float:
        """The relative spread of a variant's per-round p50 (interquartile range / median)."""
        values = sorted(r["p50_ms"] for r in figures[name])
        if len(values) < 2:
            return 0.0
        q = statistics.quantiles(values, n=4)
        return round((q[2] - q[0]) / statistics.median(values), 4)

    names = ["on", "off", "off_alone", "before"]
    on_over_off = ratio("on", "off")
    off_over_before = ratio("off_alone", "before")
    return {
        "rounds": rounds,
        "calls_per_round": calls,
        "seconds": round(seconds, 1),
        "baseline": subprocess.run(
            ["git", "rev-parse", "--short", baseline], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}",
        "p50_ms": {n: round(figure(n, "p50_ms"), 4) for n in names},
        "mean_ms": {n: round(figure(n, "mean_ms"), 4) for n in names},
        "cpu_ms_per_call": {n: round(figure(n, "cpu_ms"), 4) for n in names},
        "ratios": {
            "on_over_off_p50": on_over_off,
            "on_over_off_p50_paired": paired("on", "off"),
            "on_over_off_cpu": ratio("on", "off", "cpu_ms"),
            "off_over_before_p50": off_over_before,
            "off_over_before_p50_paired": paired("off_alone", "before"),
            "off_over_before_cpu": ratio("off_alone", "before", "cpu_ms"),
        },
        "round_spread": {n: spread(n) for n in names},
        "spans_received": spans,
        "metric_exports_received": metric_exports,
        "target_on_over_off": TARGET_ON_OVER_OFF,
        "met": on_over_off <= TARGET_ON_OVER_OFF,
        "off_within_spread_of_before": abs(off_over_before - 1) <= max(spread("off_alone"), spread("before")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300, help="calls per worker and round")
    parser.add_argument("--baseline", help="the commit of the build without the hooks")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    report = measure(args.rounds, args.calls, baseline_commit(args.baseline))
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
