"""``python -m benchmarks catalog``: what one more session costs when the catalog is already known.

Figures, measured in one run on the dev corpus (405 real tool definitions, names made unique):

* memory per additional embedded ``Session`` with the whole corpus registered (tracemalloc, the
  mean over ``--sessions`` sessions kept alive together, after a first session registered the
  same definitions; target <= 0.3 MB);
* time to register the already-known corpus in a new session (``register_tools`` alone, the
  median of ``--repeat`` new sessions; target <= 10 ms), and the same for the first session of
  the process, which parses, validates, minifies and counts every definition;
* time to open a new session and register the corpus (construction included), for context;
* the gateway's schema check of a ``--big``-tool catalog (the corpus repeated under new names,
  as an aggregate of many servers sharing schemas): checked once per distinct schema, against
  the uncached check run on every tool (measured on the corpus, per tool, times ``--big``);
* registering the ``--big``-tool catalog in a new session once another holds it;
* the cold ``plan_turn`` over the ``--big``-tool catalog (the first plan, which prunes most of
  it; target <= 50 ms), as sessions are made by default (a checkpoint falls due in it and is
  saved after it) and with automatic checkpoints off (the plan alone); the median of 7 new
  sessions, the garbage of each one's registration collected before its plan is timed;
* a non-steady ``plan_turn`` over 1,000 and ``--big`` tools (about 40 resident), the median of
  ``--turns`` turns each after one call whose arguments overflow their budget, after one
  re-expansion, and after a phase change: as a session plans it (from the tools that can matter,
  ``residency._runtime._plans``) and, in the same run, with every tool read on every turn (the
  planning before), in lockstep on equal sessions whose plans must show the same tools.

Definitions are parsed, checked, minified and counted once per process and shared by every
session (``residency._runtime._tool_cache``); a session holds its states and its own records.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.bench._corpus import default_corpus, load_servers
from residency._bench._report import BenchReport
from residency._core._planner import Budget
from residency._core._tools import parse_tool
from residency._runtime import Session
from residency._runtime._tool_cache import metaschema_problem, schema_problem

SMALL_ARGS = ["--sessions", "10", "--repeat", "5", "--big", "2000"]

MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=None, help="corpus folder (default: the dev corpus)")
    parser.add_argument("--sessions", type=int, default=20, help="sessions measured for memory (default 20)")
    parser.add_argument("--repeat", type=int, default=15, help="new sessions timed (default 15)")
    parser.add_argument("--big", type=int, default=10_000, help="tools in the large catalog (default 10000)")
    parser.add_argument("--turns", type=int, default=15, help="non-steady turns timed per case (default 15)")


def corpus_tools(corpus: Path | None = None) -> list[dict[str, Any]]:
    """Every tool of the corpus, a name given twice made unique with its server's name."""
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for server, listed in load_servers(corpus or default_corpus()).items():
        for tool in listed:
            name = tool["name"] if tool["name"] not in seen else f"{server}__{tool['name']}"
            seen.add(name)
            tools.append({**tool, "name": name})
    return tools


