"""Store agreement: the same random sessions on MemoryStore and SQLiteStore (and PostgresStore,
with ``RESIDENCY_PG_URL``), step by step.

Each rule runs on both sessions; both must answer alike (the same result or the same error
type) and end in equal snapshots. A plain model of the span lifecycle checks the span states.
The crash rule kills the durable side mid-transaction (mid-append, and optionally mid-checkpoint)
and reopens it from the file: the recovered session must equal the in-memory one, which is
reopened from its own store too. Both sides save a checkpoint every few entries (and on the
checkpoint rule), so reopens restore a checkpoint and replay its tail; a checkpoint that exists
must be the one used.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from residency import (
    PRECONDITION_TAGS,
    Budget,
    IllegalTransition,
    MemoryStore,
    ResidencyError,
    Session,
    SpanState,
    SQLiteStore,
    ToolState,
    UnrecoverablePruneError,
    WindowItemKind,
)
from tests._tiers import examples

from .postgres import drop_schema, new_schema, pg_url, with_params

R, X, E = SpanState.RESIDENT, SpanState.EXTERNALIZED, SpanState.EVICTED
NAMES = [f"tool_{i}" for i in range(4)]
TAGS = ["constraint", "invariant", "diff", "plan", "negative_result", "scope_qualifier"]
SESSION = "agreement"
EVERY = 4  # journal entries between automatic checkpoints: small, so reopens use them


def _tool(name: str, i: int) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": f"Tool {i}. " * (i + 1),
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    if i % 2:
        tool["annotations"] = {"readOnlyHint": True}
    return tool


class Tick:
    """A clock that advances one second per read: the same on both sides."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def now(self) -> float:
        self.t += 1.0
        return self.t


class ModelSpan:
    def __init__(self, tags: frozenset[str], depth: int = 0) -> None:
        self.tags = tags
        self.state = R
        self.copy = False
        self.depth = depth
        self.grounded = depth == 0
        self.verified = True

    @property
    def precondition(self) -> bool:
        return bool(self.tags & PRECONDITION_TAGS)

    def evict_target(self) -> SpanState | None:
        """None: refused as unrecoverable."""
        if self.state is E:
            return E
        if self.precondition:
            return X if (self.copy or self.state is X) else None
        return E


