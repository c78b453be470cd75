"""``python -m benchmarks offload``: what span offloading does to a call that returns 1 MB.

A real MCP client calls a real upstream's ``dump`` tool through the gateway; ``dump`` answers
with ``--size`` bytes of text (1 MB by default, different on every call, so the content store
cannot deduplicate). Figures, each against a baseline measured in the same run:

* ``tools/call`` p50 and p99 with offloading on (``spans.offload_tokens``) against the same
  gateway configuration with it off, in alternating rounds. On, the gateway counts the
  result's tokens, writes it to the content store, journals the span and answers with a
  preview and a link; off, it passes the megabyte through. Measured in-process with a memory
  store and with a SQLite store (one durable content write per call), and over stdio: a
  ``residency serve`` subprocess with a SQLite store in front of an upstream subprocess, the
  client speaking JSON-RPC over the pipe (``--wire none`` skips it). No target: on trades a
  store write for a megabyte the client no longer receives, and which wins depends on the
  store and the transport;
* one ``count_tokens`` of such a result, for scale (the offload path counts the result's tokens
  to decide, and the span records them);
* reading an offloaded result back whole with ``read_span`` (in ranges of the gateway's
  largest, 256 KiB), against one call with offloading off: what an agent that does need the
  whole result pays on top of the preview call (reported).

Before timing, one offloaded result is read back whole and compared with the upstream's text
(sha256), so the figures are those of a path that keeps every byte.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.lowlevel import Server

if __package__ in (None, ""):  # run as a program (an upstream the benches start): the checkout on the path
    sys.path[:1] = [str(Path(__file__).resolve().parents[2])]

from benchmarks.bench.gateway import percentile
from residency._bench._report import BenchReport
from residency._gateway import MAX_RANGE, SPAN_META_KEY, Gateway, parse_config
from residency._tokens import count_tokens

SMALL_ARGS = ["--calls", "6", "--wire-calls", "4"]

DUMP = "dump"
_DUMP_TOOL: dict[str, Any] = {
    "name": DUMP,
    "description": "Export the whole table as text.",
    "inputSchema": {"type": "object", "properties": {"table": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}
_OFFLOAD_TOKENS = 4000
_WARMUP = 2
_ROUNDS = 10
_RUN_TIMEOUT = 1800.0
_READY_WAIT = 120.0


# -- the upstream ----------------------------------------------------------------------------


def dump_text(size: int, n: int) -> str:
    """The ``n``-th answer of ``dump``: ``size`` bytes of numbered log-like lines (ASCII)."""
    head = f"export {n}\n"
    line = "2026-11-30T12:00:00Z service=api level=info status=200 latency_ms=12 path=/v1/items\n"
    body = line * (max(0, size - len(head)) // len(line) + 1)
    return (head + body)[:size]


def upstream_server(size: int) -> Server[Any]:
    """The bench upstream: ``dump``, a ``size``-byte answer, different on every call."""
    tools = [types.Tool.model_validate(_DUMP_TOOL)]
    counter = itertools.count()

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = dump_text(size, next(counter))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("residency-bench-dump", on_list_tools=list_tools, on_call_tool=call_tool)


# -- measuring -------------------------------------------------------------------------------


def _config(offload: bool, store: str, servers: dict[str, Any] | None = None) -> str:
    residency: dict[str, Any] = {"pinned": [DUMP], "store": store}
    if servers:  # serve once the upstream is up: the first call must find its tool
        residency["ready_wait"] = _READY_WAIT
    if offload:
        residency["spans"] = {"offload_tokens": _OFFLOAD_TOKENS}
    return json.dumps({"mcpServers": servers or {}, "residency": residency})


async def _call(client: Client) -> types.CallToolResult:
    result = await client.call_tool(DUMP, {"table": "requests"})
    if result.is_error:
        raise RuntimeError(f"the dump call failed: {result.content}")
    return result


def _span(result: types.CallToolResult) -> dict[str, Any]:
    span = (result.meta or {}).get(SPAN_META_KEY)
    if not isinstance(span, dict):
        raise RuntimeError("offloading is on but the result was not offloaded")
    return span


async def _read_whole(client: Client, span: dict[str, Any]) -> bytes:
    """The whole of an offloaded result, read with ``read_span`` from offset 0 until done."""
    out = bytearray()
    offset, done = 0, False
    while not done:
        result = await client.call_tool(
            "read_span", {"id": span["id"], "offset": offset, "length": MAX_RANGE}
        )
        data = result.structured_content or {}
        if result.is_error or data.get("offset") != offset:
            raise RuntimeError(f"read_span failed at offset {offset}: {result.content}")
        out += str(data["text"]).encode("utf-8")
        offset, done = int(data["next_offset"]), bool(data["done"])
    return bytes(out)


async def _verify(client: Client, size: int) -> None:
    """One offloaded result, read back whole, is the upstream's text, and its sha256 its key."""
    span = _span(await _call(client))
    whole = await _read_whole(client, span)
    n = int(whole.split(b"\n", 1)[0].removeprefix(b"export "))
    if whole != dump_text(size, n).encode() or span["key"] != "sha256:" + hashlib.sha256(whole).hexdigest():
        raise RuntimeError("an offloaded result did not read back whole")


