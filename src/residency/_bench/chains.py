"""``residency bench chains``: the collision check against archives of growing size.

Figures, each against a baseline measured in the same run:

* ``check_chain`` of a 50-step candidate against archives of 100, 1,000 and 10,000 chains, as
  a speed-up over a naive scan of every chain at every position (the seed's loop, corrected to
  look anywhere; it skips a position on its first tool before comparing a whole run). Target at
  10,000 chains: at least 10x.
* growth of the check's cost from the smallest archive to the largest, beside the growth of
  the archive itself: sub-linear means well below the archive's growth (target: at most a
  tenth of it).
* the live guard's per-call check (``check_next``) at the largest archive, for scale.

The candidate passes (no collision), which is the common case and the worst one for both: a
check that passes must have looked at every possible match. Both answers are compared.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from residency._bench._report import BenchReport, time_per_call
from residency._core._chains import ChainArchive, ChainRecord, build_chain
from residency._core._constraints import holds

SUMMARY = "check_chain against 100/1k/10k archived chains vs a naive scan of every chain"
SMALL_ARGS = ["--repeat", "5"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[100, 1000, 10_000],
        help="archive sizes (default 100 1000 10000)",
    )
    parser.add_argument("--steps", type=int, default=50, help="steps in the candidate (default 50)")
    parser.add_argument("--tools", type=int, default=300, help="distinct tool names (default 300)")
    parser.add_argument("--repeat", type=int, default=7, help="timing rounds (default 7)")
    parser.add_argument("--seed", type=int, default=7)


def _chains(rng: random.Random, n: int, names: list[str]) -> list[ChainRecord]:
    out = []
    for i in range(n):
        topology = [rng.choice(names) for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.5:
            constraint: Any = {"all": []}
        else:
            constraint = {
                "tool": rng.choice(topology[:-1]),
                "argument": "payload_bytes",
                "op": ">",
                "value": 5_000_000,
            }
        out.append(
            build_chain(topology, f"step {len(topology) - 1} fails deterministically ({i})", constraint)
        )
    return out


def naive_check(chains: list[ChainRecord], tools: list[str], args: list[Any]) -> ChainRecord | None:
    """The baseline: every chain, every position."""
    for record in chains:
        run = record.fatal_run
        first, length = run[0], len(run)
        for start in range(len(tools) - length + 1):
            if (
                tools[start] == first
                and tuple(tools[start : start + length]) == run
                and holds(record.constraint, args[start : start + length]) is not False
            ):
                return record
    return None


def _candidate(
    rng: random.Random, steps: int, names: list[str], chains: list[ChainRecord]
) -> tuple[list[str], list[Any]]:
    """A candidate that passes against every archive: small payloads, no fatal topology."""
    args: list[Any] = [{"payload_bytes": rng.randint(1, 1_000_000)} for _ in range(steps)]
    for _ in range(10_000):
        tools = [rng.choice(names) for _ in range(steps)]
        if naive_check(chains, tools, args) is None:
            return tools, args
    raise RuntimeError("no passing candidate found; use more --tools")


def run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("chains")
    rng = random.Random(args.seed)
    names = [f"tool_{i}" for i in range(args.tools)]
    sizes = sorted(args.sizes)
    every = _chains(rng, sizes[-1], names)
    tools, call_args = _candidate(rng, args.steps, names, every)
    rows: dict[int, dict[str, float]] = {}
    for size in sizes:
        chains = every[:size]
        archive = ChainArchive(chains)
        assert archive.check(tools, call_args).safe and naive_check(chains, tools, call_args) is None

        def indexed(archive: ChainArchive = archive) -> object:
            return archive.check(tools, call_args)

        def naive(chains: list[ChainRecord] = chains) -> object:
            return naive_check(chains, tools, call_args)

        t_index = time_per_call(indexed, repeat=args.repeat)
        t_naive = time_per_call(naive, repeat=args.repeat)
        rows[size] = {"index_us": t_index * 1e6, "naive_us": t_naive * 1e6, "speedup": t_naive / t_index}
        target = size == sizes[-1]
        report.add(
            f"naive scan / check_chain at {size:,} chains",
            t_naive / t_index,
            "x",
            ">= 10x" if target else "",
            (t_naive / t_index >= 10) if target else None,
        )
    small, large = sizes[0], sizes[-1]
    growth = rows[large]["index_us"] / rows[small]["index_us"]
    archive_growth = large / small
    report.add(
        f"check_chain cost growth {small:,} -> {large:,} chains",
        growth,
        "x",
        f"<= {archive_growth / 10:g}x (archive grows {archive_growth:g}x)",
        growth <= archive_growth / 10,
    )
    report.add(
        f"naive scan cost growth {small:,} -> {large:,} chains",
        rows[large]["naive_us"] / rows[small]["naive_us"],
        "x",
    )
    archive = ChainArchive(every)
    tail = tools[-archive.longest_run :]
    tail_args = call_args[-archive.longest_run :]
    t_next = time_per_call(lambda: archive.check_next(tail, tail_args, names[0], {"payload_bytes": 1}))
    report.add(f"live guard check_next at {large:,} chains", t_next * 1e6, "us")
    report.data = {"steps": args.steps, "tools": args.tools, "seed": args.seed, "by_size": rows}
    return report
