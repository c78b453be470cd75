"""What OpenTelemetry costs a gateway request: tracing on, off, and a build without the hooks.

Run from the repository root, with the project's venv active (and the ``otel`` extra):

    python benchmarks/otel_overhead.py
    python benchmarks/otel_overhead.py --json benchmarks/results/otel_overhead.json

Three worker processes each run a gateway in process with one in-process upstream
(``tests/gateway/traced_upstream.py``) and an in-process ``mcp.Client`` that calls the
upstream's tool through it, one call at a time:

- ``on``: ``residency.telemetry`` set: a span per request, admission and upstream call, batched
  (the SDK's ``BatchSpanProcessor``) and exported over OTLP/HTTP to a receiver that runs in
  this (the parent) process, as a local collector would; metrics exported every second;
- ``off``: the same tree without the section (the hooks are there, ``tracing`` is None);
- ``before``: the source tree before the hooks were added (``--baseline``, by default the
  parent of the commit that added ``_tracing.py``), extracted with ``git archive``: the build
  without the hooks.

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
import anyio
from mcp import Client
from residency._gateway import Gateway, parse_config
from tests.gateway import traced_upstream

async def main(endpoint):
    # Pinned, so it is listed: the client knows the tool it calls (as an agent's does).
    residency = {"ready_wait": 60, "pinned": ["echo_meta"]}
    if endpoint:
        residency["telemetry"] = {"otlp": {"endpoint": endpoint}, "metric_interval": 1}
    cfg = parse_config(json.dumps({"mcpServers": {}, "residency": residency}))
    async with Gateway(cfg, upstreams={"up": traced_upstream.server()}) as gw:
        async with Client(gw.server, mode="legacy") as client:
            meta = {"residency/session": "bench"}
            await client.list_tools(meta=meta)
            async def call():
                result = await client.call_tool("echo_meta", {"text": "x"}, meta=meta)
                assert not result.is_error, result
            for _ in range(200):
                await call()
            print(json.dumps({"ready": True}), flush=True)
            while True:
                line = await anyio.to_thread.run_sync(sys.stdin.readline)
                if not line.strip():
                    break
                times = []
                cpu = time.process_time()
                for _ in range(int(line)):
                    started = time.perf_counter()
                    await call()
                    times.append(time.perf_counter() - started)
                cpu = time.process_time() - cpu
                print(json.dumps({"p50_ms": statistics.median(times) * 1000,
                                  "mean_ms": statistics.fmean(times) * 1000,
                                  "cpu_ms": cpu / len(times) * 1000}), flush=True)

anyio.run(main, sys.argv[1])
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
    def __init__(self, name: str, src: Path, endpoint: str) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, endpoint],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
        )
        self.rounds: list[dict[str, float]] = []

    def ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker did not start")

    def round(self, calls: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        self.rounds.append(json.loads(self.process.stdout.readline()))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)

    def figure(self, key: str) -> float:
        return statistics.median(r[key] for r in self.rounds)


def measure(rounds: int, calls: int, baseline: str) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests._otlp import OTLPReceiver

    current = ROOT / "src"
    with OTLPReceiver() as rx, tempfile.TemporaryDirectory() as tmp:
        before_src = extract(baseline, Path(tmp))
        workers = [
            Worker("on", current, rx.endpoint),
            Worker("off", current, ""),
            Worker("before", before_src, ""),
        ]
        try:
            for w in workers:
                w.ready()
            started = time.perf_counter()
            for n in range(rounds):
                for w in workers[n % 3 :] + workers[: n % 3]:
                    w.round(calls)
            seconds = time.perf_counter() - started
        finally:
            for w in workers:
                w.close()
        spans = len(rx.spans())
        metric_exports = len(rx.metrics)
    by = {w.name: w for w in workers}

    def ratio(a: str, b: str, key: str = "p50_ms") -> float:
        return round(by[a].figure(key) / by[b].figure(key), 4)

    def paired(a: str, b: str) -> float:
        return round(
            statistics.median(
                x["p50_ms"] / y["p50_ms"] for x, y in zip(by[a].rounds, by[b].rounds, strict=True)
            ),
            4,
        )

    def spread(name: str) -> float:
        """The relative spread of a worker's per-round p50 (interquartile range / median)."""
        values = sorted(r["p50_ms"] for r in by[name].rounds)
        q = statistics.quantiles(values, n=4)
        return round((q[2] - q[0]) / statistics.median(values), 4)

    on_over_off = ratio("on", "off")
    off_over_before = ratio("off", "before")
    return {
        "rounds": rounds,
        "calls_per_round": calls,
        "seconds": round(seconds, 1),
        "baseline": subprocess.run(
            ["git", "rev-parse", "--short", baseline], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}",
        "p50_ms": {w.name: round(w.figure("p50_ms"), 4) for w in workers},
        "mean_ms": {w.name: round(w.figure("mean_ms"), 4) for w in workers},
        "cpu_ms_per_call": {w.name: round(w.figure("cpu_ms"), 4) for w in workers},
        "ratios": {
            "on_over_off_p50": on_over_off,
            "on_over_off_p50_paired": paired("on", "off"),
            "on_over_off_cpu": ratio("on", "off", "cpu_ms"),
            "off_over_before_p50": off_over_before,
            "off_over_before_p50_paired": paired("off", "before"),
            "off_over_before_cpu": ratio("off", "before", "cpu_ms"),
        },
        "round_spread": {w.name: spread(w.name) for w in workers},
        "spans_received": spans,
        "metric_exports_received": metric_exports,
        "target_on_over_off": TARGET_ON_OVER_OFF,
        "met": on_over_off <= TARGET_ON_OVER_OFF,
        "off_within_spread_of_before": abs(off_over_before - 1) <= max(spread("off"), spread("before")),
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
