"""The gateway benchmark: its upstream, its percentiles, and a tiny in-process run."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from benchmarks.bench import gateway as bench
from benchmarks.run import BENCHES
from benchmarks.run import main as run_main
from residency._gateway import RESPONSES_ENV
from residency._gateway._meta_tools import listed_meta_tools
from tests._timing import SERVING, START, STEP, TEST


def test_the_nearest_rank_percentile_picks_a_measured_sample() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert bench.percentile(samples, 0.5) == 50.0
    assert bench.percentile(samples, 0.99) == 99.0
    assert bench.percentile(samples, 1.0) == 100.0
    assert bench.percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        bench.percentile([], 0.5)


@pytest.mark.anyio
async def test_the_bench_upstream_echoes_its_arguments_and_pads_its_tool_list() -> None:
    async with Client(bench.upstream_server(tools=25), mode="legacy") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(bench.ECHO, {"text": "hi", "times": 2})
    assert names[0] == bench.ECHO
    assert len(names) == len(set(names)) == 26
    assert json.loads(result.content[0].text) == {"text": "hi", "times": 2}  # type: ignore[union-attr]


def test_a_small_in_process_run_reports_every_ratio_with_its_target() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--calls", "8", "--list-tools", "40", "--list-repeat", "1", "--wire", "none"])
    report = bench.run(args)
    figures = {f.name: f for f in report.figures}
    for sessions in ("1 session", "10 sessions"):
        p50 = figures[f"in-process {sessions} call p50 gateway/direct"]
        p99 = figures[f"in-process {sessions} call p99 gateway/direct"]
        assert (p50.target, p99.target) == ("<= 2.5x", "<= 3x")
        assert p50.value > 0 and p99.value > 0
        assert p50.ok is (p50.value <= 2.5)
    listed = [f for f in report.figures if f.name.startswith("tools/list 40 tools")]
    assert len(listed) == 2
    listed_meta = listed_meta_tools(chains=False, offload=False)  # a fresh session
    assert report.data["tools/list"]["everything resident"]["listed"] == 40 + len(listed_meta)
    assert not any(name.startswith(("stdio", "http")) for name in figures)


def test_the_gateway_bench_is_registered_and_runs_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCHES["gateway"].module == "benchmarks.bench.gateway"
    code = run_main(["gateway", "--calls", "4", "--list-tools", "10", "--list-repeat", "1", "--wire", "none"])
    assert code in (0, 1)  # 1 when a latency target is missed on a loaded machine
    assert "gateway/direct" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_http_fronts_the_bench_compares_answer_as_labelled_and_forward_calls(
    tmp_path: Path,
) -> None:
    """The floor (bare proxy) and the gateway, each answering SSE and JSON, in front of one
    upstream subprocess: each answers a request with the content type its figure is named for,
    and forwards an echo call."""
    up_port = bench.free_port()
    up_url = f"http://127.0.0.1:{up_port}/mcp"
    config = tmp_path / "http.json"
    residency = {"pinned": ["echo"], "ready_wait": START}  # serve once the upstream is up
    config.write_text(json.dumps({"mcpServers": {"up": {"url": up_url}}, "residency": residency}))
    serve = [sys.executable, "-m", "residency", "serve", "--config", str(config), "--transport", "http"]
    proxy = [*bench.program(), "--serve-proxy", up_url]
    # (argv, environment, whether it should answer JSON)
    fronts: list[tuple[list[str], dict[str, str] | None, bool]] = []
    for answers_json in (False, True):
        port = str(bench.free_port())
        fronts.append(
            ([*proxy, "--port", port, *(["--json-response"] if answers_json else [])], None, answers_json)
        )
        port = str(bench.free_port())
        responses = {**os.environ, RESPONSES_ENV: "json" if answers_json else "sse"}
        fronts.append(([*serve, "--host", "127.0.0.1", "--port", port], responses, answers_json))
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    with anyio.fail_after(TEST):  # five interpreters, started one after another
        async with (
            bench._process(bench.upstream_argv("http", up_port), tmp_path / "up.log") as up,
            contextlib.AsyncExitStack() as stack,
            httpx2.AsyncClient(timeout=STEP) as http,  # the first answer of a busy front
        ):
            await bench.wait_for_port(up_port, up, timeout=START)
            for i, (argv, environment, answers_json) in enumerate(fronts):
                log = tmp_path / f"front-{i}.log"
                process = await stack.enter_async_context(bench._process(argv, log, env=environment))
                port = argv[argv.index("--port") + 1]
                await bench.wait_for_port(int(port), process, timeout=SERVING)
                url = f"http://127.0.0.1:{port}/mcp"
                accept = {"accept": "application/json, text/event-stream"}
                answer = await http.post(url, json=initialize, headers=accept)
                kind = answer.headers["content-type"].split(";")[0]
                assert kind == ("application/json" if answers_json else "text/event-stream"), argv
                async with Client(url, mode="legacy", cache=None) as client:
                    result = await client.call_tool(bench.ECHO, {"text": "through", "times": 3})
                assert json.loads(result.content[0].text) == {"text": "through", "times": 3}  # type: ignore[union-attr]