class StoreAgreement(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="residency-agreement-"))
        self.path = self.dir / "store.db"
        self.mem_clock, self.sql_clock = Tick(), Tick()
        self.mem_store = MemoryStore()
        self.mem = Session(self.mem_store, session_id=SESSION, clock=self.mem_clock, checkpoint_every=EVERY)
        self.sql_store = self.open_durable()
        self.sql = Session(self.sql_store, session_id=SESSION, clock=self.sql_clock, checkpoint_every=EVERY)
        self.spans: dict[str, ModelSpan] = {}
        self.registered: set[str] = set()

    def open_durable(self) -> Any:
        """The store compared with the in-memory one (opened again after each crash)."""
        return SQLiteStore(self.path)

    def both(self, op: Callable[[Session], Any]) -> tuple[str, Any]:
        outcomes = []
        for session in (self.mem, self.sql):
            try:
                outcomes.append(("ok", op(session)))
            except ResidencyError as exc:
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1]
        return outcomes[0]

    # -- tools -------------------------------------------------------------------------------

    @rule(count=st.integers(1, len(NAMES)), redefine=st.booleans())
    def register(self, count: int, redefine: bool) -> None:
        tools = [_tool(n, i) for i, n in enumerate(NAMES[:count])]
        if redefine:
            tools[0]["description"] += " (changed upstream)"
        self.both(lambda s: s.register_tools(tools))
        self.registered |= set(NAMES[:count])

    @rule(name=st.sampled_from(NAMES), n=st.integers(0, 3))
    def call(self, name: str, n: int) -> None:
        self.both(lambda s: s.record_call(name, {"n": n}))

    @rule(limit=st.integers(0, 6))
    def scope_calls(self, limit: int) -> None:
        # The session joined the default scope at its first write; its calls are the scope's.
        mem = self.mem_store.scope_calls("default", limit)
        assert self.sql_store.scope_calls("default", limit) == mem
        assert self.sql_store.scope_calls("default", limit, exclude=SESSION) == []

    @rule(data=st.data())
    def evict_arguments(self, data: st.DataObject) -> None:
        ids = [c.id for c in self.mem.resident_calls()] + ["c999"]
        call_id = data.draw(st.sampled_from(ids))
        self.both(lambda s: s.evict_arguments(call_id))

    @rule(name=st.sampled_from(NAMES), trigger=st.sampled_from(["prune", "evict", "reexpand"]))
    def tool_transition(self, name: str, trigger: str) -> None:
        self.both(lambda s: getattr(s, trigger)(name))

    @rule(schema=st.integers(0, 300), arguments=st.integers(0, 40))
    def plan_turn(self, schema: int, arguments: int) -> None:
        self.both(lambda s: s.plan_turn(Budget(schema_tokens=schema, argument_tokens=arguments)))

    # -- spans -------------------------------------------------------------------------------

    @rule(text=st.text(max_size=40), tags=st.sets(st.sampled_from(TAGS), max_size=2))
    def add_span(self, text: str, tags: set[str]) -> None:
        kind, record = self.both(lambda s: s.add_span(text, tags=tags, source="tool:test"))
        assert kind == "ok"
        self.spans[record.id] = ModelSpan(frozenset(tags))

    def _span_id(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*sorted(self.spans), "s999"]))

    @rule(data=st.data())
    def externalize(self, data: st.DataObject) -> None:
        span_id = self._span_id(data)
        kind, key = self.both(lambda s: s.externalize(span_id))
        model = self.spans.get(span_id)
        if model is None or model.state is E:
            assert kind == "error"
            return
        assert kind == "ok"
        assert key == self.mem.span(span_id).key
        model.state, model.copy = X, True

    @rule(data=st.data())
    def evict_span(self, data: st.DataObject) -> None:
        span_id = self._span_id(data)
        kind, result = self.both(lambda s: s.evict_span(span_id))
        model = self.spans.get(span_id)
        dest = None if model is None else model.evict_target()
        if dest is None:
            assert kind == "error"
            assert model is None or result is UnrecoverablePruneError
            return
        assert kind == "ok"
        assert model is not None
        model.copy = model.copy or model.state is R
        model.state = dest

    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        span_id = self._span_id(data)
        kind, _ = self.both(lambda s: s.restore(span_id))
        model = self.spans.get(span_id)
        assert kind == ("error" if model is None else "ok")
        if model is not None:
            model.state = R

    @rule(data=st.data())
    def reground(self, data: st.DataObject) -> None:
        span_id = self._span_id(data)
        kind, _ = self.both(lambda s: s.reground(span_id))
        model = self.spans.get(span_id)
        if model is not None and kind == "ok":
            model.grounded = True

    @precondition(lambda self: bool(self.spans))
    @rule(data=st.data(), text=st.text(max_size=20))
    def summarize(self, data: st.DataObject, text: str) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.spans)), max_size=3, unique=True))
        sources = [self.spans[i] for i in ids]
        refused = any(m.depth >= 1 and not m.grounded for m in sources) or any(
            m.evict_target() is None for m in sources
        )
        kind, result = self.both(lambda s: s.summarize(ids, text))
        if refused:
            assert (kind, result) == ("error", UnrecoverablePruneError)
            return
        assert kind == "ok"
        for m in sources:
            dest = m.evict_target()
            assert dest is not None
            m.copy = m.copy or m.state is R
            m.state = dest
        summary = ModelSpan(frozenset(), depth=1 + max((m.depth for m in sources), default=0))
        summary.verified = bool(sources) and all(m.verified for m in sources)
        assert result.derivation_depth == summary.depth and result.verified == summary.verified
        self.spans[result.id] = summary

    # -- checkpoints and crashes -------------------------------------------------------------

    @rule()
    def checkpoint(self) -> None:
        kind, seq = self.both(lambda s: s.checkpoint())
        assert kind == "ok"
        # The blobs may differ in which equal strings they share; what they restore is compared
        # by the crash rule.
        for store in (self.sql_store, self.mem_store):
            saved = store.load_checkpoint(SESSION)
            assert (saved[0] if saved else 0) == seq

    def die_mid_transaction(self, rows: int, torn_checkpoint: bool) -> None:
        """The durable side's writer dies with ``rows`` entries (and a checkpoint) uncommitted."""
        conn = self.sql_store._conn
        assert conn is not None
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM journal WHERE session_id = ?", (SESSION,)
        ).fetchone()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO journal (session_id, seq, op, data, at) VALUES (?, ?, 'span_add', '{}', 0)",
            [(SESSION, last + i) for i in range(1, rows + 1)],
        )
        if torn_checkpoint:
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (SESSION,))
            conn.execute(
                "INSERT INTO checkpoints (session_id, part, seq, bytes) VALUES (?, 0, ?, x'00')",
                (SESSION, last + rows),
            )
        conn.close()  # no COMMIT: the half-written batch must vanish
        self.sql_store._conn = None

    @rule(rows=st.integers(1, 3), torn_checkpoint=st.booleans())
    def crash_and_reopen(self, rows: int, torn_checkpoint: bool) -> None:
        """The durable side dies in the middle of a batch: its connection goes without commit.

        With ``torn_checkpoint`` it dies while replacing its checkpoint too: the previous
        checkpoint must survive whole and be the one the reopen restores.
        """
        saved = self.sql_store.load_checkpoint(SESSION)
        self.die_mid_transaction(rows, torn_checkpoint)
        del self.sql
        self.sql_store = self.open_durable()
        self.sql = Session(self.sql_store, session_id=SESSION, clock=self.sql_clock, checkpoint_every=EVERY)
        assert self.sql_store.load_checkpoint(SESSION) == saved
        assert self.sql.restored_from == (saved[0] if saved else 0)
        event("reopened from a checkpoint" if saved else "reopened by a full replay")

        # The in-memory side reopens from its own store's checkpoint: nothing changes.
        before = self.mem.snapshot()
        saved = self.mem_store.load_checkpoint(SESSION)
        self.mem = Session(self.mem_store, session_id=SESSION, clock=self.mem_clock, checkpoint_every=EVERY)
        assert self.mem.restored_from == (saved[0] if saved else 0)
        assert self.mem.snapshot() == before
        assert self.sql.snapshot() == before

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def both_stores_agree(self) -> None:
        assert self.sql.snapshot() == self.mem.snapshot()

    @invariant()
    def no_ghost_tool(self) -> None:
        for name in self.mem.tools():
            if self.mem.arguments_resident(name):
                assert self.mem.state(name) is not ToolState.EVICTED

    @invariant()
    def span_states_match_the_model(self) -> None:
        assert {r.id: self.mem.span_state(r.id) for r in self.mem.spans()} == {
            i: m.state for i, m in self.spans.items()
        }

    @invariant()
    def precondition_spans_leave_only_as_pointers(self) -> None:
        pointers = {i.span_id: i for i in self.sql.window() if i.kind is WindowItemKind.POINTER}
        for record in self.sql.spans():
            state = self.sql.span_state(record.id)
            if record.precondition:
                assert state is not E
                if state is X:
                    assert record.key in pointers[record.id].text

    def teardown(self) -> None:
        self.sql_store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_an_illegal_span_trigger_changes_nothing_on_either_store(tmp_path: Path) -> None:
    for store in (MemoryStore(), SQLiteStore(tmp_path / "x.db")):
        s = Session(store)
        span = s.add_span("a")
        s.evict_span(span.id)
        before = s.snapshot()
        with pytest.raises(IllegalTransition):
            s.externalize(span.id)
        assert s.snapshot() == before


