"""What the audit log (and a rate limit) adds to a request on the gateway's path, as ratios.

Run from the repository root, with the project's venv active:

    python benchmarks/audit_cost.py
    python benchmarks/audit_cost.py --json benchmarks/results/audit_cost.json

Three gateways on the demo desk run in this process, each with an in-process MCP client
(``mcp.Client(gateway.server)``: the gateway's whole request path, without a network stack):

- ``off``: no ``audit`` and no ``rate_limit`` (no middleware runs: the baseline);
- ``audit``: ``audit`` to a file in a temporary directory (one line per request, line-buffered);
- ``audit_and_limit``: the same plus a ``rate_limit`` high enough never to refuse.

Each request is a forwarded ``tools/call`` of a pinned desk tool, or a ``tools/list`` (one in
four). Within a round the variants take turns in small batches, each in every place of the
order alike, so the machine's noise hits all of them the same; a variant's figure
is the median over rounds of its CPU time per request (the event loop thread's: the gateway, the
client and the desk cost together, so the ratio understates the gateway's share, and the
added milliseconds are the honest figure), and its ``ratio`` the median over rounds of its time
against the baseline's in the same round. ``parts_us`` times the gate's two parts alone, in
CPU microseconds: writing one audit line, and one rate-limit take. Target: the audit log adds
at most 10% to a request (``ratio`` of ``audit`` to ``off`` at most 1.10, ``met``); the exit
code is 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from residency._gateway import Gateway, IncidentDesk, parse_config
from residency._gateway._audit import AuditLog, AuditSettings
from residency._gateway._config import Secrets
from residency._gateway._rate_limit import RateLimiter, RateLimitSettings

TARGET_RATIO = 1.10
VARIANTS = ("off", "audit", "audit_and_limit")
BATCHES = 12
"""Batches per round: the variants take turns batch by batch, each first, second and third alike."""


def _config(variant: str, directory: Path) -> Any:
    residency: dict[str, Any] = {"delivery": "list", "pinned": ["search_runbooks"]}
    if variant != "off":
        residency["audit"] = {"path": str(directory / f"{variant}.jsonl")}
    if variant == "audit_and_limit":
        residency["rate_limit"] = {"requests_per_minute": 1_000_000, "burst": 1_000_000}
    return parse_config(json.dumps({"mcpServers": {}, "residency": residency}))


async def _requests(client: Client, n: int) -> float:
    """CPU seconds of ``n`` requests."""
    started = time.thread_time()
    for i in range(n):
        if i % 4 == 3:
            await client.list_tools()
        else:
            await client.call_tool("search_runbooks", {"query": "rollback"})
    return time.thread_time() - started


def _parts(n: int = 20_000) -> dict[str, float]:
    """CPU microseconds of the gate's two parts alone: writing one audit line, one bucket take."""
    with tempfile.TemporaryDirectory() as tmp:
        log = AuditLog(
            AuditSettings(path=str(Path(tmp) / "parts.jsonl")), Secrets(["a-secret-value-1"]).redact
        )
        with log:
            started = time.thread_time()
            for _ in range(n):
                log.record("forwarded", subject="alice", session="k1", tool="search_runbooks", outcome="ok")
            record = (time.thread_time() - started) / n * 1e6
    limiter = RateLimiter(RateLimitSettings(requests_per_minute=1_000_000, burst=1_000_000))
    started = time.thread_time()
    for i in range(n):
        limiter.take("alice", call=True, now=float(i))
    take = (time.thread_time() - started) / n * 1e6
    return {"audit_record": round(record, 2), "rate_limit_take": round(take, 2)}


async def measure(rounds: int, per_round: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        gateways = {
            v: Gateway(_config(v, directory), upstreams={"desk": IncidentDesk().server}) for v in VARIANTS
        }
        per_request: dict[str, list[float]] = {v: [] for v in VARIANTS}
        async with (
            gateways["off"],
            gateways["audit"],
            gateways["audit_and_limit"],
            Client(gateways["off"].server, mode="legacy") as off,
            Client(gateways["audit"].server, mode="legacy") as audit,
            Client(gateways["audit_and_limit"].server, mode="legacy") as both,
        ):
            clients = {"off": off, "audit": audit, "audit_and_limit": both}
            for client in clients.values():  # warm up: sessions opened, caches filled
                await _requests(client, 20)
            batch = max(1, per_round // BATCHES)
            for _ in range(rounds):
                spent = dict.fromkeys(VARIANTS, 0.0)
                for b in range(BATCHES):
                    # Each variant takes each place in the order equally often (a rotation).
                    order = VARIANTS[b % 3 :] + VARIANTS[: b % 3]
                    for variant in order:
                        spent[variant] += await _requests(clients[variant], batch)
                for variant in VARIANTS:
                    per_request[variant].append(spent[variant] / (batch * BATCHES) * 1000)
        lines = (directory / "audit.jsonl").read_text(encoding="utf-8").count("\n")
    median = {v: round(statistics.median(ms), 4) for v, ms in per_request.items()}
    # Paired: each round's variant against that round's baseline, so drift in the machine's load
    # between rounds cancels; the median of those ratios is the figure judged.
    ratio = {
        v: round(statistics.median(a / b for a, b in zip(per_request[v], per_request["off"], strict=True)), 3)
        for v in VARIANTS
        if v != "off"
    }
    return {
        "rounds": rounds,
        "requests_per_round": per_round,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}",
        "cpu_per_request_ms": median,
        "added_ms": {v: round(median[v] - median["off"], 4) for v in VARIANTS if v != "off"},
        "ratio": ratio,
        "audit_lines_written": lines,
        "parts_us": _parts(),
        "target_ratio": TARGET_RATIO,
        "met": ratio["audit"] <= TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=200, help="requests per variant per round")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    result = anyio.run(measure, args.rounds, args.requests)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
