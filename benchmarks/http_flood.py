"""The HTTP gateway under a flood: what idle and slow connections and stalled bodies cost it.

Run from the repository root, with the project's venv active (Linux: it reads /proc):

    python benchmarks/http_flood.py
    python benchmarks/http_flood.py --json benchmarks/results/http_flood.json

Each scenario starts its own ``residency serve --transport http`` (loopback, no token: the
defaults, ``residency.http`` untouched) in front of a stdio upstream (``python
benchmarks/bench/gateway.py --serve-upstream stdio``, an ``echo`` tool) and, while a client on
127.0.0.1 calls ``echo`` back to back, attacks it from other source addresses (Linux loopback
answers all of 127/8):

``connections``  ``--connections`` (2,000) connections from 127.0.0.2, half sending nothing,
                 half trickling header lines that never end; each one the gateway closes is
                 opened again (at most ``--reconnect-rate`` a second), for ``--hold`` seconds
                 (default 15, past the 10 s header timeout). Targets: every call of the other
                 client succeeds within 1 s; the gateway's RSS grows by at most 50 MB and its
                 stderr by at most 100 lines (its line per forwarded call not counted).
``bodies``       ``--bodies`` (100) requests from as many addresses, each declaring a 3.5 MB
                 body (under the 4 MiB cap), sending all of it but the last KiB and stalling,
                 for ``--hold`` seconds. Target: RSS grows by at most 50 MB (and the other
                 client's calls still succeed within 1 s).

``--fd-limit N`` runs the gateway under a soft and hard ``RLIMIT_NOFILE`` of N (it cannot raise
its soft limit then): e.g. 1024, where 2,000 connections are more than it may hold.

RSS (``VmRSS``) growth is its peak during the attack (sampled every 0.1 s) over its value just
before. The other client's calls are timed for ``--rest`` seconds before each attack too
(reported, no target: what the machine gives at rest). It exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent

CALL_TARGET_S = 1.0
RSS_TARGET_MB = 50.0
STDERR_TARGET_LINES = 100
BODY_BYTES = 3_500_000
_STARTUP_S = 120.0
_WARMUP_CALLS = 20
_SCENARIO_SLACK_S = 120.0
_SERVING = re.compile(rb"serving MCP at (http://\S+?:(\d+)/\S*)")


def _raise_own_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _limit_fds(limit: int) -> None:
    """In the gateway's process before it starts: soft and hard descriptor limits of ``limit``."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


# -- the gateway -------------------------------------------------------------------------------


@dataclass
class Gateway:
    """A running ``residency serve --transport http``, its stderr counted as it comes."""

    process: subprocess.Popen[bytes]
    stderr: bytearray
    url: str
    port: int

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc/PID/status")

    def lines(self) -> list[str]:
        """Its stderr lines but those of the calls it forwards (one per call, attack or not)."""
        text = bytes(self.stderr).decode(errors="replace")
        return [line for line in text.splitlines() if " call forwarded " not in line]


