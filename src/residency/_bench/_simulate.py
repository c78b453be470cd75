"""The simulated model and the four strategies the session benchmark replays a trace under.

Theory of operation
-------------------
A strategy decides what the model is shown about tools each turn; the simulated model then
tries to make each call of the trace. The model is seed 000's failure model made executable:

- It sees a tool's schema (in the tool list, or in a ``reexpand_tools`` result): it builds
  the call the task needs, to the schema it sees (a value the shown schema declares as a
  string is sent as a string: that is how a lossy schema turns an object into text).
- It sees no schema but a tombstone: it calls ``reexpand_tools`` first (a careless model
  rebuilds the call anyway; a tombstone-checking host refuses it, then the model re-expands).
- It sees no schema but the arguments of an earlier call to the tool: it rebuilds the call
  from them. It keeps the earlier call's fields (the task's values where the task has one,
  the stale values otherwise) and drops every field it cannot know about: those that were
  not in the earlier call and that the task does not name (``intent``). That rebuilt call is
  a ghost call.
- It sees neither: where the strategy offers search it calls ``search_tools`` (the gateway's
  BM25) with the words of the tool's name (or the trace's ``query``), then once more with
  the server's name added if the tool was not among the hits, then ``reexpand_tools``;
  elsewhere the call fails.

Every forwarded call is validated against the FULL definition the upstream serves at that
turn. A call that is never forwarded, or that the upstream rejects, failed; one the upstream
accepts completed, and is also counted stale if its arguments differ from what the task needed
(a stale value kept, a field dropped: the upstream acted on something else than was meant).
Tokens are those of what the model is sent about tools: the tool list as a model API
receives it (name, description, input schema), tombstone lines, meta-tool definitions, and the
results of ``search_tools``, ``reexpand_tools`` and refusals, in the turn they happen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema

from residency._bench._trace import Toolset, Trace, TraceCall, TraceTurn
from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject, definition_hash
from residency._errors import CallRefused
from residency._gateway._aggregate import Catalog, CatalogEntry
from residency._gateway._meta_tools import meta_tool_definitions, reexpand_tools, search_tools
from residency._gateway._search import tokenize
from residency._session import Session
from residency._tokens import count_tokens

__all__ = [
    "STRATEGIES",
    "Model",
    "Strategy",
    "Tally",
    "conform",
    "make_strategy",
    "model_view",
    "rebuild_from_stale",
    "replay",
]

Model = Literal["heeding", "careless"]
Minifier = Callable[[JSONObject], JSONObject]

STRATEGIES = ("all-full", "seed-003", "minify", "residency")

SEARCH_LIMIT = 5

# -- the model ---------------------------------------------------------------------------------


def model_view(tool: Mapping[str, Any]) -> JSONObject:
    """A tool as a model API receives it: name, description and input schema.

    MCP hosts do not pass ``title``, ``annotations`` or ``outputSchema`` to the model, so they
    are not counted for any strategy. OpenAI-style ``{"type": "function", "function": {...}}``
    definitions are read through.
    """
    fn = tool.get("function") if tool.get("type") == "function" else None
    src: Mapping[str, Any] = fn if isinstance(fn, Mapping) else tool
    schema = src.get("inputSchema", src.get("parameters", {"type": "object"}))
    view: JSONObject = {"name": src["name"]}
    if isinstance(src.get("description"), str) and src["description"]:
        view["description"] = src["description"]
    view["inputSchema"] = schema
    return view


def conform(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> JSONObject:
    """The arguments the model sends when it builds the call to the schema it sees.

    Where the shown schema declares a top-level property as ``string`` and the task's value
    is not one, the model sends the value as JSON text (seed 000's re-serialized types).
    """
    props = schema.get("properties")
    out: JSONObject = {}
    for key, value in arguments.items():
        prop = props.get(key) if isinstance(props, Mapping) else None
        declared = prop.get("type") if isinstance(prop, Mapping) else None
        if declared == "string" and not isinstance(value, str):
            out[key] = json.dumps(value, separators=(",", ":"))
        else:
            out[key] = value
    return out


def rebuild_from_stale(
    prior: Mapping[str, Any], wanted: Mapping[str, Any], intent: Iterable[str] = ()
) -> JSONObject:
    """A call rebuilt from an earlier call's arguments, without the schema.

    Args:
        prior: the earlier call's arguments (still in the transcript).
        wanted: the arguments the task needs.
        intent: fields the task names explicitly; the model sets them even if new.

    Returns:
        The earlier call's fields with the task's values where it has one and the stale
        values otherwise, plus the ``intent`` fields; every other field is dropped.
    """
    out = {k: wanted.get(k, v) for k, v in prior.items()}
    for key in intent:
        if key in wanted:
            out[key] = wanted[key]
    return out


# -- strategies --------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one strategy did over a trace; the JSON report is built from it."""

    calls: int = 0
    completed_calls: int = 0
    failed_calls: int = 0
    ghost_calls_forwarded: int = 0
    invalid_calls_forwarded: int = 0
    stale_calls_forwarded: int = 0
    refused_calls: int = 0
    reexpansions: int = 0
    searches: int = 0
    search_misses: int = 0
    per_turn_tokens: list[int] = field(default_factory=list)
    per_turn_tokens_results_carried: list[int] = field(default_factory=list)
    per_turn_result_tokens: list[int] = field(default_factory=list)
    plan_seconds: list[float] = field(default_factory=list)
    tombstones_per_turn: list[int] = field(default_factory=list)

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "total_tokens": sum(self.per_turn_tokens),
            "total_tokens_results_carried": sum(self.per_turn_tokens_results_carried),
            "per_turn_tokens": list(self.per_turn_tokens),
            "meta_result_tokens": sum(self.per_turn_result_tokens),
            "calls": self.calls,
            "completed_calls": self.completed_calls,
            "failed_calls": self.failed_calls,
            "ghost_calls_forwarded": self.ghost_calls_forwarded,
            "invalid_calls_forwarded": self.invalid_calls_forwarded,
            "stale_calls_forwarded": self.stale_calls_forwarded,
            "refused_calls": self.refused_calls,
            "reexpansions": self.reexpansions,
            "searches": self.searches,
            "search_misses": self.search_misses,
        }
        if self.tombstones_per_turn:
            out["max_tombstones_shown"] = max(self.tombstones_per_turn)
        return out


