"""``benchmarks/http_flood.py`` runs end to end in a tiny configuration and reports its figures.

Its time targets are the benchmark's to check on a full run; here only what does not depend on
the machine's speed is asserted: no call failed, memory and the log stayed bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._timing import TEST

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="the benchmark reads /proc")
def test_the_http_flood_benchmark_runs_and_reports_both_attacks(tmp_path: Path) -> None:
    out = tmp_path / "flood.json"
    argv = ["--connections", "300", "--bodies", "8", "--hold", "2", "--rest", "1", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "http_flood.py"), *argv],
        capture_output=True,
        text=True,
        timeout=TEST,
        cwd=str(ROOT),
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a time target missed on a busy machine
    report = json.loads(out.read_text())
    connections, bodies = report["scenarios"]["connections"], report["scenarios"]["bodies"]
    for figures in (connections, bodies):
        assert figures["failed_calls"] == 0, figures["call_failures"]
        assert figures["calls_attacked"] > 0
        assert figures["rss_growth_mb"] <= 50
        assert not any("Traceback" in line for line in figures["stderr"])
    assert connections["stderr_lines"] <= 100
    # Past the per-client cap the gateway closed the flood's connections at once.
    assert connections["closed_by_gateway"] > 0
    assert bodies["body_outcomes"].get("held", 0) < 8
