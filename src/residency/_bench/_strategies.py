"""The residency strategies of the session benchmark, and ``make_strategy`` over all seven.

Each drives a real ``Session`` (the compact minifier, the trace's pins and phases), calls
``plan_turn`` every turn and sends every call through ``authorize_call`` then ``record_call``;
the host applies the plan's argument evictions to its transcript (an embedded host), so they
break the cached prefix where the evicted arguments were.

- ``residency``: gateway semantics, a tool is callable by being in the tool list. The stable
  planner (the default, ``Budget.planner``), the meta-tools with their constant descriptions,
  and the gateway's own ``search_tools``/``reexpand_tools`` handlers answering the model.
  Tombstones a plan creates reach the model in one text block appended to the transcript, as
  the gateway appends them to the result of the call the plan follows.
- ``residency-greedy``: the same before the stable planner: ``Budget.greedy`` (idle demotion
  after 8 turns, the smallest list every turn) and the tombstone lines in ``reexpand_tools``'
  description, so the list changed with them.
- ``residency-adapter``: what a host does with ``residency.adapters.anthropic``. The tool block
  never depends on the plan: a tool-search tool, the re-expand tool and the pinned tools, then
  every other tool with ``defer_loading`` (its definition is not in the prefix: not counted).
  The model loads a tool by searching (the server-side search returns ``tool_reference``
  blocks for its ``DEFER_HITS`` best hits, expanded to the minified definitions, in the
  transcript) or by re-expanding a tool it knows of (a tombstone): one ``tool_reference``. The
  session mirrors what the model has loaded: deferred tools start withheld, a loaded tool is
  re-expanded, and when the host's compaction takes a tool's last reference out of the
  transcript it prunes the tool (tombstoned if its arguments are still there). A schema in the
  transcript cannot be taken back without editing it, so the host plans with no schema budget
  and no phase: the planner keeps the argument budget and the tombstones. The block digest
  covers the pinned tools only: deferred tools are not in the prompt prefix (the provider's
  documentation), and a loaded definition stays in the transcript as it was loaded.
- ``residency-reference``: the gateway with ``residency.delivery = "reference"``. The tool list
  is fixed: the pinned tools and the meta-tools with ``call_tool``. Every other tool reaches the
  model in a result: each ``search_tools`` hit carries its schema at the session's minify level,
  ``reexpand_tools`` returns full schemas; the session records each such result as a delivery,
  and the model calls the tool through ``call_tool`` (the call's exchange is counted as the
  ``call_tool`` call it is). When the host's compaction takes a result out of the transcript it
  reports it (``drop_deliveries``), and the next plan (``plan_turn(by_reference=True)``)
  withholds what no result still carries: tombstoned where its arguments are in view, with the
  notice in the transcript as by list. The careless model's rebuilt calls go through
  ``call_tool`` too, and meet the same admission.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from residency._bench._pricing import block_key
from residency._bench._simulate import (
    DEFER_HITS,
    SEARCH_LIMIT,
    DeferStrategy,
    Minifier,
    MinifyStrategy,
    Seed003Strategy,
    Strategy,
    model_view,
)
from residency._bench._trace import Toolset, Trace, TraceTurn
from residency._core._lifecycle import ToolState
from residency._core._planner import Budget
from residency._core._tools import JSONObject, definition_hash
from residency._errors import CallRefused, IllegalTransition
from residency._gateway import (
    CALL_TOOL,
    REEXPAND_TOOLS,
    RESULT_META_KEY,
    SEARCH_TOOLS,
    Catalog,
    CatalogEntry,
    listed_meta_tools,
    meta_tool_definitions,
    reexpand_tools,
    search_tools,
)
from residency._runtime import Session, TurnPlan
from residency._search import search, tokenize
from residency._tokens import count_tokens
from residency.adapters._common import REEXPAND_DESCRIPTION, reexpand_schema

__all__ = [
    "RESIDENCY_STRATEGIES",
    "STRATEGIES",
    "AdapterStrategy",
    "GreedyStrategy",
    "ReferenceStrategy",
    "ResidencyStrategy",
    "make_strategy",
]

RESIDENCY_STRATEGIES = ("residency", "residency-greedy", "residency-adapter", "residency-reference")
STRATEGIES = ("all-full", "seed-003", "minify", "defer", *RESIDENCY_STRATEGIES)

NOTICE = "Withheld now:"  # the first line of the gateway's tombstone notice (``_server``)
_UNBOUNDED = 1 << 40


class ResidencyStrategy(Strategy):
    """Minify + ``Session.plan_turn`` (stable) + tombstones + meta-tools (gateway semantics)."""

    name = "residency"
    by_reference = False  # how every turn is planned (``plan_turn(by_reference=...)``)

    def __init__(
        self, toolset: Toolset, minify: Minifier, trace: Trace, budget: Budget | None = None
    ) -> None:
        super().__init__(toolset)
        self._budget = budget if budget is not None else trace.budget
        self.session = Session(
            minify=lambda tool: model_view(minify(tool)), pinned=trace.pinned, phases=trace.phases
        )
        self.session.register_tools(self.definitions.values())
        self._expanded: dict[str, JSONObject] = {}
        self._meta_tokens = 0
        self._server_of = toolset.server_of
        self._catalog = _catalog(self.definitions, toolset.server_of)
        self._pending: list[str] = []  # tombstones made between turns, for the next notice

    def upgrade(self, names: Iterable[str]) -> bool:
        changed = super().upgrade(names)
        if changed:
            before = set(self.session.tombstones())
            self.session.register_tools(self.definitions.values())
            self._catalog = _catalog(self.definitions, self._server_of)
            self._pending += [line for line in self.session.tombstones() if line not in before]
        return changed

    def evict_oldest(self, n: int) -> None:
        ids = [str(ref) for ref in self.prompt.compact(n)]
        if ids:
            self.session.evict_arguments(*ids)

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        self._extra = 0
        self._expanded = {}
        plan = self._plan(phase)
        self._show(plan)
        self.tally.tombstones_per_turn.append(len(plan.tombstones))

    def _plan(self, phase: str | None) -> TurnPlan:
        start = time.perf_counter()
        plan = self.session.plan_turn(self._budget, phase=phase, by_reference=self.by_reference)
        self.tally.plan_seconds.append(time.perf_counter() - start)
        self.prompt.drop_arguments(plan.evictions)
        self.tally.argument_evictions += len(plan.evictions)
        self._notice(dict.fromkeys([*self._pending, *plan.new_tombstones]))
        self._pending = []
        return plan

    def _notice(self, lines: Iterable[str]) -> None:
        """Tombstones just created reach the model in the transcript, not in the tool list."""
        lines = list(lines)
        if lines:
            tokens = count_tokens("\n".join([NOTICE, *lines]))
            self._extra += tokens
            self.prompt.meta(tokens)

    def _show(self, plan: TurnPlan) -> None:
        """This turn's tool block: the plan's tools (in the plan's order), then the meta-tools."""
        self._shown = {t["name"]: t for t in plan.tools}
        self._shown_tokens = count_tokens(list(plan.tools))
        meta = [model_view(m) for m in self._meta_tools(plan)]
        self._meta_tokens = count_tokens(meta)
        self._block = block_key([*plan.tools, *meta])

    def _meta_tools(self, plan: TurnPlan) -> list[JSONObject]:
        # As the gateway lists them with its default config (no offloading of results).
        return meta_tool_definitions(listed_meta_tools(chains=bool(self.session.chains()), offload=False))

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
        self._exchange(REEXPAND_TOOLS, {"names": [tool]}, _text_tokens(result))
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
            arguments = {"query": q, "limit": SEARCH_LIMIT}
            result = search_tools(self.session, self._catalog, arguments)
            self.tally.searches += 1
            self._exchange(SEARCH_TOOLS, arguments, _text_tokens(result))
            if tool in {hit["name"] for hit in (result.structured_content or {}).get("tools", ())}:
                return self.reexpand(tool)
        self.tally.search_misses += 1
        return None

    def submit(self, tool: str, arguments: JSONObject) -> bool:
        try:
            self.session.authorize_call(tool, arguments)
        except CallRefused as refusal:
            self.tally.refused_calls += 1
            self._exchange(tool, arguments, count_tokens(str(refusal)))
            return False
        self.prompt.request()
        self._forward(tool, arguments, self.session.record_call(tool, arguments).id)
        return True


class GreedyStrategy(ResidencyStrategy):
    """``residency`` before the stable planner: ``Budget.greedy`` and tombstones in the list."""

    name = "residency-greedy"

    def __init__(self, toolset: Toolset, minify: Minifier, trace: Trace) -> None:
        budget = Budget.greedy(trace.budget.schema_tokens, trace.budget.argument_tokens)
        super().__init__(toolset, minify, trace, budget)

    def _notice(self, lines: Iterable[str]) -> None:
        pass  # the tombstones were in the list

    def _meta_tools(self, plan: TurnPlan) -> list[JSONObject]:
        return listed_with_tombstones(plan.tombstones)


def listed_with_tombstones(tombstones: Iterable[str]) -> list[JSONObject]:
    """The meta-tools as the gateway listed them before: tombstone lines in ``reexpand_tools``'
    description, so the list changed whenever a tool was withheld."""
    lines = list(tombstones)
    definitions = meta_tool_definitions()
    if lines:
        for d in definitions:
            if d["name"] == REEXPAND_TOOLS:
                d["description"] += (
                    "\nWithheld tools whose earlier arguments are still in the conversation:\n"
                )
                d["description"] += "\n".join(lines)
    return definitions


class AdapterStrategy(ResidencyStrategy):
    """``residency.adapters.anthropic``: a constant block; schemas load into the transcript."""

    name = "residency-adapter"

    def __init__(self, toolset: Toolset, minify: Minifier, trace: Trace) -> None:
        super().__init__(toolset, minify, trace, replace(trace.budget, schema_tokens=_UNBOUNDED))
        self._pinned = frozenset(trace.pinned)
        # The transcript segments holding a reference to each tool, with the input schema it
        # expanded to when it was appended (a later upgrade does not rewrite the transcript).
        self._loaded: dict[str, list[tuple[int, JSONObject]]] = {}
        # Deferred tools: the model has loaded none of them yet.
        for name in self.session.tools():
            if name not in self._pinned:
                self.session.prune(name)
        self._search_tool = model_view(meta_tool_definitions()[0])
        self._reexpand_tool: JSONObject = {
            "name": REEXPAND_TOOLS,
            "description": REEXPAND_DESCRIPTION,
            "inputSchema": reexpand_schema(),
        }

    def evict_oldest(self, n: int) -> None:
        super().evict_oldest(n)
        # A tool whose every reference left the transcript is no longer loaded: the session
        # withholds it (a tombstone where its arguments are still there), and says so.
        gone = [
            name
            for name, loads in self._loaded.items()
            if loads and not any(self.prompt.holds(h) for h, _ in loads)
        ]
        before = set(self.session.tombstones())
        for name in gone:
            self._loaded[name] = []
            if self.session.state(name) is ToolState.RESIDENT:
                self.session.prune(name)
        self._pending += [line for line in self.session.tombstones() if line not in before]

    def open_turn(self, turn: TraceTurn, phase: str | None, changed: bool) -> None:
        # No phase: restoring phase tools would make callable what the model has not loaded.
        super().open_turn(turn, None, changed)

    def _show(self, plan: TurnPlan) -> None:
        session = self.session
        eager = [session.tool(n).shown for n in session.tools() if n in self._pinned]
        meta = [self._search_tool, self._reexpand_tool]
        self._shown = {t["name"]: t for t in eager}
        self._shown_tokens = count_tokens(eager) if eager else 0
        self._meta_tokens = count_tokens(meta)
        # Deferred tools are not in the prompt prefix (the provider's documentation): an
        # upstream upgrade of one changes no cached byte; what was loaded stays as it was.
        self._block = block_key([*meta, *eager])

    def visible(self, tool: str) -> JSONObject | None:
        if tool in self._pinned:
            return super().visible(tool)
        if self.session.state(tool) is ToolState.TOMBSTONED:
            return None  # its tombstone came after the definition: the model goes by it
        for handle, schema in reversed(self._loaded.get(tool, ())):
            if self.prompt.holds(handle):
                return schema
        return None

    def _load(self, names: Iterable[str], handle: int) -> None:
        for name in names:
            schema = self.session.tool(name).shown.get("inputSchema", {"type": "object"})
            self._loaded.setdefault(name, []).append((handle, schema))

    def reexpand(self, tool: str) -> JSONObject | None:
        try:
            self.session.reexpand(tool)
        except IllegalTransition:  # archived: refused with its tombstone
            self._exchange(REEXPAND_TOOLS, {"names": [tool]}, count_tokens(self.session.tombstone_text(tool)))
            return None
        # One tool_reference block, which the API expands to the listed (minified) definition.
        handle = self._exchange(REEXPAND_TOOLS, {"names": [tool]}, self.session.tool(tool).tokens)
        self._load([tool], handle)
        self.tally.reexpansions += 1
        return self.visible(tool)

    def find(self, tool: str, query: str) -> JSONObject | None:
        session = self.session
        deferred = [session.tool(n).shown for n in session.tools() if n not in self._pinned]
        for q in (query, f"{query} {' '.join(tokenize(self._server_of[tool]))}"):
            hits = [h.name for h in search(q, deferred, DEFER_HITS)]
            self.tally.searches += 1
            tokens = sum(session.tool(n).tokens for n in hits) if hits else count_tokens("No match.")
            handle = self._exchange(SEARCH_TOOLS, {"query": q}, tokens)
            loaded = []
            for name in hits:  # each loaded tool is a re-expansion (``searched_tools``)
                if session.state(name) is not ToolState.RESIDENT:
                    try:
                        session.reexpand(name)
                    except IllegalTransition:
                        continue
                loaded.append(name)
            self._load(loaded, handle)
            if tool in loaded:
                return self.visible(tool)
        self.tally.search_misses += 1
        return None


class ReferenceStrategy(ResidencyStrategy):
    """Delivery by reference: a fixed list; schemas in results; calls through ``call_tool``."""

    name = "residency-reference"
    by_reference = True

    def __init__(self, toolset: Toolset, minify: Minifier, trace: Trace) -> None:
        super().__init__(toolset, minify, trace)
        # The deliveries still in the transcript: delivery id -> the exchange that showed them,
        # and per tool the (exchange, input schema) it was shown with, newest last.
        self._delivered: dict[str, int] = {}
        self._loaded: dict[str, list[tuple[int, JSONObject]]] = {}

    def evict_oldest(self, n: int) -> None:
        super().evict_oldest(n)
        # The host reports the results its compaction dropped (``residency/dropped_results``).
        gone = [d for d, handle in self._delivered.items() if not self.prompt.holds(handle)]
        if gone:
            self.session.drop_deliveries(*gone)
            for d in gone:
                del self._delivered[d]

    def _show(self, plan: TurnPlan) -> None:
        """The fixed list: the pinned tools, then the meta-tools with ``call_tool``."""
        listed = [t for t in plan.tools if self.session.is_pinned(t["name"])]
        self._shown = {t["name"]: t for t in listed}
        self._shown_tokens = count_tokens(listed) if listed else 0
        meta = [model_view(m) for m in self._meta_tools(plan)]
        self._meta_tokens = count_tokens(meta)
        self._block = block_key([*listed, *meta])

    def _meta_tools(self, plan: TurnPlan) -> list[JSONObject]:
        chains = bool(self.session.chains())
        return meta_tool_definitions(listed_meta_tools(chains=chains, offload=False, call_tool=True))

    def visible(self, tool: str) -> JSONObject | None:
        if tool in self._shown:
            return super().visible(tool)
        if self.session.state(tool) is not ToolState.RESIDENT:
            return None  # withheld: the model goes by its tombstone, or finds it again
        for handle, schema in reversed(self._loaded.get(tool, ())):
            if self.prompt.holds(handle):
                return schema
        return None

    def _delivery(self, result: Any, handle: int) -> None:
        """A result that showed schemas: what it carries, for ``visible`` and host reports."""
        delivery = (result.meta or {}).get(RESULT_META_KEY)
        if delivery is None:
            return
        self._delivered[str(delivery)] = handle
        for definition in (result.structured_content or {}).get("tools", ()):
            shown = definition.get("definition", definition)
            self._loaded.setdefault(definition["name"], []).append(
                (handle, shown.get("inputSchema", {"type": "object"}))
            )

    def reexpand(self, tool: str) -> JSONObject | None:
        arguments: JSONObject = {"names": [tool]}
        result = reexpand_tools(self.session, self._catalog, arguments, call_tool=True, deliver=True)
        handle = self._exchange(REEXPAND_TOOLS, arguments, _text_tokens(result))
        if result.is_error:
            return None
        self.tally.reexpansions += 1
        self._delivery(result, handle)
        return self.visible(tool)

    def find(self, tool: str, query: str) -> JSONObject | None:
        # One search brings the schema: the hit carries it, and call_tool calls it.
        listed = list(self._shown)
        for q in (query, f"{query} {' '.join(tokenize(self._server_of[tool]))}"):
            arguments = {"query": q, "limit": SEARCH_LIMIT}
            result = search_tools(self.session, self._catalog, arguments, by_reference=True, listed=listed)
            self.tally.searches += 1
            handle = self._exchange(SEARCH_TOOLS, arguments, _text_tokens(result))
            self._delivery(result, handle)
            if tool in {hit["name"] for hit in (result.structured_content or {}).get("tools", ())}:
                return self.visible(tool)
        self.tally.search_misses += 1
        return None

    def submit(self, tool: str, arguments: JSONObject) -> bool:
        via = "" if tool in self._shown else CALL_TOOL
        try:
            record = self.session.admit_call(
                tool, arguments, reexpand_evicted=True, show_schema=bool(via), via=via
            )
        except CallRefused as refusal:
            self.tally.refused_calls += 1
            self._exchange(CALL_TOOL, _through(tool, arguments), count_tokens(str(refusal)))
            return False
        self.prompt.request()
        self._forward(tool, arguments, record.id)
        return True

    def _forward(self, tool: str, arguments: JSONObject, ref: str | None = None) -> None:
        if tool in self._shown:
            super()._forward(tool, arguments, ref)
            return
        # The transcript holds the call_tool call; its arguments are the tool's (``prior``).
        self._calls += 1
        self._last_ref = ref or f"call-{self._calls}"
        self.prompt.call(CALL_TOOL, _through(tool, arguments), self._last_ref)


def _through(tool: str, arguments: JSONObject) -> JSONObject:
    """``call_tool``'s arguments for a call of ``tool``."""
    return {"name": tool, "arguments": arguments}


def _catalog(definitions: Mapping[str, JSONObject], server_of: Mapping[str, str]) -> Catalog:
    return Catalog(
        CatalogEntry(name, server_of[name], name.rsplit(".", 1)[-1], d, definition_hash(d))
        for name, d in definitions.items()
    )


def _text_tokens(result: Any) -> int:
    """Tokens of what a meta-tool result shows the model: its text content."""
    return sum(count_tokens(c.text) for c in result.content if getattr(c, "type", "") == "text")


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
    if name == "defer":
        return DeferStrategy(toolset, trace)
    if name == "residency":
        return ResidencyStrategy(toolset, minify, trace)
    if name == "residency-greedy":
        return GreedyStrategy(toolset, minify, trace)
    if name == "residency-adapter":
        return AdapterStrategy(toolset, minify, trace)
    if name == "residency-reference":
        return ReferenceStrategy(toolset, minify, trace)
    raise ValueError(f"unknown strategy {name!r}; known: {STRATEGIES}")
