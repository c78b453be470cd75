"""``python -m benchmarks chains``: the collision check against archives of growing size.

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

The same at the archive scope (``--scope-chains``, 10,000 by default), where a successor meets
the chains: a SQLite store whose scope holds them, and a session of that scope holding them
too (all its tools marked shared, so none is retired and every call is guarded):

* ``Session.check_chain`` (a read of the scope's new records, then the index) and the live
  guard (``authorize_call``: the scope read, the argument checks, then ``check_next``), each
  against a naive scan of every chain in the same run (for the guard: every chain, at the
  two positions ``check_next`` looks at). Target: at least 10x for ``check_chain``;
* ``check_chain`` while the scope's chains are not adopted yet (the session lacks a tool each
  of them names, so they stay pending: the check indexes them once, then reuses the index), and
  that session's live guard (each call looks for pending chains it can adopt now);
* through the gateway: a real MCP client (in-process) calling the ``check_chain`` meta-tool,
  and a forwarded call of a guarded tool to a real upstream, with the scope's chains against
  the same gateway and upstream over a store with no chains (the archive's share of a call);
* adopting a scope's chains (``--adopt-sizes``): what a session pays, once, to journal the
  chains of a scope it joins, and how that grows with the scope.

Setup journals the 10,000 chains into the session in one batch (what adoption journals) and
reopens it, rather than adopting them: adoption is measured on its own at the smaller sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.server.lowlevel import Server

from residency._bench._report import BenchReport, time_per_call
from residency._core._chains import ChainArchive, ChainRecord, build_chain
from residency._core._planner import Budget
from residency._core._predicates import holds
from residency._gateway import Gateway, parse_config
from residency._runtime import Session
from residency._store._protocol import DEFAULT_SCOPE
from residency._store._sqlite import SQLiteStore

SMALL_ARGS = [
    "--repeat",
    "5",
    "--scope-chains",
    "2000",
    "--adopt-sizes",
    "50",
    "200",
    "--gateway-calls",
    "50",
]


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
    parser.add_argument(
        "--scope-chains",
        type=int,
        default=10_000,
        help="chains in the archive scope (default 10000; 0: skip)",
    )
    parser.add_argument(
        "--adopt-sizes",
        type=int,
        nargs="+",
        default=[100, 500, 1000],
        help="scope sizes a session adopts, timed once each (default 100 500 1000)",
    )
    parser.add_argument(
        "--gateway-calls",
        type=int,
        default=200,
        help="timed calls per side through the gateway (default 200)",
    )


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
    report.data["load_average"] = list(os.getloadavg())  # a shared machine skews the absolute times
    if args.scope_chains > 0:
        folder = Path(tempfile.mkdtemp(prefix="residency-bench-"))
        try:
            _scope(report, args, names, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return report


def naive_next(
    chains: list[ChainRecord],
    history: list[str],
    history_args: list[Any],
    tool: str,
    arguments: Mapping[str, Any],
) -> ChainRecord | None:
    """The live guard's baseline: every chain, at the two positions ``check_next`` looks at."""
    tools, args = [*history, tool], [*history_args, arguments]
    n = len(tools)
    for record in chains:
        run, length = record.fatal_run, len(record.fatal_run)
        for stop, fatal_step in ((n, False), (n - 1, True)):
            start = stop - length
            if start < 0 or tuple(tools[start:stop]) != run:
                continue
            if fatal_step and (record.terminal != tool or run == record.topology):
                continue
            if holds(record.constraint, args[start:stop]) is not False:
                return record
    return None


def _definitions(names: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "description": "Move a payload one step down the pipeline.",
            "inputSchema": {"type": "object", "properties": {"payload_bytes": {"type": "integer"}}},
            "annotations": {"readOnlyHint": True},
        }
        for name in names
    ]


def _scope_store(path: Path, chains: list[ChainRecord], names: list[str], session_id: str | None) -> None:
    """A store whose scope holds ``chains``, and a session of the scope that holds them too.

    The session (``session_id``, or the store's only one when None: a gateway's) registers its
    tools and marks them shared before the chains reach the scope, then journals them in one
    batch, as adopting them would (adoption is timed on its own).
    """
    store = SQLiteStore(path, durability="normal")
    try:
        if session_id is None:
            (session_id,) = store.sessions()
        session = Session(store, session_id=session_id)
        session.register_tools(_definitions(names))
        session.mark_shared(*names)
        for record in chains:
            store.archive_chain(DEFAULT_SCOPE, record.to_json())
        batch = [("archive_chain", {"chain": r.to_json(), "scope": DEFAULT_SCOPE}) for r in chains]
        session._journal.commit(*batch)  # what adoption journals, without its search (see above)
        session.checkpoint()
    finally:
        store.close()


