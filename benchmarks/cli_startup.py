"""How long the command line takes to answer ``--help``, against a bare interpreter.

Run from the repository root, with the project's venv active (or its python):

    python benchmarks/cli_startup.py                  # 9 runs of each, the median
    python benchmarks/cli_startup.py --runs 21 --json benchmarks/results/cli_startup.json

Each command line runs as a fresh process, ``--runs`` times, interleaved with ``python -c pass``
(the baseline, measured in the same rounds so a busy machine slows both alike). Figures are the
median wall time of each and its ratio to the baseline's median. Targets: at most 0.3 s, or at
most 3x the baseline. It exits 1 if any command misses both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from residency._cli import COMMANDS  # noqa: E402

LIMIT_SECONDS = 0.3
LIMIT_RATIO = 3.0


def command_lines() -> list[list[str]]:
    """``residency --help``, each command's ``--help`` and the nested ones with commands of their own."""
    lines = [[], *([c.name] for c in COMMANDS), ["config", "check"]]
    return [[sys.executable, "-m", "residency", *line, "--help"] for line in lines]


def _time(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(runs: int) -> dict[str, object]:
    baseline_argv = [sys.executable, "-c", "pass"]
    lines = command_lines()
    samples: dict[str, list[float]] = {"python -c pass": []}
    for argv in lines:
        samples[" ".join(["residency", *argv[3:]])] = []
    for _ in range(runs):
        samples["python -c pass"].append(_time(baseline_argv))
        for argv in lines:
            samples[" ".join(["residency", *argv[3:]])].append(_time(argv))
    base = statistics.median(samples["python -c pass"])
    rows = []
    for name, times in samples.items():
        median = statistics.median(times)
        ratio = median / base
        ok = name == "python -c pass" or median <= LIMIT_SECONDS or ratio <= LIMIT_RATIO
        rows.append({"command": name, "median_s": round(median, 4), "ratio": round(ratio, 2), "ok": ok})
    return {"runs": runs, "baseline_s": round(base, 4), "rows": rows, "ok": all(r["ok"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command line (default 9)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    result = measure(args.runs)
    width = max(len(str(r["command"])) for r in result["rows"])  # type: ignore[attr-defined]
    for row in result["rows"]:  # type: ignore[attr-defined]
        verdict = "" if row["command"] == "python -c pass" else ("ok" if row["ok"] else "MISSED")
        print(f"{row['command']:<{width}}  {row['median_s']:.3f} s  {row['ratio']:5.2f}x  {verdict}")
    print(f"targets: at most {LIMIT_SECONDS} s or {LIMIT_RATIO:g}x `python -c pass`; medians of {args.runs}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
