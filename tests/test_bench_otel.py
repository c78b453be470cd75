"""``benchmarks/otel_overhead.py`` runs end to end in a tiny configuration and reports its figures.

Its ratio target is the benchmark's to check on a full run; here only what does not depend on
the machine's speed is asserted: every variant of the three workloads (in-process client with an
in-process upstream, the same with a stdio upstream, real client over streamable HTTP) ran its
rounds, and the ``on`` gateways' spans and metrics reached the receivers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests._timing import TEST

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="the benchmark extracts its baseline with git")
def test_the_otel_benchmark_runs_and_the_on_variant_exports(tmp_path: Path) -> None:
    out = tmp_path / "otel.json"
    # The baseline is the checked-out commit itself: no history needed (a shallow clone works).
    argv = ["--rounds", "2", "--calls", "5", "--http-calls", "4", "--baseline", "HEAD", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "otel_overhead.py"), *argv],
        capture_output=True,
        text=True,
        timeout=TEST,
        cwd=str(ROOT),
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the ratio target missed on a busy machine
    report = json.loads(out.read_text())
    assert set(report["p50_ms"]) == {"on", "off", "off_alone", "before"}
    assert all(v > 0 for v in report["p50_ms"].values())
    # Three spans per call (request, admission, upstream call), and the warm-up's too.
    assert report["spans_received"] >= 3 * (200 + 2 * 5)
    assert report["metric_exports_received"] >= 1
    assert isinstance(report["met"], bool)
    # The carrying of the trace context was timed alone beside the in-process gateways.
    for key in ("context_floor_ms_per_call", "context_floor_ratio", "on_over_off_p50_without_context_floor"):
        assert math.isfinite(report[key]), key
    stdio = report["stdio"]
    for figures in ("p50_ms", "mean_ms", "cpu_ms_per_call"):
        assert set(stdio[figures]) == {"on", "off", "off_alone", "before"}
        assert all(v > 0 for v in stdio[figures].values())
    assert set(stdio["ratios"]) == set(report["ratios"])
    # Every call through the gateway whose upstream is a process of its own was traced.
    assert stdio["calls_made_on"] == 200 + 2 * 5
    assert stdio["calls_traced_on"] == stdio["calls_made_on"]
    assert stdio["spans_received"] >= 3 * stdio["calls_made_on"]
    assert isinstance(stdio["met"], bool)
    http = report["http"]
    for figures in ("p50_ms", "mean_ms", "gateway_cpu_ms_per_call"):
        assert set(http[figures]) == {"on", "off", "off_alone", "before"}
        assert all(v > 0 for v in http[figures].values())
    assert set(http["ratios"]) == set(report["ratios"])
    assert http["protocol_versions"] and isinstance(http["met"], bool)
    # Every call the HTTP client made to the gateway with telemetry on arrived as a request span.
    assert http["calls_made_on"] == 200 + 2 * 4
    assert http["calls_traced_on"] == http["calls_made_on"]
    assert http["spans_received"] >= 3 * http["calls_made_on"]
    assert http["metric_exports_received"] >= 1
