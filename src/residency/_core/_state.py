"""A session's state as a pure value, and the journal operations that change it.

Theory of operation
-------------------
A session is its journal: a list of entries ``(op, data, at)``. ``SessionState`` is what the
entries so far add up to, and ``apply(entry)`` adds one more. Nothing here reads a store, a
clock or a callback: the time an event carries is the entry's ``at``, and ids (``c<n>``,
``s<n>``) are counted from the state itself. So a state can be rebuilt, compared and
checkpointed with no store at all, and replaying a journal twice gives what replaying it once
gives.

The runtime (``residency._runtime``) is the shell around it. A command reads the state to decide
(raising, with nothing changed, when it may not happen), computes its journal entries, has the
store append them (write-ahead), and only then applies them here. Opening a session replays
the stored entries through the same ``apply``.

``OPERATIONS`` is the declared table of journal operations: name -> reducer. Every name the
runtime writes is in it, and an entry naming anything else is refused (a journal written by a
newer version). A reducer trusts the shape of its data no more than the store: a missing key
or a wrong type raises, and the shell reports the entry as malformed.

One input is not journaled: what a registered definition is *shown as* (its minified view and
token count) depends on the session's minifier. ``spec_of`` turns a definition into its
``ToolSpec``; it must be a pure function of the definition (the runtime passes the process-wide
shared cache, ``residency._runtime._tool_cache``).

Caches the shell keeps beside the state (compiled validators, the last steady plan, the
residency order) are not part of it; ``texts`` holds the text of resident spans, which the shell
may also fill with text it read back from the content store (``texts`` of stored spans are a
cache, which a checkpoint leaves out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from itertools import repeat
from typing import Any, Protocol

from residency._core._chains import ChainArchive, ChainRecord
from residency._core._events import Event, EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, SpanState, ToolState
from residency._core._spans import SpanRecord, record_from
from residency._core._tools import CallRecord, DeliveryRecord, JSONObject, ToolSpec
from residency._errors import InvalidInput, StoreError

__all__ = ["OPERATIONS", "QUIET_OPERATIONS", "Entry", "Reducer", "SessionState", "SpecOf"]

SpecOf = Callable[[JSONObject], ToolSpec]
"""A registered definition -> its shared ``ToolSpec`` (a pure function of the definition)."""


class Entry(Protocol):
    """What ``apply`` reads of a journal entry (``residency.JournalEntry`` is one)."""

    @property
    def op(self) -> str: ...

    @property
    def data(self) -> Mapping[str, Any]: ...

    @property
    def at(self) -> float: ...


_EVENT_OF = {
    ToolState.TOMBSTONED: EventKind.TOMBSTONED,
    ToolState.EVICTED: EventKind.EVICTED,
    ToolState.RESIDENT: EventKind.REEXPANDED,
    ToolState.ARCHIVED: EventKind.ARCHIVED,
}
_TOOL_STATE_OF = {s.value: s for s in ToolState}
_SPAN_STATE_OF = {s.value: s for s in SpanState}  # dict lookups: replay runs them once per entry


class SessionState:
    """Everything a session's journal adds up to. Change it only through ``apply`` (``texts``
    aside: the shell may add the text of a resident span it read back from the content store).

    Attributes:
        turn, phase: the current turn and the phase it was planned in.
        events: the event log, oldest first.
        at: the time of the last entry applied.
        tools: name -> pinned spec, in registration order; ``states``: name -> lifecycle state.
        last_turn, uses: per tool, the turn it was last used or placed, and its call count.
        calls: call id -> record; ``resident``: the calls whose arguments are resident, oldest
            first; ``resident_by_tool`` and ``argument_total`` count them.
        deliveries: delivery id -> record (every result that showed tool schemas);
            ``delivered``: those still in the transcript, oldest first; ``carried_by_tool``:
            per tool, how many of them show its current definition.
        spans: span id -> record; ``span_states``; ``stored``: ids whose bytes are in the
            content store; ``texts``: text of resident spans held in memory.
        archive: archived chains; ``shared``: tools marked shared; ``revocations``: credential
            reference -> whether its last revocation attempt succeeded.
    """

    def __init__(self, spec_of: SpecOf) -> None:
        self.spec_of = spec_of
        self.turn = 0
        self.phase: str | None = None
        self.events: list[Event] = []
        self.at = 0.0
        self.tools: dict[str, ToolSpec] = {}
        self.catalog_version = 0
        """Bumped whenever ``tools`` changes: what a cache built over the catalog keys on."""
        self.states: dict[str, ToolState] = {}
        self.last_turn: dict[str, int] = {}
        self.uses: dict[str, int] = {}
        self.calls: dict[str, CallRecord] = {}
        self.resident: dict[str, CallRecord] = {}
        self.resident_by_tool: dict[str, int] = {}
        self.argument_total = 0
        self.deliveries: dict[str, DeliveryRecord] = {}
        self.delivered: dict[str, DeliveryRecord] = {}
        self.carried_by_tool: dict[str, int] = {}
        self.spans: dict[str, SpanRecord] = {}
        self.span_states: dict[str, SpanState] = {}
        self.stored: set[str] = set()
        self.texts: dict[str, str] = {}
        self.archive = ChainArchive()
        self.shared: set[str] = set()
        self.revocations: dict[str, bool] = {}

    def apply(self, entry: Entry) -> None:
        """Add one journal entry to the state.

        Raises:
            StoreError: an operation not in ``OPERATIONS``.
            Exception: data that does not fit the operation (a missing key, a wrong type);
                the caller names the entry.
        """
        reducer = OPERATIONS.get(entry.op)
        if reducer is None:
            raise StoreError(f"journal has an unknown operation {entry.op!r} (written by a newer version?)")
        self.at = entry.at
        reducer(self, entry.data)

    # -- reading, for commands and reducers ---------------------------------------------------

    def event(self, kind: EventKind, subject: str, detail: str = "") -> Event:
        event = Event(self.turn, kind, subject, detail, self.at)
        self.events.append(event)
        return event

    def arguments_resident(self, name: str) -> bool:
        return self.resident_by_tool.get(name, 0) > 0

    def facts(self, name: str) -> dict[str, bool]:
        """The facts the tool lifecycle's guards read."""
        return {"arguments_resident": self.resident_by_tool.get(name, 0) > 0}

    def next_call_id(self) -> str:
        return f"c{len(self.calls) + 1}"

    def next_span_id(self) -> str:
        return f"s{len(self.spans) + 1}"

    def next_delivery_id(self) -> str:
        return f"r{len(self.deliveries) + 1}"

    def carried(self, name: str) -> bool:
        """Whether a delivered result still in the transcript shows the tool's current definition."""
        return self.carried_by_tool.get(name, 0) > 0

    def recount_carried(self, name: str) -> None:
        """Count again the deliveries showing ``name``'s current definition (after a redefinition)."""
        digest = self.tools[name].hash
        count = sum(
            1
            for d in self.delivered.values()
            for n, h in zip(d.tools, d.hashes, strict=True)
            if n == name and h == digest
        )
        if count:
            self.carried_by_tool[name] = count
        else:
            self.carried_by_tool.pop(name, None)


