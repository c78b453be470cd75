"""``python -m benchmarks lifecycle``: what residency costs per turn and per recorded call.

Figures, each against a baseline measured in the same run:

* one ``plan_turn`` on a session of N tools and M recorded calls, as a ratio to ``json.dumps``
  of the full tool list it replaces (target <= 1x);
* memory per recorded call beyond its argument payload (target <= 2 KB), from tracemalloc;
* one transition fired through the shared machine, as a ratio to a plain dict lookup of the
  same table, and the cost a Machine per record would add (``add_model``), for scale.
"""

from __future__ import annotations

import argparse
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.bench._corpus import numbered_tools
from residency._bench._report import BenchReport, time_per_call
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._planner import Budget
from residency._runtime import Session

SMALL_ARGS = ["--tools", "1000", "--calls", "10000"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", type=int, default=1000, help="tools in the session (default 1000)")
    parser.add_argument("--calls", type=int, default=10_000, help="recorded calls (default 10000)")
    parser.add_argument("--corpus", type=Path, default=None, help="corpus folder (default: the dev corpus)")
    parser.add_argument("--seed", type=int, default=7)


def _arguments(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "path": f"/srv/data/file_{i}.txt",
        "line": rng.randint(1, 500),
        "query": "error budget " * rng.randint(1, 3),
    }


def run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("lifecycle")
    rng = random.Random(args.seed)
    tools = numbered_tools(args.tools, args.corpus)
    session = Session()
    session.register_tools(tools)
    names = session.tools()

    # Memory per recorded call beyond its payload: record M calls under tracemalloc, then build
    # the same payloads alone; the difference is what residency keeps per call.
    texts = [json.dumps(_arguments(rng, i)) for i in range(args.calls)]
    picks = [names[rng.randrange(len(names))] for _ in range(args.calls)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for name, text in zip(picks, texts, strict=True):
        session.record_call(name, json.loads(text))
    with_calls = tracemalloc.get_traced_memory()[0] - base
    base = tracemalloc.get_traced_memory()[0]
    payloads = [json.loads(text) for text in texts]
    payload = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del payloads
    per_call = (with_calls - payload) / args.calls
    report.add("memory per recorded call beyond payload", per_call, "B", "<= 2048 B", per_call <= 2048)

    # plan_turn against json.dumps of the full tool list it replaces.
    budget = Budget(schema_tokens=6000, argument_tokens=20_000)
    listing = [session.tool(n).definition for n in names]
    dumps = time_per_call(lambda: json.dumps(listing))
    session.plan_turn(budget)
    turn = [0]

    def plan() -> None:
        turn[0] += 1
        name = names[turn[0] % len(names)]
        if session.state(name) is not ToolState.RESIDENT:
            session.reexpand(name)
        session.record_call(name, _arguments(rng, turn[0]))
        session.plan_turn(budget)

    plan_cost = time_per_call(plan, repeat=5)
    ratio = plan_cost / dumps
    report.add("plan_turn / json.dumps(tool list)", ratio, "x", "<= 1x", ratio <= 1.0)

    # One transition through the shared machine against a dict lookup of the same table.
    table = {(t.source, t.trigger): t.dest for t in TOOL_LIFECYCLE.table if t.when is None}
    facts = {"arguments_resident": False}
    fire = time_per_call(lambda: TOOL_LIFECYCLE.fire(ToolState.RESIDENT, "prune", record="t", facts=facts))
    lookup = time_per_call(lambda: table.get((ToolState.RESIDENT, "tombstone")))
    report.add("shared-machine transition / dict lookup", fire / lookup, "x")
    report.add("shared-machine transition", fire * 1e6, "us")
    report.data = {
        "tools": args.tools,
        "calls": args.calls,
        "json_dumps_seconds": dumps,
        "plan_turn_seconds": plan_cost,
        "transition_seconds": fire,
        "dict_lookup_seconds": lookup,
        "memory_with_calls_bytes": with_calls,
        "payload_bytes": payload,
        "tool_list_bytes": len(json.dumps(listing)),
    }
    return report
