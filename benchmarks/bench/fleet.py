"""``python -m benchmarks fleet``: what replicas on PostgreSQL serve, against one replica on SQLite.

Three set-ups run one after the other in the same run, each a set of ``residency serve
--transport http`` processes with the bench's ``echo`` upstream (a stdio subprocess per
replica, ``echo`` pinned):

* one replica on a SQLite file (the baseline: where a team starts);
* one replica on PostgreSQL;
* two replicas on one PostgreSQL schema, the sessions spread over them (session ``i`` on
  replica ``i % 2``: what a load balancer routing by session does).

The load is the same for each: ``--sessions`` clients at once (2026-07-28 era, each naming its
own session), ``--calls`` timed ``tools/call`` each after a warm-up. Figures: calls per second
(all calls over the wall time) and the p50/p99 latency of one call, for each set-up; the ratio
of PostgreSQL to SQLite; and how far two replicas scale over one (calls/s ratio).

The catch-up query (``Store.load`` of a session's tail when nothing is new: what every request
on a shared store runs before it acts) is timed on its own, in this process, on both stores,
and set against the p50 of a call.

What limits scaling is measured rather than guessed: over each timed window the bench reads
the CPU time of every replica process and of itself (the load generator) from ``/proc``, and
the machine's busy fraction from ``/proc/stat``. On a 2-core machine the client, the replicas,
their upstreams and PostgreSQL all share the same two cores, so a second replica can only add
what the first one leaves idle.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import mcp_types as types
from mcp import Client

from benchmarks.bench.gateway import ECHO, free_port, percentile, upstream_argv, wait_for_port
from residency._bench._report import BenchReport, time_per_call
from residency._gateway import SESSION_META_KEY

SMALL_ARGS = ["--sessions", "4", "--calls", "20"]

PG_ENV = "RESIDENCY_PG_URL"
_WARMUP = 5
_RUN_TIMEOUT = 1800.0
_ARGUMENTS = {"text": "the quick brown fox", "times": 2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV, ""),
        help=f"PostgreSQL server to use (default: ${PG_ENV}); a throwaway schema is made and dropped",
    )
    parser.add_argument("--sessions", type=int, default=8, help="concurrent client sessions (default 8)")
    parser.add_argument("--calls", type=int, default=150, help="timed calls per session (default 150)")


# -- CPU accounting --------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its waited-for children (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime are fields 14-17 of stat (11-14 after the command name).
    return sum(int(f) for f in fields[11:15]) / ticks


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and everything below it (a replica and its upstream)."""
    return _cpu_seconds(pid) + sum(_tree_cpu(c) for c in _children(pid))


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine so far, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0, 0.0
    values = [float(v) for v in first]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    return sum(values) - idle, sum(values)


# -- replicas and load -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _replicas(config: Path, store: str, count: int, tmp: Path) -> AsyncIterator[list[tuple[str, int]]]:
    """``count`` replicas on ``store``: their (URL, pid)."""
    processes: list[subprocess.Popen[bytes]] = []
    out: list[tuple[str, int]] = []
    try:
        for i in range(count):
            port = free_port()
            argv = [sys.executable, "-m", "residency", "serve", "--config", str(config)]
            argv += ["--transport", "http", "--host", "127.0.0.1", "--port", str(port), "--store", store]
            with (tmp / f"replica-{len(list(tmp.iterdir()))}-{i}.log").open("wb") as err:
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
                )
            processes.append(process)
            await wait_for_port(port, process)
            out.append((f"http://127.0.0.1:{port}/mcp", process.pid))
        yield out
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                with anyio.fail_after(10):
                    while process.poll() is None:
                        await anyio.sleep(0.02)
            except TimeoutError:
                process.kill()
                process.wait()


async def _measure(
    report: BenchReport,
    name: str,
    config: Path,
    store: str,
    count: int,
    args: argparse.Namespace,
    tmp: Path,
) -> dict[str, Any]:
    async with _replicas(config, store, count, tmp) as replicas:
        urls = [url for url, _ in replicas]
        pids = [pid for _, pid in replicas]
        label = f"{name.replace(' ', '-').replace(',', '')}-{uuid.uuid4().hex[:6]}"
        latencies: list[float] = []
        async with contextlib.AsyncExitStack() as stack:
            clients = []
            for i in range(args.sessions):
                client = await stack.enter_async_context(Client(urls[i % len(urls)], cache=None))
                clients.append((client, cast("types.RequestParamsMeta", {SESSION_META_KEY: f"{label}-{i}"})))

            async def run(client: Client, meta: types.RequestParamsMeta, n: int, timed: bool) -> None:
                for _ in range(n):
                    start = time.perf_counter()
                    result = await client.call_tool(ECHO, _ARGUMENTS, meta=meta)
                    if timed:
                        latencies.append(time.perf_counter() - start)
                    if result.is_error:
                        raise RuntimeError(f"the echo call failed: {result.content}")

            async with anyio.create_task_group() as tg:
                for client, meta in clients:
                    tg.start_soon(run, client, meta, _WARMUP, False)
            replica_cpu = [_tree_cpu(p) for p in pids]
            own_cpu = time.process_time()
            busy, total = _machine_busy()
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for client, meta in clients:
                    tg.start_soon(run, client, meta, args.calls, True)
            wall = time.perf_counter() - start
            busy2, total2 = _machine_busy()
            own = time.process_time() - own_cpu
            replicas_cpu = [_tree_cpu(p) - before for p, before in zip(pids, replica_cpu, strict=True)]
    rate = len(latencies) / wall
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    report.add(f"{name}: calls/s", rate, "calls/s")
    report.add(f"{name}: p50", p50 * 1e3, "ms")
    report.add(f"{name}: p99", p99 * 1e3, "ms")
    cores = os.cpu_count() or 1
    return {
        "replicas": count,
        "sessions": args.sessions,
        "timed_calls": len(latencies),
        "wall_s": round(wall, 3),
        "calls_per_s": round(rate, 1),
        "p50_ms": round(p50 * 1e3, 3),
        "p99_ms": round(p99 * 1e3, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1e3, 3),
        # CPU over the timed window, in cores (1.0 = one core busy the whole time).
        "cpu_cores_per_replica": [round(c / wall, 2) for c in replicas_cpu],
        "cpu_cores_load_generator": round(own / wall, 2),
        "machine_busy_fraction": round((busy2 - busy) / (total2 - total), 3) if total2 > total else None,
        "machine_cores": cores,
    }


