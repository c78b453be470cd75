"""OpenTelemetry over OTLP (``residency.telemetry``): spans and metrics as a collector gets them.

Every test here exports to a real OTLP/HTTP receiver (``tests._otlp``: the official protobuf
definitions decode what arrives) from a gateway with a real upstream; a real ``mcp.Client``
drives the gateway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from residency._errors import ConfigError
from residency._gateway import Gateway, parse_config
from residency._gateway._connection import SESSION_META_KEY
from tests._otlp import OTLPReceiver, ReceivedSpan, attributes
from tests._processes import reap
from tests._timing import SERVING, STEP
from tests.gateway import traced_upstream
from tests.gateway.conftest import config, running

pytestmark = pytest.mark.anyio

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
HERE = Path(__file__).resolve().parent


def meta(key: str = "k1", traceparent: str | None = TRACEPARENT) -> types.RequestParamsMeta:
    found: dict[str, Any] = {SESSION_META_KEY: key}
    if traceparent is not None:
        found["traceparent"] = traceparent
    return cast(types.RequestParamsMeta, found)


def telemetry(rx: OTLPReceiver, **more: Any) -> dict[str, Any]:
    return {"telemetry": {"otlp": {"endpoint": rx.endpoint}, "metric_interval": 60, **more}}


@asynccontextmanager
async def traced(rx: OTLPReceiver, received: list[dict[str, Any]], **more: Any) -> AsyncIterator[Gateway]:
    async with running(telemetry(rx, **more), upstreams={"tr": traced_upstream.server(received)}) as gw:
        yield gw


def one(spans: list[ReceivedSpan], name: str, kind: int) -> ReceivedSpan:
    found = [s for s in spans if s.name == name and s.span.kind == kind]
    assert len(found) == 1, [(s.name, s.span.kind) for s in spans]
    return found[0]


def prometheus_values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def otlp_values(metrics: Mapping[str, Metric]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The OTLP metrics as the Prometheus samples they stand for (the same names and labels)."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for name, metric in metrics.items():
        kind = metric.WhichOneof("data")
        if kind == "sum":
            for p in metric.sum.data_points:
                labels = frozenset(attributes(p.attributes).items())
                found[(f"{name}_total", labels)] = p.as_int if p.HasField("as_int") else p.as_double
        elif kind == "gauge":
            for p in metric.gauge.data_points:
                labels = frozenset(attributes(p.attributes).items())
                found[(name, labels)] = p.as_int if p.HasField("as_int") else p.as_double
        elif kind == "histogram":
            for h in metric.histogram.data_points:
                hl = attributes(h.attributes)
                found[(f"{name}_count", frozenset(hl.items()))] = h.count
                found[(f"{name}_sum", frozenset(hl.items()))] = h.sum
                running_total = 0
                bounds = [*(repr(b) for b in h.explicit_bounds), "+Inf"]
                for bound, count in zip(bounds, h.bucket_counts, strict=True):
                    running_total += count
                    le = bound if bound == "+Inf" else str(float(bound))
                    found[(f"{name}_bucket", frozenset({**hl, "le": le}.items()))] = running_total
    return found


async def test_a_call_is_traced_from_the_clients_context_to_the_upstream() -> None:
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                result = await client.call_tool("echo_meta", {"text": "hi"}, meta=meta())
        assert not result.is_error
        spans = rx.spans()  # leaving the gateway sent what was batched

    server = one(spans, "tools/call echo_meta", Span.SPAN_KIND_SERVER)
    admit = one(spans, "admit echo_meta", Span.SPAN_KIND_INTERNAL)
    upstream = one(spans, "tools/call echo_meta", Span.SPAN_KIND_CLIENT)
    # One trace, the client's: the request's span is a child of the client's span, the admission
    # and the upstream call children of the request's.
    assert {s.trace_id for s in (server, admit, upstream)} == {TRACE_ID}
    assert server.parent_id == CLIENT_SPAN
    assert admit.parent_id == server.span_id and upstream.parent_id == server.span_id
    assert server.attributes == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2025-11-25",
        "jsonrpc.request.id": server.attributes["jsonrpc.request.id"],
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo_meta",
    }
    assert admit.attributes == {
        "residency.admission.decision": "admitted",
        "residency.admission.reason": "reexpanded",  # by reference, a first call re-expands it
        "gen_ai.tool.name": "echo_meta",
        "residency.upstream": "tr",
    }
    assert upstream.attributes["residency.upstream"] == "tr"
    assert upstream.attributes["mcp.method.name"] == "tools/call"
    assert upstream.resource["service.name"] == "residency"
    # The upstream got the client span's context in the call's _meta.
    assert len(received) == 1
    assert received[0]["traceparent"] == f"00-{TRACE_ID}-{upstream.span_id}-01"
    assert json.loads(result.content[0].text)["traceparent"] == received[0]["traceparent"]  # type: ignore[union-attr]


@pytest.fixture
def process_provider() -> Iterator[InMemorySpanExporter]:
    """A process-wide tracer provider, as an application installs one, recording into memory;
    removed again afterwards (OpenTelemetry's globals are set once per process, so they are
    reset as its own tests reset them, and the ``mcp`` SDK's tracer forgets the provider)."""
    import mcp.shared._otel as mcp_otel
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        mcp_otel._tracer._real_tracer = None  # type: ignore[attr-defined]
        provider.shutdown()


async def test_an_applications_instrumentation_nests_under_the_gateways_spans(
    process_provider: InMemorySpanExporter,
) -> None:
    """With a process-wide tracer provider installed, the gateway's spans are OpenTelemetry's
    current span while it calls upstream: the ``mcp`` client's own span of the call (the
    application's instrumentation) is a child of the gateway's upstream span, and the upstream
    continues the trace from it. A stdio upstream: the ``mcp`` client's JSON-RPC dispatch to it
    is what records that span and writes its context into ``_meta``."""
    upstream_command = {"command": sys.executable, "args": [str(HERE / "traced_upstream.py")]}
    with OTLPReceiver() as rx:
        async with (
            running(telemetry(rx), servers={"tr": upstream_command}) as gw,
            Client(gw.server, mode="legacy") as client,
        ):
            with anyio.fail_after(SERVING):
                result = await client.call_tool("echo_meta", {"text": "hi"}, meta=meta())
        assert not result.is_error
        spans = rx.spans()

    upstream = one(spans, "tools/call echo_meta", Span.SPAN_KIND_CLIENT)
    recorded = process_provider.get_finished_spans()
    sends = [
        s
        for s in recorded
        if s.name == "MCP send tools/call echo_meta"
        and s.parent is not None
        and f"{s.parent.span_id:016x}" == upstream.span_id
    ]
    assert len(sends) == 1, [(s.name, s.parent) for s in recorded]
    send = sends[0].get_span_context()
    assert send is not None
    assert f"{send.trace_id:032x}" == upstream.trace_id
    seen = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert seen["traceparent"] == f"00-{upstream.trace_id}-{send.span_id:016x}-{send.trace_flags:02x}"


async def test_refusals_and_tool_errors_are_marked_on_their_spans() -> None:
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                refused = await client.call_tool("echo_meta", {"text": 3}, meta=meta(traceparent=None))
                failed = await client.call_tool("fail", {}, meta=meta(traceparent=None))
        assert refused.is_error and failed.is_error
        spans = rx.spans()

    admit = one(spans, "admit echo_meta", Span.SPAN_KIND_INTERNAL)
    assert admit.attributes["residency.admission.decision"] == "refused"
    assert admit.attributes["residency.admission.reason"] == "arguments_invalid"
    refused_span = one(spans, "tools/call echo_meta", Span.SPAN_KIND_SERVER)
    assert refused_span.attributes["error.type"] == "tool_error"
    assert refused_span.span.status.code == refused_span.span.status.STATUS_CODE_ERROR
    assert admit.parent_id == refused_span.span_id and admit.trace_id == refused_span.trace_id
    assert not [s for s in spans if s.name == "tools/call echo_meta" and s.span.kind == Span.SPAN_KIND_CLIENT]
    # Without a context from the client, the request starts a trace of its own.
    assert refused_span.parent_id == ""
    upstream = one(spans, "tools/call fail", Span.SPAN_KIND_CLIENT)
    assert upstream.attributes["error.type"] == "tool_error"
    assert received[0]["traceparent"].split("-")[1] == upstream.trace_id


async def test_each_span_carries_its_own_tools_attributes() -> None:
    """Span names and fixed attributes are built once per tool and reused: interleaved calls of
    two tools, one failing, must each get their own, and an error marked on one span must not
    reach the next span of the same tool."""
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                for tool in ("echo_meta", "fail", "echo_meta", "fail", "echo_meta"):
                    args = {"text": "x"} if tool == "echo_meta" else {}
                    await client.call_tool(tool, args, meta=meta(traceparent=None))
        # Besides the calls', the session's own requests (``initialize``) have spans.
        spans = [s for s in rx.spans() if s.name.endswith((" echo_meta", " fail"))]

    assert len(spans) == 3 * 5
    for s in spans:
        tool = s.name.rsplit(" ", 1)[1]
        assert s.attributes["gen_ai.tool.name"] == tool
        assert ("error.type" in s.attributes) == (tool == "fail" and s.span.kind != Span.SPAN_KIND_INTERNAL)
        if s.span.kind == Span.SPAN_KIND_CLIENT:
            assert s.attributes["residency.upstream"] == "tr"
    ids = [s.attributes["jsonrpc.request.id"] for s in spans if s.span.kind == Span.SPAN_KIND_SERVER]
    assert len(set(ids)) == 5  # what varies per request is set per request


async def test_a_trace_the_client_did_not_sample_is_carried_upstream_but_not_exported() -> None:
    received: list[dict[str, Any]] = []
    unsampled = f"00-{TRACE_ID}-{CLIENT_SPAN}-00"
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                await client.call_tool("echo_meta", {"text": "x"}, meta=meta(traceparent=unsampled))
                await client.call_tool("echo_meta", {"text": "y"}, meta=meta(traceparent=TRACEPARENT))
        spans = [s for s in rx.spans() if s.name.endswith(" echo_meta")]

    # The sampled call's three spans only; the upstream continued both traces, one unsampled.
    assert len(spans) == 3 and {s.trace_id for s in spans} == {TRACE_ID}
    version, trace_id, span_id, flags = received[0]["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")
    assert span_id not in {s.span_id for s in spans} | {CLIENT_SPAN}
    assert received[1]["traceparent"].endswith("-01")


async def test_the_sampler_of_the_environment_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_TRACES_SAMPLER=always_off``: no span is exported, the context still travels."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                await client.call_tool("echo_meta", {"text": "x"}, meta=meta(traceparent=None))
        assert rx.spans() == []
    assert int(received[0]["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # not sampled


def test_names_redacted_before_a_secret_was_known_are_not_reused_after() -> None:
    from prometheus_client import CollectorRegistry

    from residency._gateway._config import Secrets
    from residency._gateway._otel_config import TelemetrySettings
    from residency._gateway._tracing import Tracing

    secrets = Secrets()
    with OTLPReceiver() as rx:
        settings = TelemetrySettings.model_validate({"otlp": {"endpoint": rx.endpoint}, "metrics": False})
        tracing = Tracing(settings, CollectorRegistry(), secrets, "0")
        tracing.admission("get-tok3n-x9", 1, reason="resident", refused=False)
        secrets.add("tok3n-x9")
        tracing.admission("get-tok3n-x9", 2, reason="resident", refused=False)
        secrets.discard("tok3n-x9")
        tracing.admission("get-tok3n-x9", 3, reason="resident", refused=False)
        tracing.shutdown()
        spans = sorted(rx.spans(), key=lambda s: s.span.start_time_unix_nano)
    assert [s.name for s in spans] == ["admit get-tok3n-x9", "admit get-***", "admit get-tok3n-x9"]
    assert [s.attributes["gen_ai.tool.name"] for s in spans] == ["get-tok3n-x9", "get-***", "get-tok3n-x9"]


async def test_the_metrics_sent_are_the_metrics_served() -> None:
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        async with traced(rx, received) as gw, Client(gw.server, mode="legacy") as client:
            with anyio.fail_after(STEP):
                await client.list_tools(meta=meta())
                for text in ("a", "b"):
                    await client.call_tool("echo_meta", {"text": text}, meta=meta())
                await client.call_tool("echo_meta", {"text": 3}, meta=meta())
                await client.call_tool("fail", {}, meta=meta())
        # Left: the last export is the registry as it ended.
        served = gw.telemetry.prometheus()[0].decode()
        sent = rx.metric_points()

    values = otlp_values(sent)
    assert values == prometheus_values(served)
    assert (
        values[("residency_calls_forwarded_total", frozenset({"upstream": "tr", "outcome": "ok"}.items()))]
        == 2
    )
    assert values[("residency_calls_refused_total", frozenset({"reason": "arguments_invalid"}.items()))] == 1
    assert values[("residency_call_seconds_count", frozenset({"upstream": "tr"}.items()))] == 3
    assert sent["residency_call_seconds"].unit == "s"
    assert sent["residency_calls_forwarded"].sum.is_monotonic


async def test_export_headers_are_sent_and_never_shown() -> None:
    received: list[dict[str, Any]] = []
    with OTLPReceiver() as rx:
        settings = telemetry(rx)
        settings["telemetry"]["otlp"]["headers"] = {"x-api-key": "otlp-key-9f3a7c1e"}
        settings["telemetry"]["traces"] = False
        cfg = config(settings)
        assert "otlp-key-9f3a7c1e" not in repr(cfg)
        assert cfg.secrets().redact("key otlp-key-9f3a7c1e") == "key ***"
        async with Gateway(cfg, upstreams={"tr": traced_upstream.server(received)}):
            pass
        assert not rx.traces  # traces off: metrics only
        assert rx.metrics and all(h.get("x-api-key") == "otlp-key-9f3a7c1e" for h in rx.headers)


@pytest.mark.slow  # leaving waits out the exporters' timeouts (one second each)
async def test_a_collector_that_is_down_costs_the_calls_nothing() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = {"telemetry": {"otlp": {"endpoint": f"http://127.0.0.1:{port}", "timeout": 1}}}
    received: list[dict[str, Any]] = []
    with anyio.fail_after(STEP):
        async with (
            running(settings, upstreams={"tr": traced_upstream.server(received)}) as gw,
            Client(gw.server, mode="legacy") as client,
        ):
            for text in ("a", "b"):
                result = await client.call_tool("echo_meta", {"text": text}, meta=meta())
                assert not result.is_error
    assert len(received) == 2 and all("traceparent" in m for m in received)


def test_export_headers_read_the_environment() -> None:
    text = json.dumps(
        {"residency": {"telemetry": {"otlp": {"headers": {"authorization": "Bearer ${OTLP_T}"}}}}}
    )
    cfg = parse_config(text, environ={"OTLP_T": "tok-5511-abcdef"})
    assert cfg.residency.telemetry is not None
    assert (
        cfg.residency.telemetry.otlp.headers["authorization"].get_secret_value() == "Bearer tok-5511-abcdef"
    )
    assert cfg.secrets().redact("tok-5511-abcdef") == "***"
    with pytest.raises(ConfigError, match="OTLP_T"):
        parse_config(text, environ={})


def test_a_bad_telemetry_section_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"telemetry"):
        config({"telemetry": {"otlp": {"endpoint": "collector:4318"}}})
    with pytest.raises(ConfigError, match=r"telemetry"):
        config({"telemetry": {"otlp": {"protocol": "thrift"}}})


def test_grpc_without_its_exporter_says_what_to_install() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the gRPC exporter is installed here")
    with pytest.raises(ConfigError, match=r"residency\[otel,otel-grpc\]"):
        Gateway(config({"telemetry": {"otlp": {"protocol": "grpc"}}}))


# -- processes -------------------------------------------------------------------------------------

OFF_SCRIPT = """
import json, sys
import anyio
from mcp import Client
from residency._gateway import Gateway, parse_config
sys.path.insert(0, sys.argv[1])
from tests.gateway import traced_upstream

async def main():
    cfg = parse_config(json.dumps({"mcpServers": {}, "residency": {"ready_wait": 30}}))
    async with Gateway(cfg, upstreams={"tr": traced_upstream.server()}) as gw:
        async with Client(gw.server, mode="legacy") as client:
            meta = {"traceparent": "TRACEPARENT"}
            result = await client.call_tool("echo_meta", {"text": "x"}, meta=meta)
            assert not result.is_error, result
    loaded = sorted(
        m for m in sys.modules
        if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto",
                         "residency._gateway._tracing", "google.protobuf"))
    )
    print(json.dumps(loaded))

anyio.run(main)
""".replace("TRACEPARENT", TRACEPARENT)


@pytest.mark.slow
def test_without_the_section_nothing_is_imported_or_sent() -> None:
    repo = str(HERE.parent.parent)
    with OTLPReceiver() as rx:
        # The standard variables alone do not turn telemetry on.
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint, "OTEL_SERVICE_NAME": "x"}
        done = subprocess.run(
            [sys.executable, "-c", OFF_SCRIPT, repo], env=env, capture_output=True, text=True, timeout=SERVING
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1]) == []
        assert not rx.traces and not rx.metrics