def big_catalog(tools: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` tools: the corpus repeated, each copy under new names (``name_r2``, ...)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        tool = tools[i % len(tools)]
        copy = i // len(tools)
        out.append(tool if copy == 0 else {**tool, "name": f"{tool['name']}_r{copy + 1}"})
    return out


def _uncached_checks(tools: list[dict[str, Any]]) -> None:
    """The gateway's schema check before it was cached (one metaschema validation per tool)."""
    for tool in tools:
        metaschema_problem(parse_tool(tool)["inputSchema"])


def _cold_plan_ms(tools: list[dict[str, Any]], checkpoint_every: int | None, rounds: int = 7) -> float:
    """Median ms of the first ``plan_turn`` of a new session holding ``tools`` (registered)."""
    budget = Budget(schema_tokens=8_000, argument_tokens=8_000)
    times = []
    for _ in range(rounds):
        session = Session() if checkpoint_every is None else Session(checkpoint_every=checkpoint_every)
        session.register_tools(tools)
        # The setup's garbage collected first (registering 10,000 tools leaves plenty), so a
        # plan is not billed for a full collection of what came before it; the plan's own
        # allocations still run the collector as they would.
        gc.collect()
        start = time.perf_counter()
        session.plan_turn(budget)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


TURN_CASES = ("one call", "one re-expansion", "a phase change")
"""What happened before each timed non-steady turn (``_non_steady_turns``)."""


def _non_steady_turns(tools: list[dict[str, Any]], turns: int) -> dict[str, tuple[float, float]]:
    """Median ms of a non-steady ``plan_turn`` per case in ``TURN_CASES``: (every tool read,
    from the tools that can matter), timed on two sessions given the same operations in turn.

    None of these turns can take the steady shortcut (a re-expansion changes what the session
    shows, the phase differs from the last plan's, the arguments overflow their budget): each
    decides.

    Raises:
        RuntimeError: the two sessions' plans differ, or a call did not overflow the arguments.
    """
    names = [t["name"] for t in tools]
    n = len(names)
    phases = {"a": names[n // 5 : n // 5 + 10], "b": names[n // 3 : n // 3 + 10]}
    budget = Budget(schema_tokens=8_000, argument_tokens=400)
    # About 700 tokens, past the arguments' ceiling (600) alone: the plan after each such call
    # evicts arguments, so it is not steady.
    overflowing = {"text": " ".join(f"word{i}" for i in range(350))}
    sessions: list[Session] = []
    for incremental in (False, True):
        session = Session(checkpoint_every=0, phases=phases)
        session._plans.incremental = incremental
        session.register_tools(tools)
        session.plan_turn(budget)  # cold: most tools leave
        for name in names[n // 10 : n // 10 + 40]:  # a working set: re-expanded and called
            session.reexpand(name)
            session.record_call(name, {})
        session.plan_turn(budget)
        session.plan_turn(budget)
        sessions.append(session)
    withheld = iter(names[n // 2 :])  # one re-expanded per turn, never a phase tool
    times: dict[str, tuple[list[float], list[float]]] = {case: ([], []) for case in TURN_CASES}
    phase: str | None = None
    for i in range(max(1, min(turns, n - n // 2))):
        for case in TURN_CASES:
            if case == "a phase change":
                phase = "a" if i % 2 else "b"
            reexpand = next(withheld) if case == "one re-expansion" else None
            shown = []
            for session, timed in zip(sessions, times[case], strict=True):
                if case == "one call":
                    session.record_call(session.resident_tools()[-1], overflowing)
                elif reexpand is not None:
                    session.reexpand(reexpand)
                start = time.perf_counter()
                plan = session.plan_turn(budget, phase=phase)
                timed.append(time.perf_counter() - start)
                if case == "one call" and not plan.evictions:
                    raise RuntimeError("a call's arguments did not overflow their budget")
                shown.append((plan.tool_names, plan.tombstones, plan.evictions, plan.schema_tokens))
                session.plan_turn(budget, phase=phase)  # settle
            if shown[0] != shown[1]:
                raise RuntimeError(f"the plans differ after {case}")
    return {
        case: (statistics.median(full) * 1000, statistics.median(fast) * 1000)
        for case, (full, fast) in times.items()
    }


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> BenchReport:
    tools = corpus_tools(args.corpus)
    report = BenchReport("catalog")
    # The gateway's schema check at scale, first: nothing in this process has checked these
    # schemas yet. The uncached baseline costs the same per tool, so it is timed on the corpus.
    big = big_catalog(tools, max(1, args.big))
    uncached_per_tool = _timed(lambda: _uncached_checks(tools)) / len(tools)
    checks_ms = _timed(lambda: [schema_problem(parse_tool(t)["inputSchema"]) for t in big]) * 1000
    first = Session()
    first_ms = _timed(lambda: first.register_tools(tools)) * 1000

    register: list[float] = []
    opened: list[float] = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        session = Session()
        made = time.perf_counter()
        session.register_tools(tools)
        done = time.perf_counter()
        register.append(done - made)
        opened.append(done - start)
    register_ms = statistics.median(register) * 1000
    open_ms = statistics.median(opened) * 1000

    # Memory: sessions kept alive together, measured after the first one made the shared data.
    count = max(1, args.sessions)
    kept: list[Session] = []
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(count):
            session = Session()
            session.register_tools(tools)
            kept.append(session)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_session = (after - before) / count / MB
    del kept

    holder = Session()
    big_first_ms = _timed(lambda: holder.register_tools(big)) * 1000
    second = Session()
    big_known_ms = _timed(lambda: second.register_tools(big)) * 1000

    cold_ms = _cold_plan_ms(big, None)
    cold_alone_ms = _cold_plan_ms(big, 0)
    turn_sizes = sorted({min(1_000, len(big)), len(big)})
    turns = getattr(args, "turns", 15)
    non_steady = {size: _non_steady_turns(big[:size], turns) for size in turn_sizes}

    report.add("tools in the catalog", len(tools), "tools")
    report.add("memory per additional session", per_session, "MB", "<= 0.3 MB", per_session <= 0.3)
    report.add("register known tools in a new session", register_ms, "ms", "<= 10 ms", register_ms <= 10)
    report.add("new session + register known tools", open_ms, "ms")
    report.add("register in the first session (cold)", first_ms, "ms")
    report.add(
        f"schema checks, {len(big):,}-tool catalog, uncached (before)", uncached_per_tool * len(big), "s"
    )
    report.add(f"schema checks, {len(big):,}-tool catalog, once per schema", checks_ms, "ms")
    report.add(f"register {len(big):,} tools in the first session", big_first_ms, "ms")
    report.add(f"register {len(big):,} known tools in a new session", big_known_ms, "ms")
    report.add(f"cold plan_turn, {len(big):,} tools", cold_ms, "ms", "<= 50 ms", cold_ms <= 50)
    report.add(f"cold plan_turn, {len(big):,} tools, no automatic checkpoint", cold_alone_ms, "ms")
    for size, cases in non_steady.items():
        for case, (full, fast) in cases.items():
            name = f"non-steady plan_turn, {size:,} tools, after {case}"
            report.add(f"{name}, every tool read (before)", full, "ms")
            report.add(name, fast, "ms")
            report.add(f"{name}: before / now", full / fast, "x")
    report.data = {
        "tools": len(tools),
        "sessions": count,
        "memory_per_session_mb": per_session,
        "register_known_ms": register_ms,
        "register_known_ms_all": [r * 1000 for r in register],
        "open_and_register_ms": open_ms,
        "register_first_ms": first_ms,
        "big": len(big),
        "schema_check_uncached_ms_per_tool": uncached_per_tool * 1000,
        "schema_checks_big_ms": checks_ms,
        "register_big_first_ms": big_first_ms,
        "register_big_known_ms": big_known_ms,
        "cold_plan_ms": cold_ms,
        "cold_plan_no_checkpoint_ms": cold_alone_ms,
        "non_steady_turns": turns,
        "non_steady_plan_ms": {
            str(size): {case: {"every_tool_read": full, "now": fast} for case, (full, fast) in cases.items()}
            for size, cases in non_steady.items()
        },
    }
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from ``python -m benchmarks.bench.catalog`` and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    report = run(args)
    for f in report.figures:
        target = f" (target {f.target}: {'yes' if f.ok else 'NO'})" if f.target else ""
        print(f"{f.name}: {f.value:,.3f} {f.unit}{target}")
    if args.json is not None:
        args.json.write_text(report.dumps() + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
