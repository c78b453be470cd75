"""The simulated model, and the strategies the session benchmark compares residency with.

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
Tool tokens are those of what the model is sent about tools: the tool list as a model API
receives it (name, description, input schema), tombstone lines, meta-tool definitions, and the
results of ``search_tools``, ``reexpand_tools`` and refusals, in the turn they happen (one
request per turn). Besides, every strategy keeps the whole prompt of every request in a
``_pricing.Prompt`` (tool block, user words, calls, results, meta-tool exchanges, one request
per step): the cost model prices it.

``defer`` is the pattern of a provider's tool search: a tool block that never changes (the
pinned tools, full, plus one search tool); a search returns the full definitions of its top
``DEFER_HITS`` hits in its result, in the transcript, and those tools are callable while that
result is there. It has no tombstones and no refusals.

The residency strategies, and ``make_strategy`` over all of them, are in ``_strategies``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import jsonschema

from residency._bench._pricing import Prompt, block_key, call_tokens
from residency._bench._trace import Toolset, Trace, TraceCall, TraceTurn
from residency._core._tools import JSONObject
from residency._gateway import SEARCH_TOOLS, meta_tool_definitions
from residency._search import search, tokenize
from residency._tokens import count_tokens

__all__ = [
    "DEFER_HITS",
    "SEARCH_LIMIT",
    "DeferStrategy",
    "Minifier",
    "MinifyStrategy",
    "Model",
    "Seed003Strategy",
    "Strategy",
    "Tally",
    "conform",
    "model_view",
    "rebuild_from_stale",
    "replay",
]

Model = Literal["heeding", "careless"]
Minifier = Callable[[JSONObject], JSONObject]

SEARCH_LIMIT = 5
# A provider's tool search loads the full definitions of its 3 to 5 best hits; the low end.
DEFER_HITS = 3
# The upstream's answer to arguments its schema rejects: one short error line.
ERROR_RESULT_TOKENS = 40

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
    argument_evictions: int = 0
    per_turn_tokens: list[int] = field(default_factory=list)
    per_turn_tokens_results_carried: list[int] = field(default_factory=list)
    per_turn_result_tokens: list[int] = field(default_factory=list)
    plan_seconds: list[float] = field(default_factory=list)
    tombstones_per_turn: list[int] = field(default_factory=list)
    listed_per_turn: list[int] = field(default_factory=list)  # tools in the list, meta-tools aside

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "total_tokens": sum(self.per_turn_tokens),
            "total_tokens_results_carried": sum(self.per_turn_tokens_results_carried),
            "per_turn_tokens": list(self.per_turn_tokens),
            "meta_result_tokens": sum(self.per_turn_result_tokens),
            # Every count as it is (the annotations are strings: postponed evaluation).
            **{f.name: getattr(self, f.name) for f in fields(self) if f.type == "int"},
        }
        if self.tombstones_per_turn:
            out["max_tombstones_shown"] = max(self.tombstones_per_turn)
        return out


class Strategy:
    """Shows every tool, full, every turn (``all-full``); subclasses show less.

    ``prompt`` holds what every request sends; ``transcript`` is the calls whose arguments the
    model still sees, oldest first.
    """

    name = "all-full"

    def __init__(self, toolset: Toolset) -> None:
        self.definitions = dict(toolset.initial)
        self._upgraded = toolset.upgraded
        self.tally = Tally()
        self.prompt = Prompt()
        self._validators: dict[str, Any] = {}
        self._extra = 0  # tokens of meta-tool results this turn
        self._carried = 0  # tokens of meta-tool results of earlier turns still in the transcript
        self._shown: dict[str, JSONObject] = {}
        self._shown_tokens = 0
        self._block = ""
        self._opened = False
        self._calls = 0
        self._last_ref = ""  # the call just forwarded, for its result

    # What the model is shown: recomputed only when definitions change.
    def shown(self, phase: str | None) -> dict[str, JSONObject]:
        return {n: model_view(d) for n, d in self.definitions.items()}

    def _refresh(self, phase: str | None) -> None:
        self._shown = self.shown(phase)
        self._shown_tokens = count_tokens(list(self._shown.values()))
        self._block = block_key(list(self._shown.values()))

    def listed(self) -> list[str]:
        """The tools of this turn's tool block, meta-tools aside."""
        return list(self._shown)

    def block(self) -> tuple[str, int]:
        """This turn's tool block: its ``block_key`` and its tokens."""
        return self._block, self.turn_tokens()

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        if changed or not self._opened:
            self._refresh(phase)
            self._opened = True
        self._extra = 0

    def turn_tokens(self) -> int:
        return self._shown_tokens

    def close_turn(self, base: int) -> None:
        self.prompt.request()  # the model answers once the turn's last result is in
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
        """The host compacts its transcript: its ``n`` oldest calls with arguments leave."""
        self.prompt.compact(n)

    @property
    def transcript(self) -> list[tuple[str, JSONObject]]:
        return [(tool, arguments) for _, tool, arguments in self.prompt.calls()]

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
        """The model calls the tool; it is forwarded (no check here). False if refused instead."""
        self.prompt.request()
        self._forward(tool, arguments)
        return True

    def _forward(self, tool: str, arguments: JSONObject, ref: str | None = None) -> None:
        self._calls += 1
        self._last_ref = ref or f"call-{self._calls}"
        self.prompt.call(tool, arguments, self._last_ref)

    def receive(self, tokens: int) -> None:
        """The upstream's result of the call just forwarded enters the transcript."""
        self.prompt.result(self._last_ref, tokens)

    def _exchange(self, tool: str, arguments: JSONObject, result_tokens: int) -> int:
        """One request in which the model calls a meta-tool, then the exchange enters the transcript."""
        self.prompt.request()
        self._extra += result_tokens
        return self.prompt.meta(call_tokens(tool, arguments) + result_tokens)

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


