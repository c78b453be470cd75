"""The tool part of a session: registration, calls and the tool lifecycle.

Schema residency and argument residency are coupled here. A call can be recorded only for a
resident tool (so arguments never appear for a tool whose schema is withheld), and every
change of tool state goes through the shared lifecycle machine with the tool's
``arguments_resident`` fact, which refuses the ghost state. ``authorize_call`` and
``record_call`` share one check of the tool (``_callable``) and of the arguments' shape
(``_shape``); authorizing also validates the arguments against the full schema and runs the
call guards (the chain guard). A call the model made through a proxy tool (the gateway's
``call_tool``) is recorded with ``via`` naming it; it is otherwise the same call.

Every command reads the pure state (``journal.state``), computes its journal entries, and has
the journal commit them; the reducers live in ``residency._core._state``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError

from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._state import SessionState
from residency._core._tools import MAX_ARGUMENT_DEPTH, CallRecord, JSONObject, ToolSpec
from residency._core._validation import (
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_VALUES,
    ArgumentShape,
    ArgumentValidator,
    measure_arguments,
    oversize,
    short_message,
)
from residency._errors import (
    ArgumentsInvalid,
    CallRefused,
    InvalidInput,
    NotFound,
    ToolArchived,
    ToolNotResident,
)
from residency._runtime._inputs import tool_list
from residency._runtime._journal import Journal
from residency._runtime._tool_cache import (
    checked_spec,
    checked_tool,
    known_spec,
    remember_checked,
    shared_validator,
)
from residency._search import SearchHit, ToolIndex, shared_index
from residency._search._learned import LearnedLabels
from residency._tokens import count_tokens

__all__ = ["IMPLICIT_REEXPANSION", "CallGuard", "ToolPart"]

IMPLICIT_REEXPANSION = "implicit re-expansion: called with arguments valid against the full schema"
"""The reason journaled when ``admit_call(reexpand_evicted=True)`` re-expands an evicted tool."""

CallGuard = Callable[[str, JSONObject], None]
"""A check run by ``authorize_call`` after the schema check; raises ``CallRefused`` to refuse."""

_WITHHELD = frozenset({ToolState.TOMBSTONED, ToolState.EVICTED})


class ToolPart:
    """Tool registration, the call record and the tool lifecycle of one session."""

    def __init__(
        self,
        journal: Journal,
        *,
        pinned: frozenset[str],
        reexpand_tool: str,
        guards: Sequence[CallGuard] = (),
    ) -> None:
        self._journal = journal
        self.pinned = pinned
        self.reexpand_tool = reexpand_tool
        self.guards = list(guards)
        # Compiled validators, by tool name, with the spec they were compiled for (a cache).
        self._validators: dict[str, tuple[ToolSpec, ArgumentValidator]] = {}
        # The search index of the catalog, with the state and catalog version it was found for.
        self._search_index: tuple[SessionState, int, ToolIndex] | None = None

    # -- registration ------------------------------------------------------------------------

    def register(self, tools: Iterable[Mapping[str, Any]]) -> list[str]:
        """Register MCP tool definitions (``tools/list`` entries).

        New tools start resident. A tool registered again with the same definition is left as
        it is; with a changed definition it is re-pinned, and if arguments built against the old
        definition are resident it is tombstoned until re-expanded. Chains of the archive scope
        waiting for these tools are adopted.

        Each distinct definition is checked, minified and counted once per process; sessions
        registering it share one read-only ``ToolSpec`` (see ``residency._runtime._tool_cache``).

        Returns:
            The names that were new or changed.

        Raises:
            InvalidInput: not a list of definitions, a malformed definition or a name given
                twice; nothing is registered.
            SchemaError: an ``inputSchema`` that is not a valid JSON Schema, or nests deeper
                than ``MAX_DEFINITION_DEPTH`` levels.
        """
        state, specs = self._journal.state, self._journal.specs
        parsed: list[JSONObject] = []
        ahead: dict[str, ToolSpec] = {}
        seen: set[str] = set()
        minify = specs.minify
        for i, raw in enumerate(tool_list(tools)):
            # Checked, minified and counted once per process (``residency._runtime._tool_cache``):
            # a definition this process already took is found by its text and shared.
            spec, key = known_spec(raw, minify)
            if spec is None:
                spec = remember_checked(key, self._checked(raw, f"tools[{i}]"), minify)
            name = spec.name
            if name in seen:
                raise InvalidInput(f"tools[{i}]: tool {name!r} is given twice", where=f"tools[{i}]")
            seen.add(name)
            known = state.tools.get(name)
            if known is None or known.hash != spec.hash:
                ahead[name] = spec
                parsed.append(spec.definition)
        if parsed:
            specs.ahead = ahead
            try:
                self._journal.commit(("register", {"tools": parsed}))
            finally:
                specs.ahead = {}
        return [t["name"] for t in parsed]

    def _checked(self, raw: object, where: str) -> ToolSpec:
        """The slow path of ``register``: check one definition and make its spec."""
        tool = checked_tool(raw, where)
        # Minified before journaling: a schema the minifier cannot process is refused here.
        return checked_spec(tool, self._journal.specs.minify)

    # -- reading -----------------------------------------------------------------------------

    def spec(self, name: str) -> ToolSpec:
        """The tool's pinned definition (shared, read-only). Raises ``NotFound`` for an unknown tool."""
        try:
            return self._journal.state.tools[name]
        except (KeyError, TypeError):
            raise NotFound(f"unknown tool {name!r}") from None

    def state(self, name: str) -> ToolState:
        """The tool's lifecycle state. Raises ``NotFound`` for an unknown tool."""
        self.spec(name)
        return self._journal.state.states[name]

    def names(self, state: ToolState | None = None) -> list[str]:
        """Tool names in registration order, optionally only those in ``state``."""
        states = self._journal.state.states
        return [n for n in self._journal.state.tools if state is None or states[n] is state]

    def call(self, call_id: str) -> CallRecord:
        """A recorded call. Raises ``NotFound`` for an unknown id."""
        try:
            return self._journal.state.calls[call_id]
        except (KeyError, TypeError):
            raise NotFound(f"unknown call id {call_id!r}") from None

    def resident_calls(self) -> list[CallRecord]:
        """Calls whose arguments are resident, oldest first."""
        return list(self._journal.state.resident.values())

    def arguments_resident(self, name: str) -> bool:
        """Whether arguments of an earlier call to the tool are still in the transcript."""
        self.spec(name)
        return self._journal.state.arguments_resident(name)

    def search(self, query: str, limit: int = 5, *, learned: LearnedLabels | None = None) -> list[SearchHit]:
        """The withheld tools (tombstoned or evicted; never archived) that best match ``query``.

        One index per distinct set of definitions is shared by every session of the process;
        with the ``search`` extra installed, BM25 is fused with an offline embedding ranker.

        Returns:
            At most ``limit`` hits, best first.
        """
        state = self._journal.state
        states = state.states
        return self._index(state).search(
            query, limit=limit, among=lambda name: states.get(name) in _WITHHELD, learned=learned
        )

    def _index(self, state: SessionState) -> ToolIndex:
        """The shared index of ``state``'s catalog, looked up again only when the catalog changed
        (the lookup's key covers every tool, which costs more than a query)."""
        cached = self._search_index
        if cached is not None and cached[0] is state and cached[1] == state.catalog_version:
            return cached[2]
        index = shared_index(state.tools.values())
        self._search_index = (state, state.catalog_version, index)
        return index

    # -- tombstones --------------------------------------------------------------------------

    def tombstone_text(self, name: str) -> str:
        """The one line shown for a tool whose schema is withheld."""
        state = self._journal.state
        if state.states.get(name) is ToolState.ARCHIVED:
            return (
                f"{name}: archived with an abandoned tool chain; calls are refused and "
                f"re-expansion is not possible (an operator must re-admit it)."
            )
        kind = "mutation tool" if self.spec(name).mutation else "tool"
        # Only a tool whose earlier arguments are still visible has arguments to go stale.
        stale = "; earlier arguments may be stale" if state.arguments_resident(name) else ""
        return (
            f"{name}: {kind} schema withheld{stale}. "
            f'Call {self.reexpand_tool} with names=["{name}"] before calling it.'
        )

    def tombstones(self) -> list[str]:
        """Every tombstone line currently shown, sorted by tool name."""
        return [self.tombstone_text(n) for n in sorted(self.tombstoned_names())]

    def tombstoned_names(self) -> list[str]:
        # Runs over every tool on every turn: the enum members and the lookup are bound once.
        tombstoned, archived = ToolState.TOMBSTONED, ToolState.ARCHIVED
        calls = self._journal.state.resident_by_tool
        states = self._journal.state.states.items()
        return [n for n, s in states if s is tombstoned or (s is archived and calls.get(n, 0) > 0)]

    # -- calls -------------------------------------------------------------------------------

    def _callable(self, name: str, *, implicit: bool = False) -> ToolSpec:
        """The tool's spec if a call of it may be admitted or recorded now.

        ``implicit``: an evicted tool about to be re-expanded is callable too.
        """
        spec = self.spec(name)
        state = self._journal.state.states[name]
        if state is ToolState.ARCHIVED:
            raise ToolArchived(self.tombstone_text(name), tool=name)
        if state is not ToolState.RESIDENT and not (implicit and state is ToolState.EVICTED):
            raise ToolNotResident(self.tombstone_text(name), tool=name)
        return spec

    @staticmethod
    def _shape(arguments: object, refuse: Callable[[str], Exception], *, limits: bool) -> ArgumentShape:
        """The arguments' shape, checked: a JSON object, nested no deeper than the limit, and
        (``limits``) within the value count and size of one call. ``refuse`` makes the error."""
        if not isinstance(arguments, Mapping):
            raise refuse("arguments must be a JSON object")
        # The limits bound what checking costs, so they are checked first, at a bounded cost.
        shape = measure_arguments(arguments, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_VALUES if limits else 1 << 62)
        if shape.depth > MAX_ARGUMENT_DEPTH:
            raise refuse(f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels")
        if not limits:
            return shape
        if shape.values > MAX_ARGUMENT_VALUES:
            raise refuse(
                f"arguments hold more than {MAX_ARGUMENT_VALUES:,} values (object members and "
                "array items), the most one call may have"
            )
        size = oversize(arguments, shape)
        if size is not None:
            raise refuse(
                f"arguments are {size:,} bytes of JSON, over the {MAX_ARGUMENT_BYTES:,}-byte "
                "limit of one call"
            )
        return shape

    def check_call(
        self, name: str, arguments: Mapping[str, Any], *, implicit: bool = False, show_schema: bool = False
    ) -> None:
        """The checks of ``authorize_call``; ``implicit``: an evicted tool about to be re-expanded;
        ``show_schema``: an invalid-arguments refusal carries the full input schema (as it does
        for ``implicit``)."""
        spec = self._callable(name, implicit=implicit)

        def refuse(message: str) -> ArgumentsInvalid:
            return ArgumentsInvalid(f"{name}: {message}", tool=name, path="$")

        shape = self._shape(arguments, refuse, limits=True)
        plain = shape.plain
        cached = self._validators.get(name)
        if cached is None or cached[0] is not spec:
            cached = self._validators[name] = (spec, shared_validator(spec))
        error = cached[1].first_error(arguments if plain else dict(arguments), plain=plain)
        if error is not None:
            path = _error_path(error)
            if implicit or show_schema:
                # The model never saw this schema in the list: give it now, so one retry can fix the call.
                schema = json.dumps(spec.input_schema, separators=(",", ":"), ensure_ascii=False)
                hint = f"Its full input schema: {schema}"
            else:
                hint = f"The full schema is available from {self.reexpand_tool}."
            raise ArgumentsInvalid(
                f"{name}: invalid arguments at {path}: {short_message(error.message)}. {hint}",
                tool=name,
                path=path,
            )
        for guard in self.guards:
            guard(name, dict(arguments))

    def authorize(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        implicit: bool = False,
        show_schema: bool = False,
        via: str = "",
    ) -> None:
        """Check that a call may be forwarded; raise if not. A refusal is logged as an event.

        Raises:
            NotFound: unknown tool.
            ToolNotResident: the schema is withheld; the message names the re-expand tool.
            ToolArchived: the tool left the active index with an abandoned chain.
            ArgumentsInvalid: the arguments fail the full schema; ``path`` names the field.
            ChainCollision: the call would complete an archived fatal chain prefix.
        """
        try:
            self.check_call(name, arguments, implicit=implicit, show_schema=show_schema)
        except CallRefused as refusal:
            data = {"tool": refusal.tool, "reason": str(refusal)}
            if via:
                data["via"] = via
            self._journal.commit(("refuse", data))
            raise

    def record_call(self, name: str, arguments: Mapping[str, Any], *, via: str = "") -> CallRecord:
        """Record a call the host made; its arguments are now resident.

        ``via``: what the call came through when the model did not call the tool by its own
        name (a proxy tool, such as the gateway's ``call_tool``); journaled with the call and
        kept on its record. Empty for a direct call.

        Returns:
            The call record (``.id`` names it in ``evict_arguments``).

        Raises:
            NotFound: unknown tool.
            ToolNotResident, ToolArchived: the tool's schema is withheld: recording the call
                would put arguments beside a missing schema.
            InvalidInput: arguments that are not a JSON object, or a ``via`` that is not a string.
        """
        _check_via(via)
        self._callable(name)

        def refuse(message: str) -> InvalidInput:
            return InvalidInput(f"call {message}", where="arguments")

        self._shape(arguments, refuse, limits=False)
        return self.record(name, arguments, via)

    def admit_call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        reexpand_evicted: bool,
        show_schema: bool = False,
        via: str = "",
    ) -> CallRecord:
        """``authorize_call`` then ``record_call``, checking the arguments once.

        What a gateway does with a call it is about to forward.

        Args:
            name: the tool.
            arguments: the call's arguments.
            reexpand_evicted: admit a call to an *evicted* tool whose arguments validate against
                its full schema, re-expanding it first (logged as an implicit re-expansion). An
                evicted tool has no arguments in the transcript, so such a call cannot be a ghost
                call; a tombstoned tool stays refused until it is re-expanded explicitly. When
                the arguments do not validate, the refusal carries the full input schema.
            show_schema: an invalid-arguments refusal carries the full input schema whatever
                the tool's state (for a host whose tool list does not show the tool).
            via: as for ``record_call``; also journaled with a refusal.

        Returns:
            The call record.

        Raises:
            NotFound, ToolNotResident, ToolArchived, ArgumentsInvalid, ChainCollision: as
                ``authorize_call`` (the refusal is logged; nothing is recorded).
            InvalidInput: arguments that are not JSON, or a ``via`` that is not a string.
        """
        _check_via(via)
        implicit = reexpand_evicted and self._journal.state.states.get(name) is ToolState.EVICTED
        self.authorize(name, arguments, implicit=implicit, show_schema=show_schema, via=via)
        if implicit:
            self.transition(name, "reexpand", IMPLICIT_REEXPANSION)
        return self.record(name, arguments, via)

    def record(self, name: str, arguments: Mapping[str, Any], via: str = "") -> CallRecord:
        """Journal a call already checked."""
        try:
            text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"call arguments are not JSON: {exc}", where="arguments") from None
        if len(text) > MAX_ARGUMENT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES:
            raise InvalidInput(
                f"call arguments are over the {MAX_ARGUMENT_BYTES:,}-byte limit of one call",
                where="arguments",
            )
        state = self._journal.state
        call_id = state.next_call_id()
        data = {"id": call_id, "tool": name, "arguments": json.loads(text), "tokens": count_tokens(text)}
        if via:
            data["via"] = via  # absent for a direct call: its entry is what it always was
        self._journal.commit(("call", data))
        return state.calls[call_id]

    def evict_arguments(self, *call_ids: str) -> None:
        """The host dropped these calls' arguments from its transcript.

        Already-evicted ids are accepted and change nothing.

        Raises:
            NotFound: an unknown call id (nothing is evicted).
        """
        for call_id in call_ids:
            self.call(call_id)
        resident = self._journal.state.resident
        ids = [c for c in dict.fromkeys(call_ids) if c in resident]
        if ids:
            self._journal.commit(("evict_arguments", {"ids": ids}))

    # -- lifecycle ---------------------------------------------------------------------------

    def transition(self, name: str, trigger: str, reason: str = "") -> ToolState:
        self.spec(name)
        state = self._journal.state
        dest = TOOL_LIFECYCLE.fire(state.states[name], trigger, record=name, facts=state.facts(name))
        self._journal.commit(
            ("transition", {"tool": name, "trigger": trigger, "dest": dest.value, "reason": reason})
        )
        return dest

    def reexpand(self, name: str) -> JSONObject:
        """Make the tool resident again (a first-class signal) and return its full definition.

        Raises:
            NotFound: unknown tool.
            IllegalTransition: the tool is archived (only ``readmit`` brings it back).
        """
        state = self._journal.state
        current = state.states.get(name) if name in state.tools else None
        if current is not ToolState.RESIDENT:
            self.transition(name, "reexpand", "re-expansion requested")
        full: JSONObject = json.loads(json.dumps(self.spec(name).definition))
        return full

    # -- comparison --------------------------------------------------------------------------

    def snapshot_parts(self, parts: dict[str, Any]) -> None:
        state = self._journal.state
        parts["tools"] = {
            n: {
                "state": state.states[n].value,
                "hash": spec.hash,
                "last_turn": state.last_turn.get(n, -1),
                "uses": state.uses.get(n, 0),
            }
            for n, spec in state.tools.items()
        }
        parts["calls"] = {
            c.id: {
                "tool": c.tool,
                "turn": c.turn,
                "resident": c.id in state.resident,
                "arguments": c.arguments,
                "via": c.via,
            }
            for c in state.calls.values()
        }
        parts["tombstones"] = self.tombstones()


def _check_via(via: object) -> None:
    if not isinstance(via, str) or len(via) > 128:
        raise InvalidInput(
            "via must be a string of at most 128 characters (empty: a direct call)", where="via"
        )


def _error_path(error: ValidationError) -> str:
    """A JSON path naming the offending field (for ``required``, the missing one)."""
    parts: Sequence[Any] = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [p for p in error.validator_value if p not in error.instance]
        if missing:
            parts = [*parts, missing[0]]
    path = "$"
    for p in parts:
        path += f"[{p}]" if isinstance(p, int) else f".{p}"
    return path
