"""What OpenTelemetry costs a gateway request: tracing on, off, and a build without the hooks.

Run from the repository root, with the project's venv active (and the ``otel`` extra):

    python benchmarks/otel_overhead.py
    python benchmarks/otel_overhead.py --json benchmarks/results/otel_overhead.json
    python benchmarks/otel_overhead.py --compare REV   # also REV's tracing, in the same rounds

In the first workload each variant is a gateway with one in-process upstream
(``tests/gateway/traced_upstream.py``) and an in-process ``mcp.Client`` that calls the upstream's
``echo`` tool through it, one call at a time. ``echo`` answers with its argument, so an answer is
as long with tracing on as off (the same upstream's ``echo_meta``, which the tests use to see the
trace context, answers with the call's ``_meta``: tracing on would lengthen every answer it
carries through the gateway).
The variants:

- ``on``: ``residency.telemetry`` set: a span per request, admission and upstream call, batched
  and exported over OTLP/HTTP (from the gateway's event loop) to a receiver that runs in this
  (the parent) process, as a local collector would; metrics exported every second (from the
  telemetry's metric thread);
- ``off``: the same tree without the section (the hooks are there, ``tracing`` is None);
- ``before``: the source tree before the hooks were added (``--baseline``, by default the
  parent of the commit that added ``_tracing.py``), extracted with ``git archive``: the build
  without the hooks.

Three worker processes: ``on`` and ``off`` side by side in one (the same scheduling and
neighbours: on this shared machine a process's latency drifts by several times for minutes at
a time, so two processes are not comparable), and ``off`` (``off_alone``) and ``before`` each
alone (neither exports anything). ``on`` over ``off`` compares the first two, ``off`` over
``before`` the last two. CPU time is the whole process's during a variant's calls, so ``off``
beside ``on`` is charged whatever the telemetry of ``on`` spends meanwhile (its metric thread,
a batch it sends). With ``--compare REV``, ``REV``'s ``on`` exports its spans as that
revision does.

With ``--compare REV`` a fourth worker runs ``on`` and ``off`` side by side from the source
tree at ``REV`` (``on_compare``, ``off_compare``): an earlier version of the tracing measured in
the same rounds, so a change's effect is read from one run.

A second workload (``stdio`` in the report) is the first with the upstream where an ``mcp.json``
entry puts it: each gateway starts ``traced_upstream.py`` as a process of its own and speaks to it
over its stdio. Three more worker processes, in the same arrangements (``on`` and ``off`` side by
side, ``off`` and ``before`` each alone); CPU time is the worker's (its gateways and client), not
the upstreams'.

In the first workload the upstream shares the gateway's process, so whatever the upstream does
with the trace context it is sent is counted as well: the ``mcp`` SDK's server reads it from
``_meta`` (its OpenTelemetry middleware), and its client writes it. The ``on``/``off`` worker times
that alone each round (``context_floor``): a bare ``mcp.Client`` calling the same in-process
upstream with the context as the gateway sends it and without, alternately. The report gives it
as a ratio of ``off`` and the ``on`` over ``off`` ratio without it (the gateway's own share).

A third workload (``http`` in the report) makes the same calls as an application does: three
more gateway processes like the first three (the same variants, settings and in-process
upstream; ``on`` and ``off`` side by side in one, ``off`` and ``before`` each alone) serve their
gateways over the HTTP front (``serve_http``), and the real client, the ``mcp`` SDK's
streamable-HTTP ``Client(url)`` in its default era, calls them from a process of its own (one
for every variant, so the client side is the same for each). Not one ``residency serve``
process per variant: on against off would then compare two processes' luck as well as the
tracing (see above), and the upstream would be one more process behind a pipe. With the client
in another process its work is neither counted as the gateway's CPU nor competes with the
gateway for the interpreter lock. CPU time is the gateway process's (its gateways, their
upstream, the exporter's threads), read by that process before and after each variant's calls.
The ``on`` gateway exports to a receiver of its own, and the report shows what it decoded:
every span, and the calls whose request span arrived against the calls made.

Rounds alternate the workers, in a rotating order (the machine's noise hits all alike); a
worker's figure for a round is the median latency (p50) of its calls in that round, and its
figure for the run the median over rounds. Ratios are of those figures; ``paired`` ratios are
the median of the per-round ratios. Targets: ``on`` at most 1.05x ``off`` (p50), and ``off``
indistinguishable from ``before`` (within the spread of the rounds). The exit code is 1 when
the first is missed in any workload.
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

async def main(endpoint, upstream, *variants):
    endpoint = "" if endpoint == "-" else endpoint
    meta = {"residency/session": "bench"}
    async with AsyncExitStack() as stack:
        clients = {}
        for variant in variants:
            # Pinned, so it is listed: the client knows the tool it calls (as an agent's does).
            residency = {"ready_wait": 60, "pinned": ["echo"]}
            if variant == "on":
                residency["telemetry"] = {"otlp": {"endpoint": endpoint}, "metric_interval": 1}
            if upstream == "stdio":
                # The upstream as mcp.json starts one: a process of its own, over its stdio.
                command = {"command": sys.executable, "args": [traced_upstream.__file__]}
                servers, inline = {"up": command}, None
            else:
                servers, inline = {}, {"up": traced_upstream.server()}
            cfg = parse_config(json.dumps({"mcpServers": servers, "residency": residency}))
            gw = await stack.enter_async_context(Gateway(cfg, upstreams=inline))
            client = await stack.enter_async_context(Client(gw.server, mode="legacy"))
            await client.list_tools(meta=meta)
            clients[variant] = client
        async def call(client):
            result = await client.call_tool("echo", {"text": "x"}, meta=meta)
            assert not result.is_error, result
        for client in clients.values():
            for _ in range(200):
                await call(client)
        floors = None
        if "on" in variants and upstream != "stdio":
            floors = (span_floor(), await context_floor(stack))
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
            if floors is not None:
                spans, context = floors[0](int(line)), await floors[1](int(line))
                figures["sdk_floor"] = {"p50_ms": spans, "mean_ms": 0.0, "cpu_ms": 0.0}
                figures["context_floor"] = {"p50_ms": context, "mean_ms": 0.0, "cpu_ms": 0.0}
            print(json.dumps(figures), flush=True)

def span_floor():
    # The SDK's own cost of one call's three spans (request and upstream spans made current,
    # the admission span not), with the gateway's attributes, into a BatchSpanProcessor whose
    # exporter drops them: what no change to the gateway's hooks can remove.
    from opentelemetry.context import attach, detach
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanKind, set_span_in_context

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    tracer = provider.get_tracer("residency.gateway", "0")
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo"}
    request = {"mcp.method.name": "tools/call", **tool, "mcp.protocol.version": "2025-11-25"}
    admit = {"residency.admission.decision": "admitted", "residency.admission.reason": "resident",
             "gen_ai.tool.name": "echo", "residency.upstream": "up"}
    upstream = {**request, "residency.upstream": "up", "network.transport": "pipe"}

    def once(n):
        server = tracer.start_span("tools/call echo", kind=SpanKind.SERVER,
                                   attributes={**request, "jsonrpc.request.id": str(n)})
        outer = attach(set_span_in_context(server))
        tracer.start_span("admit echo", attributes=admit, start_time=time.time_ns()).end()
        client = tracer.start_span("tools/call echo", kind=SpanKind.CLIENT, attributes=upstream)
        inner = attach(set_span_in_context(client))
        detach(inner)
        client.end()
        detach(outer)
        server.end()

    def measure(calls):
        times = []
        for n in range(calls):
            started = time.perf_counter()
            once(n)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    return measure

async def context_floor(stack):
    # What carrying the trace context costs a call below the gateway: a bare mcp Client calls
    # the same in-process upstream with the context as the gateway sends it (in _meta, and
    # current, so that the client's own propagation writes it too) and without it, alternately.
    # The mcp SDK's client and the upstream's server (its OpenTelemetry middleware reads the
    # context) do that work whatever the gateway does.
    from opentelemetry.context import attach, detach
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    bare = await stack.enter_async_context(Client(traced_upstream.server(), mode="legacy"))
    context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, False, TraceFlags(1))
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

    async def once(traced):
        if not traced:
            return await bare.call_tool("echo", {"text": "x"})
        token = attach(set_span_in_context(NonRecordingSpan(context)))
        try:
            return await bare.call_tool("echo", {"text": "x"}, meta=dict(carried))
        finally:
            detach(token)

    for _ in range(200):
        await once(True)
        await once(False)

    async def measure(calls):
        times = {True: [], False: []}
        for n in range(calls):
            for traced in ((True, False) if n % 2 else (False, True)):
                started = time.perf_counter()
                await once(traced)
                times[traced].append(time.perf_counter() - started)
        return (statistics.median(times[True]) - statistics.median(times[False])) * 1000

    return measure

anyio.run(main, *sys.argv[1:])
"""