@pytest.mark.slow
async def test_a_served_gateway_exports_to_the_collector(tmp_path: Path) -> None:
    """``residency serve`` over HTTP with a stdio upstream: spans and metrics reach the receiver
    while it runs, and the metrics it sends equal its ``/metrics``."""
    with OTLPReceiver() as rx:
        cfg = {
            "mcpServers": {"tr": {"command": sys.executable, "args": [str(HERE / "traced_upstream.py")]}},
            "residency": {
                "ready_wait": 60,
                "telemetry": {
                    "otlp": {"endpoint": rx.endpoint},
                    "metric_interval": 0.2,
                    "service_name": "gw-test",
                },
            },
        }
        path = tmp_path / "gateway.json"
        path.write_text(json.dumps(cfg))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE.parent.parent)]),
        }
        process = await anyio.open_process(
            [
                sys.executable,
                "-m",
                "residency",
                "serve",
                "--config",
                str(path),
                "--transport",
                "http",
                "--port",
                "0",
            ],
            env=env,
            stderr=subprocess.PIPE,
        )
        try:
            async with anyio.create_task_group() as tg:
                urls: list[str] = []
                serving = anyio.Event()
                tg.start_soon(_read_url, process, urls, serving)
                with anyio.fail_after(SERVING):
                    await serving.wait()
                sent_traceparent = await _drive(rx, urls[0].rsplit("/mcp", 1)[0])
                tg.cancel_scope.cancel()
        finally:
            process.terminate()
            await reap(process)

    spans = rx.spans()
    server = one(spans, "tools/call echo_meta", Span.SPAN_KIND_SERVER)
    upstream = one(spans, "tools/call echo_meta", Span.SPAN_KIND_CLIENT)
    assert server.parent_id == CLIENT_SPAN and server.trace_id == TRACE_ID
    assert upstream.parent_id == server.span_id
    assert sent_traceparent == f"00-{TRACE_ID}-{upstream.span_id}-01"
    assert upstream.attributes["network.transport"] == "pipe"
    assert server.resource["service.name"] == "gw-test"
    assert "mcp.session.id" in server.attributes  # a stateful HTTP session


