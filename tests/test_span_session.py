"""Spans in a Session: the seed-002 scenario, summaries and provenance, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from residency import (
    IllegalTransition,
    IntegrityError,
    InvalidInput,
    MemoryStore,
    NotFound,
    Session,
    SpanState,
    UnrecoverablePruneError,
    UnverifiedSummary,
    WindowItemKind,
)
from residency._store._protocol import content_key

R, X, E = SpanState.RESIDENT, SpanState.EXTERNALIZED, SpanState.EVICTED


def _schema(amount_type: str) -> dict[str, Any]:
    return {
        "table": "payments",
        "environment": "production",
        "columns": {
            "id": {"type": "bigint", "nullable": False},
            "amount": {"type": amount_type, "nullable": False, "check": "amount >= 0"},
            "currency": {"type": "char(3)", "nullable": False},
        },
    }


@pytest.fixture
def session() -> Session:
    return Session(MemoryStore(), session_id="refactor")


def test_seed_002_the_schema_dump_survives_eviction_pressure_and_a_changed_live_schema(
    session: Session,
) -> None:
    live = _schema("numeric(12,2)")
    dump = json.dumps(live, indent=2)
    schema = session.add_span(dump, tags={"constraint", "scope_qualifier"}, source="tool:describe_table")
    diffs = [
        session.add_span(
            f"--- a/migrations/{i}.sql\n+ALTER TABLE payments ...{i}", tags=["diff"], source="tool:edit"
        )
        for i in range(3)
    ]

    # The pruner calls the schema dump "redundant, already summarized": refused, nothing changes.
    before = session.snapshot()
    with pytest.raises(UnrecoverablePruneError):
        session.evict_span(schema.id)
    with pytest.raises(UnrecoverablePruneError):
        session.evict_span(diffs[0].id, schema.id)
    assert session.snapshot() == before
    assert session.span_state(diffs[0].id) is R

    # Externalized first, it leaves as a pointer that shows the key, never as a paraphrase.
    key = session.externalize(schema.id)
    assert key == content_key(dump.encode()) == schema.key
    session.evict_span(schema.id, diffs[0].id)
    window = session.window()
    pointer = next(item for item in window if item.span_id == schema.id)
    assert pointer.kind is WindowItemKind.POINTER
    assert key in pointer.text
    assert dump not in pointer.text
    assert [item.span_id for item in window] == [schema.id, diffs[1].id, diffs[2].id]

    # The bad edits change the live schema; a "re-read" would now see the wrong constraints.
    live["columns"]["amount"] = {"type": "float", "nullable": True}
    reread = session.add_span(json.dumps(live, indent=2), source="tool:describe_table")
    assert reread.key != schema.key

    # Restoring gives the original bytes, as written, verified by hash.
    assert session.restore(schema.id) == dump
    assert session.reground(schema.id) == {schema.id: dump}
    assert session.span_state(schema.id) is R
    assert next(i for i in session.window() if i.span_id == schema.id).text == dump


def test_an_evicted_diff_is_gone_from_the_window_but_still_in_the_store(session: Session) -> None:
    diff = session.add_span("+ one line", tags={"diff"})
    session.evict_span(diff.id)
    assert session.span_state(diff.id) is E
    assert session.window() == []
    assert session.store.get_content(diff.key) == b"+ one line"
    assert session.restore(diff.id) == "+ one line"
    assert [i.text for i in session.window()] == ["+ one line"]


def test_a_restored_precondition_span_can_leave_again_only_as_a_pointer(session: Session) -> None:
    span = session.add_span("x must be positive", tags={"invariant"})
    session.externalize(span.id)
    session.restore(span.id)
    session.evict_span(span.id)
    assert session.span_state(span.id) is X


def test_externalizing_twice_returns_the_same_key_and_journals_once(session: Session) -> None:
    span = session.add_span("a")
    key = session.externalize(span.id)
    length = len(session.store.load(session.session_id))
    assert session.externalize(span.id) == key
    assert len(session.store.load(session.session_id)) == length


def test_an_evicted_span_cannot_be_externalized_until_restored(session: Session) -> None:
    span = session.add_span("a")
    session.evict_span(span.id)
    with pytest.raises(IllegalTransition):
        session.externalize(span.id)


def test_a_summary_records_provenance_and_depth_and_its_sources_leave(session: Session) -> None:
    a = session.add_span("column amount is numeric(12,2)", tags={"constraint"})
    b = session.add_span("diff 1")
    session.externalize(a.id)
    summary = session.summarize([a.id, b.id], "schema constraints verified", source="model")
    assert summary.provenance == (a.id, b.id)
    assert summary.derivation_depth == 1
    assert summary.verified and not summary.grounded
    assert session.span_state(a.id) is X  # a precondition stays as a pointer
    assert session.span_state(b.id) is E
    assert session.may_justify(summary.id)
    assert session.require_verified(summary.id) == summary


def test_summarizing_a_precondition_span_that_was_not_externalized_is_refused(session: Session) -> None:
    a = session.add_span("never retry with payload > 5 MB: it times out", tags={"negative_result"})
    b = session.add_span("plan")
    before = session.snapshot()
    with pytest.raises(UnrecoverablePruneError):
        session.summarize([a.id, b.id], "tried things")
    assert session.snapshot() == before


def test_a_summary_of_a_summary_is_refused_until_regrounded(session: Session) -> None:
    a, b, c = (session.add_span(t) for t in ("verified against production, not staging", "diff", "plan"))
    first = session.summarize([a.id, b.id], "verified")
    before = session.snapshot()
    with pytest.raises(UnrecoverablePruneError):
        session.summarize([first.id, c.id], "ok")
    assert session.snapshot() == before

    originals = session.reground(first.id)
    assert originals == {a.id: "verified against production, not staging", b.id: "diff"}
    assert session.span(first.id).grounded
    second = session.summarize([first.id, c.id], "verified against production")
    assert second.derivation_depth == 2
    with pytest.raises(UnrecoverablePruneError):
        session.summarize([second.id], "ok")


def test_a_summary_with_no_sources_is_unverified_and_cannot_justify(session: Session) -> None:
    summary = session.summarize([], "schema constraints verified")
    assert not summary.verified
    assert not session.may_justify(summary.id)
    with pytest.raises(UnverifiedSummary) as info:
        session.require_verified(summary.id)
    assert info.value.span == summary.id and info.value.unresolved == ()
    with pytest.raises(UnverifiedSummary):
        session.reground(summary.id)


def test_a_summary_whose_source_bytes_were_tampered_no_longer_resolves() -> None:
    store = MemoryStore()
    session = Session(store)
    a, b = session.add_span("original"), session.add_span("other")
    summary = session.summarize([a.id, b.id], "sum")
    assert session.may_justify(summary.id)
    store._content[a.key] = b"forged"
    assert not session.may_justify(summary.id)
    with pytest.raises(UnverifiedSummary) as info:
        session.require_verified(summary.id)
    assert info.value.unresolved == (a.id,)
    with pytest.raises(IntegrityError):
        session.restore(a.id)
    assert session.span_state(a.id) is E


def test_an_unverified_summary_can_be_neither_regrounded_nor_summarized() -> None:
    session = Session()
    empty = session.summarize([], "claims")
    with pytest.raises(UnverifiedSummary):
        session.reground(empty.id)
    with pytest.raises(UnrecoverablePruneError):
        session.summarize([empty.id], "claims again")


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.span("s99"),
        lambda s: s.externalize("s99"),
        lambda s: s.evict_span("s1", "s99"),
        lambda s: s.restore("s99"),
        lambda s: s.reground("s99"),
        lambda s: s.summarize(["s1", "s99"], "x"),
        lambda s: s.may_justify("s99"),
        lambda s: s.require_verified("s99"),
        lambda s: s.span_state(None),
    ],
)
def test_unknown_span_ids_are_errors_and_change_nothing(session: Session, call: Any) -> None:
    session.add_span("a")
    before = session.snapshot()
    with pytest.raises(NotFound):
        call(session)
    assert session.snapshot() == before
    assert session.span_state("s1") is R


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda s: s.add_span(b"bytes"), "text"),
        (lambda s: s.add_span("x", tags="constraint"), "tags"),
        (lambda s: s.add_span("x", source=3), "source"),
        (lambda s: s.summarize("s1", "x"), "span_ids"),
        (lambda s: s.summarize(["s1"], None), "text"),
    ],
)
def test_malformed_span_input_is_refused_with_where(session: Session, call: Any, where: str) -> None:
    session.add_span("a")
    before = session.snapshot()
    with pytest.raises(InvalidInput) as info:
        call(session)
    assert info.value.where == where
    assert session.snapshot() == before


def test_the_journal_reproduces_spans_and_replaying_twice_equals_once() -> None:
    store = MemoryStore()
    s = Session(store, session_id="j")
    a = s.add_span("schema", tags={"constraint"})
    b = s.add_span("diff")
    s.externalize(a.id)
    summary = s.summarize([a.id, b.id], "sum")
    s.reground(summary.id)
    s.restore(b.id)
    once = Session(store, session_id="j")
    assert once.snapshot() == s.snapshot()
    assert once.window() == s.window()
    assert Session(store, session_id="j").snapshot() == once.snapshot()
