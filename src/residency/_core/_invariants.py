"""The invariants of a session's state, checked whenever a session is opened.

Every state a journal replay can reach satisfies them; a state that breaks one came from a
damaged or forged checkpoint (or journal). Each function returns the first problem found, as
text, or None. They read a ``SessionState`` and only read it.

Tools:
    - every tool has a state, and its pinned hash and mutation flag are those of its definition;
    - no ghost tool: a tool whose state shows neither schema nor tombstone has no resident
      arguments (``TOOL_LIFECYCLE.is_ghost_target``);
    - call ids are ``c1 .. cN`` with no gap (the next id is ``c<N+1>``, so none is reused), each
      call names a known tool, and the resident calls are calls of the record;
    - the per-tool counts of resident calls and uses, and the resident argument total, agree
      with the records they count.

Deliveries:
    - delivery ids are ``r1 .. rN`` with no gap, each names known tools with one hash each, and
      the live ones are deliveries of the record;
    - the per-tool count of live deliveries showing its current definition agrees with them.

Spans:
    - span ids are ``s1 .. sN`` with no gap, each with a state;
    - a span that left the window has its bytes in the content store (``stored``); a resident
      span whose bytes are not stored has its text in memory;
    - no precondition span is evicted (it leaves only as a pointer);
    - a summary's provenance names earlier spans, and its depth is ``1 + max(their depths)``.

Chains:
    - archived chains and shared marks name known tools.
"""

from __future__ import annotations

from collections import Counter

from residency._core._lifecycle import TOOL_LIFECYCLE, SpanState, ToolState
from residency._core._spans import summary_depth
from residency._core._state import SessionState
from residency._core._tools import definition_hash, is_mutation

__all__ = ["chain_problem", "delivery_problem", "span_problem", "state_problem", "tool_problem"]


def _numbered(ids: list[str], prefix: str) -> str | None:
    """Why ``ids`` are not ``<prefix>1 .. <prefix>N`` in order, or None."""
    if ids == [f"{prefix}{i}" for i in range(1, len(ids) + 1)]:
        return None
    i, found = next((i, f) for i, f in enumerate(ids, 1) if f != f"{prefix}{i}")
    return f"id {found!r} where {prefix}{i} should be (ids run {prefix}1, {prefix}2, ... with no gap)"


def tool_problem(s: SessionState) -> str | None:
    """The first broken tool or call invariant, or None."""
    tools, states = s.tools, s.states
    if states.keys() != tools.keys():
        return "tool states do not match the registered tools"
    for name, spec in tools.items():
        if spec.name != name or not isinstance(states[name], ToolState):
            return f"tool {name!r} is recorded inconsistently"
        if spec.hash != definition_hash(spec.definition):
            return f"tool {name!r} is pinned to a hash that is not its definition's"
        if spec.mutation != is_mutation(spec.definition):
            return f"tool {name!r} has a mutation flag its definition does not give"
    calls = s.calls
    problem = _numbered(list(calls), "c")
    if problem is not None:
        return f"calls: {problem}"
    # Whole-collection comparisons: a reopen runs this over every call (about 1 us a call).
    records = list(calls.values())
    if [r.id for r in records] != list(calls):
        return "a call is filed under another id"
    uses = Counter(r.tool for r in records)
    if not uses.keys() <= tools.keys():
        return f"calls name unknown tools {sorted(uses.keys() - tools.keys())}"
    kept = s.resident
    if not all(calls.get(i) is r for i, r in kept.items()):  # one object in both, always
        return "a resident call is not a call of the record"
    resident = Counter(r.tool for r in kept.values())
    total = sum(r.argument_tokens for r in kept.values())
    if {n: c for n, c in s.resident_by_tool.items() if c} != resident:
        return "the per-tool counts of resident calls disagree with the resident calls"
    if s.argument_total != total:
        return f"the resident argument total is {s.argument_total}, the resident calls hold {total}"
    if {n: c for n, c in s.uses.items() if c} != uses:
        return "the per-tool use counts disagree with the call record"
    for name, count in resident.items():
        if TOOL_LIFECYCLE.is_ghost_target(states[name]):
            return (
                f"tool {name!r} is {states[name].value} while {count} call(s) of its arguments are "
                f"visible and no tombstone is shown (a ghost tool)"
            )
    if not s.last_turn.keys() <= tools.keys() or any(t > s.turn for t in s.last_turn.values()):
        return "a tool was last used after the current turn, or is unknown"
    return None


