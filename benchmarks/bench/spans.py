"""``python -m benchmarks spans``: what externalizing, restoring and reopening spans cost in SQLite.

Figures, each a ratio against raw ``sqlite3`` doing the same I/O in the same run, on a file
in the same folder with the same pragmas (WAL, the same ``synchronous`` setting):

* ``externalize``: ``Session.externalize`` (content write, then a journal append: two durable
  transactions) against one raw insert of the same bytes (target <= 3x);
* ``restore``: ``Session.restore`` (a verified read, then a journal append) against a raw
  select of the same bytes plus a raw insert of a small row in one durable transaction
  (target <= 3x); its read path alone (``get_content`` with hash verification) against the
  raw select (target <= 3x);
* ``reopen``: opening the store and the session that holds all N spans with the default
  configuration: restore its checkpoint, then replay the journal after it. The tail is the
  worst case, ``DEFAULT_CHECKPOINT_EVERY - 1`` entries (a session saves a checkpoint every
  ``DEFAULT_CHECKPOINT_EVERY``). Against a raw select of all the session's journal rows, which
  is what rebuilding the state from raw sqlite3 would have to read (target <= 3x);
* ``reopen, full replay``: the same store with its checkpoint deleted, so the whole journal is
  replayed (what a store written before checkpoints, or with an unusable one, costs; no target);
* ``checkpoint save``: one ``Session.checkpoint()`` of the whole state (encode and durable
  write), and that cost spread over the ``DEFAULT_CHECKPOINT_EVERY`` entries between two
  automatic checkpoints. The per-operation figures above are timed with automatic checkpoints
  off, so this is what the default configuration adds to them;
* ``reopen 100 sessions``: opening a store of 100 sessions and each session (seconds), with
  the same kind of raw select as baseline. These sessions are shorter than one checkpoint
  interval, so each is replayed in full.

Per-operation costs are timed on ``--sample`` spans of a store that holds all ``--spans``;
setup runs with ``synchronous=NORMAL`` to save time and is not timed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from residency._bench._report import BenchReport
from residency._runtime import Session
from residency._runtime._journal import DEFAULT_CHECKPOINT_EVERY
from residency._store._protocol import content_key
from residency._store._sqlite import SQLiteStore

SMALL_ARGS = ["--spans", "10000", "--sample", "1000", "--per-session", "20"]
_CHUNK = 50
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 _-=+(){}[];:,."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spans", type=int, default=100_000, help="spans in the store (default 100000)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per span (default 1024)")
    parser.add_argument(
        "--sample", type=int, default=10_000, help="spans timed per operation (default 10000)"
    )
    parser.add_argument(
        "--sessions", type=int, default=100, help="sessions in the reopen store (default 100)"
    )
    parser.add_argument("--per-session", type=int, default=100, help="spans per session there (default 100)")
    parser.add_argument(
        "--durability", choices=["full", "normal"], default="full", help="store durability (default full)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="folder for the database files (default: a temp dir)"
    )
    parser.add_argument("--seed", type=int, default=7)


def _texts(rng: random.Random, n: int, size: int) -> list[str]:
    return ["".join(rng.choices(_ALPHABET, k=size)) for _ in range(n)]


def _raw(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS content (key TEXT PRIMARY KEY, bytes BLOB NOT NULL)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS journal (id INTEGER PRIMARY KEY, session_id TEXT, op TEXT, data TEXT)"
    )
    return conn


def _interleaved(n: int, ours: Callable[[int], object], raw: Callable[[int], object]) -> tuple[float, float]:
    """Seconds per call of ``ours(i)`` and ``raw(i)`` for i < n, timed in alternating chunks.

    Alternating keeps background disk load (and WAL checkpoints) from landing on one side only.
    """
    totals = [0.0, 0.0]
    for lo in range(0, n, _CHUNK):
        for side, fn in enumerate((ours, raw)):
            start = time.perf_counter()
            for i in range(lo, min(lo + _CHUNK, n)):
                fn(i)
            totals[side] += time.perf_counter() - start
    return totals[0] / max(n, 1), totals[1] / max(n, 1)


def _median_time(fn: Any, repeat: int = 3) -> float:
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        rounds.append(time.perf_counter() - start)
    return statistics.median(rounds)


def run(args: argparse.Namespace) -> BenchReport:
    report = BenchReport("spans")
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="residency-bench-", dir=args.dir))
    try:
        _spans(report, args, rng, folder)
        _sessions(report, args, rng, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report.data["arguments"] = {k: str(v) for k, v in vars(args).items() if k not in ("run", "module")}
    return report


def _spans(report: BenchReport, args: argparse.Namespace, rng: random.Random, folder: Path) -> None:
    n, sample = args.spans, min(args.sample, args.spans)
    texts = _texts(rng, n, args.size)
    path = folder / "spans.db"

    setup = SQLiteStore(path, durability="normal")
    session = Session(setup, session_id="bench", checkpoint_every=0)
    ids = [session.add_span(t, tags=["diff"], source="bench").id for t in texts]
    setup.close()

    raw = _raw(folder / "raw.db", args.durability.upper())
    blobs = [t.encode() for t in texts]
    keys = [content_key(b) for b in blobs]
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO content VALUES (?, ?)", zip(keys[sample:], blobs[sample:], strict=True))
    raw.execute("COMMIT")

    store = SQLiteStore(path, durability=args.durability)
    session = Session(store, session_id="bench", checkpoint_every=0)

    def raw_insert(i: int) -> None:
        raw.execute("INSERT INTO content VALUES (?, ?)", (keys[i], blobs[i]))

    externalize, raw_insert_t = _interleaved(sample, lambda i: session.externalize(ids[i]), raw_insert)
    store.close()
    rest = SQLiteStore(path, durability="normal")
    session = Session(rest, session_id="bench", checkpoint_every=0)
    for span_id in ids[sample:]:
        session.externalize(span_id)
    rest.close()

    store = SQLiteStore(path, durability=args.durability)
    session = Session(store, session_id="bench", checkpoint_every=0)
    picked = rng.sample(range(n), sample)

    def raw_select(i: int) -> None:
        raw.execute("SELECT bytes FROM content WHERE key = ?", (keys[picked[i]],)).fetchone()

    def raw_select_write(i: int) -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw_select(i)
        raw.execute(
            "INSERT INTO journal (session_id, op, data) VALUES ('bench', 'restore', ?)", (ids[picked[i]],)
        )
        raw.execute("COMMIT")

    restore, raw_select_write_t = _interleaved(
        sample, lambda i: session.restore(ids[picked[i]]), raw_select_write
    )
    read, raw_select_t = _interleaved(sample, lambda i: store.get_content(keys[picked[i]]), raw_select)

    # A checkpoint of the whole state, then the longest tail the default interval leaves.
    saves = []
    for k in range(3):
        session.externalize(ids[picked[k]])
        start = time.perf_counter()
        session.checkpoint()
        saves.append(time.perf_counter() - start)
    checkpoint_s = statistics.median(saves)
    checkpoint_bytes = len((store.load_checkpoint("bench") or (0, b""))[1])
    tail = DEFAULT_CHECKPOINT_EVERY - 1
    toggled = [ids[picked[k]] for k in range(3, min(sample, 53))] or ids[:1]
    for k in range(tail):
        span_id = toggled[(k // 2) % len(toggled)]
        if k % 2:
            session.restore(span_id)
        else:
            session.externalize(span_id)
    entries = session.seq
    store.close()

    def reopen(at: Path = path) -> None:
        s = SQLiteStore(at, durability=args.durability)
        Session(s, session_id="bench")
        s.close()

    def raw_journal(at: Path = path) -> None:
        conn = sqlite3.connect(at)
        conn.execute("SELECT op, data, at FROM journal WHERE session_id = 'bench' ORDER BY seq").fetchall()
        conn.close()

    replayed = folder / "replayed.db"
    shutil.copyfile(path, replayed)
    with sqlite3.connect(replayed) as conn:
        conn.execute("DELETE FROM checkpoints")
    conn.close()

    reopen_s = _median_time(reopen)
    raw_reopen_s = _median_time(raw_journal)
    replay_s = _median_time(lambda: reopen(replayed))
    raw_replay_s = _median_time(lambda: raw_journal(replayed))
    raw.close()

    def ratio(name: str, ours: float, base: float) -> None:
        value = ours / base
        report.add(name, value, "x", "<= 3x", value <= 3)

    ratio("externalize / raw insert", externalize, raw_insert_t)
    ratio("restore / raw select+insert", restore, raw_select_write_t)
    ratio("restore read / raw select", read, raw_select_t)
    ratio(f"reopen {n:,} spans (checkpoint + {tail:,} entries) / raw select", reopen_s, raw_reopen_s)
    report.add(f"reopen {n:,} spans, full replay / raw select", replay_s / raw_replay_s, "x")
    report.add("full replay per journal entry", replay_s / entries * 1e6, "us")
    report.add(f"checkpoint save at {n:,} spans", checkpoint_s * 1e3, "ms")
    report.add("checkpoint save per journal entry", checkpoint_s / DEFAULT_CHECKPOINT_EVERY * 1e6, "us")
    report.data["spans"] = {
        "spans": n,
        "bytes_per_span": args.size,
        "sample": sample,
        "durability": args.durability,
        "journal_entries": entries,
        "us": {
            "externalize": externalize * 1e6,
            "raw_insert": raw_insert_t * 1e6,
            "restore": restore * 1e6,
            "restore_read": read * 1e6,
            "raw_select": raw_select_t * 1e6,
            "raw_select_and_insert": raw_select_write_t * 1e6,
        },
        "reopen_s": reopen_s,
        "raw_journal_select_s": raw_reopen_s,
        "reopen_tail_entries": tail,
        "full_replay_s": replay_s,
        "raw_journal_select_full_replay_file_s": raw_replay_s,
        "checkpoint_every": DEFAULT_CHECKPOINT_EVERY,
        "checkpoint_save_s": checkpoint_s,
        "checkpoint_bytes": checkpoint_bytes,
    }


def _sessions(report: BenchReport, args: argparse.Namespace, rng: random.Random, folder: Path) -> None:
    path = folder / "sessions.db"
    setup = SQLiteStore(path, durability="normal")
    tools = [
        {"name": f"tool_{i}", "description": "A tool.", "inputSchema": {"type": "object"}} for i in range(10)
    ]
    for i in range(args.sessions):
        s = Session(setup, session_id=f"agent-{i:03d}")
        s.register_tools(tools)
        for k, text in enumerate(_texts(rng, args.per_session, args.size)):
            span = s.add_span(text)
            if k % 2:
                s.externalize(span.id)
    setup.close()

    def reopen_all() -> None:
        store = SQLiteStore(path)
        for session_id in store.sessions():
            Session(store, session_id=session_id)
        store.close()

    def raw_all() -> None:
        conn = sqlite3.connect(path)
        conn.execute("SELECT session_id, op, data, at FROM journal ORDER BY session_id, seq").fetchall()
        conn.close()

    ours, base = _median_time(reopen_all), _median_time(raw_all)
    report.add(f"reopen {args.sessions} sessions", ours, "s")
    report.add(f"reopen {args.sessions} sessions / raw select", ours / base, "x")
    report.data["sessions"] = {
        "sessions": args.sessions,
        "spans_per_session": args.per_session,
        "reopen_s": ours,
        "raw_select_s": base,
    }