def _catch_up_cost(report: BenchReport, pg_url: str, schema: str, tmp: Path) -> dict[str, float]:
    """Seconds per catch-up query with nothing new, on PostgreSQL and on SQLite."""
    from residency._store._postgres import PostgresStore
    from residency._store._protocol import JournalEntry
    from residency._store._sqlite import SQLiteStore

    out: dict[str, float] = {}
    entries = [JournalEntry("call", {"id": f"c{i}", "tool": ECHO}, 0.0) for i in range(200)]
    stores: list[tuple[str, Any]] = [
        ("postgresql", PostgresStore(pg_url, schema=schema)),
        ("sqlite", SQLiteStore(tmp / "catch-up.db")),
    ]
    for name, store in stores:
        try:
            last = store.append("catch-up", entries)
            store.append("other", entries)  # another session's entries in the same table

            def catch_up(store: Any = store, last: int = last) -> object:
                return store.load("catch-up", last)

            seconds = time_per_call(catch_up, repeat=7, min_time=0.2)
        finally:
            store.close()
        out[name] = seconds
        report.add(f"catch-up query, nothing new ({name})", seconds * 1e6, "us")
    return out


async def _run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("fleet")
    if not args.pg_url:
        report.data["skipped"] = f"no PostgreSQL server: pass --pg-url or set {PG_ENV}"
        return report
    from residency._store import redact_url

    report.data["postgresql"] = redact_url(args.pg_url)
    schema = f"residency_bench_{uuid.uuid4().hex[:12]}"
    report.data["schema"] = schema  # dropped at the end
    sep = "&" if "?" in args.pg_url else "?"
    pg_store = f"{args.pg_url}{sep}schema={schema}"
    setups: dict[str, dict[str, Any]] = {}
    report.data["setups"] = setups
    try:
        with anyio.fail_after(_RUN_TIMEOUT), tempfile.TemporaryDirectory(prefix="residency-bench-") as name:
            tmp = Path(name)
            config = tmp / "fleet.json"
            up = upstream_argv("stdio")
            config.write_text(
                json.dumps(
                    {
                        "mcpServers": {"up": {"command": up[0], "args": up[1:]}},
                        "residency": {"pinned": [ECHO], "ready_wait": 120},
                    }
                )
            )
            runs = (
                ("sqlite, 1 replica", f"sqlite:///{tmp / 'fleet.db'}", 1),
                ("postgresql, 1 replica", pg_store, 1),
                ("postgresql, 2 replicas", pg_store, 2),
            )
            for label, store, count in runs:
                setups[label] = await _measure(report, label, config, store, count, args, tmp)
            catch_up = _catch_up_cost(report, args.pg_url, schema, tmp)
    finally:
        _drop_schema(args.pg_url, schema)
    sqlite, pg1, pg2 = (setups[label] for label, _, _ in runs)
    report.add("postgresql 1 replica / sqlite: calls/s", pg1["calls_per_s"] / sqlite["calls_per_s"], "x")
    report.add("postgresql 1 replica / sqlite: p50", pg1["p50_ms"] / sqlite["p50_ms"], "x")
    scaling = pg2["calls_per_s"] / pg1["calls_per_s"]
    report.add("2 replicas / 1 replica on postgresql: calls/s", scaling, "x")
    share = catch_up["postgresql"] * 1e3 / pg1["p50_ms"]
    report.add("catch-up query / call p50 (postgresql)", share * 100, "%")
    report.data["catch_up_seconds"] = catch_up
    report.data["scaling"] = {
        "two_over_one": round(scaling, 3),
        "machine_cores": os.cpu_count(),
        "note": (
            "the load generator, the replicas, their upstreams and PostgreSQL share the machine's "
            "cores; see machine_busy_fraction and the cpu_cores_* figures of each set-up"
        ),
    }
    return report


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(args: argparse.Namespace) -> BenchReport:
    """Run the benchmark (see the module docstring)."""
    return anyio.run(_run, args)
