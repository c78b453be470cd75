"""Crash test with real processes: SIGKILL a worker mid-stream, then check the file.

The worker (``tests/_crash_worker.py``) applies random span, tool and raw-batch operations to
one SQLite store and prints a line after each one returns, saving a checkpoint every few
journal entries. The parent kills it with SIGKILL after a random number of acknowledgements
(so at a random point of whatever it is doing next, checkpoint saves included), then checks:
the file passes ``PRAGMA integrity_check``; the session reopens, from its checkpoint if it has
one, to the state a full replay of the journal gives; every acknowledged operation is there;
no span is lost; every journal batch is whole.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from residency import MemoryStore, Session, SpanState, SQLiteStore
from residency._store._protocol import content_key

from ._crash_worker import BATCHES, SESSION
from ._processes import reap
from ._timing import START

ROOT = Path(__file__).resolve().parent.parent
KILLS = 50
CHECKPOINT_EVERY = 3  # small: checkpoint saves are a good part of what the worker does

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _run_and_kill(db: Path, seed: int, acks_before_kill: int) -> list[dict[str, Any]]:
    """Start a worker, read ``acks_before_kill`` acks, SIGKILL it; every ack it printed."""
    process = await anyio.open_process(
        [sys.executable, "-m", "tests._crash_worker", str(db), str(seed), str(CHECKPOINT_EVERY)],
        cwd=ROOT,
        stderr=None,
    )
    assert process.stdout is not None
    stream = BufferedByteReceiveStream(process.stdout)
    lines: list[bytes] = []
    try:
        while len(lines) < acks_before_kill:
            lines.append(await stream.receive_until(b"\n", 1 << 20))
        with anyio.CancelScope(shield=True):
            process.send_signal(signal.SIGKILL)
            await process.wait()
        # Lines flushed before the kill are acknowledged too; a torn last line is not.
        rest = b""
        try:
            while True:
                rest += await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        lines.extend(line for line in rest.split(b"\n") if line)
    finally:
        await reap(process)  # shielded: a timed-out test leaves no worker and no open pipe
    acks = []
    for line in lines:
        try:
            acks.append(json.loads(line))
        except ValueError:
            assert line is lines[-1], "only the last line can be torn by the kill"
    assert process.returncode == -signal.SIGKILL
    return acks


def _check(db: Path, acks: list[dict[str, Any]]) -> None:
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        seqs = [
            r[0] for r in raw.execute("SELECT seq FROM journal WHERE session_id = ? ORDER BY seq", (SESSION,))
        ]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        raw.close()

    store = SQLiteStore(db)
    try:
        saved = store.load_checkpoint(SESSION)
        session = Session(store, session_id=SESSION)  # restores, then replays every whole batch
        # A checkpoint that survived the kill is whole: it is the one used, and it gives what
        # replaying the whole journal gives.
        assert session.restored_from == (saved[0] if saved else 0)
        replay = MemoryStore()
        replay.append(SESSION, store.load(SESSION))
        assert Session(replay, session_id=SESSION).snapshot() == session.snapshot()
        spans = {r.id: r for r in session.spans()}
        parts: Counter[str] = Counter()
        sizes: dict[str, int] = {}
        for entry in store.load(BATCHES):
            parts[entry.data["batch"]] += 1
            sizes[entry.data["batch"]] = entry.data["n"]
        assert all(parts[b] == sizes[b] for b in parts), "a batch was half-applied"

        for ack in acks:
            op = ack["op"]
            if op == "add":
                assert spans[ack["id"]].key == ack["key"]
            elif op == "externalize":
                assert session.externalized_copy(ack["id"])
                assert store.get_content(ack["key"])
            elif op == "evict":
                assert all(session.externalized_copy(i) for i in ack["ids"])
            elif op == "restore":
                assert ack["text_key"] == ack["key"]
            elif op == "summarize":
                assert spans[ack["id"]].provenance == tuple(ack["sources"])
            elif op == "batch":
                assert parts[ack["batch"]] == ack["n"]
            elif op == "call":
                assert session.call(ack["id"])
            elif op == "turn":
                assert session.turn >= ack["turn"]

        # No span is lost: whatever left the window is in the content store, byte for byte.
        for record in spans.values():
            if session.span_state(record.id) is not SpanState.RESIDENT:
                assert content_key(store.get_content(record.key)) == record.key
            if record.precondition:
                assert session.span_state(record.id) is not SpanState.EVICTED
        keys = {r.key for r in spans.values()}
        assert all(item.key in keys for item in session.window())  # resident text reads back
    finally:
        store.close()


async def test_a_sigkilled_worker_never_loses_an_acknowledged_operation(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rnd = random.Random(20261129)
    acknowledged: list[dict[str, Any]] = []
    for kill in range(KILLS):
        with anyio.fail_after(START):  # per worker: it starts Python, then acks within a moment
            acks = await _run_and_kill(db, seed=kill, acks_before_kill=rnd.randint(1, 30))
        acknowledged.extend(acks)
        _check(db, acknowledged)
    assert sum(a["op"] == "add" for a in acknowledged) > KILLS
    store = SQLiteStore(db)
    saved = store.load_checkpoint(SESSION)
    store.close()
    assert saved is not None and saved[0] > len(acknowledged) // 2  # checkpoints were saved throughout
    assert {a["op"] for a in acknowledged} >= {"add", "externalize", "evict", "summarize", "batch"}
