"""The checkpoint format of a ``SessionState``: the state as plain data, field by field.

Theory of operation
-------------------
A checkpoint saves a session's state so a reopen replays only the journal after it. What it
saves is declared here, once: ``FIELDS`` names every part of the state in order, and
``state_data`` / ``state_from_data`` turn a state into plain data (dicts, lists, tuples, sets,
strings, numbers, None: nothing a decoder has to look up by name) and back. Adding, removing or
changing a field changes ``STATE_VERSION``; a checkpoint of another version is ignored and the
journal replayed (``residency._store._checkpoint`` frames and checks the blob).

Derived objects are not saved but rebuilt, as a replay builds them: the chain archive's index
from its records, each tool's ``ToolSpec`` from its definition (verified by hash and shared,
``restore_spec``), the per-tool count of live deliveries from the deliveries. A tool's
minified view and token count are kept only when the writer says what made them (``shown_by``:
the minifier and tokenizer) and the reader's are the same.
Text of a span whose bytes are in the content store is a cache and is left out.

Restoring trusts the data no more than the journal: a value of the wrong shape raises, and the
caller replays instead; a well-formed state that breaks an invariant is refused by the caller's
check (``residency._core._invariants``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from residency._core._chains import ChainArchive, ChainRecord
from residency._core._events import Event, EventKind
from residency._core._lifecycle import SpanState, ToolState
from residency._core._spans import SpanRecord
from residency._core._state import SessionState, SpecOf
from residency._core._tools import CallRecord, DeliveryRecord, JSONObject, ToolSpec

__all__ = ["FIELDS", "STATE_VERSION", "RestoreSpec", "state_data", "state_from_data"]

STATE_VERSION = 3
"""The version of ``FIELDS`` and their encodings (1 was the attribute dump of older releases; 2
had no deliveries and no ``via`` of calls)."""

FIELDS = (
    "turn",
    "phase",
    "at",
    "events",
    "shown_by",
    "tools",
    "states",
    "last_turn",
    "uses",
    "calls",
    "resident",
    "resident_by_tool",
    "argument_total",
    "deliveries",
    "delivered",
    "spans",
    "span_states",
    "stored",
    "texts",
    "archive",
    "shared",
    "revocations",
)
"""Every field a checkpoint holds, in order."""

RestoreSpec = Callable[[str, JSONObject, str, "JSONObject | None", int], ToolSpec]
"""(name, definition, hash, shown or None, tokens) -> the tool's spec, shared when it verifies."""

_KIND_OF = {k.value: k for k in EventKind}
_TOOL_STATE_OF = {s.value: s for s in ToolState}
_SPAN_STATE_OF = {s.value: s for s in SpanState}
_SPAN_FIELDS = (
    "id",
    "key",
    "tags",
    "source",
    "provenance",
    "derivation_depth",
    "verified",
    "grounded",
    "turn",
    "tokens",
)


def _shared(values: Iterable[Any]) -> list[Any]:
    """Equal values as one object, which a pickle then writes once (the same tag set, say)."""
    one: dict[Any, Any] = {}
    return [one.setdefault(v, v) for v in values]


def state_data(state: SessionState, shown_by: str | None) -> dict[str, Any]:
    """The state as plain data, one key per name of ``FIELDS``.

    Args:
        state: the state to save.
        shown_by: what made the tools' minified views and counts (None: leave them out; the
            reader makes them again).
    """
    events = state.events
    spans = list(state.spans.values())
    calls = list(state.calls.values())
    stored = state.stored
    return {
        "turn": state.turn,
        "phase": state.phase,
        "at": state.at,
        "events": (
            [e.turn for e in events],
            _shared(e.kind.value for e in events),
            [e.subject for e in events],
            _shared(e.detail for e in events),
            [e.at for e in events],
        ),
        "shown_by": shown_by,
        "tools": [
            (s.name, s.definition, s.hash, s.shown if shown_by is not None else None, s.tokens)
            for s in state.tools.values()
        ],
        "states": {n: s.value for n, s in state.states.items()},
        "last_turn": dict(state.last_turn),
        "uses": dict(state.uses),
        "calls": (
            [c.id for c in calls],
            [c.tool for c in calls],
            [c.turn for c in calls],
            [c.arguments for c in calls],
            [c.argument_tokens for c in calls],
            [c.via for c in calls],
        ),
        "resident": list(state.resident),
        "resident_by_tool": dict(state.resident_by_tool),
        "argument_total": state.argument_total,
        "deliveries": [(d.id, list(d.tools), list(d.hashes), d.turn) for d in state.deliveries.values()],
        "delivered": list(state.delivered),
        "spans": tuple(
            _shared(getattr(r, f) for r in spans)
            if f in ("tags", "source")
            else [getattr(r, f) for r in spans]
            for f in _SPAN_FIELDS
        ),
        "span_states": {i: s.value for i, s in state.span_states.items()},
        "stored": sorted(stored),
        "texts": {i: t for i, t in state.texts.items() if i not in stored},
        "archive": [r.to_json() for r in state.archive],
        "shared": sorted(state.shared),
        "revocations": dict(state.revocations),
    }


