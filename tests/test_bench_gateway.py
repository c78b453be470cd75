"""The gateway benchmark: its upstream, its percentiles, and a tiny in-process run."""

from __future__ import annotations

import argparse
import json

import pytest
from mcp import Client

from residency._bench import gateway as bench
from residency._cli import main as cli_main
from residency._cli._bench import BENCHES
from residency._gateway._meta_tools import listed_meta_tools


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
    assert BENCHES["gateway"] == "residency._bench.gateway"
    code = cli_main(
        ["bench", "gateway", "--calls", "4", "--list-tools", "10", "--list-repeat", "1", "--wire", "none"]
    )
    assert code in (0, 1)  # 1 when a latency target is missed on a loaded machine
    assert "gateway/direct" in capsys.readouterr().out
