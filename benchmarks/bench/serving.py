"""``python -m benchmarks serving``: ``residency serve`` processes at catalog scale, against the same
work without the gateway, measured in one run.

Figures:

* **first tools/list over stdio** at ``--tools`` upstream tools (default 10,000: the dev corpus
  repeated under new names): the time from starting the process a client talks to until its
  first ``tools/list`` answer, through ``residency serve`` (which starts the upstream, lists it,
  checks, minifies and counts the catalog, opens a session and plans it) against the upstream
  alone; the median of ``--rounds`` alternating rounds, each a fresh pair of processes (target:
  within 2x). The gateway is told to wait for its upstream (``ready_wait``) and its session
  must hold every upstream tool at that first list (read from ``residency://tools`` after the
  clock stopped): by default it would serve after 5 s with the tools that are ready;
* **memory per client session** over streamable HTTP: ``--clients`` handshake-era clients, each
  with a session of its own that has listed the tools, held open together in front of an
  upstream of ``--session-tools`` tools (default 405, the corpus); the growth of the serving
  process's resident memory (``VmRSS``) from one client to all of them, per client, for
  ``residency serve`` and for a bare proxy on the same SDK that forwards and keeps nothing
  (target for the gateway: <= 0.5 MB).

Both spawn real processes (the bench upstream of ``benchmarks.bench.gateway``); the memory
figure reads ``/proc`` and is skipped where there is none.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client import Client

from benchmarks.bench.gateway import (
    _config,
    _process,
    _serve_argv,
    free_port,
    program,
    upstream_argv,
    wait_for_port,
)
from residency._bench._report import BenchReport

SMALL_ARGS = ["--tools", "2000", "--rounds", "1", "--clients", "10"]

FIRST_LIST_TARGET = 2.0
"""The gateway's first tools/list over stdio, against the upstream's own."""
SESSION_MB_TARGET = 0.5
"""Memory per additional gateway client session."""
MB = 1024 * 1024
_TIMEOUT = 1800.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tools", type=int, default=10_000, help="upstream tools for the stdio figure (default 10000)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternating direct/gateway rounds (default 2)")
    parser.add_argument(
        "--clients", type=int, default=30, help="HTTP client sessions held together (default 30)"
    )
    parser.add_argument(
        "--session-tools", type=int, default=405, help="upstream tools for the memory figure (default 405)"
    )


async def _first_list(params: StdioServerParameters, *, gateway: bool = False) -> tuple[float, int]:
    """Seconds from starting the process to its first tools/list answer, and the tools listed
    (through the gateway: the tools its session holds, read after the clock stopped)."""
    start = time.perf_counter()
    async with Client(params, mode="legacy", cache=None) as client:
        listed = await client.list_tools()
        seconds = time.perf_counter() - start
        if not gateway:
            return seconds, len(listed.tools)
        table = await client.read_resource("residency://tools")
        text = table.contents[0].text if isinstance(table.contents[0], types.TextResourceContents) else "[]"
        return seconds, len(json.loads(text))


async def _stdio_first_list(report: BenchReport, args: argparse.Namespace, tmp: Path) -> None:
    tools = max(1, args.tools)
    up = [*upstream_argv("stdio"), "--tools", str(tools - 1)]
    config = tmp / "stdio.json"
    # ready_wait: serve once the upstream is up, so that the first list is of the whole catalog
    # (by default the gateway serves after 5 s and a slower upstream's tools arrive later).
    config.write_text(_config({"ready_wait": _TIMEOUT}, {"up": {"command": up[0], "args": up[1:]}}))
    serve = _serve_argv(config, "--transport", "stdio")
    env = dict(os.environ)
    direct: list[float] = []
    gated: list[float] = []
    for _ in range(max(1, args.rounds)):
        seconds, count = await _first_list(StdioServerParameters(command=up[0], args=up[1:], env=env))
        if count != tools:
            raise RuntimeError(f"the upstream listed {count} tools, not {tools}")
        direct.append(seconds)
        params = StdioServerParameters(command=serve[0], args=serve[1:], env=env)
        seconds, held = await _first_list(params, gateway=True)
        if held != tools:
            raise RuntimeError(f"the gateway's session held {held} tools at its first list, not {tools}")
        gated.append(seconds)
    d, g = statistics.median(direct), statistics.median(gated)
    name = f"first tools/list over stdio, {tools:,} tools"
    report.add(f"{name}, direct", d, "s")
    report.add(f"{name}, through the gateway", g, "s")
    report.add(
        f"{name}: gateway / direct", g / d, "x", f"<= {FIRST_LIST_TARGET:g}x", g / d <= FIRST_LIST_TARGET
    )
    report.data["first_list"] = {"tools": tools, "direct_s": direct, "gateway_s": gated}


def _rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def _per_session(url: str, pid: int, clients: int) -> float:
    """Bytes the process at ``url`` grows by per client session, from one client to ``clients``
    + 1 of them held open together (each opened, listed its tools and called nothing)."""
    async with contextlib.AsyncExitStack() as stack:

        async def one() -> None:
            client = await stack.enter_async_context(Client(url, mode="legacy", cache=None))
            await client.list_tools()

        await one()  # the first session makes what every session shares
        await anyio.sleep(0.5)
        before = _rss(pid)
        for _ in range(clients):
            await one()
        await anyio.sleep(0.5)
        return (_rss(pid) - before) / clients


async def _http_memory(report: BenchReport, args: argparse.Namespace, tmp: Path) -> None:
    if not Path("/proc/self/status").exists():
        report.data["memory"] = "skipped: no /proc"
        return
    up_port, gw_port, proxy_port = free_port(), free_port(), free_port()
    up_url = f"http://127.0.0.1:{up_port}/mcp"
    config = tmp / "http.json"
    config.write_text(_config({}, {"up": {"url": up_url}}))
    serve = _serve_argv(config, "--transport", "http", "--host", "127.0.0.1", "--port", str(gw_port))
    proxy = [*program(), "--serve-proxy", up_url, "--port", str(proxy_port)]
    upstream = [*upstream_argv("http", up_port), "--tools", str(max(0, args.session_tools - 1))]
    clients = max(1, args.clients)
    async with contextlib.AsyncExitStack() as stack:
        up = await stack.enter_async_context(_process(upstream, tmp / "upstream.log"))
        await wait_for_port(up_port, up)  # the proxy lists it as it starts
        gateway = await stack.enter_async_context(_process(serve, tmp / "gateway.log"))
        bare = await stack.enter_async_context(_process(proxy, tmp / "proxy.log"))
        await wait_for_port(gw_port, gateway)
        await wait_for_port(proxy_port, bare)
        through_gateway = await _per_session(f"http://127.0.0.1:{gw_port}/mcp", gateway.pid, clients)
        through_proxy = await _per_session(f"http://127.0.0.1:{proxy_port}/mcp", bare.pid, clients)
    name = f"memory per HTTP client session, {args.session_tools} upstream tools"
    report.add(
        f"{name}, gateway",
        through_gateway / MB,
        "MB",
        f"<= {SESSION_MB_TARGET:g} MB",
        through_gateway / MB <= SESSION_MB_TARGET,
    )
    report.add(f"{name}, bare SDK proxy", through_proxy / MB, "MB")
    report.data["memory"] = {
        "clients": clients,
        "gateway_bytes_per_session": through_gateway,
        "proxy_bytes_per_session": through_proxy,
    }


async def _run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("serving")
    with anyio.fail_after(_TIMEOUT), tempfile.TemporaryDirectory(prefix="residency-bench-") as tmp:
        await _http_memory(report, args, Path(tmp))
        await _stdio_first_list(report, args, Path(tmp))
    return report


def run(args: argparse.Namespace) -> BenchReport:
    """Run the benchmark (see the module docstring)."""
    return anyio.run(_run, args)