class Strategy:
    """Shows every tool, full, every turn (``all-full``); subclasses show less.

    The transcript is the calls whose arguments the model still sees, oldest first.
    """

    name = "all-full"

    def __init__(self, toolset: Toolset) -> None:
        self.definitions = dict(toolset.initial)
        self._upgraded = toolset.upgraded
        self.tally = Tally()
        self.transcript: list[tuple[str, JSONObject]] = []
        self._validators: dict[str, Any] = {}
        self._extra = 0  # tokens of meta-tool results this turn
        self._carried = 0  # tokens of meta-tool results of earlier turns still in the transcript
        self._shown: dict[str, JSONObject] = {}
        self._shown_tokens = 0
        self._opened = False

    # What the model is shown: recomputed only when definitions change.
    def shown(self, phase: str | None) -> dict[str, JSONObject]:
        return {n: model_view(d) for n, d in self.definitions.items()}

    def _refresh(self, phase: str | None) -> None:
        self._shown = self.shown(phase)
        self._shown_tokens = count_tokens(list(self._shown.values()))

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        if changed or not self._opened:
            self._refresh(phase)
            self._opened = True
        self._extra = 0

    def turn_tokens(self) -> int:
        return self._shown_tokens

    def close_turn(self, base: int) -> None:
        total = base + self._extra
        self.tally.per_turn_tokens.append(total)
        self.tally.per_turn_result_tokens.append(self._extra)
        self.tally.per_turn_tokens_results_carried.append(total + self._carried)
        self._carried += self._extra

    def upgrade(self, names: Iterable[str]) -> bool:
        names = list(names)
        for name in names:
            self.definitions[name] = self._upgraded[name]
            self._validators.pop(name, None)
        return bool(names)

    def evict_oldest(self, n: int) -> None:
        del self.transcript[:n]

    # What the model can see of one tool.
    def visible(self, tool: str) -> JSONObject | None:
        view = self._shown.get(tool)
        return view["inputSchema"] if view is not None else None

    def tombstoned(self, tool: str) -> bool:
        return False

    def prior(self, tool: str) -> JSONObject | None:
        for name, arguments in reversed(self.transcript):
            if name == tool:
                return arguments
        return None

    # What the model can do about a tool it cannot see (nothing, here).
    def reexpand(self, tool: str) -> JSONObject | None:
        return None

    def find(self, tool: str, query: str) -> JSONObject | None:
        return None

    def submit(self, tool: str, arguments: JSONObject) -> bool:
        """Forward the call (no check here). Returns False if refused instead."""
        self._forward(tool, arguments)
        return True

    def _forward(self, tool: str, arguments: JSONObject) -> None:
        self.transcript.append((tool, arguments))

    def valid(self, tool: str, arguments: JSONObject) -> bool:
        """Whether the upstream's FULL current schema accepts the arguments."""
        validator = self._validators.get(tool)
        if validator is None:
            schema = self.definitions[tool].get("inputSchema", {"type": "object"})
            validator = self._validators[tool] = jsonschema.validators.validator_for(schema)(schema)
        return bool(validator.is_valid(arguments))


