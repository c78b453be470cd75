"""The serving benchmark, tiny: real processes, every figure with its target."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.bench import serving as bench
from benchmarks.run import BENCHES


@pytest.mark.slow
def test_a_tiny_run_reports_the_first_list_and_the_memory_per_session() -> None:
    assert BENCHES["serving"].module == "benchmarks.bench.serving"
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tools", "60", "--rounds", "1", "--clients", "3", "--session-tools", "20"])
    report = bench.run(args)
    figures = {f.name: f for f in report.figures}
    ratio = figures["first tools/list over stdio, 60 tools: gateway / direct"]
    assert ratio.target == "<= 2x" and ratio.value > 0 and ratio.ok is (ratio.value <= 2)
    first = report.data["first_list"]
    assert first["tools"] == 60 and len(first["direct_s"]) == len(first["gateway_s"]) == 1
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc: the memory figure is skipped")
    memory = figures["memory per HTTP client session, 20 upstream tools, gateway"]
    assert memory.target == "<= 0.5 MB" and memory.ok is (memory.value <= 0.5)
    assert "memory per HTTP client session, 20 upstream tools, bare SDK proxy" in figures
    assert report.data["memory"]["clients"] == 3
