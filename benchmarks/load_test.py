"""The test suite on a loaded machine: a CPU burner on every core, the test command N times.

Run from the repository root, with the project's venv active (or its python):

    python benchmarks/load_test.py                 # the README's `pytest`, 3 times
    python benchmarks/load_test.py --runs 5 -- tests/test_crash.py tests/gateway/test_upstreams.py
    python benchmarks/load_test.py --ci            # `.ci/run` on a fresh clone of HEAD, 3 times

Before the first run it starts one burner process per core (``os.cpu_count()``, or ``--burners``):
a plain Python busy loop each, so the tests compete with that many always-runnable processes for
every core, as on a busy CI machine. Then it runs ``python -m pytest -p no:cacheprovider [ARGS]``
(no ARGS: the fast tier, as the README's ``pytest`` does; ``-- --run-slow -n 4``: everything)
``--runs`` times in a row, and writes each run's exit code, counts (from pytest's closing line),
failed tests and wall time to ``--results`` (JSON; each run's full output goes to a temporary
folder it names).
With ``--ci`` each run is ``CI=true bash .ci/run`` in a fresh clone of the checkout's HEAD made
beside it (the tests find ``../shared`` from there, as from the checkout), removed afterwards;
the results then also hold each phase's wall time as ``.ci/run`` printed it.
The burners are killed at the end, whatever happened. It exits 1 if any run failed, 0 otherwise.

The environment is passed through: set ``RESIDENCY_PG_URL`` and ``RESIDENCY_LANGCHAIN_PYTHON`` as
``.ci/run`` does, or those tests skip. ``RESIDENCY_TEST_TIME_SCALE`` scales the tests' own waits
(``tests/_timing.py``); this script leaves it as it finds it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BURN = "while True:\n    pass\n"
# pytest's closing line, e.g. "== 3 failed, 1090 passed, 12 skipped in 512.33s (0:08:32) =="
_CLOSING = re.compile(r"\d+ (passed|failed|errors?|skipped)\b.* in [\d.]+s\b")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
# .ci/run's phase lines, e.g. ".ci/run: phase 'types (mypy --strict)' took 61 s"
_PHASE = re.compile(r"^\.ci/run: phase '(.+)' took (\d+) s$", re.M)


def start_burners(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` busy-loop processes, in a process group of their own each (killed with ``stop``)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", BURN],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(n)
    ]


def stop(burners: list[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(burner.pid, signal.SIGKILL)
    for burner in burners:
        burner.wait()


def counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``passed``, ``failed``, ...), empty if none."""
    for line in reversed(output.splitlines()):
        if _CLOSING.search(line):
            found = {
                ("error" if kind.startswith("error") else kind): int(n) for n, kind in _COUNT.findall(line)
            }
            if found:
                return found
    return {}


def run_once(index: int, pytest_args: list[str], log_dir: Path, *, ci: bool = False) -> dict[str, Any]:
    log = log_dir / f"run-{index}.log"
    clone = ROOT.parent / f".load-test-clone-{os.getpid()}-{index}"
    started = time.monotonic()
    commit = None
    try:
        with log.open("w") as out:
            if ci:
                subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, stdout=out)
                # Each run clones HEAD as it is when the run starts: commits made meanwhile count.
                commit = subprocess.run(
                    ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
                ).stdout.strip()
                env = {**os.environ, "CI": "true"}
                code = subprocess.call(
                    ["bash", ".ci/run"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            else:
                argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
                code = subprocess.call(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    failed = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    result: dict[str, Any] = {
        "run": index,
        "exit_code": code,
        "seconds": round(seconds, 1),
        "counts": counts(text),
        "failed": failed,
        "log": str(log),
    }
    if ci:
        result["commit"] = commit
        result["phases"] = {name: int(took) for name, took in _PHASE.findall(text)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3, help="test runs in a row (default 3)")
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 1, help="busy loops (default: one per core)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "load_test.json",
        help="JSON results file (default benchmarks/results/load_test.json)",
    )
    parser.add_argument(
        "--ci", action="store_true", help="run `.ci/run` on a fresh clone of HEAD instead of pytest"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: the fast tier)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.burners < 0:
        parser.error("--runs must be 1 or more and --burners 0 or more")
    if args.ci and args.pytest_args:
        parser.error("--ci runs .ci/run as it is: it takes no pytest arguments")
    log_dir = Path(tempfile.mkdtemp(prefix="residency-load-test-"))  # each run's full output

    report: dict[str, Any] = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "burners": args.burners,
        "load": f"{args.burners} python busy-loop processes (while True: pass), one per core",
        "command": (
            ["CI=true", "bash", ".ci/run", "(fresh clone of HEAD)"]
            if args.ci
            else ["python", "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args]
        ),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "time_scale": os.environ.get("RESIDENCY_TEST_TIME_SCALE", "1"),
        "runs": [],
    }
    # A SIGTERM ends the runs like Ctrl-C does: through the finally below, burners killed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    burners = start_burners(args.burners)
    try:
        for index in range(1, args.runs + 1):
            result = run_once(index, args.pytest_args, log_dir, ci=args.ci)
            report["runs"].append(result)
            args.results.write_text(json.dumps(report, indent=2) + "\n")
            print(
                f"run {index}/{args.runs}: exit {result['exit_code']} in {result['seconds']:.0f} s, "
                f"{result['counts']}" + (f", failed: {result['failed']}" if result["failed"] else ""),
                flush=True,
            )
    finally:
        stop(burners)
    bad = [r for r in report["runs"] if r["exit_code"] != 0]
    report["failed_runs"] = len(bad)
    args.results.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{len(report['runs']) - len(bad)} of {len(report['runs'])} runs passed; results in {args.results}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