Reducer = Callable[[SessionState, Mapping[str, Any]], None]

# -- tools -------------------------------------------------------------------------------------


def _turn(s: SessionState, data: Mapping[str, Any]) -> None:
    s.turn = int(data["turn"])
    phase = data.get("phase")
    s.phase = phase if isinstance(phase, str) else None


def _register(s: SessionState, data: Mapping[str, Any]) -> None:
    # Runs once per tool of a catalog: lookups bound once.
    spec_of, tools, states, last_turn, event = s.spec_of, s.tools, s.states, s.last_turn, s.event
    resident, registered, turn = ToolState.RESIDENT, EventKind.REGISTERED, s.turn
    s.catalog_version += 1
    for tool in data["tools"]:
        name = tool["name"]
        spec = spec_of(tool)
        old = tools.get(name)
        tools[name] = spec
        if old is None:
            states[name] = resident
            last_turn[name] = turn  # a new tool is warm for idle_turns turns
            event(registered, name)
            continue
        event(EventKind.REDEFINED, name, "definition changed upstream")
        if s.delivered:
            s.recount_carried(name)  # a result showing the old definition carries it no more
        if states[name] is resident and s.resident_by_tool.get(name):
            states[name] = TOOL_LIFECYCLE.fire(resident, "redefine", record=name, facts=s.facts(name))
            event(EventKind.TOMBSTONED, name, "definition changed while arguments are resident")


