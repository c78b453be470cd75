"""The tool half of a Session: registration, calls, the tool lifecycle, and turn plans.

Schema residency and argument residency are coupled here. A call can be recorded only for a
resident tool (so arguments never appear for a tool whose schema is withheld), and every
change of tool state goes through the shared lifecycle machine with the tool's
``arguments_resident`` fact, which refuses the ghost state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jsonschema.exceptions import ValidationError

from residency._core._events import Event, EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._minify import minify_tool
from residency._core._planner import Budget, ResidentCall, ToolStanding, decide
from residency._core._tools import (
    MAX_ARGUMENT_DEPTH,
    CallRecord,
    JSONObject,
    ToolSpec,
    parse_tool,
)
from residency._core._validation import (
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_VALUES,
    measure_arguments,
    oversize,
    scan_arguments,
    short_message,
)
from residency._errors import (
    ArgumentsInvalid,
    CallRefused,
    InvalidInput,
    NotFound,
    SchemaError,
    ToolArchived,
    ToolNotResident,
)
from residency._inputs import callable_param, check_definition_depth, name_set, phase_map, tool_list
from residency._search import SearchHit, shared_index
from residency._session_base import DEFAULT_CHECKPOINT_EVERY, SessionBase
from residency._tokens import count_tokens, tokenizer_name
from residency._tool_cache import (
    checked_spec,
    known_spec,
    remember_checked,
    schema_problem,
    shared_spec,
    shared_validator,
)

__all__ = ["IMPLICIT_REEXPANSION", "CallGuard", "ToolOps", "TurnPlan"]

IMPLICIT_REEXPANSION = "implicit re-expansion: called with arguments valid against the full schema"
"""The reason journaled when ``admit_call(reexpand_evicted=True)`` re-expands an evicted tool."""

CallGuard = Callable[[str, JSONObject], None]
"""A check run by ``authorize_call`` after the schema check; raises ``CallRefused`` to refuse."""


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the host shows the model this turn, and what it must drop.

    Attributes:
        turn: the turn this plan opens.
        tools: the resident tools as the model is shown them (minified; shared by every session
            that registered the same definitions: copy one before changing it): with the ``stable``
            planner in the order they became resident (a tool that arrives goes at the end,
            the others keep their places; see ``resident_tools``), with ``greedy`` in
            registration order.
        tombstones: one line per tool whose schema is withheld while its arguments are
            visible, sorted by tool name. They change more often than the tools: keep them
            out of the tool block (a prompt cache is keyed on it) and show
            ``new_tombstones`` in the result of the call the plan follows.
        evictions: ids of calls whose arguments the host must now drop from its transcript.
        events: what this plan changed.
        schema_tokens: tokens of ``tools``.
        argument_tokens: tokens of the arguments still resident after ``evictions``.
        new_tombstones: the lines of ``tombstones`` this plan created, sorted by tool name.
    """

    turn: int
    tools: tuple[JSONObject, ...]
    tombstones: tuple[str, ...]
    evictions: tuple[str, ...]
    events: tuple[Event, ...]
    schema_tokens: int
    argument_tokens: int
    new_tombstones: tuple[str, ...] = ()

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t["name"] for t in self.tools)


_WITHHELD = frozenset({ToolState.TOMBSTONED, ToolState.EVICTED})

_EVENT_OF = {
    ToolState.TOMBSTONED: EventKind.TOMBSTONED,
    ToolState.EVICTED: EventKind.EVICTED,
    ToolState.RESIDENT: EventKind.REEXPANDED,
    ToolState.ARCHIVED: EventKind.ARCHIVED,
}


class _Steady(NamedTuple):
    """The last steady turn: what it was planned under and what it showed."""

    revision: int
    budget: Budget
    phase: str | None
    warm_until: int | None
    tools: tuple[JSONObject, ...]
    tombstones: tuple[str, ...]
    schema_tokens: int


