"""The built wheel works without the checkout: ``residency bench`` from an installed wheel.

The wheel is built from this checkout and installed into a folder of its own; the commands run
with only that folder on the path (this venv's dependencies beside it) from a folder outside the
checkout, so neither ``src/`` nor ``benchmarks/`` can be imported. ``.ci/run`` does the same in a
fresh venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._timing import scaled

ROOT = Path(__file__).resolve().parent.parent
# Building runs hatchling in an isolated environment pip makes (from its cache when warm).
BUILD = scaled(600)
RUN = scaled(180)

_WHERE = """
import importlib.util, json, residency
found = importlib.util.find_spec("benchmarks") is not None
print(json.dumps({"residency": residency.__file__, "benchmarks": found}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, installed into a folder of its own: that folder."""
    base = tmp_path_factory.mktemp("wheel")
    dist, target = base / "dist", base / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--quiet", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=BUILD,
    )
    [wheel] = dist.glob("residency-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=BUILD,
    )
    return target


def _run(installed: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RESIDENCY_CORPUS")}
    env["PYTHONPATH"] = str(installed)
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN
    )


@pytest.mark.slow
def test_the_installed_wheel_is_what_runs_and_the_checkout_is_out_of_reach(
    installed: Path, tmp_path: Path
) -> None:
    done = _run(installed, tmp_path, "-c", _WHERE)
    assert done.returncode == 0, done.stderr
    where = json.loads(done.stdout)
    assert Path(where["residency"]).is_relative_to(installed)
    assert where["benchmarks"] is False


@pytest.mark.slow
def test_residency_bench_help_and_the_cost_bench_on_the_demo_desk_run_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    helped = _run(installed, tmp_path, "-m", "residency", "bench", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "cost" in helped.stdout
    out = tmp_path / "cost.json"
    done = _run(installed, tmp_path, "-m", "residency", "bench", "cost", "--turns", "3", "--json", str(out))
    assert done.returncode == 0, done.stderr
    [report] = json.loads(out.read_text())
    assert report["data"]["tools"] > 0 and report["data"]["strategies"]["reference"]["effective_cost"]


@pytest.mark.slow
def test_the_cost_bench_replays_a_trace_over_a_tools_file_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    from residency._gateway import desk_tools

    tools, trace, out = tmp_path / "tools.json", tmp_path / "trace.json", tmp_path / "cost.json"
    tools.write_text(json.dumps({"server": "desk", "tools": desk_tools()}))
    call = {"tool": "list_incidents", "arguments": {"status": "open"}, "result_tokens": 200}
    budget = {"schema_tokens": 500, "argument_tokens": 2000}
    trace.write_text(
        json.dumps({"name": "t", "servers": ["desk"], "budget": budget, "turns": [{"calls": [call]}]})
    )
    argv = ["-m", "residency", "bench", "cost", "--tools", str(tools), "--trace", str(trace)]
    done = _run(installed, tmp_path, *argv, "--json", str(out))
    assert done.returncode == 0, done.stderr
    [report] = json.loads(out.read_text())
    assert report["data"]["session"]["calls"] == 1
