"""``python -m benchmarks gateway``: what the gateway's second hop costs.

Figures, each against a baseline measured in the same run:

* ``tools/call`` latency through the gateway against calling the same upstream directly, p50
  and p99, at 1 and 10 concurrent sessions (in-process ``mcp.Client``, handshake era;
  targets: p50 <= 2.5x and p99 <= 3x the direct call), and at 1 session in the 2026-07-28 era
  (reported, no target), and at 1 session with 1,000 upstream tools in the catalog (reported:
  a quiet turn is planned in constant time, so the ratio should not move); the floor beside
  them: a bare proxy that forwards through the same SDK and does nothing else (reported); and
  with sessions in a SQLite store, one fsync per call (reported: it depends on the disk);
* the same over stdio and streamable HTTP, where the gateway is a ``residency serve``
  subprocess in front of an upstream subprocess, against a client talking to that upstream
  subprocess over the same transport (two process hops against one; stdio reported, HTTP at 1
  session with a target of p50 <= 1.5x, answering SSE or JSON). Over HTTP, in the same run:
  the gateway's second hop in the handshake era (before) and in the era it now picks (the
  2026-07-28 era for this small upstream, see ``residency._gateway._http_upstream``), both
  answering SSE (the default); the gateway answering JSON (``RESIDENCY_HTTP_RESPONSES=json``,
  see ``residency._gateway._http``); and the floor beside them, a bare proxy on the same SDK
  served over streamable HTTP in front of the same upstream, answering SSE and JSON
  (reported). On Linux each is also measured as CPU time per call of all processes together
  (reported: steadier than latency on a busy machine);
* ``tools/list`` of an upstream offering 1,000 tools, gated (the default: the pinned tools
  plus the meta-tools) and delivered by list with a budget that keeps every tool resident,
  against the un-gated list straight from the upstream.

The upstream is the bench's own: an ``echo`` tool plus padding tools taken from the dev corpus
(synthetic ones without it), so the call path measures the hop, not the tool. The client's hop
is the same on both sides (in-process, same era, same number of sessions, warm-up excluded);
behind the gateway, the second hop is however the gateway speaks to that upstream: the
2026-07-28 era for this in-process one (see ``residency._gateway._upstream``). Run
``python benchmarks/bench/gateway.py --serve-upstream stdio|http [--port N] [--tools N]`` to
serve it on its own, and ``python benchmarks/bench/gateway.py --serve-proxy URL --port N
[--json-response]`` to serve the bare proxy in front of it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server

if __package__ in (None, ""):  # run as a program (an upstream the benches start): the checkout on the path
    sys.path[:1] = [str(Path(__file__).resolve().parents[2])]

from benchmarks.bench._corpus import numbered_tools
from residency._bench._report import BenchReport
from residency._gateway import RESPONSES_ENV, Gateway, in_process_era, parse_config

SMALL_ARGS = ["--calls", "200", "--wire-calls", "40", "--list-repeat", "3"]

ECHO = "echo"
_ECHO_TOOL: dict[str, Any] = {
    "name": ECHO,
    "description": "Return the arguments it was given.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "Text to send back."},
            "times": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["text"],
    },
}
_CALL_ARGUMENTS = {"text": "the quick brown fox", "times": 2}
HTTP_P50_TARGET = 1.5
"""The gateway over HTTP in front of an HTTP upstream, p50 against the direct HTTP call."""
_WARMUP = 20
_STARTUP_TIMEOUT = 60.0
_RUN_TIMEOUT = 600.0


# -- the upstream ----------------------------------------------------------------------------


def _padding(n: int) -> list[dict[str, Any]]:
    """``n`` realistic tool definitions with unique names (the dev corpus, else synthetic)."""
    return numbered_tools(n, name="pad_{i:04d}_{name}")


def upstream_server(tools: int = 0) -> Server[Any]:
    """The bench upstream: ``echo`` plus ``tools`` padding tools."""
    models = [types.Tool.model_validate(t) for t in [_ECHO_TOOL, *_padding(tools)]]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=models)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = json.dumps(params.arguments or {}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("residency-bench-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_upstream(transport: str, port: int, tools: int) -> None:
    server = upstream_server(tools)
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


async def _serve_proxy(url: str, port: int, mode: str, json_response: bool = False) -> None:
    """The HTTP floor: a bare proxy (``_bare_proxy``) served over streamable HTTP as the gateway
    serves its front (stateful, SSE responses unless ``json_response``, no access log), in front
    of the upstream at ``url``, spoken to in ``mode`` (``"auto"``: the era the gateway picks)."""
    import uvicorn

    async with Client(url, mode=mode, cache=None) as hop:
        app = _bare_proxy(hop).streamable_http_app(host="127.0.0.1", json_response=json_response)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
        )
        await uvicorn.Server(config).serve()


# -- measuring -------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``samples``."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


ClientFactory = Callable[[], Client]


async def _timed_calls(clients: Sequence[Client], calls: int) -> list[float]:
    """Per-call seconds of ``calls`` echo calls on each client, all clients at once."""
    latencies: list[float] = []

    async def one(client: Client) -> None:
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool(ECHO, _CALL_ARGUMENTS)
            latencies.append(time.perf_counter() - start)
            if result.is_error:
                raise RuntimeError(f"the echo call failed: {result.content}")

    async with anyio.create_task_group() as tg:
        for client in clients:
            tg.start_soon(one, client)
    return latencies


async def _paired(
    direct: ClientFactory, gated: ClientFactory, sessions: int, calls: int, rounds: int = 20
) -> tuple[list[float], list[float]]:
    """Direct and gated latencies: ``sessions`` clients each, ``calls`` timed calls per client.

    Both sets of clients are opened and warmed up first (a session opens on its first call),
    then measured in alternating short rounds (``rounds`` of each, ``calls / rounds`` calls per
    client in each), so that drift on a shared machine hits both alike. Objects alive by then
    (modules, tool models, the gateway) are moved out of the collector's sight: otherwise the
    first full collection scans the whole import-time heap and lands a one-off pause of tens of
    milliseconds on whichever round it hits.
    """
    d: list[float] = []
    g: list[float] = []
    per_round = max(1, calls // rounds)
    async with contextlib.AsyncExitStack() as stack:
        direct_clients = [await stack.enter_async_context(direct()) for _ in range(sessions)]
        gated_clients = [await stack.enter_async_context(gated()) for _ in range(sessions)]
        for client in [*direct_clients, *gated_clients]:
            for _ in range(_WARMUP):
                await client.call_tool(ECHO, _CALL_ARGUMENTS)
        gc.collect()
        gc.freeze()
        for _ in range(rounds):
            d += await _timed_calls(direct_clients, per_round)
            g += await _timed_calls(gated_clients, per_round)
    return d, g


def _report_pair(
    report: BenchReport,
    label: str,
    direct: list[float],
    gated: list[float],
    *,
    targets: bool,
    through: str = "gateway",
    p50_target: float | None = None,
) -> None:
    d50, d99 = percentile(direct, 0.5), percentile(direct, 0.99)
    g50, g99 = percentile(gated, 0.5), percentile(gated, 0.99)
    r50, r99 = g50 / d50, g99 / d99
    report.data[label] = {
        "direct_p50_ms": d50 * 1e3,
        "direct_p99_ms": d99 * 1e3,
        f"{through}_p50_ms": g50 * 1e3,
        f"{through}_p99_ms": g99 * 1e3,
        "samples": len(gated),
    }
    limit = p50_target if p50_target is not None else 2.5 if targets else None
    report.add(
        f"{label} call p50 {through}/direct",
        r50,
        "x",
        f"<= {limit:g}x" if limit is not None else "",
        r50 <= limit if limit is not None else None,
    )
    report.add(
        f"{label} call p99 {through}/direct",
        r99,
        "x",
        "<= 3x" if targets else "",
        r99 <= 3.0 if targets else None,
    )
    report.add(f"{label} call p50 through the {through}", g50 * 1e3, "ms")


async def _list_latency(make_client: ClientFactory, repeat: int) -> tuple[float, int]:
    """Median seconds of one ``tools/list`` and the number of tools it returned."""
    async with make_client() as client:
        count = len((await client.list_tools()).tools)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            await client.list_tools()
            samples.append(time.perf_counter() - start)
    return percentile(samples, 0.5), count


def _config(residency: dict[str, Any], servers: dict[str, Any] | None = None) -> str:
    """A gateway config; with ``servers``, one that serves once they are up (``ready_wait``), so
    that the first list, and the first measured call, find the upstream's tools on a busy machine."""
    if servers:
        residency = {"ready_wait": _STARTUP_TIMEOUT, **residency}
    return json.dumps({"mcpServers": servers or {}, "residency": residency})


