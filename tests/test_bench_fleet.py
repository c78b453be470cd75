"""``python -m benchmarks fleet`` with tiny counts: every figure is measured, and nothing is left behind."""

from __future__ import annotations

import argparse
import json
import math

import psycopg
import pytest

from benchmarks.bench import fleet
from benchmarks.run import main
from tests.postgres import pg_url


@pytest.mark.slow
def test_the_fleet_bench_measures_every_set_up_and_drops_its_schema() -> None:
    url = pg_url()
    parser = argparse.ArgumentParser()
    fleet.add_arguments(parser)
    report = fleet.run(parser.parse_args(["--pg-url", url, "--sessions", "2", "--calls", "3"]))
    figures = {f.name: f.value for f in report.figures}
    for setup in ("sqlite, 1 replica", "postgresql, 1 replica", "postgresql, 2 replicas"):
        data = report.data["setups"][setup]
        assert data["timed_calls"] == 2 * 3
        for figure in ("calls/s", "p50", "p99"):
            value = figures[f"{setup}: {figure}"]
            assert math.isfinite(value) and value > 0, (setup, figure, value)
        assert figures[f"{setup}: p99"] >= figures[f"{setup}: p50"]
        assert len(data["cpu_cores_per_replica"]) == data["replicas"]
    assert figures["2 replicas / 1 replica on postgresql: calls/s"] > 0
    assert figures["catch-up query, nothing new (postgresql)"] > 0
    json.dumps(report.to_json())
    with psycopg.connect(url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
            (report.data["schema"],),
        ).fetchone()
    assert left == (0,)


def test_the_fleet_bench_says_why_it_measured_nothing_without_postgresql() -> None:
    parser = argparse.ArgumentParser()
    fleet.add_arguments(parser)
    report = fleet.run(parser.parse_args(["--pg-url", ""]))
    assert report.figures == []
    assert "PostgreSQL" in report.data["skipped"]


def test_the_fleet_bench_is_a_bench_command() -> None:
    assert main(["fleet", "--pg-url", ""]) == 0