def _guarded_tool(chains: list[ChainRecord], names: list[str]) -> str:
    """The tool most chains use that can be called any number of times in a row safely."""
    used = Counter(n for r in chains for n in r.topology)
    for name, _ in used.most_common():
        if naive_next(chains, [name] * 8, [{"payload_bytes": 1}] * 8, name, {"payload_bytes": 1}) is None:
            return name
    return names[0]


def _scope(report: BenchReport, args: argparse.Namespace, names: list[str], folder: Path) -> None:
    rng = random.Random(args.seed + 1)
    chains = _chains(rng, args.scope_chains, names)
    n = len(chains)
    tools, call_args = _candidate(rng, args.steps, names, chains)
    data: dict[str, Any] = {"chains": n}
    report.data["scope"] = data

    path = folder / "scope.db"
    _scope_store(path, chains, names, "successor")
    store = SQLiteStore(path)
    try:
        started = time.perf_counter()
        session = Session(store, session_id="successor")
        data["reopen_s"] = time.perf_counter() - started
        assert len(session.chains()) == n and session.check_chain(tools, call_args).safe
        assert naive_check(chains, tools, call_args) is None

        t_check = time_per_call(lambda: session.check_chain(tools, call_args), repeat=args.repeat)
        t_naive = time_per_call(lambda: naive_check(chains, tools, call_args), repeat=args.repeat)
        ratio = t_naive / t_check
        report.add(
            f"scope: naive scan / Session.check_chain at {n:,} chains", ratio, "x", ">= 10x", ratio >= 10
        )

        tool = _guarded_tool(chains, names)
        session.plan_turn(Budget(schema_tokens=1 << 40, argument_tokens=1 << 40))
        for _ in range(8):  # the guard looks at the last calls (at most 6 here)
            session.record_call(tool, {"payload_bytes": 1})
        history, hist_args = [tool] * 8, [{"payload_bytes": 1}] * 8
        assert naive_next(chains, history, hist_args, tool, {"payload_bytes": 1}) is None
        session.authorize_call(tool, {"payload_bytes": 1})
        t_guard = time_per_call(
            lambda: session.authorize_call(tool, {"payload_bytes": 1}), repeat=args.repeat
        )
        t_naive_next = time_per_call(
            lambda: naive_next(chains, history, hist_args, tool, {"payload_bytes": 1}), repeat=args.repeat
        )
        report.add(
            f"scope: naive scan / live guard (authorize_call) at {n:,} chains", t_naive_next / t_guard, "x"
        )
        data["us"] = {
            "check_chain": t_check * 1e6,
            "naive_check": t_naive * 1e6,
            "authorize_call": t_guard * 1e6,
            "naive_next": t_naive_next * 1e6,
        }
    finally:
        store.close()

    # Pending: a session that lacks one tool of every chain (it registered none of them).
    store = SQLiteStore(path)
    try:
        lacking = Session(store, session_id="newcomer")
        assert lacking.check_chain(tools, call_args).safe
        t_pending = time_per_call(lambda: lacking.check_chain(tools, call_args), repeat=3, min_time=0.01)
        report.add(
            f"scope: Session.check_chain, {n:,} chains not adopted / naive scan", t_pending / t_naive, "x"
        )
        data["us"]["check_chain_pending"] = t_pending * 1e6
        # The live guard of such a session, calling a tool no chain names: the chains stay pending.
        lacking.register_tools(_definitions(["probe"]))
        lacking.authorize_call("probe", {"payload_bytes": 1})
        t_pending_guard = time_per_call(
            lambda: lacking.authorize_call("probe", {"payload_bytes": 1}), repeat=3, min_time=0.01
        )
        report.add(
            f"scope: live guard (authorize_call), {n:,} chains not adopted / naive scan",
            t_pending_guard / t_naive_next,
            "x",
        )
        data["us"]["authorize_call_pending"] = t_pending_guard * 1e6
    finally:
        store.close()

    anyio.run(_through_gateway, report, args, tools, call_args, chains, names, folder)
    _adoption(report, args, names, folder)


def _upstream(names: list[str]) -> Server[Any]:
    tools = [types.Tool.model_validate(d) for d in _definitions(names)]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name}: done")])

    return Server("residency-bench-pipeline", on_list_tools=list_tools, on_call_tool=call_tool)


@contextlib.asynccontextmanager
async def _gateway_client(path: Path, names: list[str], pinned: str) -> AsyncIterator[Client]:
    """A real MCP client of a gateway over the store at ``path``, in front of a real upstream."""
    residency = {"store": f"sqlite:///{path}", "pinned": [pinned], "budget": {"schema_tokens": 1 << 30}}
    config = parse_config(json.dumps({"mcpServers": {}, "residency": residency}), source="<bench>")
    async with (
        Gateway(config, upstreams={"up": _upstream(names)}, default_session=_GATEWAY_KEY) as gateway,
        Client(gateway.server, mode="legacy", cache=None) as client,
    ):
        yield client