@contextlib.contextmanager
def gateway(tmp: Path, fd_limit: int | None = None) -> Iterator[Gateway]:
    upstream = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench" / "gateway.py"),
        "--serve-upstream",
        "stdio",
    ]
    config = tmp / "gateway.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {"up": {"command": upstream[0], "args": upstream[1:]}},
                "residency": {"pinned": ["echo"], "ready_wait": 60},
            }
        )
    )
    argv = [sys.executable, "-m", "residency", "serve", "--transport", "http", "--port", "0"]
    process = subprocess.Popen(
        [*argv, "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=str(ROOT),
        start_new_session=True,
        bufsize=0,
        preexec_fn=None if fd_limit is None else partial(_limit_fds, fd_limit),
    )
    err = bytearray()
    found = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        while chunk := process.stderr.read(65536):
            err.extend(chunk)
            if _SERVING.search(err):
                found.set()
        found.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        found.wait(_STARTUP_S)
        match = _SERVING.search(err)
        if match is None:
            raise RuntimeError(f"the gateway printed no URL:\n{err.decode(errors='replace')}")
        yield Gateway(process, err, match.group(1).decode(), int(match.group(2)))
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # and its upstream, whatever state it is in
        process.wait(30)
        reader.join(30)


# -- the attackers -----------------------------------------------------------------------------


class Stop(Protocol):
    """A ``threading.Event`` or a ``multiprocessing`` one: what ends an attack."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass
class Flood:
    """``count`` connections from ``source``, half silent and half trickling header lines, each
    opened again when the gateway closes it (at most ``rate`` reopenings a second)."""

    port: int
    count: int
    source: str
    rate: float
    stop: Stop = field(default_factory=threading.Event)
    opened: int = 0
    closed_by_gateway: int = 0
    peak_open: int = 0
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    def _open(self, slow: bool, selector: selectors.BaseSelector) -> bool:
        sock = socket.socket()
        try:
            sock.bind((self.source, 0))
            sock.settimeout(2)
            sock.connect(("127.0.0.1", self.port))
            if slow:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.setblocking(False)
        except OSError:
            sock.close()
            return False
        selector.register(sock, selectors.EVENT_READ, slow)
        self.opened += 1
        return True

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        wanted = [i % 2 == 1 for i in range(self.count)]  # slow or silent, still to open
        first_wave = True
        allowance, last = 0.0, time.monotonic()
        next_trickle = last + 1.0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                allowance = min(allowance + (now - last) * self.rate, self.rate)
                last = now
                while wanted and (first_wave or allowance >= 1):
                    if not self._open(wanted[-1], selector):
                        break
                    wanted.pop()
                    allowance -= 0 if first_wave else 1
                first_wave = False
                self.peak_open = max(self.peak_open, len(selector.get_map()))
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        selector.unregister(sock)
                        sock.close()
                        self.closed_by_gateway += 1
                        wanted.append(bool(key.data))
                if now >= next_trickle:
                    next_trickle = now + 1.0
                    for key in list(selector.get_map().values()):
                        if key.data:
                            sock = key.fileobj
                            assert isinstance(sock, socket.socket)
                            with contextlib.suppress(OSError):
                                sock.send(b"X-Filler: 1\r\n")
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()


@dataclass
class StalledBodies:
    """``count`` requests from as many addresses, each sending all but the last KiB of a
    ``BODY_BYTES`` body it declares, then stalling until ``stop``."""

    port: int
    count: int
    stop: Stop = field(default_factory=threading.Event)
    outcomes: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for i in range(self.count):
            thread = threading.Thread(target=self._one, args=(f"127.0.2.{i % 250 + 1}",), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _one(self, source: str) -> None:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {BODY_BYTES}\r\n\r\n"
        ).encode()
        data = memoryview(head + b"x" * (BODY_BYTES - 1024))
        with socket.socket() as sock:
            try:
                sock.bind((source, 0))
                sock.settimeout(1)
                sock.connect(("127.0.0.1", self.port))
                while data and not self.stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        data = data[sock.send(data[: 1 << 16]) :]
            except OSError:
                self.outcomes.append("refused")
                return
            sock.settimeout(0.2)
            while not self.stop.is_set():
                try:
                    answer = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    answer = b""
                self.outcomes.append(
                    f"answered {answer[9:12].decode(errors='replace')}" if answer else "closed"
                )
                return
            self.outcomes.append("held" if not data else "still sending")

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def _attack(
    kind: str, port: int, count: int, rate: float, ready: Stop, go: Stop, stop: Stop, out: Any
) -> None:
    """Run one attack in a process of its own (its work must not slow the other client down):
    ``ready`` once started, attacking from ``go`` until ``stop``; put what it saw on ``out``."""
    _raise_own_fd_limit()
    ready.set()
    go.wait()
    if kind == "connections":
        flood = Flood(port, count, "127.0.0.2", rate, stop=stop)
        flood.run()
        out.put(
            {
                "attacker_connections_opened": flood.opened,
                "attacker_peak_open": flood.peak_open,
                "closed_by_gateway": flood.closed_by_gateway,
            }
        )
        return
    bodies = StalledBodies(port, count, stop=stop)
    bodies.start()
    stop.wait()
    bodies.join()
    outcomes = bodies.outcomes
    out.put({"body_outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))}})


# -- one scenario ----------------------------------------------------------------------------------


@dataclass
class Calls:
    """The other client's calls: latencies at rest and under the attack (with when each began,
    from the attack's start), and the failures."""

    rest: list[float] = field(default_factory=list)
    attacked: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def _victim(url: str, rest: float, hold: float, calls: Calls, attack: anyio.Event) -> None:
    """Call ``echo`` back to back: warm-up calls, ``rest`` seconds timed at rest, then ``hold``
    seconds timed under the attack (``attack`` set when it starts)."""
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):

        async def call() -> float:
            started = time.monotonic()
            try:
                with anyio.fail_after(10):
                    result = await client.call_tool("echo", {"text": "the quick brown fox"})
                if result.is_error:
                    calls.failures.append("isError result")
            except Exception as exc:  # a failed call is a figure, not a crash
                calls.failures.append(f"{type(exc).__name__}: {exc}")
            return time.monotonic() - started

        for _ in range(_WARMUP_CALLS):
            await call()
        calls.failures.clear()
        until = time.monotonic() + rest
        while time.monotonic() < until:
            calls.rest.append(await call())
        began = time.monotonic()
        attack.set()
        while time.monotonic() < began + hold:
            offset = time.monotonic() - began
            calls.attacked.append((offset, await call()))


