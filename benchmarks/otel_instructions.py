"""What OpenTelemetry costs a gateway call, counted in instructions: a figure noise cannot move.

Run from the repository root, with the project's venv active (and the ``otel`` extra), on a
machine with valgrind (Debian's ``valgrind`` package):

    python benchmarks/otel_instructions.py
    python benchmarks/otel_instructions.py --json benchmarks/results/otel_instructions.json
    python benchmarks/otel_instructions.py --compare REV   # also REV's variants, in the same run
    python benchmarks/otel_instructions.py --delay 5000    # the SDK's schedule delay

``otel_overhead.py`` times calls, and on a shared machine its ratios move by a few hundredths from
run to run, as much as the thing measured. This benchmark counts instead. Each variant runs the
in-process workload of ``otel_overhead.py`` (a gateway, the in-process upstream
``tests/gateway/traced_upstream.py``, an in-process ``mcp.Client`` calling its ``echo`` tool)
under valgrind's callgrind, which counts the instructions the process executes while counting is
switched on: here around the measured calls only, after a warm-up, so neither the interpreter's
start nor the gateway's set-up is counted. With ``PYTHONHASHSEED`` fixed, a variant's count
repeats to about 0.2% from run to run, whatever else the machine is doing.

The variants (each in a process of its own; two run at a time):

- ``off``: no ``residency.telemetry`` section;
- ``on``: telemetry on: three spans per call, batched and sent over OTLP/HTTP from the gateway's
  event loop to a receiver in this (the parent) process, outside valgrind;
- ``on_unsent``: telemetry on, but every span is dropped when it ends instead of being queued:
  what the calls themselves do for tracing (their spans, and the trace context sent upstream),
  without the batches' encoding and sending.

With ``--compare REV`` the source tree at ``REV`` (extracted with ``git archive``) is counted
too (``off_compare``, ``on_compare``, ``on_unsent_compare``): an earlier version of the tracing
in the same run.

Each is counted twice: with the garbage collector running as it does, and with it switched off
for the measured calls (``no_gc``). A collection lands on one call in a dozen or fewer and
makes it long, so a p50 latency sees mostly the second count, a mean or the CPU time the first.

Two settings differ from a gateway's defaults because valgrind runs the process about fifty times
slower than it runs alone, and wall-clock timers would fire fifty times as often per call: the
metric export interval is an hour (metrics are sent per interval, not per call, and are not
counted here), and ``OTEL_BSP_SCHEDULE_DELAY`` is ten minutes, so spans are sent in full batches
of 512, as under a steady load (``--delay MS`` sets another: a delay shorter than the requests'
deadlines shows what a timer of the event loop would hold back, see ``_loop_export``). Counts are
of instructions, not time: a cache miss or a wait adds nothing to them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: the tests' OTLP receiver, otel_overhead's extract

from benchmarks.otel_overhead import extract  # noqa: E402

VARIANTS = ("off", "on", "on_unsent")

WORKER = r"""
import gc, json, os, subprocess, sys
from contextlib import AsyncExitStack
import anyio
from mcp import Client
from residency._gateway import Gateway, parse_config
from tests.gateway import traced_upstream

