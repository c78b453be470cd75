"""The chains benchmark: its baselines agree with the archive, and a tiny run of every part."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from benchmarks.bench import chains as bench
from benchmarks.run import BENCHES
from benchmarks.run import main as run_main
from residency._core._chains import ChainArchive


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


TINY = ["--sizes", "20", "60", "--repeat", "1", "--scope-chains", "80", "--adopt-sizes", "10", "30"]
TINY += ["--gateway-calls", "10", "--tools", "40", "--steps", "12"]


def test_the_naive_baselines_give_the_archives_answers() -> None:
    rng = random.Random(3)
    names = [f"tool_{i}" for i in range(8)]  # few tools: collisions are common
    chains = bench._chains(rng, 40, names)
    archive = ChainArchive(chains)
    outcomes = set()
    for _ in range(400):
        tools = [rng.choice(names) for _ in range(rng.randint(1, 9))]
        args = [{"payload_bytes": rng.choice([1, 9_000_000])} for _ in tools]
        safe = archive.check(tools, args).safe
        assert (bench.naive_check(chains, tools, args) is None) is safe
        history, last = tools[:-1], tools[-1]
        guard = archive.check_next(history, args[:-1], last, args[-1]).safe
        assert (bench.naive_next(chains, history, args[:-1], last, args[-1]) is None) is guard
        outcomes.add((safe, guard))
    assert {True, False} <= {s for s, _ in outcomes} and {True, False} <= {g for _, g in outcomes}


def test_the_guarded_tool_can_be_called_again_and_again_without_a_collision() -> None:
    rng = random.Random(5)
    names = [f"tool_{i}" for i in range(30)]
    chains = bench._chains(rng, 200, names)
    tool = bench._guarded_tool(chains, names)
    assert any(tool in r.topology for r in chains)
    assert ChainArchive(chains).check([tool] * 10, [{"payload_bytes": 1}] * 10).safe


def test_a_tiny_run_measures_the_scope_the_gateway_and_adoption() -> None:
    report = bench.run(_args(*TINY))
    names = [f.name for f in report.figures]
    for part in (
        "scope: naive scan / Session.check_chain at 80 chains",
        "scope: naive scan / live guard (authorize_call) at 80 chains",
        "scope: Session.check_chain, 80 chains not adopted / naive scan",
        "gateway: check_chain at 80 chains / with one",
        "gateway: guarded call at 80 chains / with one",
        "scope: adopting 30 chains (once per session)",
        "scope: adoption cost growth 10 -> 30 chains (scope grows 3x)",
    ):
        assert part in names
    assert all(f.value > 0 for f in report.figures)
    scope = report.data["scope"]
    assert scope["chains"] == 80 and set(scope["adoption_s"]) == {10, 30}
    assert set(scope["gateway_p50_ms"]) == {"check_chains", "check_one", "call_chains", "call_one"}


def test_no_scope_part_when_asked_for_none() -> None:
    report = bench.run(_args("--sizes", "10", "20", "--repeat", "1", "--scope-chains", "0", "--tools", "40"))
    assert "scope" not in report.data
    assert not any(f.name.startswith(("scope", "gateway")) for f in report.figures)


def test_the_chains_bench_runs_from_the_cli_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert BENCHES["chains"].module == "benchmarks.bench.chains"
    out = tmp_path / "chains.json"
    assert run_main(["chains", *TINY, "--json", str(out)]) in (0, 1)  # 1: a target missed
    (written,) = json.loads(out.read_text())
    assert written["name"] == "chains" and written["data"]["scope"]["chains"] == 80
    assert "chains" in capsys.readouterr().out


def test_the_small_arguments_of_residency_bench_parse_and_keep_every_part() -> None:
    args = _args(*bench.SMALL_ARGS)
    assert args.scope_chains > 0 and len(args.adopt_sizes) >= 2 and args.gateway_calls > 0