_GATEWAY_KEY = "successor"


async def _through_gateway(
    report: BenchReport,
    args: argparse.Namespace,
    tools: list[str],
    call_args: list[Any],
    chains: list[ChainRecord],
    names: list[str],
    folder: Path,
) -> None:
    """The gateway's check_chain and a guarded forwarded call, with the scope's chains and with one.

    The baseline scope holds one chain rather than none: with none the gateway does not list
    ``check_chain`` (it could only answer "safe"), and a client re-lists before calling a tool
    it does not see, which would time the list, not the check.
    """
    full, empty = folder / "gateway.db", folder / "empty.db"
    tool = _guarded_tool(chains, names)
    fatal = next(r for r in chains if r.to_json()["constraint"] == {"all": []})
    other = next(r for r in chains if not set(r.topology) & set(fatal.topology))
    for path, held in ((full, chains), (empty, [other])):
        async with _gateway_client(path, names, tool) as client:
            await client.list_tools()  # the gateway's session opens, with the upstream's tools
        _scope_store(path, held, names, None)
    check = {"sequence": tools, "arguments": call_args}
    async with (
        _gateway_client(full, names, tool) as with_chains,
        _gateway_client(empty, names, tool) as without,
    ):
        for client in (with_chains, without):
            await client.list_tools()
            for _ in range(5):
                await _ok(client, tool, {"payload_bytes": 1})
                await _ok(client, "check_chain", check)
        # The gateway path sees the scope: a chain's own topology is unsafe there, safe without.
        verdicts = [
            await _ok(client, "check_chain", {"sequence": list(fatal.topology)})
            for client in (with_chains, without)
        ]
        assert [v.structured_content["safe"] for v in verdicts if v.structured_content] == [False, True]

        samples: dict[str, list[float]] = {
            k: [] for k in ("check_chains", "check_one", "call_chains", "call_one")
        }
        per_round = max(1, args.gateway_calls // 10)
        for _ in range(10):
            for key, client, name, arguments in (
                ("check_chains", with_chains, "check_chain", check),
                ("check_one", without, "check_chain", check),
                ("call_chains", with_chains, tool, {"payload_bytes": 1}),
                ("call_one", without, tool, {"payload_bytes": 1}),
            ):
                for _ in range(per_round):
                    started = time.perf_counter()
                    await _ok(client, name, arguments)
                    samples[key].append(time.perf_counter() - started)
    p50 = {k: statistics.median(v) for k, v in samples.items()}
    n = len(chains)
    report.add(
        f"gateway: check_chain at {n:,} chains / with one", p50["check_chains"] / p50["check_one"], "x"
    )
    report.add(f"gateway: check_chain p50 at {n:,} chains", p50["check_chains"] * 1e3, "ms")
    report.add(f"gateway: guarded call at {n:,} chains / with one", p50["call_chains"] / p50["call_one"], "x")
    report.add(f"gateway: guarded call p50 at {n:,} chains", p50["call_chains"] * 1e3, "ms")
    report.add("gateway: guarded call p50 with one chain", p50["call_one"] * 1e3, "ms")
    report.data["scope"]["gateway_p50_ms"] = {k: v * 1e3 for k, v in p50.items()}


async def _ok(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    result = await client.call_tool(name, arguments)
    if result.is_error:
        raise RuntimeError(f"{name} failed through the gateway: {result.content}")
    return result


def _adoption(report: BenchReport, args: argparse.Namespace, names: list[str], folder: Path) -> None:
    """Seconds a session of the scope takes to adopt the scope's chains, once, by scope size."""
    rng = random.Random(args.seed + 2)
    seconds: dict[int, float] = {}
    for size in sorted(args.adopt_sizes):
        store = SQLiteStore(folder / f"adopt-{size}.db", durability="normal")
        try:
            session = Session(store, session_id="joiner")
            session.register_tools(_definitions(names))
            session.mark_shared(*names)
            for record in _chains(rng, size, names):
                store.archive_chain(DEFAULT_SCOPE, record.to_json())
            started = time.perf_counter()
            session.plan_turn(Budget(schema_tokens=1 << 40, argument_tokens=1 << 40))  # adopts first
            seconds[size] = time.perf_counter() - started
            assert len(session.chains()) == size and session.archive_digest()
        finally:
            store.close()
        report.add(f"scope: adopting {size:,} chains (once per session)", seconds[size], "s")
    small, large = min(seconds), max(seconds)
    if large > small:
        report.add(
            f"scope: adoption cost growth {small:,} -> {large:,} chains (scope grows {large / small:g}x)",
            seconds[large] / seconds[small],
            "x",
        )
    report.data["scope"]["adoption_s"] = seconds
