"""The span rules of the pure core: what may leave the window, and what a summary may claim."""

from __future__ import annotations

import itertools

import pytest

from residency import (
    PRECONDITION_TAGS,
    SPAN_LIFECYCLE,
    IllegalTransition,
    InvalidInput,
    SpanRecord,
    SpanState,
    UnrecoverablePruneError,
)
from residency._core._spans import (
    fire_span,
    parse_span_ids,
    parse_tags,
    pointer_text,
    summary_depth,
    summary_refusal,
    summary_verified,
)

R, X, E = SpanState.RESIDENT, SpanState.EXTERNALIZED, SpanState.EVICTED
KEY = "sha256:" + "ab" * 32


def _span(span_id: str = "s1", tags: frozenset[str] = frozenset(), **kw: object) -> SpanRecord:
    return SpanRecord(id=span_id, key=KEY, tags=tags, source="tool:x", **kw)  # type: ignore[arg-type]


def test_the_four_precondition_tags() -> None:
    assert frozenset({"invariant", "constraint", "negative_result", "scope_qualifier"}) == PRECONDITION_TAGS


@pytest.mark.parametrize("tag", sorted(PRECONDITION_TAGS))
def test_each_precondition_tag_makes_a_precondition_span(tag: str) -> None:
    assert _span(tags=frozenset({tag, "other"})).precondition
    assert not _span(tags=frozenset({"diff", "plan"})).precondition


@pytest.mark.parametrize("tag", sorted(PRECONDITION_TAGS))
def test_evicting_a_precondition_span_without_a_copy_is_unrecoverable(tag: str) -> None:
    with pytest.raises(UnrecoverablePruneError):
        fire_span(_span(tags=frozenset({tag})), R, "evict", externalized_copy=False)


def test_a_precondition_span_with_a_copy_leaves_only_as_a_pointer() -> None:
    span = _span(tags=frozenset({"constraint"}))
    assert fire_span(span, R, "evict", externalized_copy=True) is X
    assert fire_span(span, X, "evict", externalized_copy=True) is X


def test_an_ordinary_span_may_leave_entirely_from_the_window_or_a_pointer() -> None:
    span = _span()
    assert fire_span(span, R, "evict", externalized_copy=False) is E
    assert fire_span(span, R, "evict", externalized_copy=True) is E
    assert fire_span(span, X, "evict", externalized_copy=True) is E


def test_no_trigger_ever_takes_a_precondition_span_to_evicted() -> None:
    for state, trigger, copy in itertools.product(SpanState, SPAN_LIFECYCLE.triggers, (False, True)):
        dest = SPAN_LIFECYCLE.target(state, trigger, {"precondition": True, "externalized_copy": copy})
        assert dest is not E or state is E


def test_an_evicted_span_comes_back_only_by_restore() -> None:
    for trigger in SPAN_LIFECYCLE.triggers:
        dest = SPAN_LIFECYCLE.target(E, trigger, {"precondition": False, "externalized_copy": True})
        assert dest in (E, None) or trigger == "restore"
    with pytest.raises(IllegalTransition) as info:
        fire_span(_span(), E, "externalize", externalized_copy=True)
    assert (info.value.state, info.value.trigger) == ("evicted", "externalize")


def test_summary_depth_is_one_more_than_the_deepest_source() -> None:
    assert summary_depth([]) == 1
    assert summary_depth([_span("a"), _span("b")]) == 1
    deep = _span("c", provenance=("a",), derivation_depth=2, grounded=True)
    assert summary_depth([_span("a"), deep]) == 3


def test_summarizing_an_ungrounded_summary_is_refused() -> None:
    summary = _span("s3", provenance=("s1",), derivation_depth=1, grounded=False)
    refusal = summary_refusal([_span("s1"), summary])
    assert isinstance(refusal, UnrecoverablePruneError)
    assert summary_refusal([_span("s1"), _span("s3", provenance=("s1",), derivation_depth=1)]) is None


def test_a_summary_is_verified_only_with_sources_that_are_all_verified() -> None:
    assert not summary_verified([])
    assert summary_verified([_span("a"), _span("b")])
    unverified = _span("c", derivation_depth=1, verified=False)
    assert not summary_verified([_span("a"), unverified])


def test_the_pointer_shows_the_full_key_and_how_to_get_the_original() -> None:
    line = pointer_text(_span("s7", tags=frozenset({"constraint"})))
    assert KEY in line and "s7" in line and "constraint" in line and "restore" in line


def test_tags_must_be_a_collection_of_non_empty_strings() -> None:
    assert parse_tags(["constraint", "constraint", "diff"]) == frozenset({"constraint", "diff"})
    for bad, where in (("constraint", "tags"), ([""], "tags[0]"), (["ok", 3], "tags[1]"), (5, "tags")):
        with pytest.raises(InvalidInput) as info:
            parse_tags(bad)
        assert info.value.where == where


def test_span_ids_must_be_a_collection_of_strings() -> None:
    assert parse_span_ids(["s2", "s1", "s2"]) == ("s2", "s1")
    for bad in ("s1", None, ["s1", 2]):
        with pytest.raises(InvalidInput):
            parse_span_ids(bad)