def _transition(s: SessionState, data: Mapping[str, Any]) -> None:
    name, trigger = data["tool"], data["trigger"]
    dest = _TOOL_STATE_OF[data["dest"]]
    s.states[name] = dest
    kind = EventKind.READMITTED if trigger == "readmit" else _EVENT_OF[dest]
    s.event(kind, name, data.get("reason") or trigger)
    if dest is ToolState.RESIDENT:
        s.last_turn[name] = s.turn


def _transitions(s: SessionState, data: Mapping[str, Any]) -> None:
    """Many tools, one trigger, one destination (a plan pruning a large catalog at once)."""
    trigger, reason = data["trigger"], data.get("reason") or data["trigger"]
    dest = _TOOL_STATE_OF[data["dest"]]
    kind = EventKind.READMITTED if trigger == "readmit" else _EVENT_OF[dest]
    states, events, turn, at = s.states, s.events, s.turn, s.at
    names = data["tools"]
    unknown = set(names) - states.keys()
    if unknown:
        raise KeyError(min(unknown))
    states.update(dict.fromkeys(names, dest))
    events.extend(map(Event, repeat(turn), repeat(kind), names, repeat(reason), repeat(at)))
    if dest is ToolState.RESIDENT:
        s.last_turn.update(dict.fromkeys(names, turn))


def _call(s: SessionState, data: Mapping[str, Any]) -> None:
    name = data["tool"]
    via = data.get("via", "")  # journals written before calls had a "via" have none
    if not isinstance(via, str):
        raise TypeError(f"a call's via is a {type(via).__name__}, not a string")
    record = CallRecord(data["id"], name, s.turn, data["arguments"], int(data["tokens"]), via)
    s.calls[record.id] = record
    s.resident[record.id] = record
    s.resident_by_tool[name] = s.resident_by_tool.get(name, 0) + 1
    s.argument_total += record.argument_tokens
    s.last_turn[name] = s.turn
    s.uses[name] = s.uses.get(name, 0) + 1
    s.event(EventKind.CALLED, name, f"{record.id} via {via}" if via else record.id)


def _evict_arguments(s: SessionState, data: Mapping[str, Any]) -> None:
    for call_id in data["ids"]:
        record = s.resident.pop(call_id)
        s.resident_by_tool[record.tool] -= 1
        s.argument_total -= record.argument_tokens
        s.event(EventKind.ARGUMENTS_EVICTED, call_id, record.tool)


def _refuse(s: SessionState, data: Mapping[str, Any]) -> None:
    s.event(EventKind.REFUSED, data["tool"], data["reason"])


def _deliver(s: SessionState, data: Mapping[str, Any]) -> None:
    names, hashes = tuple(data["tools"]), tuple(data["hashes"])
    if len(names) != len(hashes) or not all(isinstance(n, str) and n in s.tools for n in names):
        raise ValueError("a delivery names unknown tools, or not one hash per tool")
    record = DeliveryRecord(data["id"], names, hashes, s.turn)
    s.deliveries[record.id] = record
    s.delivered[record.id] = record
    carried, tools = s.carried_by_tool, s.tools
    for name, digest in zip(names, hashes, strict=True):
        if tools[name].hash == digest:
            carried[name] = carried.get(name, 0) + 1


def _drop_deliveries(s: SessionState, data: Mapping[str, Any]) -> None:
    carried, tools = s.carried_by_tool, s.tools
    for delivery_id in data["ids"]:
        record = s.delivered.pop(delivery_id)
        for name, digest in zip(record.tools, record.hashes, strict=True):
            if tools[name].hash == digest:
                left = carried[name] - 1
                if left:
                    carried[name] = left
                else:
                    del carried[name]


def _budget(s: SessionState, data: Mapping[str, Any]) -> None:
    s.event(
        EventKind.BUDGET_EXCEEDED,
        "schema",
        f"pinned tools need {data['schema_tokens']} tokens; budget {data['budget']}",
    )


# -- spans -------------------------------------------------------------------------------------


