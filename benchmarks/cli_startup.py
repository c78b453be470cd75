"""How long the command line takes to answer ``--help``, and ``serve`` its first requests.

Run from the repository root, with the project's venv active (or its python):

    python benchmarks/cli_startup.py                  # 9 runs of each, the median
    python benchmarks/cli_startup.py --runs 21 --json benchmarks/results/cli_startup.json
    python benchmarks/cli_startup.py --compare main~3 # serve's figures for another revision too

Each command line runs as a fresh process, ``--runs`` times, interleaved with ``python -c pass``
(the baseline, measured in the same rounds so a busy machine slows both alike). Figures are the
median wall time of each and its ratio to the baseline's median. Targets: at most 0.3 s, or at
most 3x the baseline. It exits 1 if any command misses both.

``serve`` is measured as a host spawns it: ``residency serve`` (the demo desk) over stdio, sent
``initialize``, then ``notifications/initialized`` and ``tools/list`` once the first answer is
in; its figures are the seconds from the spawn to each answer (medians of ``--runs``), beside
``python -c "import mcp"`` (what the MCP SDK alone costs) in the same rounds. ``--compare REV``
measures REV's ``serve`` too, from a temporary git worktree, in the same rounds. These have no
target: the SDK's import alone is most of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "cli-startup-bench", "version": "1"},
    },
}
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _line(message: Mapping[str, object]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _answer(proc: subprocess.Popen[bytes], want: int) -> None:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"serve closed stdout before answering request {want}")
        message = json.loads(line)
        if message.get("id") == want:
            if "result" not in message:
                raise RuntimeError(f"serve answered request {want} with {message}")
            return


def time_serve(src: Path) -> tuple[float, float]:
    """Seconds from spawning ``residency serve`` (``src`` first on the path) to its answers to
    ``initialize`` and to the first ``tools/list``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "residency", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(_line(_INITIALIZE))
        proc.stdin.flush()
        _answer(proc, 1)
        initialized = time.perf_counter() - started
        proc.stdin.write(_line(_INITIALIZED) + _line(_LIST))
        proc.stdin.flush()
        _answer(proc, 2)
        listed = time.perf_counter() - started
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
    return initialized, listed


@contextmanager
def revision_tree(rev: str) -> Iterator[Path]:
    """A temporary git worktree of ``rev`` (detached), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="residency-bench-") as scratch:
        path = Path(scratch) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev],
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def measure_serve(runs: int, trees: dict[str, Path]) -> dict[str, object]:
    """``serve``'s answers for each tree (label -> repository root), interleaved with the SDK's
    import, ``runs`` rounds."""
    mcp_argv = [sys.executable, "-c", "import mcp"]
    sdk: list[float] = []
    samples: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in trees}
    for _ in range(runs):
        sdk.append(_time(mcp_argv))
        for label, tree in trees.items():
            first, listed = time_serve(tree / "src")
            samples[label][0].append(first)
            samples[label][1].append(listed)
    rows = [
        {
            "revision": label,
            "initialize_s": round(statistics.median(first), 3),
            "tools_list_s": round(statistics.median(listed), 3),
        }
        for label, (first, listed) in samples.items()
    ]
    return {"runs": runs, "import_mcp_s": round(statistics.median(sdk), 3), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command line (default 9)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument(
        "--compare", metavar="REV", help="also measure serve at this git revision, in the same rounds"
    )
    parser.add_argument("--no-serve", action="store_true", help="measure --help only")
    args = parser.parse_args(argv)
    result = measure(args.runs)
    width = max(len(str(r["command"])) for r in result["rows"])  # type: ignore[attr-defined]
    for row in result["rows"]:  # type: ignore[attr-defined]
        verdict = "" if row["command"] == "python -c pass" else ("ok" if row["ok"] else "MISSED")
        print(f"{row['command']:<{width}}  {row['median_s']:.3f} s  {row['ratio']:5.2f}x  {verdict}")
    print(f"targets: at most {LIMIT_SECONDS} s or {LIMIT_RATIO:g}x `python -c pass`; medians of {args.runs}")
    if not args.no_serve:
        with _trees(args.compare) as trees:
            serve = measure_serve(args.runs, trees)
        serve["load_average"] = [round(x, 2) for x in os.getloadavg()]
        result["serve_stdio"] = serve
        print(
            f"\nserve over stdio, the demo desk (medians of {args.runs}; "
            f"python -c 'import mcp' {serve['import_mcp_s']:.3f} s)"
        )
        for row in serve["rows"]:  # type: ignore[attr-defined]
            print(
                f"  {row['revision']:<24} initialize {row['initialize_s']:.3f} s  "
                f"first tools/list {row['tools_list_s']:.3f} s"
            )
        print(f"  load average {serve['load_average']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


@contextmanager
def _trees(compare: str | None) -> Iterator[dict[str, Path]]:
    if compare is None:
        yield {"this tree": ROOT}
        return
    with revision_tree(compare) as old:
        yield {compare: old, "this tree": ROOT}


if __name__ == "__main__":
    sys.exit(main())
