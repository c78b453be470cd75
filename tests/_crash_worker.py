"""A worker for the crash test: random operations on a SQLite store, one ack line per operation.

Run as ``python -m tests._crash_worker DB SEED [CHECKPOINT_EVERY]``. It resumes the session
already in ``DB`` (from its checkpoint, if it has one) and applies random operations until
killed, saving a checkpoint every ``CHECKPOINT_EVERY`` journal entries (default 5). After each
operation returns (so after its journal batch is durable) it prints one JSON line and flushes:
everything printed is acknowledged and must survive a SIGKILL.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from residency import (
    Budget,
    JournalEntry,
    ResidencyError,
    Session,
    SpanState,
    SQLiteStore,
)
from residency._store._protocol import content_key

SESSION = "crash"
BATCHES = "crash-batches"
TAGS = ["constraint", "invariant", "diff", "plan", "negative_result"]
TOOLS: list[dict[str, Any]] = [
    {
        "name": f"tool_{i}",
        "description": f"Tool {i}.",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
    for i in range(3)
]


def _ack(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(path: str, seed: int, checkpoint_every: int = 5) -> None:
    rnd = random.Random(seed)
    store = SQLiteStore(path)
    s = Session(store, session_id=SESSION, checkpoint_every=checkpoint_every)
    s.register_tools(TOOLS)
    batch = len(store.load(BATCHES))  # a unique batch number base for this run
    n = 0
    while True:
        n += 1
        spans = s.spans()
        roll = rnd.random()
        try:
            if roll < 0.3 or not spans:
                tags = rnd.sample(TAGS, rnd.randint(0, 2))
                text = f"run {seed} op {n} " + "x" * rnd.randint(0, 3000)
                record = s.add_span(text, tags=tags, source="worker")
                _ack(op="add", id=record.id, key=record.key)
            elif roll < 0.45:
                span = rnd.choice(spans)
                if s.span_state(span.id) is not SpanState.EVICTED:
                    _ack(op="externalize", id=span.id, key=s.externalize(span.id))
            elif roll < 0.55:
                ids = [r.id for r in rnd.sample(spans, min(len(spans), rnd.randint(1, 3)))]
                s.evict_span(*ids)
                _ack(op="evict", ids=ids)
            elif roll < 0.62:
                span = rnd.choice(spans)
                _ack(
                    op="restore", id=span.id, key=span.key, text_key=content_key(s.restore(span.id).encode())
                )
            elif roll < 0.72:
                ids = [r.id for r in rnd.sample(spans, min(len(spans), rnd.randint(1, 4)))]
                summary = s.summarize(ids, f"summary {n}")
                _ack(op="summarize", id=summary.id, sources=ids)
            elif roll < 0.85:
                size = rnd.randint(2, 6)
                batch += 1
                entries = [
                    JournalEntry("part", {"batch": f"{seed}-{batch}", "i": i, "n": size}, 0.0)
                    for i in range(size)
                ]
                store.append(BATCHES, entries)
                _ack(op="batch", batch=f"{seed}-{batch}", n=size)
            elif roll < 0.93:
                name = rnd.choice(TOOLS)["name"]
                if s.state(name).value == "resident":
                    _ack(op="call", id=s.record_call(name, {"n": n}).id)
                else:
                    s.reexpand(name)
            else:
                plan = s.plan_turn(
                    Budget(schema_tokens=rnd.randint(0, 200), argument_tokens=rnd.randint(0, 30))
                )
                _ack(op="turn", turn=plan.turn)
        except ResidencyError as exc:
            _ack(op="refused", error=type(exc).__name__)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(a) for a in sys.argv[3:4]))