async def _drive(rx: OTLPReceiver, base: str) -> str:
    """One traced call through the served gateway; the spans and metrics it causes arrive, and
    the metrics equal its ``/metrics``. Returns the ``traceparent`` the upstream received."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(STEP)) as http:
        async with Client(f"{base}/mcp", mode="legacy") as client:
            with anyio.fail_after(STEP):
                result = await client.call_tool("echo_meta", {"text": "hi"}, meta=meta())
        assert not result.is_error
        sent: str = json.loads(result.content[0].text)["traceparent"]  # type: ignore[union-attr]
        assert sent.split("-")[1] == TRACE_ID
        ok = ("residency_calls_forwarded_total", frozenset({"upstream": "tr", "outcome": "ok"}.items()))

        def arrived() -> bool:
            names = {(s.name, s.span.kind) for s in rx.spans()}
            forwarded = otlp_values(rx.metric_points()).get(ok)
            return ("tools/call echo_meta", Span.SPAN_KIND_CLIENT) in names and forwarded == 1

        assert await anyio.to_thread.run_sync(rx.wait_for, arrived, SERVING)
        scraped = (await http.get(f"{base}/metrics")).text
        # The gateway is idle now: the next export carries what /metrics shows.
        count = len(rx.metrics)
        assert await anyio.to_thread.run_sync(rx.wait_for, lambda: len(rx.metrics) > count, SERVING)
        assert otlp_values(rx.metric_points()) == prometheus_values(scraped)
    return sent


async def _read_url(process: anyio.abc.Process, urls: list[str], serving: anyio.Event) -> None:
    """Drain the process's stderr; the URL it says it serves on goes to ``urls``."""
    assert process.stderr is not None
    seen = ""
    async for chunk in process.stderr:
        seen += chunk.decode(errors="replace")
        if not urls and "transport http at " in seen and "\n" in seen.split("transport http at ", 1)[1]:
            urls.append(seen.split("transport http at ", 1)[1].split()[0])
            serving.set()