def delivery_problem(s: SessionState) -> str | None:
    """The first broken delivery invariant, or None."""
    deliveries = s.deliveries
    problem = _numbered(list(deliveries), "r")
    if problem is not None:
        return f"deliveries: {problem}"
    for delivery_id, record in deliveries.items():
        if record.id != delivery_id or len(record.tools) != len(record.hashes):
            return f"delivery {delivery_id!r} is recorded inconsistently"
        if not all(n in s.tools for n in record.tools):
            return f"delivery {delivery_id!r} names unknown tools"
    if not all(deliveries.get(i) is r for i, r in s.delivered.items()):
        return "a live delivery is not a delivery of the record"
    carried = Counter(
        n
        for d in s.delivered.values()
        for n, h in zip(d.tools, d.hashes, strict=True)
        if s.tools[n].hash == h
    )
    if {n: c for n, c in s.carried_by_tool.items() if c} != carried:
        return "the per-tool counts of live deliveries disagree with the deliveries"
    return None


def span_problem(s: SessionState) -> str | None:
    """The first broken span invariant, or None."""
    spans, states, stored, texts = s.spans, s.span_states, s.stored, s.texts
    problem = _numbered(list(spans), "s")
    if problem is not None:
        return f"spans: {problem}"
    if states.keys() != spans.keys() or not stored <= spans.keys() or not texts.keys() <= spans.keys():
        return "span states, stored copies or texts name unknown spans"
    records = list(spans.values())
    if [r.id for r in records] != list(spans) or not {type(v) for v in states.values()} <= {SpanState}:
        return "a span is filed under another id, or has no state"
    left = {i for i, state in states.items() if state is not SpanState.RESIDENT}
    if not left <= stored:
        return f"spans {sorted(left - stored)} left the window with no copy in the content store"
    unheld = spans.keys() - left - stored - texts.keys()
    if unheld:
        return f"spans {sorted(unheld)} are resident but their text is held nowhere"
    evicted = [i for i in left if states[i] is SpanState.EVICTED and spans[i].precondition]
    if evicted:
        return f"precondition spans {sorted(evicted)} are evicted (they may leave only as pointers)"
    for record in records:
        if not record.is_summary:
            if record.provenance:
                return f"span {record.id!r} has provenance but is not a summary"
            continue
        number = int(record.id[1:])
        sources = [spans.get(i) for i in record.provenance]
        if any(src is None or int(src.id[1:]) >= number for src in sources):
            return f"summary {record.id!r} names a source that is not an earlier span"
        if record.derivation_depth != summary_depth([src for src in sources if src is not None]):
            return f"summary {record.id!r} has a derivation depth its sources do not give"
    return None


def chain_problem(s: SessionState) -> str | None:
    """The first broken chain invariant, or None."""
    tools = s.tools
    for record in s.archive:
        unknown = [n for n in record.topology if n not in tools]
        if unknown:
            return f"archived chain {record.digest[:12]} names unknown tools {unknown}"
    if not s.shared <= tools.keys():
        return "a tool marked shared is unknown"
    return None


def state_problem(s: SessionState) -> str | None:
    """The first broken invariant of the whole state, or None."""
    if isinstance(s.turn, bool) or not isinstance(s.turn, int) or s.turn < 0:
        return f"turn {s.turn!r} is not a turn number"
    return tool_problem(s) or delivery_problem(s) or span_problem(s) or chain_problem(s)