# -- in-process ------------------------------------------------------------------------------


async def _in_process(report: BenchReport, args: argparse.Namespace) -> None:
    upstream = upstream_server()
    config = parse_config(_config({"pinned": [ECHO]}), source="<bench>")
    async with Gateway(config, upstreams={"up": upstream}) as gateway:
        for sessions in (1, 10):
            calls = args.calls if sessions == 1 else max(1, args.calls // sessions) * 2
            direct, gated = await _paired(
                lambda: Client(upstream, mode="legacy", cache=None),
                lambda: Client(gateway.server, mode="legacy", cache=None),
                sessions,
                calls,
            )
            label = f"in-process {sessions} session{'s' if sessions > 1 else ''}"
            _report_pair(report, label, direct, gated, targets=True)
        # The 2026-07-28 era, for scale: in-process, mcp.Client skips JSON-RPC framing there.
        direct, gated = await _paired(
            lambda: Client(upstream, cache=None), lambda: Client(gateway.server, cache=None), 1, args.calls
        )
        _report_pair(report, "in-process 1 session 2026-07-28", direct, gated, targets=False)
    # The floor: a bare proxy that forwards every call through the same SDK, in the era the
    # gateway speaks to this upstream, and does nothing else.
    async with Client(
        upstream, mode="auto" if in_process_era(upstream) == "modern" else "legacy", cache=None
    ) as hop:
        proxy = _bare_proxy(hop)
        direct, proxied = await _paired(
            lambda: Client(upstream, mode="legacy", cache=None),
            lambda: Client(proxy, mode="legacy", cache=None),
            1,
            args.calls,
        )
        _report_pair(
            report, "in-process 1 session, bare SDK proxy,", direct, proxied, targets=False, through="proxy"
        )
    # Sessions on disk: a SQLite store syncs every recorded call (one fsync per call; the turn
    # plan rides along relaxed). The ratio depends on the disk.
    with tempfile.TemporaryDirectory(prefix="residency-bench-") as tmp:
        on_disk = parse_config(
            _config({"pinned": [ECHO], "store": f"sqlite:///{tmp}/sessions.db"}), source="<bench>"
        )
        async with Gateway(on_disk, upstreams={"up": upstream}) as gateway:
            direct, gated = await _paired(
                lambda: Client(upstream, mode="legacy", cache=None),
                lambda: Client(gateway.server, mode="legacy", cache=None),
                1,
                max(1, args.calls // 4),
            )
            _report_pair(report, "in-process 1 session, SQLite store,", direct, gated, targets=False)
    # A session's planning must not grow with the catalog: the same call with 1,000 upstream tools.
    many = upstream_server(args.list_tools - 1)
    async with Gateway(config, upstreams={"up": many}) as gateway:
        direct, gated = await _paired(
            lambda: Client(many, mode="legacy", cache=None),
            lambda: Client(gateway.server, mode="legacy", cache=None),
            1,
            args.calls,
        )
        _report_pair(
            report, f"in-process 1 session, {args.list_tools} upstream tools,", direct, gated, targets=False
        )


def _bare_proxy(hop: Client) -> Server[Any]:
    """A low-level server that forwards ``tools/list`` and ``tools/call`` to ``hop``, and nothing else."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await hop.list_tools()

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        with anyio.move_on_after(_RUN_TIMEOUT):
            return await hop.call_tool(params.name, params.arguments)
        raise RuntimeError("the bare proxy's upstream did not answer")

    return Server("residency-bench-proxy", on_list_tools=list_tools, on_call_tool=call_tool)


async def _tools_list(report: BenchReport, args: argparse.Namespace) -> None:
    upstream = upstream_server(args.list_tools - 1)
    plain, n_plain = await _list_latency(
        lambda: Client(upstream, mode="legacy", cache=None), args.list_repeat
    )
    report.data["tools/list"] = {"upstream_tools": n_plain, "direct_ms": plain * 1e3}
    budgets = {
        "default budget": {},
        # A list that shows every tool: delivery by list, with a budget that holds them all.
        "everything resident": {"delivery": "list", "budget": {"schema_tokens": 1 << 40}},
    }
    for label, residency in budgets.items():
        config = parse_config(_config(residency), source="<bench>")
        async with Gateway(config, upstreams={"up": upstream}) as gateway:
            gated, n_gated = await _list_latency(
                lambda: Client(gateway.server, mode="legacy", cache=None), args.list_repeat
            )
        report.data["tools/list"][label] = {"listed": n_gated, "ms": gated * 1e3}
        report.add(f"tools/list {n_plain} tools, {label} ({n_gated} listed) / un-gated", gated / plain, "x")


# -- over the wire ---------------------------------------------------------------------------


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_for_port(
    port: int, process: subprocess.Popen[bytes], timeout: float = _STARTUP_TIMEOUT
) -> None:
    """Poll until something listens on ``127.0.0.1:port``; fail early if ``process`` exited."""
    with anyio.fail_after(timeout):
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} exited with {process.returncode} before listening")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


@contextlib.asynccontextmanager
async def _process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    with log.open("wb") as err:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            with anyio.fail_after(10):
                while process.poll() is None:
                    await anyio.sleep(0.02)
        except TimeoutError:
            process.kill()
            process.wait()


def program() -> list[str]:
    """The command line that runs this module as a program, from any folder (``_main``)."""
    return [sys.executable, str(Path(__file__).resolve())]


def upstream_argv(transport: str, port: int = 0) -> list[str]:
    """The command line of the bench upstream over ``transport`` (``stdio`` or ``http``)."""
    return [*program(), "--serve-upstream", transport, "--port", str(port)]


def _serve_argv(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "residency", "serve", "--config", str(config), *extra]


async def _over_stdio(report: BenchReport, args: argparse.Namespace, tmp: Path) -> None:
    up = upstream_argv("stdio")
    config = tmp / "stdio.json"
    config.write_text(_config({"pinned": [ECHO]}, {"up": {"command": up[0], "args": up[1:]}}))
    serve = _serve_argv(config, "--transport", "stdio")
    env = dict(os.environ)

    def direct() -> Client:
        return Client(StdioServerParameters(command=up[0], args=up[1:], env=env), mode="legacy", cache=None)

    def gated() -> Client:
        return Client(
            StdioServerParameters(command=serve[0], args=serve[1:], env=env), mode="legacy", cache=None
        )

    d, g = await _paired(direct, gated, 1, args.wire_calls)
    _report_pair(report, "stdio 1 session", d, g, targets=False)


@dataclass(frozen=True)
class _Front:
    """One process in front of the HTTP upstream, measured against the direct call."""

    label: str
    """Names its figures."""
    argv: list[str]
    port: int
    through: str
    """``gateway`` or ``proxy``."""
    env: dict[str, str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


def _http_client(url: str) -> ClientFactory:
    """Handshake-era clients of ``url``, client-side caching off."""
    return lambda: Client(url, mode="legacy", cache=None)


async def _over_http(report: BenchReport, args: argparse.Namespace, tmp: Path) -> None:
    """Gateways and bare proxies in front of one HTTP upstream, each against the direct call in
    the same run:

    * the gateway with its second hop in the handshake era (``"era": "legacy"``, how every HTTP
      upstream was spoken to before), and as configured by default (the 2026-07-28 era for this
      small upstream), both answering SSE as ``residency serve`` does by default;
    * the default gateway answering one JSON body per request (``RESIDENCY_HTTP_RESPONSES=json``);
    * the floor: a bare proxy on the same SDK (``_serve_proxy``, second hop as the gateway picks
      it), answering SSE and answering JSON. What the gateway costs above its floor is its own.
    """
    up_port = free_port()
    up_url = f"http://127.0.0.1:{up_port}/mcp"
    config, old_config = tmp / "http.json", tmp / "http-handshake.json"
    config.write_text(_config({"pinned": [ECHO]}, {"up": {"url": up_url}}))
    old_config.write_text(_config({"pinned": [ECHO]}, {"up": {"url": up_url, "era": "legacy"}}))
    json_env = {**os.environ, RESPONSES_ENV: "json"}
    sse_env = {**os.environ, RESPONSES_ENV: "sse"}

    def serve(path: Path, port: int) -> list[str]:
        return _serve_argv(path, "--transport", "http", "--host", "127.0.0.1", "--port", str(port))

    def proxy(port: int, *extra: str) -> list[str]:
        return [*program(), "--serve-proxy", up_url, "--port", str(port), *extra]

    ports = [free_port() for _ in range(5)]
    old = _Front(
        "http 1 session, handshake-era upstream hop (before),",
        serve(old_config, ports[0]),
        ports[0],
        "gateway",
        sse_env,
    )
    gw = _Front("http", serve(config, ports[1]), ports[1], "gateway", sse_env)
    gw_json = _Front(
        "http 1 session, JSON responses,", serve(config, ports[2]), ports[2], "gateway", json_env
    )
    floor = _Front("http 1 session, bare SDK proxy,", proxy(ports[3]), ports[3], "proxy")
    floor_json = _Front(
        "http 1 session, bare SDK proxy, JSON responses,",
        proxy(ports[4], "--json-response"),
        ports[4],
        "proxy",
    )
    fronts = [old, gw, gw_json, floor, floor_json]

    direct = _http_client(up_url)

    async with (
        _process(upstream_argv("http", up_port), tmp / "upstream.log") as up,
        contextlib.AsyncExitStack() as stack,
    ):
        await wait_for_port(up_port, up)
        processes = {
            front.label: await stack.enter_async_context(
                _process(front.argv, tmp / f"front-{i}.log", env=front.env)
            )
            for i, front in enumerate(fronts)
        }
        for front in fronts:
            await wait_for_port(front.port, processes[front.label])
        for front in fronts:
            for sessions in (1, 10) if front is gw else (1,):
                calls = args.wire_calls if sessions == 1 else max(1, args.wire_calls // sessions) * 2
                d, g = await _paired(direct, _http_client(front.url), sessions, calls)
                label = (
                    f"http {sessions} session{'s' if sessions > 1 else ''}" if front is gw else front.label
                )
                target = (
                    HTTP_P50_TARGET
                    if sessions == 1 and front.through == "gateway" and front is not old
                    else None
                )
                _report_pair(report, label, d, g, targets=False, through=front.through, p50_target=target)
        # CPU per call (Linux): robust where latency is not, on a machine busy with other work.
        if Path(f"/proc/{up.pid}/stat").exists():
            calls = args.wire_calls
            direct_cpu = await _cpu_per_call(direct(), [up], calls)
            names = {old.label: "before", gw.label: "after"}
            for front in fronts:
                name = names.get(front.label, front.label.removeprefix("http 1 session, ").rstrip(","))
                cpu = await _cpu_per_call(_http_client(front.url)(), [processes[front.label], up], calls)
                report.data[f"http cpu per call ({name})"] = {"direct_ms": direct_cpu * 1e3, "ms": cpu * 1e3}
                report.add(
                    f"http 1 session CPU per call {front.through}/direct ({name})", cpu / direct_cpu, "x"
                )


async def _cpu_per_call(client: Client, processes: list[subprocess.Popen[bytes]], calls: int) -> float:
    """CPU seconds one echo call costs this process and ``processes`` together (warm-up excluded)."""
    tick = os.sysconf("SC_CLK_TCK")

    def spent() -> float:
        total = time.process_time()
        for process in processes:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return total

    async with client:
        await _timed_calls([client], _WARMUP)
        start = spent()
        await _timed_calls([client], calls)
        return (spent() - start) / calls


# -- the command -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calls", type=int, default=2000, help="timed calls per measurement, in-process (default 2000)"
    )
    parser.add_argument(
        "--wire-calls", type=int, default=500, help="timed calls per measurement over stdio/HTTP"
    )
    parser.add_argument(
        "--list-tools", type=int, default=1000, help="upstream tools for the tools/list figure"
    )
    parser.add_argument(
        "--list-repeat", type=int, default=30, help="timed tools/list calls (median reported)"
    )
    parser.add_argument(
        "--wire",
        choices=("none", "stdio", "http", "both"),
        default="both",
        help="also measure over stdio and/or streamable HTTP with subprocesses (default both)",
    )


async def _run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("gateway")
    report.data["era"] = (
        "client: handshake (mode='legacy'), client-side caching off; gateway to an in-process "
        "upstream: 2026-07-28; to the HTTP upstream: as it picks (2026-07-28 here), and the "
        "handshake era for the 'before' figure; the bare SDK proxy to it: as the SDK picks "
        "(2026-07-28 here); over HTTP both answer SSE unless the figure says JSON responses"
    )
    seconds: dict[str, float] = {}
    report.data["seconds"] = seconds
    parts: list[tuple[str, Callable[[BenchReport, argparse.Namespace, Path], Awaitable[None]]]] = [
        ("in-process", lambda r, a, _: _in_process(r, a)),
        ("tools/list", lambda r, a, _: _tools_list(r, a)),
    ]
    if args.wire in ("stdio", "both"):
        parts.append(("stdio", _over_stdio))
    if args.wire in ("http", "both"):
        parts.append(("http", _over_http))
    with anyio.fail_after(_RUN_TIMEOUT), tempfile.TemporaryDirectory(prefix="residency-bench-") as tmp:
        for name, part in parts:
            start = time.perf_counter()
            await part(report, args, Path(tmp))
            seconds[name] = round(time.perf_counter() - start, 2)
    return report


def run(args: argparse.Namespace) -> BenchReport:
    """Run the benchmark (see the module docstring)."""
    return anyio.run(_run, args)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench/gateway.py")
    serving = parser.add_mutually_exclusive_group(required=True)
    serving.add_argument("--serve-upstream", choices=("stdio", "http"))
    serving.add_argument("--serve-proxy", metavar="URL", help="serve the bare HTTP proxy in front of URL")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0, help="padding tools besides echo")
    parser.add_argument(
        "--mode", choices=("auto", "legacy"), default="auto", help="the bare proxy's hop (default auto)"
    )
    parser.add_argument("--json-response", action="store_true", help="the bare proxy answers JSON, not SSE")
    args = parser.parse_args(argv)
    main: Callable[[], Awaitable[None]]
    if args.serve_proxy:
        main = lambda: _serve_proxy(args.serve_proxy, args.port, args.mode, args.json_response)  # noqa: E731
    else:
        main = lambda: _serve_upstream(args.serve_upstream, args.port, args.tools)  # noqa: E731
    anyio.run(main)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
