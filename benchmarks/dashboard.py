"""How long the dashboard's pages take the server with 1,000 sessions in the store.

Run from the repository root, with the project's venv active:

    python benchmarks/dashboard.py
    python benchmarks/dashboard.py --json benchmarks/results/dashboard.json
    python benchmarks/dashboard.py --postgres   # also over PostgreSQL (RESIDENCY_PG_URL)

To compare two builds on the same data, keep the stores and point the other build at them:
``--sqlite-file PATH`` and ``--pg-schema NAME`` fill the store only if it holds no session yet
and keep it afterwards (``PYTHONPATH=other/src python benchmarks/dashboard.py --sqlite-file ...``).
``--before OTHER.json`` then puts that build's figures beside this one's: each page gets
``p95_vs_before`` (this build's p95 over the other's, same store and data) and the output keeps
the other run's per-page p95 and machine load under ``before``.

A store is filled with ``--sessions`` sessions (default 1,000), each written through the runtime
as a gateway writes one: a catalog of 20 tools registered, ``--turns`` planned turns under a
schema budget (tools evicted and re-expanded by calls), tombstones, an archive and two spans with
a summary, about 60 journal entries a session. The dashboard over that store (the app
``residency ui`` serves, with a bearer token: the check is part of every request) is called
in process through an ASGI transport, so a request's time is the server's: routing, the token
check, the store reads in a worker thread and the HTML. Pages:

- ``sessions``: the list's first page (50 rows: each session's last entry and last turn);
- ``sessions_filtered``: the list filtered by id text (matching 1 session in 10);
- ``sessions_last_page``: the list's last page;
- ``sessions_any_page``: a page of the list drawn at random;
- ``session``: one session's page (what ``residency view`` reads, the timeline, spans, chains,
  plots), a session drawn at random each request: mostly a first view (replayed from its
  journal), as the dashboard keeps only the 64 sessions last viewed;
- ``chains``: the chain archive; ``stamp``: the live poll's question for a session page.

Baseline, measured in the same run against the same app: ``healthz`` (a route that reads
nothing). Rounds alternate the pages (the machine's noise hits all alike); the figures are
percentiles over every request of every round. Target: every page's p95 at most 200 ms
(``met``); each page's p95 is also reported as a ratio to the baseline's p95. The exit code is 1
when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from residency import Budget, SQLiteStore, ToolState
from residency._runtime import Session
from residency._store._protocol import Store
from residency._ui._front import store_dashboard
from residency._ui._reads import ServedWith

TARGET_P95_MS = 200.0
TOKEN = "a-benchmark-token-of-32-chars-xx"
TOOLS = 20


def _catalog(i: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"tool_{t:02d}",
            "description": f"Tool {t} of session {i}: reads or changes one record of the desk.",
            "inputSchema": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "note": {"type": "string", "maxLength": 200}},
                "required": ["id"],
            },
        }
        for t in range(TOOLS)
    ]


def fill(store: Store, sessions: int, turns: int) -> int:
    """Write ``sessions`` sessions (see the module docstring); returns the journal entries written."""
    budget = Budget(schema_tokens=400, argument_tokens=2_000, idle_turns=2)
    entries = 0
    for i in range(sessions):
        s = Session(store, session_id=f"gateway/sess-{i:04d}")
        s.register_tools(_catalog(i))
        for turn in range(turns):
            s.plan_turn(budget)
            name = f"tool_{(i + turn) % TOOLS:02d}"
            if s.state(name) is not ToolState.RESIDENT:
                s.reexpand(name)
            s.record_call(name, {"id": f"r{turn}"})
        for name in s.resident_tools()[:2]:
            s.tombstone(name)
        a = s.add_span(f"result {i} a", tags=["log"], source="tool:tool_01")
        b = s.add_span(f"result {i} b", source="tool:tool_02")
        s.summarize([a.id, b.id], f"summary of session {i}")
        entries += s.seq
    return entries


async def _measure(app: Any, sessions: int, rounds: int, per_round: int) -> dict[str, list[float]]:
    rng = random.Random(7)
    auth = {"authorization": f"Bearer {TOKEN}"}
    last_page = -(-sessions // 50)
    pages: dict[str, Callable[[], str]] = {
        "healthz": lambda: "/healthz",
        "sessions": lambda: "/ui/",
        "sessions_filtered": lambda: "/ui/?q=sess-00",
        "sessions_last_page": lambda: f"/ui/?page={last_page}",
        "sessions_any_page": lambda: f"/ui/?page={rng.randrange(1, last_page + 1)}",
        "session": lambda: f"/ui/session/gateway%2Fsess-{rng.randrange(sessions):04d}",
        "chains": lambda: "/ui/chains",
        "stamp": lambda: f"/ui/stamp?path=%2Fui%2Fsession%2Fgateway%252Fsess-{rng.randrange(sessions):04d}",
    }
    times: dict[str, list[float]] = {name: [] for name in pages}
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=120) as client:
        for name, path in pages.items():  # warm: imports, caches, the first thread
            assert (await client.get(path(), headers=auth)).status_code == 200, name
        for _ in range(rounds):
            for name, path in pages.items():
                for _ in range(per_round):
                    url = path()
                    started = time.perf_counter()
                    response = await client.get(url, headers=auth)
                    times[name].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 200, (name, url, response.status_code)
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _report(times: dict[str, list[float]]) -> dict[str, Any]:
    base = _percentile(times["healthz"], 0.95)
    pages: dict[str, dict[str, Any]] = {}
    p95s: dict[str, float] = {}
    for name, values in times.items():
        p95 = p95s[name] = _percentile(values, 0.95)
        pages[name] = {
            "requests": len(values),
            "p50_ms": round(statistics.median(values), 2),
            "p95_ms": round(p95, 2),
            "max_ms": round(max(values), 2),
            "p95_vs_healthz": round(p95 / base, 1) if base else None,
        }
    met = all(v <= TARGET_P95_MS for k, v in p95s.items() if k != "healthz")
    return {"pages": pages, "met": met}


def run(store: Store, where: str, sessions: int, turns: int, rounds: int, per_round: int) -> dict[str, Any]:
    started = time.perf_counter()
    kept = store.sessions()
    if kept:  # a kept store (see the module docstring): measured as it is
        sessions = len(kept)
        entries = sum(len(store.load(sid)) for sid in kept)
        filled_s = 0.0
    else:
        entries = fill(store, sessions, turns)
        filled_s = time.perf_counter() - started
    app = store_dashboard(
        store,
        ServedWith("compact", delivery="list"),
        where=where,
        host="127.0.0.1",
        token=TOKEN,
        loopback=True,
    )
    times = anyio.run(_measure, app, sessions, rounds, per_round)
    return {
        "store": where,
        "sessions": sessions,
        "journal_entries": entries,
        "fill_s": round(filled_s, 1),
    } | _report(times)


def _compare(results: dict[str, Any], before: dict[str, Any]) -> None:
    """Add ``before`` (another build's run on the same stores) to ``results`` (see the docstring)."""
    kept: dict[str, Any] = {"machine": before["machine"], "runs": []}
    for old in before["runs"]:
        p95s = {name: page["p95_ms"] for name, page in old["pages"].items()}
        kept["runs"].append({"store": old["store"], "met": old["met"], "p95_ms": p95s})
        for run in results["runs"]:
            if run["store"] == old["store"]:
                for name, page in run["pages"].items():
                    if p95s.get(name):
                        page["p95_vs_before"] = round(page["p95_ms"] / p95s[name], 2)
    results["before"] = kept


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per-round", type=int, default=8)
    p.add_argument("--postgres", action="store_true", help="also over PostgreSQL (RESIDENCY_PG_URL)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--sqlite-file", type=Path, help="the SQLite store to fill once and keep")
    p.add_argument("--pg-schema", help="the PostgreSQL schema to fill once and keep")
    p.add_argument("--before", type=Path, help="another build's results on the same stores, to compare")
    args = p.parse_args(argv)
    results: dict[str, Any] = {
        "target_p95_ms": TARGET_P95_MS,
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
            f"Python {platform.python_version()}"
        ),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(args.sqlite_file or Path(tmp) / "dashboard.db")
        try:
            results["runs"].append(
                run(store, "sqlite", args.sessions, args.turns, args.rounds, args.per_round)
            )
        finally:
            store.close()
    if args.postgres:
        from residency import PostgresStore

        url = os.environ["RESIDENCY_PG_URL"]
        schema = args.pg_schema or f"bench_dashboard_{os.getpid()}"
        pg = PostgresStore(url, schema=schema)
        try:
            results["runs"].append(
                run(pg, "postgresql", args.sessions, args.turns, args.rounds, args.per_round)
            )
        finally:
            import psycopg

            pg.close()
            if not args.pg_schema:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if args.before:
        _compare(results, json.loads(args.before.read_text()))
    results["met"] = all(r["met"] for r in results["runs"])
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if results["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
