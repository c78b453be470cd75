"""The offload benchmark: its upstream, and tiny runs in-process and over stdio."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from mcp import Client

from benchmarks.bench import offload as bench
from benchmarks.run import BENCHES
from benchmarks.run import main as run_main


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_each_dump_has_the_size_asked_for_and_differs_from_the_last() -> None:
    first, second = bench.dump_text(100_000, 0), bench.dump_text(100_000, 1)
    assert len(first.encode()) == len(second.encode()) == 100_000
    assert first != second


@pytest.mark.anyio
async def test_the_bench_upstream_answers_a_new_megabyte_each_call() -> None:
    async with Client(bench.upstream_server(1_000_000), mode="legacy") as client:
        texts = [(await client.call_tool(bench.DUMP, {})).content[0].text for _ in range(2)]  # type: ignore[union-attr]
    assert [len(t) for t in texts] == [1_000_000, 1_000_000] and texts[0] != texts[1]


def test_a_tiny_in_process_run_compares_offloading_on_and_off() -> None:
    report = bench.run(_args("--size", "60000", "--calls", "3", "--wire", "none"))
    names = {f.name for f in report.figures}
    for store in ("memory store", "SQLite store"):
        assert f"in-process, {store}: call p50 offloading on/off" in names
        assert f"in-process, {store}: read_span of the whole result / call with offloading off" in names
        assert report.data[f"in-process, {store}"]["samples"] == 3
    assert not any(n.startswith("stdio") for n in names)
    assert all(f.value > 0 for f in report.figures)


def test_a_size_under_the_offload_threshold_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.run(_args("--size", "1000", "--wire", "none"))


@pytest.mark.slow
def test_the_offload_bench_runs_over_stdio_from_the_cli(tmp_path: Path) -> None:
    assert BENCHES["offload"].module == "benchmarks.bench.offload"
    out = tmp_path / "offload.json"
    argv = ["offload", "--size", "60000", "--calls", "2", "--wire-calls", "2", "--json", str(out)]
    assert run_main(argv) == 0  # no targets: only a failure to run exits non-zero
    (written,) = json.loads(out.read_text())
    assert written["data"]["stdio, SQLite store"]["samples"] == 2


def test_the_small_arguments_of_residency_bench_keep_a_megabyte_and_the_wire() -> None:
    args = _args(*bench.SMALL_ARGS)
    assert args.size == 1_000_000 and args.wire == "stdio" and args.calls > 0