def _span_add(s: SessionState, data: Mapping[str, Any]) -> None:
    record = record_from(data, turn=s.turn)
    s.spans[record.id] = record
    s.span_states[record.id] = SpanState.RESIDENT
    s.texts[record.id] = data["text"]
    s.event(EventKind.SPAN, record.id, "added")


def _span_offload(s: SessionState, data: Mapping[str, Any]) -> None:
    record = record_from(data, turn=s.turn)
    s.spans[record.id] = record
    s.span_states[record.id] = SpanState.EXTERNALIZED
    s.stored.add(record.id)
    s.event(EventKind.SPAN, record.id, f"offloaded: {data.get('bytes', 0)} bytes to the content store")


def _span_transition(s: SessionState, data: Mapping[str, Any]) -> None:
    span_id = data["id"]
    before = s.span_states[span_id]
    dest = _SPAN_STATE_OF[data["dest"]]
    s.span_states[span_id] = dest
    if before is SpanState.RESIDENT and dest is not SpanState.RESIDENT:
        s.stored.add(span_id)
        s.texts.pop(span_id, None)
    s.event(EventKind.SPAN, span_id, f"{data['trigger']}: {before.value} -> {dest.value}")


def _span_reground(s: SessionState, data: Mapping[str, Any]) -> None:
    span_id = data["id"]
    s.spans[span_id] = replace(s.spans[span_id], grounded=True)
    s.event(EventKind.SPAN, span_id, "re-grounded")


def _span_summary(s: SessionState, data: Mapping[str, Any]) -> None:
    record = record_from(data, turn=s.turn)
    s.spans[record.id] = record
    s.span_states[record.id] = SpanState.RESIDENT
    s.texts[record.id] = data["text"]
    detail = f"summary of {', '.join(record.provenance) or 'nothing'} (depth {record.derivation_depth})"
    s.event(EventKind.SPAN, record.id, detail)


# -- chains ------------------------------------------------------------------------------------


def _archive_chain(s: SessionState, data: Mapping[str, Any]) -> None:
    try:
        record = ChainRecord.from_json(data["chain"])
    except (InvalidInput, KeyError, TypeError) as exc:
        raise StoreError(f"a journaled chain record is corrupt ({exc})") from None
    s.archive.add(record)
    pending = sum(1 for c in record.credentials if not s.revocations.get(c))
    s.event(
        EventKind.CHAIN,
        record.digest,
        f"archived: {record.rule}; {pending} credential reference(s) to revoke",
    )


def _share_tools(s: SessionState, data: Mapping[str, Any]) -> None:
    for name in data["tools"]:
        s.shared.add(name)
        s.event(EventKind.CHAIN, name, "marked shared by an operator: never retired with a chain")


def _chain_warning(s: SessionState, data: Mapping[str, Any]) -> None:
    s.event(EventKind.CHAIN, data["tool"], f"warning (policy warn): {data['reason']}")


def _revocation(s: SessionState, data: Mapping[str, Any]) -> None:
    ref, revoked = data["credential"], bool(data["revoked"])
    s.revocations[ref] = revoked
    detail = "credential revoked" if revoked else f"revocation failed: {data.get('error') or 'unknown'}"
    s.event(EventKind.CHAIN, ref, detail)


OPERATIONS: Mapping[str, Reducer] = {
    "turn": _turn,
    "register": _register,
    "transition": _transition,
    "transitions": _transitions,
    "call": _call,
    "evict_arguments": _evict_arguments,
    "refuse": _refuse,
    "deliver": _deliver,
    "drop_deliveries": _drop_deliveries,
    "budget": _budget,
    "span_add": _span_add,
    "span_offload": _span_offload,
    "span_transition": _span_transition,
    "span_reground": _span_reground,
    "span_summary": _span_summary,
    "archive_chain": _archive_chain,
    "share_tools": _share_tools,
    "chain_warning": _chain_warning,
    "revocation": _revocation,
}
"""Every journal operation, name -> reducer."""

QUIET_OPERATIONS = frozenset({"call", "turn", "refuse", "deliver"})
"""Operations that never change what a session shows (see ``Session.revision``). A delivery
only adds a carrier (the tools it makes resident are ``transition`` entries of their own); a
dropped delivery is not quiet: it may leave a tool that a plan by reference must withhold."""
