"""How long a newcomer waits: from starting ``residency serve`` (no config) to a desk tool's answer.

Run from the repository root, with the project's venv active (or its python):

    python benchmarks/first_run.py                    # 5 runs, the median
    python benchmarks/first_run.py --runs 7 --json benchmarks/results/first_run.json

Each run starts ``python -m residency serve`` as a fresh process, with no config, and speaks to
it with the SDK's ``mcp.Client`` over stdio, as a host does: the handshake, ``tools/list``, then
a call of a listed desk tool (``list_incidents``). The clock starts before the process is
spawned and stops when the call's successful result is in, so it counts the interpreter's start,
the imports, the desk's start and the gateway's wait for its search vectors (at most
``search_wait``). Each run is interleaved with ``python -c pass`` (the baseline, measured in the
same rounds so a busy machine slows both alike). Target: the median at most 10 s. It exits 1 if
the median misses it, or if a run's call fails.
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

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent
LIMIT_SECONDS = 10.0
TOOL, ARGUMENTS = "list_incidents", {"status": "open"}
RUN_BOUND = 120.0
"""Seconds one run may take before it counts as failed (a hang, not a slow start)."""


def _baseline() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


async def _first_call(errlog: Any) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "residency", "serve"], env=dict(os.environ), cwd=str(ROOT)
    )
    started = time.perf_counter()
    with anyio.fail_after(RUN_BOUND):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            connected = time.perf_counter()
            listed = [t.name for t in (await client.list_tools()).tools]
            if TOOL not in listed:
                raise RuntimeError(f"{TOOL} is not in the first list: {listed}")
            result = await client.call_tool(TOOL, ARGUMENTS)
            called = time.perf_counter()
            if result.is_error:
                raise RuntimeError(f"{TOOL} failed: {result.content}")
    return {
        "connected_s": connected - started,
        "first_call_s": called - started,
        "listed": listed,
    }


def measure(runs: int) -> dict[str, Any]:
    baseline: list[float] = []
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryFile("w+") as errlog:
        for _ in range(runs):
            baseline.append(_baseline())
            samples.append(anyio.run(_first_call, errlog))
        errlog.seek(0)
        ready = [line.rstrip() for line in errlog if line.startswith("residency: ready:")]
    base = statistics.median(baseline)
    first = statistics.median(s["first_call_s"] for s in samples)
    return {
        "runs": runs,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "baseline_python_c_pass_s": round(base, 4),
        "connected_median_s": round(statistics.median(s["connected_s"] for s in samples), 3),
        "first_call_median_s": round(first, 3),
        "first_call_s": [round(s["first_call_s"], 3) for s in samples],
        "ratio_to_baseline": round(first / base, 1),
        "first_list": samples[-1]["listed"],
        "ready_line": ready[-1] if ready else None,
        "target_s": LIMIT_SECONDS,
        "ok": first <= LIMIT_SECONDS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs (default 5)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    result = measure(args.runs)
    print(f"python -c pass           {result['baseline_python_c_pass_s']:.3f} s (median)")
    print(f"serve: client connected  {result['connected_median_s']:.3f} s (median)")
    print(
        f"serve: first desk call   {result['first_call_median_s']:.3f} s (median of {args.runs}: "
        f"{', '.join(f'{s:.2f}' for s in result['first_call_s'])}); "
        f"{'ok' if result['ok'] else 'MISSED'} (target: at most {LIMIT_SECONDS:g} s)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
