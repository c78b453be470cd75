"""Every tool of every corpus file, at every level: no constraint lost, no verdict changed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.bench._seed003 import seed003_prune
from residency import minify_tool, minify_tool_with_report
from residency._core import _minify
from residency._core._minify import LEVELS
from residency._core._minify_constraints import constraint_atoms
from residency._verify import VerifyResult, verify_levels
from tests.conftest import load_corpus

SHARDS = 3
"""The corpus is judged in this many parts (every third tool), so parallel workers share it."""


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_level_loses_a_constraint_or_changes_a_verdict_on_the_corpus(shard: int) -> None:
    problems: list[str] = []
    judged = 0
    # Verdicts depend only on the schemas (the instances are drawn deterministically from the
    # original's): tools whose original and minified schemas are all equal share one judging.
    verdicts: dict[str, dict[str, VerifyResult]] = {}
    every = [(server, tool) for server, tools in load_corpus().items() for tool in tools]
    for server, tool in every[shard::SHARDS]:
        original = constraint_atoms(tool["inputSchema"])
        results: dict[str, dict[str, Any]] = {level: minify_tool(tool, level) for level in LEVELS}
        for level, result in results.items():
            lost = original - constraint_atoms(result["inputSchema"])
            if lost:
                problems.append(f"{server}/{tool['name']} {level}: lost {sorted(lost)[:3]}")
        schemas = json.dumps([tool["inputSchema"], *(r["inputSchema"] for r in results.values())])
        if schemas not in verdicts:
            # Two drawn instances per tool; mutations aim at every constraint.
            verdicts[schemas] = verify_levels(tool, results, max_examples=2, max_mutations=250)
        for level, verdict in verdicts[schemas].items():
            judged += verdict.instances
            problems.extend(
                f"{server}/{tool['name']} {level}: {d.kind} at {d.path or '/'}" for d in verdict.disagreements
            )
    assert problems == []
    assert judged > 50_000 / SHARDS, judged  # over 50,000 across the shards


def test_the_seed_pruner_loses_constraints_on_the_corpus() -> None:
    lost = total = 0
    for tools in load_corpus().values():
        for tool in tools:
            original = constraint_atoms(tool["inputSchema"])
            total += sum(original.values())
            lost += sum((original - constraint_atoms(seed003_prune(tool)["inputSchema"])).values())
    assert lost > 0.2 * total


def test_schemas_without_a_reference_skip_the_reference_passes_and_minify_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ``_mentions_ref`` lets a schema with no ``$ref`` skip three walks; taking them anyway must
    # give the same schemas and the same change counts, at every level, on every corpus tool.
    tools = [t for server in load_corpus().values() for t in server]
    assert sum(not _minify._mentions_ref(t.get("inputSchema", {})) for t in tools) > len(tools) // 2
    fast = [minify_tool_with_report(t, level) for t in tools for level in LEVELS]
    monkeypatch.setattr(_minify, "_mentions_ref", lambda schema: True)
    walked = [minify_tool_with_report(t, level) for t in tools for level in LEVELS]
    assert fast == walked