HTTP_GATEWAY = r"""
import json, sys, time
from contextlib import AsyncExitStack
import anyio
from residency._gateway import Gateway, parse_config
from residency._gateway._http import bind, serve_http
from tests.gateway import traced_upstream

async def main(endpoint, *variants):
    endpoint = "" if endpoint == "-" else endpoint
    urls = {}
    async with AsyncExitStack() as stack:
        gateways = {}
        for variant in variants:
            # The in-process workload's gateway, upstream and settings, served by the HTTP front.
            residency = {"ready_wait": 60, "pinned": ["echo"]}
            if variant == "on":
                residency["telemetry"] = {"otlp": {"endpoint": endpoint}, "metric_interval": 1}
            cfg = parse_config(json.dumps({"mcpServers": {}, "residency": residency}))
            gateways[variant] = await stack.enter_async_context(
                Gateway(cfg, upstreams={"up": traced_upstream.server()}))
        # The servers stop before the gateways close (which flushes what is left to export).
        async with anyio.create_task_group() as tg:
            for variant, gw in gateways.items():
                served = anyio.Event()
                def started(url, variant=variant, served=served):
                    urls[variant] = url
                    served.set()
                serve = lambda gw=gw, started=started: serve_http(gw, bind("127.0.0.1", 0), started=started)
                tg.start_soon(serve)
                await served.wait()
            print(json.dumps(urls), flush=True)
            # Asked before and after each variant's calls: this process's CPU time (gateways,
            # their upstream and, with telemetry on, its exports).
            while (await anyio.to_thread.run_sync(sys.stdin.readline)).strip():
                print(json.dumps(time.process_time()), flush=True)
            tg.cancel_scope.cancel()

anyio.run(main, *sys.argv[1:])
"""