class ToolOps(SessionBase):
    """Tool registration, the call record, the tool lifecycle and turn planning."""

    # Compiled validators are found again on first use; specs checked ahead of a commit are
    # consumed by it; the last steady turn is only a shortcut for the next plan.
    _CHECKPOINT_CACHES = frozenset({"_validators", "_ahead", "_steady"})
    _STEADY_PLANS: bool = True
    """Whether a turn after a steady one is planned in O(1) (tests turn it off to compare)."""
    _order_cache: tuple[list[Event], int, dict[str, None]] | None = None
    """``_residency_order``'s cache: the event log it read, how far, and the order."""

    def __init__(
        self,
        store: Any = None,
        *,
        session_id: str | None = None,
        clock: Any = None,
        minify: Callable[[JSONObject], JSONObject] | None = None,
        pinned: Iterable[str] = (),
        phases: Mapping[str, Iterable[str]] | None = None,
        reexpand_tool: str = "reexpand_tools",
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        resume: bool = False,
    ) -> None:
        # Checked before anything is built: a wrong value raises InvalidInput naming it.
        self._minify: Callable[[JSONObject], JSONObject] = (
            minify_tool
            if minify is None
            else callable_param(minify, "minify", "a function from a tool definition to what is shown")
        )
        self._ahead: dict[str, ToolSpec] = {}  # the specs register_tools checked, for its commit
        self._pinned = name_set(pinned, "pinned")
        self._phases = phase_map(phases)
        if not isinstance(reexpand_tool, str) or not reexpand_tool:
            raise InvalidInput("reexpand_tool must be a non-empty tool name", where="reexpand_tool")
        self._reexpand_tool = reexpand_tool
        self._guards: list[CallGuard] = []
        super().__init__(
            store, session_id=session_id, clock=clock, checkpoint_every=checkpoint_every, resume=resume
        )

    def _init_state(self) -> None:
        super()._init_state()
        self._tools: dict[str, ToolSpec] = {}
        self._states: dict[str, ToolState] = {}
        self._last_turn: dict[str, int] = {}
        self._uses: dict[str, int] = {}
        self._calls: dict[str, CallRecord] = {}
        self._resident: dict[str, CallRecord] = {}  # oldest first
        self._resident_by_tool: dict[str, int] = {}
        self._argument_total = 0
        self._validators: dict[str, Any] = {}
        self._steady: _Steady | None = None

    # -- registration ------------------------------------------------------------------------

    def register_tools(self, tools: Iterable[Mapping[str, Any]]) -> list[str]:
        """Register MCP tool definitions (``tools/list`` entries).

        New tools start resident. A tool registered again with the same definition is left as
        it is; with a changed definition it is re-pinned, and if arguments built against the old
        definition are resident it is tombstoned until re-expanded.

        Each distinct definition is checked, minified and counted once per process; sessions
        registering it share one read-only ``ToolSpec`` (see ``residency._tool_cache``).

        Returns:
            The names that were new or changed.

        Raises:
            InvalidInput: not a list of definitions, a malformed definition or a name given
                twice; nothing is registered.
            SchemaError: an ``inputSchema`` that is not a valid JSON Schema, or nests deeper
                than ``MAX_DEFINITION_DEPTH`` levels.
        """
        parsed: list[JSONObject] = []
        ahead: dict[str, ToolSpec] = {}
        seen: set[str] = set()
        minify = self._minify
        for i, raw in enumerate(tool_list(tools)):
            # Checked, minified and counted once per process (``residency._tool_cache``): a
            # definition this process already took is found by its text and shared.
            spec, key = known_spec(raw, minify)
            if spec is None:
                spec = remember_checked(key, self._checked(raw, f"tools[{i}]"), minify)
            name = spec.name
            if name in seen:
                raise InvalidInput(f"tools[{i}]: tool {name!r} is given twice", where=f"tools[{i}]")
            seen.add(name)
            known = self._tools.get(name)
            if known is None or known.hash != spec.hash:
                ahead[name] = spec
                parsed.append(spec.definition)
        if parsed:
            self._ahead = ahead
            try:
                self._commit(("register", {"tools": parsed}))
            finally:
                self._ahead = {}
        return [t["name"] for t in parsed]

    def _checked(self, raw: object, where: str) -> ToolSpec:
        """The slow path of ``register_tools``: check one definition and make its spec."""
        check_definition_depth(raw, where)  # before anything recurses into it
        tool = parse_tool(raw, where=where)
        problem = schema_problem(tool["inputSchema"])
        if problem is not None:
            raise SchemaError(
                f"{where} ({tool['name']}): inputSchema is not a valid JSON Schema at {problem}",
                where=f"{where}.inputSchema",
            )
        # Minified before journaling: a schema the minifier cannot process is refused here.
        return checked_spec(tool, self._minify)

    def _apply_register(self, data: Mapping[str, Any]) -> None:
        ahead = self._ahead
        for tool in data["tools"]:
            name = tool["name"]
            spec = ahead.get(name)
            if spec is None or spec.definition is not tool:
                # Replay (or another writer's entry): found by hash, or made once for the process.
                spec = checked_spec(tool, self._minify)
            old = self._tools.get(name)
            self._tools[name] = spec
            self._validators.pop(name, None)
            if old is None:
                self._states[name] = ToolState.RESIDENT
                self._last_turn[name] = self._turn  # a new tool is warm for idle_turns turns
                self._event(EventKind.REGISTERED, name)
                continue
            self._event(EventKind.REDEFINED, name, "definition changed upstream")
            if self._states[name] is ToolState.RESIDENT and self._resident_by_tool.get(name):
                self._states[name] = TOOL_LIFECYCLE.fire(
                    ToolState.RESIDENT, "redefine", record=name, facts=self._facts(name)
                )
                self._event(EventKind.TOMBSTONED, name, "definition changed while arguments are resident")

    # -- reading -----------------------------------------------------------------------------

    def _spec(self, name: str) -> ToolSpec:
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise NotFound(f"unknown tool {name!r}") from None

    def state(self, name: str) -> ToolState:
        """The tool's lifecycle state. Raises ``NotFound`` for an unknown tool."""
        self._spec(name)
        return self._states[name]

    def tool(self, name: str) -> ToolSpec:
        """The tool's pinned definition (shared, read-only). Raises ``NotFound`` for an unknown tool."""
        return self._spec(name)

    def tools(self, state: ToolState | None = None) -> list[str]:
        """Tool names in registration order, optionally only those in ``state``."""
        return [n for n in self._tools if state is None or self._states[n] is state]

    def call(self, call_id: str) -> CallRecord:
        """A recorded call. Raises ``NotFound`` for an unknown id."""
        try:
            return self._calls[call_id]
        except (KeyError, TypeError):
            raise NotFound(f"unknown call id {call_id!r}") from None

    def resident_calls(self) -> list[CallRecord]:
        """Calls whose arguments are resident, oldest first."""
        return list(self._resident.values())

    def arguments_resident(self, name: str) -> bool:
        """Whether arguments of an earlier call to the tool are still in the transcript."""
        self._spec(name)
        return self._resident_by_tool.get(name, 0) > 0

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """The withheld tools (tombstoned or evicted; never archived) that best match ``query``.

        One index per distinct set of definitions is shared by every session of the process;
        with the ``search`` extra installed, BM25 is fused with an offline embedding ranker.

        Returns:
            At most ``limit`` hits, best first.
        """
        states = self._states
        return shared_index(self._tools.values()).search(
            query, limit=limit, among=lambda name: states.get(name) in _WITHHELD
        )

    @property
    def reexpand_tool(self) -> str:
        """The name tombstones tell the model to call to get a withheld schema back."""
        return self._reexpand_tool

    def is_pinned(self, name: str) -> bool:
        return name in self._pinned

    def _facts(self, name: str) -> dict[str, bool]:
        return {"arguments_resident": self._resident_by_tool.get(name, 0) > 0}

    # -- tombstones --------------------------------------------------------------------------

    def tombstone_text(self, name: str) -> str:
        """The one line shown for a tool whose schema is withheld."""
        if self._states.get(name) is ToolState.ARCHIVED:
            return (
                f"{name}: archived with an abandoned tool chain; calls are refused and "
                f"re-expansion is not possible (an operator must re-admit it)."
            )
        kind = "mutation tool" if self._spec(name).mutation else "tool"
        # Only a tool whose earlier arguments are still visible has arguments to go stale.
        stale = "; earlier arguments may be stale" if self._resident_by_tool.get(name, 0) > 0 else ""
        return (
            f"{name}: {kind} schema withheld{stale}. "
            f'Call {self._reexpand_tool} with names=["{name}"] before calling it.'
        )

    def tombstones(self) -> list[str]:
        """Every tombstone line currently shown, sorted by tool name."""
        return [self.tombstone_text(n) for n in sorted(self._tombstoned_names())]

    def _tombstoned_names(self) -> list[str]:
        # Runs over every tool on every turn: the enum members and the lookup are bound once.
        tombstoned, archived = ToolState.TOMBSTONED, ToolState.ARCHIVED
        calls = self._resident_by_tool
        states = self._states.items()
        return [n for n, s in states if s is tombstoned or (s is archived and calls.get(n, 0) > 0)]

    # -- calls -------------------------------------------------------------------------------

    def authorize_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        """Check that a call may be forwarded; raise if not. A refusal is logged as an event.

        Raises:
            NotFound: unknown tool.
            ToolNotResident: the schema is withheld; the message names the re-expand tool.
            ToolArchived: the tool left the active index with an abandoned chain.
            ArgumentsInvalid: the arguments fail the full schema; ``path`` names the field.
            ChainCollision: the call would complete an archived fatal chain prefix.
        """
        try:
            self._check_call(name, arguments)
        except CallRefused as refusal:
            self._commit(("refuse", {"tool": refusal.tool, "reason": str(refusal)}))
            raise

    def _check_call(self, name: str, arguments: Mapping[str, Any], *, implicit: bool = False) -> None:
        """The checks of ``authorize_call``; ``implicit``: an evicted tool about to be re-expanded."""
        spec = self._spec(name)
        state = self._states[name]
        if state is ToolState.ARCHIVED:
            raise ToolArchived(self.tombstone_text(name), tool=name)
        if state is not ToolState.RESIDENT and not (implicit and state is ToolState.EVICTED):
            raise ToolNotResident(self.tombstone_text(name), tool=name)
        if not isinstance(arguments, Mapping):
            raise ArgumentsInvalid(f"{name}: arguments must be a JSON object", tool=name, path="$")
        # The limits bound what checking costs, so they are checked first, at a bounded cost.
        shape = measure_arguments(arguments, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_VALUES)
        if shape.depth > MAX_ARGUMENT_DEPTH:
            raise ArgumentsInvalid(
                f"{name}: arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels", tool=name, path="$"
            )
        if shape.values > MAX_ARGUMENT_VALUES:
            raise ArgumentsInvalid(
                f"{name}: arguments hold more than {MAX_ARGUMENT_VALUES:,} values (object members and "
                "array items), the most one call may have",
                tool=name,
                path="$",
            )
        size = oversize(arguments, shape)
        if size is not None:
            raise ArgumentsInvalid(
                f"{name}: arguments are {size:,} bytes of JSON, over the {MAX_ARGUMENT_BYTES:,}-byte "
                "limit of one call",
                tool=name,
                path="$",
            )
        plain = shape.plain
        validator = self._validators.get(name)
        if validator is None:
            validator = self._validators[name] = shared_validator(spec)
        error = validator.first_error(arguments if plain else dict(arguments), plain=plain)
        if error is not None:
            path = _error_path(error)
            if implicit:
                # The model never saw this schema in the list: give it now, so one retry can fix the call.
                schema = json.dumps(spec.input_schema, separators=(",", ":"), ensure_ascii=False)
                hint = f"Its full input schema: {schema}"
            else:
                hint = f"The full schema is available from {self._reexpand_tool}."
            raise ArgumentsInvalid(
                f"{name}: invalid arguments at {path}: {short_message(error.message)}. {hint}",
                tool=name,
                path=path,
            )
        for guard in self._guards:
            guard(name, dict(arguments))

    def _apply_refuse(self, data: Mapping[str, Any]) -> None:
        self._event(EventKind.REFUSED, data["tool"], data["reason"])

    def record_call(self, name: str, arguments: Mapping[str, Any]) -> CallRecord:
        """Record a call the host made; its arguments are now resident.

        Returns:
            The call record (``.id`` names it in ``evict_arguments``).

        Raises:
            NotFound: unknown tool.
            ToolNotResident, ToolArchived: the tool's schema is withheld: recording the call
                would put arguments beside a missing schema.
            InvalidInput: arguments that are not a JSON object.
        """
        self._spec(name)
        state = self._states[name]
        if state is ToolState.ARCHIVED:
            raise ToolArchived(self.tombstone_text(name), tool=name)
        if state is not ToolState.RESIDENT:
            raise ToolNotResident(self.tombstone_text(name), tool=name)
        if not isinstance(arguments, Mapping):
            raise InvalidInput("call arguments must be a JSON object", where="arguments")
        depth, _ = scan_arguments(arguments, MAX_ARGUMENT_DEPTH)
        if depth > MAX_ARGUMENT_DEPTH:
            raise InvalidInput(
                f"call arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels", where="arguments"
            )
        return self._record(name, arguments)

    def admit_call(
        self, name: str, arguments: Mapping[str, Any], *, reexpand_evicted: bool = False
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

        Returns:
            The call record.

        Raises:
            NotFound, ToolNotResident, ToolArchived, ArgumentsInvalid, ChainCollision: as
                ``authorize_call`` (the refusal is logged; nothing is recorded).
            InvalidInput: arguments that are not JSON.
        """
        implicit = reexpand_evicted and self._states.get(name) is ToolState.EVICTED
        try:
            self._check_call(name, arguments, implicit=implicit)
        except CallRefused as refusal:
            self._commit(("refuse", {"tool": refusal.tool, "reason": str(refusal)}))
            raise
        if implicit:
            self._transition(name, "reexpand", IMPLICIT_REEXPANSION)
        return self._record(name, arguments)

    def _record(self, name: str, arguments: Mapping[str, Any]) -> CallRecord:
        try:
            text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"call arguments are not JSON: {exc}", where="arguments") from None
        if len(text) > MAX_ARGUMENT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES:
            raise InvalidInput(
                f"call arguments are over the {MAX_ARGUMENT_BYTES:,}-byte limit of one call",
                where="arguments",
            )
        call_id = f"c{len(self._calls) + 1}"
        self._commit(
            (
                "call",
                {"id": call_id, "tool": name, "arguments": json.loads(text), "tokens": count_tokens(text)},
            )
        )
        return self._calls[call_id]

    def _apply_call(self, data: Mapping[str, Any]) -> None:
        name = data["tool"]
        record = CallRecord(data["id"], name, self._turn, data["arguments"], int(data["tokens"]))
        self._calls[record.id] = record
        self._resident[record.id] = record
        self._resident_by_tool[name] = self._resident_by_tool.get(name, 0) + 1
        self._argument_total += record.argument_tokens
        self._last_turn[name] = self._turn
        self._uses[name] = self._uses.get(name, 0) + 1

    def evict_arguments(self, *call_ids: str) -> None:
        """The host dropped these calls' arguments from its transcript.

        Already-evicted ids are accepted and change nothing.

        Raises:
            NotFound: an unknown call id (nothing is evicted).
        """
        for call_id in call_ids:
            self.call(call_id)
        ids = [c for c in dict.fromkeys(call_ids) if c in self._resident]
        if ids:
            self._commit(("evict_arguments", {"ids": ids}))

    def _apply_evict_arguments(self, data: Mapping[str, Any]) -> None:
        for call_id in data["ids"]:
            record = self._resident.pop(call_id)
            self._resident_by_tool[record.tool] -= 1
            self._argument_total -= record.argument_tokens
            self._event(EventKind.ARGUMENTS_EVICTED, call_id, record.tool)

    # -- lifecycle ---------------------------------------------------------------------------

    def _transition(self, name: str, trigger: str, reason: str = "") -> ToolState:
        self._spec(name)
        dest = TOOL_LIFECYCLE.fire(self._states[name], trigger, record=name, facts=self._facts(name))
        self._commit(("transition", {"tool": name, "trigger": trigger, "dest": dest.value, "reason": reason}))
        return dest

    def _apply_transition(self, data: Mapping[str, Any]) -> None:
        name, trigger = data["tool"], data["trigger"]
        dest = ToolState(data["dest"])
        self._states[name] = dest
        kind = EventKind.READMITTED if trigger == "readmit" else _EVENT_OF[dest]
        self._event(kind, name, data.get("reason") or trigger)
        if dest is ToolState.RESIDENT:
            self._last_turn[name] = self._turn

    def prune(self, name: str) -> ToolState:
        """Take the tool out of schema residency the safe way.

        Returns:
            ``EVICTED`` if no arguments of it are resident, else ``TOMBSTONED``.

        Raises:
            NotFound: unknown tool.
            IllegalTransition: the tool is not resident.
        """
        return self._transition(name, "prune", "pruned")

    def tombstone(self, name: str) -> ToolState:
        """Withhold the tool's schema and show a tombstone line instead."""
        return self._transition(name, "tombstone")

    def evict(self, name: str) -> ToolState:
        """Withhold the tool's schema with no tombstone.

        Raises:
            GhostToolError: arguments of an earlier call are resident; nothing changes.
            IllegalTransition: not allowed from the current state.
        """
        return self._transition(name, "evict")

    def reexpand(self, name: str) -> JSONObject:
        """Make the tool resident again (a first-class signal) and return its full definition.

        Raises:
            NotFound: unknown tool.
            IllegalTransition: the tool is archived (only ``readmit`` brings it back).
        """
        state = self._states.get(name) if name in self._tools else None
        if state is not ToolState.RESIDENT:
            self._transition(name, "reexpand", "re-expansion requested")
        full: JSONObject = json.loads(json.dumps(self._spec(name).definition))
        return full

    def archive(self, name: str, reason: str = "archived") -> ToolState:
        """Take the tool out of the active index: not searchable, not callable."""
        return self._transition(name, "archive", reason)

    def readmit(self, name: str) -> ToolState:
        """Operator action: bring an archived tool back to the index (evicted or tombstoned)."""
        return self._transition(name, "readmit", "re-admitted by operator")

    # -- planning ----------------------------------------------------------------------------

    def plan_turn(self, budget: Budget, *, phase: str | None = None) -> TurnPlan:
        """Open the next turn and plan what the model is shown.

        Arguments leave first (oldest first, to the argument budget); tombstoned tools whose
        arguments all left are evicted; then resident schemas are chosen to the schema budget
        (pinned, active phase, recency, frequency); a pruned tool with resident arguments is
        tombstoned. ``budget.planner`` says how (``residency._core._planner``): ``stable``
        (the default) changes the list only to add what is needed (a phase entered: its tools
        together) or, past the budget's margin, to cut it in one step to its low-water mark;
        ``greedy`` keeps it as small as it can every turn.

        Raises:
            InvalidInput: ``budget`` is not a ``Budget`` or ``phase`` is unknown.
        """
        if not isinstance(budget, Budget):
            raise InvalidInput("plan_turn needs a Budget", where="budget")
        if phase is not None and phase not in self._phases:
            raise InvalidInput(f"unknown phase {phase!r}; known: {sorted(self._phases)}", where="phase")
        steady = self._steady
        if (
            steady is not None
            and steady.revision == self._revision
            and steady.budget == budget
            and steady.phase == phase
            and self._argument_total <= budget.argument_ceiling
            and (steady.warm_until is None or self._turn + 1 <= steady.warm_until)
        ):
            # Nothing can have changed since a steady turn (see ``PlanDecision.steady``): only
            # the turn opens. Tool states are the same, so are the tools and tombstones shown.
            self._commit(("turn", {"turn": self._turn + 1, "phase": phase}), relaxed=True)
            return TurnPlan(
                turn=self._turn,
                tools=steady.tools,
                tombstones=steady.tombstones,
                evictions=(),
                events=(),
                schema_tokens=steady.schema_tokens,
                argument_tokens=self._argument_total,
            )
        in_phase = self._phases.get(phase, frozenset()) if phase else frozenset()
        # One standing per tool on every turn: lookups bound once, fields in ToolStanding's order
        # (name, state, tokens, pinned, in_phase, last_turn, uses, resident_calls).
        states, pinned = self._states, self._pinned
        last_turn, uses, resident_calls = self._last_turn.get, self._uses.get, self._resident_by_tool.get
        standings = [
            ToolStanding(
                n,
                states[n],
                spec.tokens,
                n in pinned,
                n in in_phase,
                last_turn(n, -1),
                uses(n, 0),
                resident_calls(n, 0),
            )
            for n, spec in self._tools.items()
        ]
        stable = budget.planner == "stable"
        decision = decide(
            budget,
            standings,
            (ResidentCall(c.id, c.tool, c.argument_tokens) for c in self._resident.values()),
            self._argument_total,
            self._turn + 1,
            entered=stable and phase is not None and phase != self._phase,
            fresh=self._asked_this_turn() if stable else (),
        )
        left: dict[str, int] = {}
        for call_id in decision.evict_calls:
            tool = self._resident[call_id].tool
            left[tool] = left.get(tool, 0) + 1

        def facts_after(name: str) -> dict[str, bool]:
            return {"arguments_resident": self._resident_by_tool.get(name, 0) - left.get(name, 0) > 0}

        items: list[tuple[str, Mapping[str, Any]]] = [("turn", {"turn": self._turn + 1, "phase": phase})]
        if decision.evict_calls:
            items.append(("evict_arguments", {"ids": list(decision.evict_calls)}))
        for trigger, names, reason in (
            ("evict", decision.cascade, "arguments left: tombstone no longer needed"),
            ("reexpand", decision.restore, "pinned or in the active phase"),
            ("prune", decision.prune, "schema budget or idle"),
        ):
            # The machine's answer depends only on (state, trigger, facts): it is asked once per
            # distinct question, not once per tool (a cold plan over a large catalog prunes
            # thousands). A refusal raises at once, as before, and is never remembered.
            answers: dict[tuple[ToolState, tuple[tuple[str, bool], ...]], ToolState] = {}
            for name in names:
                facts = facts_after(name)
                question = (self._states[name], tuple(sorted(facts.items())))
                dest = answers.get(question)
                if dest is None:
                    dest = answers[question] = TOOL_LIFECYCLE.fire(
                        question[0], trigger, record=name, facts=facts
                    )
                items.append(
                    ("transition", {"tool": name, "trigger": trigger, "dest": dest.value, "reason": reason})
                )
        if decision.over_budget:
            items.append(
                ("budget", {"schema_tokens": decision.schema_tokens, "budget": budget.schema_tokens})
            )
        first_event = len(self._events)
        # Relaxed: losing a plan to a power loss leaves a more cautious state (arguments still
        # thought visible, a tool shown again), never a ghost; the next recorded call syncs it.
        self._commit(*items, relaxed=True)
        specs = self._tools
        if stable:
            shown = tuple(specs[n].shown for n in self.resident_tools())
        else:
            resident, states = ToolState.RESIDENT, self._states
            shown = tuple(spec.shown for n, spec in specs.items() if states[n] is resident)
        events = tuple(self._events[first_event:])
        tombstoned = sorted(e.subject for e in events if e.kind is EventKind.TOMBSTONED)
        plan = TurnPlan(
            turn=self._turn,
            tools=shown,
            tombstones=tuple(self.tombstones()),
            evictions=decision.evict_calls,
            events=events,
            schema_tokens=decision.schema_tokens,
            argument_tokens=self._argument_total,
            new_tombstones=tuple(self.tombstone_text(n) for n in tombstoned),
        )
        self._steady = (
            _Steady(
                self._revision, budget, phase, decision.warm_until, shown, plan.tombstones, plan.schema_tokens
            )
            if decision.steady and self._STEADY_PLANS
            else None
        )
        return plan

    def resident_tools(self) -> list[str]:
        """The resident tools in the order they became resident: the order a stable plan shows.

        A tool is placed when it is registered or re-expanded (by the model, or by a plan
        bringing a pinned or phase tool back) and keeps its place while it stays resident, so
        a list drawn in this order changes only at its end when tools arrive. The order is
        read from the event log, so a reopened session has the same one.
        """
        order = self._residency_order()
        resident, states = ToolState.RESIDENT, self._states
        return [n for n in order if states.get(n) is resident]

    def _residency_order(self) -> dict[str, None]:
        # Kept up to date from the event log, which the journal rebuilds on replay and a
        # checkpoint restores; a cache (not state): remade after the log is replaced.
        events = self._events
        cache = self._order_cache
        if cache is not None and cache[0] is events and cache[1] <= len(events):
            _, start, order = cache
        else:
            start, order = 0, {}
        placed = (EventKind.REGISTERED, EventKind.REEXPANDED)
        for i in range(start, len(events)):
            event = events[i]
            if event.kind in placed:
                order.pop(event.subject, None)
                order[event.subject] = None
        self._order_cache = (events, len(events), order)
        return order

    def _asked_this_turn(self) -> frozenset[str]:
        """Tools the model called or re-expanded in the current turn (what a cut keeps first)."""
        turn = self._turn
        asked: set[str] = set()
        for call in reversed(self._calls.values()):
            if call.turn != turn:
                break
            asked.add(call.tool)
        reexpanded = EventKind.REEXPANDED
        for event in reversed(self._events):
            if event.turn != turn:
                break
            if event.kind is reexpanded:
                asked.add(event.subject)
        return frozenset(asked)

    def _apply_budget(self, data: Mapping[str, Any]) -> None:
        self._event(
            EventKind.BUDGET_EXCEEDED,
            "schema",
            f"pinned tools need {data['schema_tokens']} tokens; budget {data['budget']}",
        )

    # -- checkpoints -------------------------------------------------------------------------

    def _checkpoint_encode(self, state: dict[str, Any]) -> None:
        # What a tool is shown as depends on this session's minifier, which a checkpoint cannot
        # name; it is kept only for the default one and otherwise made again on restore, as a
        # replay would.
        keep = self._minify is minify_tool
        state["_tools"] = (
            tokenizer_name() if keep else None,
            [
                (s.name, s.definition, s.hash, s.mutation, s.shown if keep else None, s.tokens)
                for s in state["_tools"].values()
            ],
        )
        super()._checkpoint_encode(state)

    def _checkpoint_decode(self, state: dict[str, Any]) -> None:
        super()._checkpoint_decode(state)
        tokenizer, rows = state["_tools"]
        keep = tokenizer is not None and tokenizer == tokenizer_name() and self._minify is minify_tool
        tools: dict[str, ToolSpec] = {}
        for name, definition, digest, _mutation, shown, tokens in rows:
            # Verified by hash, and shared with every session of the process that holds it.
            tools[name] = shared_spec(name, definition, digest, self._minify, shown if keep else None, tokens)
        state["_tools"] = tools

    # -- comparison --------------------------------------------------------------------------

    def _snapshot_parts(self, parts: dict[str, Any]) -> None:
        super()._snapshot_parts(parts)
        parts["tools"] = {
            n: {
                "state": self._states[n].value,
                "hash": spec.hash,
                "last_turn": self._last_turn.get(n, -1),
                "uses": self._uses.get(n, 0),
            }
            for n, spec in self._tools.items()
        }
        parts["calls"] = {
            c.id: {
                "tool": c.tool,
                "turn": c.turn,
                "resident": c.id in self._resident,
                "arguments": c.arguments,
            }
            for c in self._calls.values()
        }
        parts["tombstones"] = self.tombstones()


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