async def main(endpoint, variant, calls, collect, warm):
    meta = {"residency/session": "bench"}
    residency = {"ready_wait": 60, "pinned": ["echo"]}
    if variant != "off":
        residency["telemetry"] = {"otlp": {"endpoint": endpoint}, "metric_interval": 3600}
    cfg = parse_config(json.dumps({"mcpServers": {}, "residency": residency}))
    async with AsyncExitStack() as stack:
        gw = await stack.enter_async_context(Gateway(cfg, upstreams={"up": traced_upstream.server()}))
        if variant == "on_unsent":
            gw.tracing._spans._processor = None  # each span dropped at its end
        client = await stack.enter_async_context(Client(gw.server, mode="legacy"))
        await client.list_tools(meta=meta)
        for _ in range(warm):
            await client.call_tool("echo", {"text": "x"}, meta=meta)
        if not collect:
            gc.collect()
            gc.disable()
        counting = ["callgrind_control", "--instr=on", str(os.getpid())]
        subprocess.run(counting, check=True, capture_output=True)
        for _ in range(calls):
            result = await client.call_tool("echo", {"text": "x"}, meta=meta)
            assert not result.is_error, result
        counting[1] = "--instr=off"
        subprocess.run(counting, check=True, capture_output=True)
        gc.enable()

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "gc", int(sys.argv[5]))
"""

_COLLECTED = re.compile(r"Collected : (\d+)")


DELAY_MS = 600_000
"""``OTEL_BSP_SCHEDULE_DELAY`` by default: ten minutes, so spans go in full batches (see above)."""


def count(
    endpoint: str,
    variant: str,
    calls: int,
    collect: bool,
    warm: int,
    into: Path,
    src: Path = ROOT / "src",
    delay_ms: int = DELAY_MS,
) -> int:
    """Instructions executed during ``calls`` calls of one variant (one process under callgrind),
    with the source tree ``src``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)]),
        "PYTHONHASHSEED": "0",
        "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
    }
    out = into / f"callgrind.{src.parent.name}.{variant}.{'gc' if collect else 'no_gc'}"
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, "-c", WORKER, endpoint, variant, str(calls), "gc" if collect else "no_gc", str(warm),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise SystemExit(f"the {variant} worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found[-1])


def measure(calls: int, warm: int, compare: str | None = None, delay_ms: int = DELAY_MS) -> dict[str, Any]:
    from tests._otlp import OTLPReceiver

    with OTLPReceiver() as rx, tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        trees = {"": ROOT / "src"}
        if compare is not None:
            trees["_compare"] = extract(compare, Path(tmp) / "compare")
        jobs = [(v, collect, tag) for v in VARIANTS for collect in (True, False) for tag in trees]
        futures = {
            (variant + tag, collect): pool.submit(
                count, rx.endpoint, variant, calls, collect, warm, Path(tmp), trees[tag], delay_ms
            )
            for variant, collect, tag in jobs
        }
        counts = {job: future.result() for job, future in futures.items()}
        spans = len(rx.spans())
    names = dict.fromkeys(name for name, _ in counts)
    per_call = {v: {"gc": counts[(v, True)] / calls, "no_gc": counts[(v, False)] / calls} for v in names}

    def ratio(a: str, b: str, key: str) -> float:
        return round(per_call[a][key] / per_call[b][key], 4)

    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    ratios = {
        "on_over_off": ratio("on", "off", "gc"),
        "on_over_off_no_gc": ratio("on", "off", "no_gc"),
        "on_unsent_over_off": ratio("on_unsent", "off", "gc"),
        "on_unsent_over_off_no_gc": ratio("on_unsent", "off", "no_gc"),
    }
    if compare is not None:
        ratios["compare_on_over_off"] = ratio("on_compare", "off_compare", "gc")
        ratios["compare_on_over_off_no_gc"] = ratio("on_compare", "off_compare", "no_gc")
        ratios["compare_on_unsent_over_off"] = ratio("on_unsent_compare", "off_compare", "gc")
    return {
        "calls": calls,
        "warm_up_calls": warm,
        "schedule_delay_ms": delay_ms,
        "instructions_per_call": {v: {k: round(n) for k, n in d.items()} for v, d in per_call.items()},
        "ratios": ratios,
        "compare": compare,
        "spans_received": spans,
        "machine": f"{platform.machine()}, Python {platform.python_version()}, {version}",
    }


def report(result: dict[str, Any]) -> str:
    per_call, r = result["instructions_per_call"], result["ratios"]
    calls, warm = result["calls"], result["warm_up_calls"]
    lines = [f"instructions per call ({calls:,} calls each, after {warm} to warm up):"]
    for variant, figures in per_call.items():
        with_gc, without = figures["gc"], figures["no_gc"]
        lines.append(f"  {variant:12s} {with_gc:>12,} with the collector, {without:>12,} without")
    lines.append(
        f"on / off: {r['on_over_off']}x with the collector, {r['on_over_off_no_gc']}x without; "
        f"the calls' own part (on_unsent / off): {r['on_unsent_over_off']}x with the collector, "
        f"{r['on_unsent_over_off_no_gc']}x without"
    )
    if result["compare"] is not None:
        lines.append(
            f"{result['compare']}: on / off {r['compare_on_over_off']}x with the collector, "
            f"{r['compare_on_over_off_no_gc']}x without; on_unsent / off "
            f"{r['compare_on_unsent_over_off']}x with the collector"
        )
    lines.append(f"spans received from the 'on' workers: {result['spans_received']:,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1536, help="calls counted per variant (3 spans each)")
    parser.add_argument("--warm", type=int, default=600, help="calls made first, not counted")
    parser.add_argument("--compare", metavar="REV", help="also count on and off from this commit's source")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--delay",
        type=int,
        default=DELAY_MS,
        metavar="MS",
        help="OTEL_BSP_SCHEDULE_DELAY of the gateways, in ms (default: ten minutes; at the SDK's "
        "5000 a batch leaves about every hundred calls under valgrind)",
    )
    args = parser.parse_args(argv)
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        print(f"this benchmark needs valgrind ({', '.join(missing)} not found): apt install valgrind")
        return 2
    result = measure(args.calls, args.warm, args.compare, args.delay)
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