def _columns(data: object, width: int, what: str) -> Sequence[Sequence[Any]]:
    if (
        not isinstance(data, list | tuple)
        or len(data) != width
        or not all(isinstance(c, list) for c in data)
        or len({len(c) for c in data}) > 1
    ):
        raise ValueError(f"malformed {what} columns")
    return data


def _typed(value: object, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{what} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def state_from_data(
    data: Mapping[str, Any], spec_of: SpecOf, restore_spec: RestoreSpec, shown_by: str | None
) -> SessionState:
    """The state ``state_data`` saved.

    Args:
        data: what ``state_data`` returned, read back.
        spec_of: the new state's definition -> spec function (for the entries after it).
        restore_spec: how a saved tool becomes its spec.
        shown_by: what makes this reader's minified views and counts; saved views are reused
            only when the writer's was the same.

    Raises:
        ValueError, KeyError, TypeError: data of another shape (the caller replays instead).
    """
    if not isinstance(data, Mapping) or set(data) != set(FIELDS):
        raise ValueError("the saved state does not hold the declared fields")
    s = SessionState(spec_of)
    s.turn = _typed(data["turn"], int, "turn")
    phase = data["phase"]
    s.phase = phase if phase is None else _typed(phase, str, "phase")
    at = data["at"]
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise ValueError(f"at is a {type(at).__name__}, not a number")
    s.at = float(at)
    turns, kinds, subjects, details, ats = _columns(data["events"], 5, "event")
    s.events = list(map(Event, turns, [_KIND_OF[k] for k in kinds], subjects, details, ats))
    keep = shown_by is not None and data["shown_by"] == shown_by
    tools: dict[str, ToolSpec] = {}
    for name, definition, digest, shown, tokens in _typed(data["tools"], list, "tools"):
        tools[name] = restore_spec(name, definition, digest, shown if keep else None, int(tokens))
    s.tools = tools
    s.states = {n: _TOOL_STATE_OF[v] for n, v in _typed(data["states"], dict, "states").items()}
    s.last_turn = dict(_typed(data["last_turn"], dict, "last_turn"))
    s.uses = dict(_typed(data["uses"], dict, "uses"))
    ids, names, call_turns, arguments, tokens_, vias = _columns(data["calls"], 6, "call")
    s.calls = {c.id: c for c in map(CallRecord, ids, names, call_turns, arguments, tokens_, vias)}
    s.resident = {i: s.calls[i] for i in _typed(data["resident"], list, "resident")}
    s.resident_by_tool = dict(_typed(data["resident_by_tool"], dict, "resident_by_tool"))
    s.argument_total = _typed(data["argument_total"], int, "argument_total")
    s.deliveries = {
        str(i): DeliveryRecord(str(i), tuple(t), tuple(h), int(turn))
        for i, t, h, turn in _typed(data["deliveries"], list, "deliveries")
    }
    s.delivered = {i: s.deliveries[i] for i in _typed(data["delivered"], list, "delivered")}
    for name in {n for d in s.delivered.values() for n in d.tools}:
        s.recount_carried(name)  # derived, as a replay derives it
    columns = _columns(data["spans"], len(_SPAN_FIELDS), "span")
    s.spans = {r.id: r for r in map(SpanRecord, *columns)}
    s.span_states = {
        i: _SPAN_STATE_OF[v] for i, v in _typed(data["span_states"], dict, "span_states").items()
    }
    s.stored = set(_typed(data["stored"], list, "stored"))
    s.texts = dict(_typed(data["texts"], dict, "texts"))
    s.archive = ChainArchive(ChainRecord.from_json(r) for r in _typed(data["archive"], list, "archive"))
    s.shared = set(_typed(data["shared"], list, "shared"))
    s.revocations = dict(_typed(data["revocations"], dict, "revocations"))
    return s