async def _paired(off: Client, on: Client, calls: int) -> tuple[list[float], list[float]]:
    """Seconds per call with offloading off and on, in alternating rounds after a warm-up."""
    for client in (off, on):
        for _ in range(_WARMUP):
            await _call(client)
    gc.collect()
    samples: tuple[list[float], list[float]] = ([], [])
    per_round = max(1, calls // _ROUNDS)
    for _ in range(max(1, min(_ROUNDS, calls))):
        for side, client in enumerate((off, on)):
            for _ in range(per_round):
                start = time.perf_counter()
                await _call(client)
                samples[side].append(time.perf_counter() - start)
    return samples


def _report(report: BenchReport, label: str, off: list[float], on: list[float]) -> None:
    p50 = (percentile(off, 0.5), percentile(on, 0.5))
    p99 = (percentile(off, 0.99), percentile(on, 0.99))
    report.add(f"{label}: call p50 offloading on/off", p50[1] / p50[0], "x")
    report.add(f"{label}: call p99 offloading on/off", p99[1] / p99[0], "x")
    report.add(f"{label}: call p50 offloading off", p50[0] * 1e3, "ms")
    report.add(f"{label}: call p50 offloading on", p50[1] * 1e3, "ms")
    report.data[label] = {
        "off_p50_ms": p50[0] * 1e3,
        "off_p99_ms": p99[0] * 1e3,
        "on_p50_ms": p50[1] * 1e3,
        "on_p99_ms": p99[1] * 1e3,
        "samples": len(on),
    }


async def _read_back(report: BenchReport, label: str, off: Client, on: Client, repeat: int) -> None:
    reads, calls = [], []
    for _ in range(repeat):
        span = _span(await _call(on))
        start = time.perf_counter()
        await _read_whole(on, span)
        reads.append(time.perf_counter() - start)
        start = time.perf_counter()
        await _call(off)
        calls.append(time.perf_counter() - start)
    ratio = percentile(reads, 0.5) / percentile(calls, 0.5)
    report.add(f"{label}: read_span of the whole result / call with offloading off", ratio, "x")
    report.data[label]["read_whole_p50_ms"] = percentile(reads, 0.5) * 1e3


# -- in-process and over stdio ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def _in_process_pair(size: int, store: str) -> AsyncIterator[tuple[Client, Client]]:
    upstream = upstream_server(size)
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for offload in (False, True):
            config = parse_config(_config(offload, store), source="<bench>")
            gateway = await stack.enter_async_context(Gateway(config, upstreams={"up": upstream}))
            clients.append(await stack.enter_async_context(Client(gateway.server, mode="legacy", cache=None)))
        yield clients[0], clients[1]


@contextlib.asynccontextmanager
async def _stdio_pair(size: int, folder: Path) -> AsyncIterator[tuple[Client, Client]]:
    up = [sys.executable, str(Path(__file__).resolve()), "--serve-upstream", "--size", str(size)]
    upstream: dict[str, Any] = {"command": up[0], "args": up[1:]}
    if "PYTHONPATH" in os.environ:  # the upstream runs the same residency as the bench
        upstream["env"] = {"PYTHONPATH": os.environ["PYTHONPATH"]}
    servers = {"up": upstream}
    env = dict(os.environ)
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for offload in (False, True):
            name = "on" if offload else "off"
            config = folder / f"{name}.json"
            config.write_text(_config(offload, f"sqlite:///{folder / name}.db", servers))
            argv = ["-m", "residency", "serve", "--config", str(config), "--transport", "stdio"]
            params = StdioServerParameters(command=sys.executable, args=argv, env=env)
            errlog = stack.enter_context((folder / f"{name}.log").open("a"))
            transport = stdio_client(params, errlog=errlog)
            clients.append(await stack.enter_async_context(Client(transport, mode="legacy", cache=None)))
        yield clients[0], clients[1]


Pair = Callable[[], contextlib.AbstractAsyncContextManager[tuple[Client, Client]]]


async def _run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("offload")
    report.data["arguments"] = {"size": args.size, "calls": args.calls, "wire_calls": args.wire_calls}
    report.data["offload_tokens"] = _OFFLOAD_TOKENS
    with anyio.fail_after(_RUN_TIMEOUT), tempfile.TemporaryDirectory(prefix="residency-bench-") as tmp:
        folder = Path(tmp)
        parts: list[tuple[str, Pair, int]] = [
            ("in-process, memory store", lambda: _in_process_pair(args.size, "memory://"), args.calls),
            (
                "in-process, SQLite store",
                lambda: _in_process_pair(args.size, f"sqlite:///{folder / 'in-process.db'}"),
                args.calls,
            ),
        ]
        if args.wire == "stdio":
            parts.append(("stdio, SQLite store", lambda: _stdio_pair(args.size, folder), args.wire_calls))
        for label, pair, calls in parts:
            async with pair() as (off, on):
                await _verify(on, args.size)
                off_s, on_s = await _paired(off, on, calls)
                _report(report, label, off_s, on_s)
                await _read_back(report, label, off, on, repeat=max(1, min(5, calls // 2)))
    # For scale: one token count of such a result (the offload path counts its tokens).
    text = dump_text(args.size, 0)
    count_tokens(text)
    started = time.perf_counter()
    count_tokens(text)
    report.add("count_tokens of one result, for scale", (time.perf_counter() - started) * 1e3, "ms")
    report.data["size_bytes"] = args.size
    report.data["load_average"] = list(os.getloadavg())  # a shared machine skews the absolute times
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=1_000_000, help="bytes per result (default 1000000)")
    parser.add_argument(
        "--calls", type=int, default=100, help="timed calls per side in-process (default 100)"
    )
    parser.add_argument(
        "--wire-calls", type=int, default=40, help="timed calls per side over stdio (default 40)"
    )
    parser.add_argument(
        "--wire", choices=("none", "stdio"), default="stdio", help="also measure over stdio (default)"
    )


def run(args: argparse.Namespace) -> BenchReport:
    """Run the benchmark (see the module docstring)."""
    if args.size <= _OFFLOAD_TOKENS * 4:
        raise SystemExit(f"--size must be well over the offload threshold ({_OFFLOAD_TOKENS} tokens)")
    return anyio.run(_run, args)


async def _serve(size: int) -> None:
    from mcp.server.stdio import stdio_server

    server = upstream_server(size)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench/offload.py")
    parser.add_argument("--serve-upstream", action="store_true", required=True)
    parser.add_argument("--size", type=int, default=1_000_000)
    size = parser.parse_args(argv).size
    anyio.run(_serve, size)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