class MinifyStrategy(Strategy):
    """Every tool, every turn, minified (compact level)."""

    name = "minify"

    def __init__(self, toolset: Toolset, minify: Minifier) -> None:
        self._minify = minify
        super().__init__(toolset)

    def shown(self, phase: str | None) -> dict[str, JSONObject]:
        return {n: model_view(self._minify(d)) for n, d in self.definitions.items()}


class Seed003Strategy(Strategy):
    """Seed 003's pruner on every tool of the active phase (every tool when no phase is set)."""

    name = "seed-003"

    def __init__(self, toolset: Toolset, prune: Minifier, phases: Mapping[str, Collection[str]]) -> None:
        self._prune = prune
        self._phases = phases
        self._phase: str | None = None
        super().__init__(toolset)

    def shown(self, phase: str | None) -> dict[str, JSONObject]:
        names = self._phases[phase] if phase is not None else self.definitions
        return {n: model_view(self._prune(d)) for n, d in self.definitions.items() if n in names}

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        super().open_turn(turn, phase, changed or phase != self._phase)
        self._phase = phase


class ResidencyStrategy(Strategy):
    """Minify + ``Session.plan_turn`` + tombstones + meta-tools, through the real Session API."""

    name = "residency"

    def __init__(self, toolset: Toolset, minify: Minifier, trace: Trace) -> None:
        super().__init__(toolset)
        self._budget = trace.budget
        self.session = Session(
            minify=lambda tool: model_view(minify(tool)), pinned=trace.pinned, phases=trace.phases
        )
        self.session.register_tools(self.definitions.values())
        self._expanded: dict[str, JSONObject] = {}
        self._meta_tokens = 0
        self._server_of = toolset.server_of
        self._catalog = _catalog(self.definitions, toolset.server_of)

    def upgrade(self, names: Iterable[str]) -> bool:
        changed = super().upgrade(names)
        if changed:
            self.session.register_tools(self.definitions.values())
            self._catalog = _catalog(self.definitions, self._server_of)
        return changed

    def evict_oldest(self, n: int) -> None:
        ids = [c.id for c in self.session.resident_calls()[:n]]
        if ids:
            self.session.evict_arguments(*ids)

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        self._extra = 0
        self._expanded = {}
        start = time.perf_counter()
        plan = self.session.plan_turn(self._budget, phase=phase)
        self.tally.plan_seconds.append(time.perf_counter() - start)
        self._shown = {t["name"]: t for t in plan.tools}
        self._shown_tokens = count_tokens(list(plan.tools))
        meta = meta_tool_definitions(plan.tombstones)
        self._meta_tokens = count_tokens([model_view(m) for m in meta])
        self.tally.tombstones_per_turn.append(len(plan.tombstones))

    def turn_tokens(self) -> int:
        return self._shown_tokens + self._meta_tokens

    def visible(self, tool: str) -> JSONObject | None:
        if tool in self._expanded:
            return self._expanded[tool]
        if self.session.state(tool) is not ToolState.RESIDENT:
            return None
        return super().visible(tool)

    def tombstoned(self, tool: str) -> bool:
        return self.session.state(tool) is ToolState.TOMBSTONED

    def prior(self, tool: str) -> JSONObject | None:
        for call in reversed(self.session.resident_calls()):
            if call.tool == tool:
                return call.arguments
        return None

    def reexpand(self, tool: str) -> JSONObject | None:
        result = reexpand_tools(self.session, self._catalog, {"names": [tool]})
        self._extra += _text_tokens(result)
        if result.is_error:
            return None
        self.tally.reexpansions += 1
        [definition] = (result.structured_content or {})["tools"]
        schema: JSONObject = definition.get("inputSchema", {"type": "object"})
        self._expanded[tool] = schema
        return schema

    def find(self, tool: str, query: str) -> JSONObject | None:
        # A model whose first query misses names the system it wants in a second one.
        for q in (query, f"{query} {' '.join(tokenize(self._server_of[tool]))}"):
            result = search_tools(self.session, self._catalog, {"query": q, "limit": SEARCH_LIMIT})
            self.tally.searches += 1
            self._extra += _text_tokens(result)
            if tool in {hit["name"] for hit in (result.structured_content or {}).get("tools", ())}:
                return self.reexpand(tool)
        self.tally.search_misses += 1
        return None

    def submit(self, tool: str, arguments: JSONObject) -> bool:
        try:
            self.session.authorize_call(tool, arguments)
        except CallRefused as refusal:
            self.tally.refused_calls += 1
            self._extra += count_tokens(str(refusal))
            return False
        self.session.record_call(tool, arguments)
        return True