HTTP_CLIENT = r"""
import json, statistics, sys, time
from contextlib import AsyncExitStack
import anyio
from mcp import Client

async def main():
    meta = {"residency/session": "bench"}
    clients = {}
    async with AsyncExitStack() as stack:
        while line := (await anyio.to_thread.run_sync(sys.stdin.readline)).strip():
            order = json.loads(line)
            if "connect" in order:
                # The SDK's streamable-HTTP client as an application uses it (its default era).
                client = await stack.enter_async_context(Client(order["url"]))
                await client.list_tools(meta=meta)
                clients[order["connect"]] = client
                for _ in range(order["warm"]):
                    result = await client.call_tool("echo", {"text": "x"}, meta=meta)
                    assert not result.is_error, result
                print(json.dumps({"protocol": client.protocol_version}), flush=True)
                continue
            client, times = clients[order["run"]], []
            for _ in range(order["calls"]):
                started = time.perf_counter()
                result = await client.call_tool("echo", {"text": "x"}, meta=meta)
                times.append(time.perf_counter() - started)
                assert not result.is_error, result
            print(json.dumps({"p50_ms": statistics.median(times) * 1000,
                              "mean_ms": statistics.fmean(times) * 1000}), flush=True)

anyio.run(main)
"""

WARM_UP = 200
"""Calls each client makes before the rounds (as the in-process worker does)."""


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
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _child(script: str, src: Path, endpoint: str, args: list[str]) -> subprocess.Popen[str]:
    """``script`` run by ``python -c`` with ``src`` (the version measured) first on its path,
    told the OTLP ``endpoint`` (``-``: none) and ``args``; lines in and out on pipes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, "-c", script, endpoint or "-", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )


class Worker:
    """A worker process running the gateways ``variants`` (``on``, ``off``) side by side, each
    with its ``upstream`` (``in-process`` or ``stdio``); its figures are kept under ``names``
    (the same order)."""

    def __init__(
        self, src: Path, endpoint: str, variants: list[str], names: list[str], upstream: str = "in-process"
    ) -> None:
        self.names = dict(zip(variants, names, strict=True))
        self.process = _child(WORKER, src, endpoint, [upstream, *variants])

    def ready(self) -> None:
        assert self.process.stdout is not None
        if not self.process.stdout.readline():
            raise SystemExit(f"the worker of {list(self.names.values())} did not start")

    def round(self, calls: int, rounds: dict[str, list[dict[str, float]]]) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        for variant, figures in json.loads(self.process.stdout.readline()).items():
            rounds.setdefault(self.names.get(variant, variant), []).append(figures)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)


class HTTPClient:
    """The process of the real MCP clients (the SDK's streamable-HTTP client), one per gateway
    variant; it takes its orders from the parent, one JSON line each, and answers one."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HTTP_CLIENT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
        )

    def ask(self, order: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(order) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise SystemExit(f"the HTTP client process stopped at {order}")
        result: dict[str, Any] = json.loads(answer)
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)