def _seconds(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_s": None, "max_s": None}
    return {"p50_s": round(statistics.median(values), 4), "max_s": round(max(values), 4)}


def scenario(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One attack on a fresh gateway, with the other client calling throughout."""
    began = time.monotonic()
    with gateway(tmp, args.fd_limit) as gw:
        up = time.monotonic() - began

        async def run() -> dict[str, Any]:
            calls = Calls()
            started = anyio.Event()
            done = anyio.Event()
            samples: list[float] = []
            before: dict[str, Any] = {}
            context = multiprocessing.get_context("spawn")
            ready, go, stop, out = context.Event(), context.Event(), context.Event(), context.Queue()
            count = args.connections if name == "connections" else args.bodies
            attacker = context.Process(
                target=_attack,
                args=(name, gw.port, count, args.reconnect_rate, ready, go, stop, out),
                daemon=True,
            )
            attacker.start()
            # Its start-up (a new interpreter) is not part of the attack.
            if not await anyio.to_thread.run_sync(ready.wait, _STARTUP_S):
                raise RuntimeError("the attacking process did not start")
            started_at = anyio.current_time()

            async def victim() -> None:
                try:
                    await _victim(gw.url, args.rest, args.hold, calls, started)
                finally:
                    done.set()

            try:
                # Bounded: a gateway that stops answering fails the scenario, it does not hang it.
                with anyio.move_on_after(args.rest + args.hold + _SCENARIO_SLACK_S) as bounded:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(victim)
                        await started.wait()
                        before.update(rss=gw.rss_mb(), lines=len(gw.lines()))
                        go.set()
                        while not done.is_set():
                            samples.append(gw.rss_mb())
                            with anyio.move_on_after(0.1):
                                await done.wait()
                if bounded.cancelled_caught:
                    calls.failures.append(
                        f"the scenario did not end within {bounded.deadline - started_at:.0f} s"
                    )
                    before.setdefault("rss", gw.rss_mb())
                    before.setdefault("lines", len(gw.lines()))
                stop.set()
                detail: dict[str, Any] = await anyio.to_thread.run_sync(out.get, True, 60)
            finally:
                go.set()
                stop.set()
                attacker.join(60)
                if attacker.is_alive():
                    attacker.kill()
            attacked = [t for _, t in calls.attacked]
            peak = max(samples, default=before["rss"])
            new_lines = gw.lines()[before["lines"] :]
            result: dict[str, Any] = {
                "hold_s": args.hold,
                "calls_at_rest": len(calls.rest),
                "at_rest": _seconds(calls.rest),
                "calls_attacked": len(attacked),
                "attacked": _seconds(attacked),
                "slow_calls": [
                    {"at_s": round(at, 2), "took_s": round(t, 3)}
                    for at, t in calls.attacked
                    if t > CALL_TARGET_S
                ],
                "failed_calls": len(calls.failures),
                "call_failures": calls.failures[:5],
                "rss_before_mb": round(before["rss"], 1),
                "rss_peak_mb": round(peak, 1),
                "rss_growth_mb": round(peak - before["rss"], 1),
                "stderr_lines": len(new_lines),
                "stderr": new_lines[:20],
                **detail,
            }
            ok = not calls.failures and bool(attacked) and max(attacked) <= CALL_TARGET_S
            ok = ok and peak - before["rss"] <= RSS_TARGET_MB
            if name == "connections":
                ok = ok and len(new_lines) <= STDERR_TARGET_LINES
            result["ok"] = ok
            return result

        result = anyio.run(run)
        result["gateway_start_s"] = round(up, 1)
        done_at = time.monotonic()
    result["gateway_stop_s"] = round(time.monotonic() - done_at, 1)
    result["wall_s"] = round(time.monotonic() - began, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000, help="connections held (default 2000)")
    parser.add_argument("--bodies", type=int, default=100, help="stalled 3.5 MB bodies (default 100)")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds each attack lasts (default 15)")
    parser.add_argument(
        "--rest", type=float, default=5.0, help="seconds of calls timed before each attack (default 5)"
    )
    parser.add_argument(
        "--reconnect-rate",
        type=float,
        default=200.0,
        help="reopened connections a second, at most (default 200)",
    )
    parser.add_argument(
        "--scenario", choices=("connections", "bodies", "both"), default="both", help="which (default both)"
    )
    parser.add_argument(
        "--fd-limit",
        type=int,
        help="run the gateway with this soft and hard RLIMIT_NOFILE (default: this process's)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if not Path("/proc/self/status").exists():
        print("http_flood: needs Linux (/proc, and loopback answering all of 127/8)", file=sys.stderr)
        return 2
    _raise_own_fd_limit()
    names = ["connections", "bodies"] if args.scenario == "both" else [args.scenario]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results[name] = scenario(name, args, Path(tmp))
    for name, figures in results.items():
        verdict = "ok" if figures["ok"] else "MISSED"
        rest, attacked = figures["at_rest"], figures["attacked"]
        print(
            f"{name:<12} at rest: {figures['calls_at_rest']} calls, p50 {rest['p50_s']} s, "
            f"max {rest['max_s']} s; attacked: {figures['calls_attacked']} calls, p50 "
            f"{attacked['p50_s']} s, max {attacked['max_s']} s, {figures['failed_calls']} failed; "
            f"RSS {figures['rss_before_mb']} -> {figures['rss_peak_mb']} MB (+{figures['rss_growth_mb']}); "
            f"stderr +{figures['stderr_lines']} lines  {verdict}"
        )
    print(
        f"targets: every attacked call within {CALL_TARGET_S:g} s, RSS +{RSS_TARGET_MB:g} MB at most, "
        f"stderr +{STDERR_TARGET_LINES} lines at most (connections; the per-call log line not counted)"
    )
    ok = all(r["ok"] for r in results.values())
    report = {"args": {k: v for k, v in vars(args).items() if k != "json"}, "scenarios": results, "ok": ok}
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
