"""One Session used from several threads at once: refused with ``ConcurrentUse``, never corrupted.

A Session is driven by one thread at a time. Eight threads on one Session used to interleave
inside operations (two calls numbered alike, a plan applied over a half-applied call) and left
a journal that could not be reopened. Now an operation that changes the session, entered while
another thread's runs, raises ``ConcurrentUse`` and changes nothing.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from residency import Budget, ConcurrentUse, MemoryStore, ResidencyError, Session, SQLiteStore
from residency._runtime._guard import CHANGES, READS

SID = "threads"
THREADS = 8
ROUNDS = 60
TOOLS = [
    {"name": f"tool_{i}", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    for i in range(6)
]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
        return
    # durability "normal": no fsync per operation, so many more operations overlap per second
    with SQLiteStore(tmp_path / "threads.db", durability="normal") as s:
        yield s


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter can, so operations interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class _YieldingClock:
    """Gives the processor (and the GIL) away inside every operation, as a store write does, so
    the other threads run while one is inside an operation."""

    def now(self) -> float:
        os.sched_yield()
        return 0.0


def _hammer(session: Session, worker: int, start: threading.Barrier, refused: Counter[str]) -> None:
    start.wait()
    for n in range(ROUNDS):
        try:
            match n % 4:
                case 0 | 1:
                    session.admit_call(f"tool_{(worker + n) % 6}", {"n": n}, reexpand_evicted=True)
                case 2:
                    session.add_span(f"worker {worker} round {n}", tags=["plan"])
                case _:
                    session.plan_turn(Budget(schema_tokens=150, argument_tokens=60))
        except ConcurrentUse:
            refused["concurrent"] += 1
        except ResidencyError as exc:  # a refusal on the merits (e.g. a tombstoned tool)
            refused[type(exc).__name__] += 1


@pytest.mark.usefixtures("busy_switching")
def test_eight_threads_on_one_session_are_refused_not_interleaved(store: Any) -> None:
    session = Session(store, session_id=SID, clock=_YieldingClock())
    session.register_tools(TOOLS)
    start = threading.Barrier(THREADS)
    refused: Counter[str] = Counter()
    threads = [threading.Thread(target=_hammer, args=(session, w, start, refused)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive()
    journal = store.load(SID)
    ids = [e.data["id"] for e in journal if e.op in ("call", "span_add")]
    assert len(ids) == len(set(ids)), "an id was issued twice"
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1))
    reopened = Session(store, session_id=SID)
    assert reopened.snapshot() == session.snapshot()
    session.check_invariants()  # the live state breaks no invariant either
    assert refused["concurrent"] > 0, "the threads never overlapped: the test proved nothing"


class _GatedClock:
    """A clock that holds the first thread reading it inside the operation that reads it."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.hold = False

    def now(self) -> float:
        if self.hold:
            self.hold = False
            self.inside.set()
            assert self.release.wait(60)
        return 0.0


def test_an_operation_entered_while_another_thread_is_inside_one_changes_nothing() -> None:
    clock = _GatedClock()
    session = Session(MemoryStore(), session_id=SID, clock=clock)
    session.register_tools(TOOLS)
    clock.hold = True
    worker = threading.Thread(target=session.admit_call, args=("tool_0", {"n": 1}))
    worker.start()
    assert clock.inside.wait(60)  # the worker is inside admit_call, before its journal write
    before = session.snapshot()
    with pytest.raises(ConcurrentUse):
        session.admit_call("tool_1", {"n": 2})
    with pytest.raises(ConcurrentUse):
        session.add_span("text")
    with pytest.raises(ConcurrentUse):
        session.plan_turn(Budget(schema_tokens=100, argument_tokens=100))
    assert session.snapshot() == before
    clock.release.set()
    worker.join(60)
    assert [c.id for c in session.resident_calls()] == ["c1"]
    assert session.admit_call("tool_1", {"n": 2}).id == "c2"  # free again once it returned


def test_the_thread_inside_an_operation_may_call_the_session_again() -> None:
    """A revocation callback runs inside ``archive_chain`` and may use the session."""
    seen: list[str] = []
    holder: list[Session] = []

    def revoke(ref: str) -> bool:
        seen.append(holder[0].add_span(f"revoked {ref}").id)
        return True

    session = Session(MemoryStore(), session_id=SID, revoke=revoke)
    holder.append(session)
    session.register_tools(TOOLS)
    session.archive_chain(["tool_0", "tool_1"], "payload too large", {"all": []}, credentials=["key-1"])
    assert seen == ["s1"]
    assert session.revocations() == {"key-1": True}


def test_every_public_method_is_guarded_or_only_reads() -> None:
    public = {n for n, v in inspect.getmembers(Session) if not n.startswith("_") and inspect.isfunction(v)}
    assert set(CHANGES).isdisjoint(READS)
    assert public == set(CHANGES) | set(READS), "classify new public methods in residency._runtime._guard"
    for name in CHANGES:
        assert hasattr(getattr(Session, name), "__wrapped__"), f"{name} is not guarded"