class DeferStrategy(Strategy):
    """A stable list (the pinned tools, full, and a search tool); schemas arrive in search results."""

    name = "defer"

    def __init__(self, toolset: Toolset, trace: Trace) -> None:
        self._pinned = frozenset(trace.pinned)
        self._search_tool = model_view(meta_tool_definitions()[0])
        super().__init__(toolset)
        self._server_of = toolset.server_of
        # tool -> (the search exchange that returned its definition, the schema in it)
        self._loaded: dict[str, tuple[int, JSONObject]] = {}

    def shown(self, phase: str | None) -> dict[str, JSONObject]:
        views = {n: model_view(d) for n, d in self.definitions.items() if n in self._pinned}
        return {**views, SEARCH_TOOLS: self._search_tool}

    def visible(self, tool: str) -> JSONObject | None:
        if tool in self._pinned:
            return super().visible(tool)
        loaded = self._loaded.get(tool)
        if loaded is not None and self.prompt.holds(loaded[0]):
            return loaded[1]
        return None

    def find(self, tool: str, query: str) -> JSONObject | None:
        withheld = [d for n, d in self.definitions.items() if n not in self._pinned]
        for q in (query, f"{query} {' '.join(tokenize(self._server_of[tool]))}"):
            views = [model_view(self.definitions[h.name]) for h in search(q, withheld, DEFER_HITS)]
            self.tally.searches += 1
            text = json.dumps(views, ensure_ascii=False, separators=(",", ":")) if views else "No match."
            handle = self._exchange(SEARCH_TOOLS, {"query": q}, count_tokens(text))
            for view in views:
                self._loaded[view["name"]] = (handle, view["inputSchema"])
            if any(view["name"] == tool for view in views):
                return self._loaded[tool][1]
        self.tally.search_misses += 1
        return None


# -- the replay --------------------------------------------------------------------------------


def _perform(s: Strategy, call: TraceCall, model: Model, result_scale: float) -> None:
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
                _forwarded(s, call, ghost, result_scale, ghost_call=True)
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
    _forwarded(s, call, arguments, result_scale, ghost_call=False)


def _forwarded(
    s: Strategy, call: TraceCall, arguments: JSONObject, result_scale: float, *, ghost_call: bool
) -> None:
    t = s.tally
    t.ghost_calls_forwarded += ghost_call
    if not s.valid(call.tool, arguments):
        t.invalid_calls_forwarded += 1
        t.failed_calls += 1
        s.receive(ERROR_RESULT_TOKENS)
        return
    t.completed_calls += 1
    if arguments != call.arguments:
        t.stale_calls_forwarded += 1
    s.receive(round((call.result_tokens or 0) * result_scale))


def replay(
    trace: Trace,
    toolset: Toolset,
    strategy: Strategy,
    *,
    model: Model = "heeding",
    result_scale: float = 1.0,
    on_turn: Callable[[], None] | None = None,
) -> Tally:
    """Replay every turn of ``trace`` under ``strategy``; returns its tally.

    ``strategy.prompt.requests`` then holds every request for the cost model; results enter
    the transcript at ``result_scale`` times the size the trace gives them.
    """
    phase: str | None = None
    for turn in trace.turns:
        strategy.prompt.next_turn()
        changed = strategy.upgrade(turn.upgrade)
        if turn.evict_calls_before_turn:
            strategy.evict_oldest(turn.evict_calls_before_turn)
        phase = turn.phase if turn.phase is not None else phase
        strategy.open_turn(turn, phase, changed)
        strategy.prompt.set_block(*strategy.block())
        strategy.tally.listed_per_turn.append(len(strategy.listed()))
        if turn.say:
            strategy.prompt.say(count_tokens(turn.say))
        base = strategy.turn_tokens()
        for call in turn.calls:
            _perform(strategy, call, model, result_scale)
        strategy.close_turn(base)
        if on_turn is not None:
            on_turn()
    return strategy.tally