TestStoreAgreement = StoreAgreement.TestCase
TestStoreAgreement.settings = settings(
    max_examples=examples(60),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class PostgresAgreement(StoreAgreement):
    """The same rules with PostgreSQL as the durable side, one schema per example.

    The crash is a writer that dies (its connection closed) with rows and a torn checkpoint
    uncommitted, then the store is reopened by a fresh pool. Commits are asynchronous here
    (``synchronous_commit=off``): the server never crashes in this test, and it keeps it quick.
    """

    def open_durable(self) -> Any:
        if not hasattr(self, "pg_schema"):
            self.pg_base = pg_url()
            self.pg_schema = new_schema()
            self.pg_url = with_params(
                self.pg_base, schema=self.pg_schema, options="-c synchronous_commit=off"
            )
        from residency._store._postgres import PostgresStore

        return PostgresStore(self.pg_url)

    def die_mid_transaction(self, rows: int, torn_checkpoint: bool) -> None:
        import psycopg
        from psycopg import sql

        s = sql.Identifier(self.pg_schema)
        conn = psycopg.connect(self.pg_base)  # a transaction of its own, never committed
        row = conn.execute(
            sql.SQL("SELECT COALESCE(MAX(seq), 0) FROM {}.journal WHERE session_id = %s").format(s),
            (SESSION,),
        ).fetchone()
        assert row is not None
        (last,) = row
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {}.journal (session_id, seq, op, data, at) "
                    "VALUES (%s, %s, 'span_add', '{{}}', 0)"
                ).format(s),
                [(SESSION, last + i) for i in range(1, rows + 1)],
            )
        if torn_checkpoint:
            conn.execute(sql.SQL("DELETE FROM {}.checkpoints WHERE session_id = %s").format(s), (SESSION,))
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.checkpoints (session_id, part, seq, bytes) VALUES (%s, 0, %s, '\\x00')"
                ).format(s),
                (SESSION, last + rows),
            )
        conn.close()  # no COMMIT: the half-written batch must vanish
        self.sql_store.close()

    def teardown(self) -> None:
        super().teardown()
        if hasattr(self, "pg_schema"):
            drop_schema(self.pg_base, self.pg_schema)


TestPostgresAgreement = PostgresAgreement.TestCase
TestPostgresAgreement.settings = settings(
    max_examples=examples(25),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