class HTTPWorker:
    """A gateway process serving ``variants`` over the HTTP front side by side, each called by
    its own client in ``client``'s process; figures are kept under ``names`` (the same order)."""

    def __init__(
        self, src: Path, endpoint: str, variants: list[str], names: list[str], client: HTTPClient
    ) -> None:
        self.names = dict(zip(variants, names, strict=True))
        self.client = client
        self.turn = 0
        self.protocols: set[str] = set()
        self.process = _child(HTTP_GATEWAY, src, endpoint, variants)

    def ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the gateway process of {list(self.names.values())} did not start")
        for variant, url in json.loads(line).items():
            answer = self.client.ask({"connect": self.names[variant], "url": url, "warm": WARM_UP})
            self.protocols.add(answer["protocol"])

    def cpu(self) -> float:
        """The gateway process's CPU time so far, in seconds (it reads it itself: exact)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("cpu\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def round(self, calls: int, rounds: dict[str, list[dict[str, float]]]) -> None:
        variants = list(self.names)
        k = self.turn % len(variants)
        self.turn += 1
        for variant in variants[k:] + variants[:k]:
            name = self.names[variant]
            cpu = self.cpu()
            figures = self.client.ask({"run": name, "calls": calls})
            figures["cpu_ms"] = (self.cpu() - cpu) / calls * 1000
            rounds.setdefault(name, []).append(figures)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)


def measure(
    rounds: int, calls: int, baseline: str, compare: str | None = None, http_calls: int = 200
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as OTLPSpan

    from tests._otlp import OTLPReceiver

    current = ROOT / "src"
    figures: dict[str, list[dict[str, float]]] = {}
    load_before = os.getloadavg()[0]
    # The HTTP workload's gateway exports to a receiver of its own: what it received is its own.
    with (
        OTLPReceiver() as rx,
        OTLPReceiver() as stdio_rx,
        OTLPReceiver() as http_rx,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before_src = extract(baseline, Path(tmp) / "before")
        client = HTTPClient()
        workers: list[Worker | HTTPWorker] = [
            # On and off side by side in one process: the same scheduling, the same neighbours.
            Worker(current, rx.endpoint, ["on", "off"], ["on", "off"]),
            # Off and before each alone: neither process exports anything.
            Worker(current, "", ["off"], ["off_alone"]),
            Worker(before_src, "", ["off"], ["before"]),
        ]
        if compare is not None:
            compare_src = extract(compare, Path(tmp) / "compare")
            workers.append(Worker(compare_src, rx.endpoint, ["on", "off"], ["on_compare", "off_compare"]))
        workers += [
            # The same three arrangements with the upstream in a process of its own, started
            # by each gateway and spoken to over its stdio, as an mcp.json entry runs it.
            Worker(current, stdio_rx.endpoint, ["on", "off"], ["stdio_on", "stdio_off"], "stdio"),
            Worker(current, "", ["off"], ["stdio_off_alone"], "stdio"),
            Worker(before_src, "", ["off"], ["stdio_before"], "stdio"),
        ]
        http_workers = [
            # The same three processes' variants, served over the HTTP front to real clients
            # in another process (one for all: the client side is the same for every variant).
            HTTPWorker(current, http_rx.endpoint, ["on", "off"], ["http_on", "http_off"], client),
            HTTPWorker(current, "", ["off"], ["http_off_alone"], client),
            HTTPWorker(before_src, "", ["off"], ["http_before"], client),
        ]
        workers += http_workers
        try:
            for w in workers:
                w.ready()
            started = time.perf_counter()
            for n in range(rounds):
                k = n % len(workers)
                for w in workers[k:] + workers[:k]:
                    w.round(http_calls if isinstance(w, HTTPWorker) else calls, figures)
            seconds = time.perf_counter() - started
        finally:
            for w in workers:
                w.close()
            client.close()
        spans = len(rx.spans())
        metric_exports = len(rx.metrics)
        stdio_spans = stdio_rx.spans()
        stdio_metric_exports = len(stdio_rx.metrics)
        http_spans = http_rx.spans()
        http_metric_exports = len(http_rx.metrics)
        protocols = sorted(set().union(*(w.protocols for w in http_workers)))

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
    floor_ms = figure("sdk_floor", "p50_ms")
    context_ms = figure("context_floor", "p50_ms")

    def workload(
        prefix: str, cpu_name: str, calls_made: int, spans: list[Any], metric_exports: int
    ) -> dict[str, Any]:
        """The figures of the variants named ``{prefix}_on`` and so on, under their short names;
        ``spans``: what the ``on`` gateway's own receiver decoded."""
        on, off, alone, before = (f"{prefix}_{n}" for n in names)
        on_over_off, off_over_before = ratio(on, off), ratio(alone, before)
        return {
            "p50_ms": {n: round(figure(f"{prefix}_{n}", "p50_ms"), 4) for n in names},
            "mean_ms": {n: round(figure(f"{prefix}_{n}", "mean_ms"), 4) for n in names},
            cpu_name: {n: round(figure(f"{prefix}_{n}", "cpu_ms"), 4) for n in names},
            "ratios": {
                "on_over_off_p50": on_over_off,
                "on_over_off_p50_paired": paired(on, off),
                "on_over_off_cpu": ratio(on, off, "cpu_ms"),
                "off_over_before_p50": off_over_before,
                "off_over_before_p50_paired": paired(alone, before),
                "off_over_before_cpu": ratio(alone, before, "cpu_ms"),
            },
            "round_spread": {n: spread(f"{prefix}_{n}") for n in names},
            # Every span, and the calls whose request (SERVER) span arrived, against the calls
            # the client made (warm-up included).
            "calls_made_on": calls_made,
            "calls_traced_on": sum(
                1 for x in spans if x.name == "tools/call echo" and x.span.kind == OTLPSpan.SPAN_KIND_SERVER
            ),
            "spans_received": len(spans),
            "metric_exports_received": metric_exports,
            "met": on_over_off <= TARGET_ON_OVER_OFF,
            "off_within_spread_of_before": abs(off_over_before - 1) <= max(spread(alone), spread(before)),
        }

    on_over_off = ratio("on", "off")
    off_over_before = ratio("off_alone", "before")
    # CPU: the worker's process (its gateways and the client), not the upstreams' processes.
    stdio = workload("stdio", "cpu_ms_per_call", WARM_UP + rounds * calls, stdio_spans, stdio_metric_exports)
    http = {
        "calls_per_round": http_calls,
        "protocol_versions": protocols,
        # CPU: the gateway's process only (gateways, their in-process upstream, exporter
        # threads); the clients' process is not counted.
        **workload(
            "http", "gateway_cpu_ms_per_call", WARM_UP + rounds * http_calls, http_spans, http_metric_exports
        ),
    }
    compared: dict[str, Any] = {}
    if compare is not None:
        pair = ["on_compare", "off_compare"]
        compared = {
            "compare": {
                "commit": subprocess.run(
                    ["git", "rev-parse", "--short", compare],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip(),
                "p50_ms": {n: round(figure(n, "p50_ms"), 4) for n in pair},
                "cpu_ms_per_call": {n: round(figure(n, "cpu_ms"), 4) for n in pair},
                "ratios": {
                    "on_over_off_p50": ratio("on_compare", "off_compare"),
                    "on_over_off_p50_paired": paired("on_compare", "off_compare"),
                    "on_over_off_cpu": ratio("on_compare", "off_compare", "cpu_ms"),
                    "on_over_on_compare_p50_paired": paired("on", "on_compare"),
                },
                "round_spread": {n: spread(n) for n in pair},
            }
        }
    return {
        "rounds": rounds,
        "calls_per_round": calls,
        "seconds": round(seconds, 1),
        "baseline": subprocess.run(
            ["git", "rev-parse", "--short", baseline], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {load_before:.1f} before "
        f"and {os.getloadavg()[0]:.1f} after, Python {platform.python_version()}",
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
        # The SDK's own cost of a call's three spans, measured alone in the on/off process
        # (median over rounds of the per-round p50), and the ratio it alone would give.
        "sdk_span_floor_ms_per_call": round(floor_ms, 4),
        "sdk_span_floor_ratio": round((figure("off", "p50_ms") + floor_ms) / figure("off", "p50_ms"), 4),
        # What carrying the trace context to the in-process upstream costs the mcp SDK's client
        # and the upstream's server (a bare client, with it and without), and on over off
        # without it: the gateway's own share of the difference.
        "context_floor_ms_per_call": round(context_ms, 4),
        "context_floor_ratio": round((figure("off", "p50_ms") + context_ms) / figure("off", "p50_ms"), 4),
        "on_over_off_p50_without_context_floor": round(
            (figure("on", "p50_ms") - context_ms) / figure("off", "p50_ms"), 4
        ),
        "spans_received": spans,
        "metric_exports_received": metric_exports,
        "target_on_over_off": TARGET_ON_OVER_OFF,
        "met": on_over_off <= TARGET_ON_OVER_OFF,
        "off_within_spread_of_before": abs(off_over_before - 1) <= max(spread("off_alone"), spread("before")),
        **compared,
        "stdio": stdio,
        "http": http,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300, help="calls per in-process variant and round")
    parser.add_argument("--http-calls", type=int, default=200, help="calls per HTTP variant and round")
    parser.add_argument("--baseline", help="the commit of the build without the hooks")
    parser.add_argument("--compare", help="also measure on and off from this commit's source tree")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if min(args.rounds, args.calls, args.http_calls) < 1:
        parser.error("--rounds, --calls and --http-calls must be at least 1")
    report = measure(args.rounds, args.calls, baseline_commit(args.baseline), args.compare, args.http_calls)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["met"] and report["stdio"]["met"] and report["http"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