def _catalog(definitions: Mapping[str, JSONObject], server_of: Mapping[str, str]) -> Catalog:
    return Catalog(
        CatalogEntry(name, server_of[name], name.rsplit(".", 1)[-1], d, definition_hash(d))
        for name, d in definitions.items()
    )


def _text_tokens(result: Any) -> int:
    """Tokens of what a meta-tool result shows the model: its text content."""
    return sum(count_tokens(c.text) for c in result.content if getattr(c, "type", "") == "text")


# -- the replay --------------------------------------------------------------------------------


def _perform(s: Strategy, call: TraceCall, model: Model) -> None:
    """The simulated model makes one call of the trace under strategy ``s``."""
    tool, wanted = call.tool, call.arguments
    t = s.tally
    t.calls += 1
    schema = s.visible(tool)
    if schema is None:
        prior = s.prior(tool)
        if s.tombstoned(tool) and model == "heeding":
            schema = s.reexpand(tool)
        elif prior is not None:
            ghost = rebuild_from_stale(prior, wanted, call.intent)
            if s.submit(tool, ghost):
                _forwarded(s, tool, ghost, wanted, ghost_call=True)
                return
            schema = s.reexpand(tool)  # the refusal names reexpand_tools; the model follows it
        else:
            schema = s.find(tool, call.query or " ".join(tokenize(tool)))
        if schema is None:
            t.failed_calls += 1
            return
    arguments = conform(wanted, schema)
    if not s.submit(tool, arguments):
        schema = s.reexpand(tool)
        if schema is None:
            t.failed_calls += 1
            return
        arguments = conform(wanted, schema)
        if not s.submit(tool, arguments):
            t.failed_calls += 1
            return
    _forwarded(s, tool, arguments, wanted, ghost_call=False)


def _forwarded(
    s: Strategy, tool: str, arguments: JSONObject, wanted: JSONObject, *, ghost_call: bool
) -> None:
    t = s.tally
    t.ghost_calls_forwarded += ghost_call
    if not s.valid(tool, arguments):
        t.invalid_calls_forwarded += 1
        t.failed_calls += 1
        return
    t.completed_calls += 1
    if arguments != wanted:
        t.stale_calls_forwarded += 1


def make_strategy(
    name: str, toolset: Toolset, trace: Trace, *, minify: Minifier, prune: Minifier
) -> Strategy:
    """Build one of ``STRATEGIES`` for a trace."""
    if name == "all-full":
        return Strategy(toolset)
    if name == "minify":
        return MinifyStrategy(toolset, minify)
    if name == "seed-003":
        return Seed003Strategy(toolset, prune, trace.phases)
    if name == "residency":
        return ResidencyStrategy(toolset, minify, trace)
    raise ValueError(f"unknown strategy {name!r}; known: {STRATEGIES}")


def replay(
    trace: Trace,
    toolset: Toolset,
    strategy: Strategy,
    *,
    model: Model = "heeding",
    on_turn: Callable[[], None] | None = None,
) -> Tally:
    """Replay every turn of ``trace`` under ``strategy``; returns its tally."""
    phase: str | None = None
    for turn in trace.turns:
        changed = strategy.upgrade(turn.upgrade)
        if turn.evict_calls_before_turn:
            strategy.evict_oldest(turn.evict_calls_before_turn)
        phase = turn.phase if turn.phase is not None else phase
        strategy.open_turn(turn, phase, changed)
        base = strategy.turn_tokens()
        for call in turn.calls:
            _perform(strategy, call, model)
        strategy.close_turn(base)
        if on_turn is not None:
            on_turn()
    return strategy.tally
