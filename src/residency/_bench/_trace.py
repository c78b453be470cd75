"""Session traces for the session benchmark: reading them, and binding them to a tool corpus.

A trace is a JSON file describing one agent session, turn by turn::

    {"name": "...", "description": "...", "servers": ["git", "github-mcp-server"],
     "budget": {"schema_tokens": 3000, "argument_tokens": 4000},
     "pinned": ["git_status"],
     "phases": {"explore": ["git_status", "get_file_contents"], "fix": [...]},
     "overrides": {"update_incident": {...an older definition served at the start...}},
     "turns": [{"phase": "explore", "say": "what the user asked",
                "calls": [{"tool": "git_status", "arguments": {"repo_path": "/repo"},
                           "result_tokens": 60}]},
               {"evict_calls_before_turn": 3, "upgrade": ["update_incident"], "calls": []}]}

``servers`` are corpus file stems. Tool names are as the servers send them, namespaced
``server.tool`` only where a name occurs on more than one of the trace's servers. ``phase``
carries over to later turns until another is named. ``overrides`` serve an older definition of
a tool until a turn lists it in ``upgrade`` (an upstream schema migration mid-session). Each
call may name ``intent``: the fields the user's request names explicitly, which a model sets
even when it rebuilds a call without the schema. Each call gives the size of its result, for
the cost model (``_pricing``): ``result_tokens`` (a count) or ``result`` (the text, counted
with the project's tokenizer); a call with neither is counted as an empty result and
``Trace.unsized_calls`` says how many there are. Every call's arguments must be valid against
the definition served at that turn; ``bind`` checks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import InvalidInput
from residency._tokens import count_tokens

__all__ = [
    "INCIDENT_DESK",
    "INCIDENT_DESK_FILE",
    "Toolset",
    "Trace",
    "TraceCall",
    "TraceTurn",
    "bind",
    "load_corpus",
    "load_trace",
    "parse_trace",
]

INCIDENT_DESK = "incident-desk"
INCIDENT_DESK_FILE = Path(__file__).resolve().parent.parent / "_gateway" / "incident_desk.json"


@dataclass(frozen=True, slots=True)
class TraceCall:
    """One call the agent means to make: the tool, the arguments the task needs, its result's size.

    ``result_tokens`` is None when the trace gives no size (counted as an empty result).
    """

    tool: str
    arguments: JSONObject
    intent: tuple[str, ...] = ()
    query: str | None = None
    result_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TraceTurn:
    """One turn: the host's evictions and upstream upgrades first, then the calls in order."""

    phase: str | None
    calls: tuple[TraceCall, ...]
    evict_calls_before_turn: int = 0
    upgrade: tuple[str, ...] = ()
    say: str = ""


@dataclass(frozen=True, slots=True)
class Trace:
    """A parsed trace (see the module docstring for the file format)."""

    name: str
    description: str
    servers: tuple[str, ...]
    budget: Budget
    pinned: tuple[str, ...]
    phases: dict[str, tuple[str, ...]]
    overrides: dict[str, JSONObject]
    turns: tuple[TraceTurn, ...]

    @property
    def calls(self) -> int:
        return sum(len(t.calls) for t in self.turns)

    @property
    def unsized_calls(self) -> int:
        """Calls whose result size the trace does not give."""
        return sum(c.result_tokens is None for t in self.turns for c in t.calls)

    @property
    def phases_entered(self) -> int:
        """How many times the session enters a phase (the first named phase counts)."""
        entered, current = 0, None
        for turn in self.turns:
            if turn.phase is not None and turn.phase != current:
                entered, current = entered + 1, turn.phase
        return entered


@dataclass(frozen=True, slots=True)
class Toolset:
    """The tools a trace runs against, as the model would see their names.

    Attributes:
        initial: name -> definition served at the start (overrides applied), in server order.
        upgraded: name -> definition served once a turn lists the tool in ``upgrade``.
        server_of: name -> server it came from.
    """

    initial: dict[str, JSONObject]
    upgraded: dict[str, JSONObject]
    server_of: dict[str, str]


def load_corpus(
    directory: Path, *, incident_desk: Path | None = INCIDENT_DESK_FILE
) -> dict[str, list[JSONObject]]:
    """Server files of a corpus folder (``{"server", "tools"}``), keyed by file stem.

    The demo upstream's incident desk is added as ``incident-desk`` when its file exists.

    Raises:
        InvalidInput: the folder does not exist or a file is not a server file.
    """
    if not directory.is_dir():
        raise InvalidInput(f"corpus folder {str(directory)!r} does not exist", where="--corpus")
    corpus: dict[str, list[JSONObject]] = {}
    for path in sorted(directory.glob("*.json")):
        corpus[path.stem] = _server_tools(path)
    if incident_desk is not None and incident_desk.is_file() and INCIDENT_DESK not in corpus:
        corpus[INCIDENT_DESK] = _server_tools(incident_desk)
    return corpus


def _server_tools(path: Path) -> list[JSONObject]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path}: not readable JSON: {exc}", where=str(path)) from None
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
    ):
        raise InvalidInput(f"{path}: expected {{'server', 'tools': [...]}} with named tools", where=str(path))
    return tools


def load_trace(path: Path) -> Trace:
    """Read and parse a trace file. Raises ``InvalidInput`` naming the file and the place."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"trace {path}: not readable JSON: {exc}", where=str(path)) from None
    try:
        return parse_trace(raw)
    except InvalidInput as exc:
        raise InvalidInput(f"trace {path}: {exc}", where=exc.where) from None


def _need(cond: bool, message: str, where: str) -> None:
    if not cond:
        raise InvalidInput(f"{where}: {message}", where=where)


def _str_list(value: object, where: str) -> tuple[str, ...]:
    _need(
        isinstance(value, list) and all(isinstance(v, str) for v in value), "must be a list of strings", where
    )
    assert isinstance(value, list)
    return tuple(value)


def parse_trace(raw: object) -> Trace:
    """Parse a decoded trace. Raises ``InvalidInput`` with ``where`` naming the bad key."""
    _need(isinstance(raw, dict), "a trace must be a JSON object", "$")
    assert isinstance(raw, dict)
    name = raw.get("name")
    _need(isinstance(name, str) and bool(name), "needs a non-empty string", "$.name")
    servers = _str_list(raw.get("servers"), "$.servers")
    _need(bool(servers), "needs at least one server", "$.servers")
    budget_raw = raw.get("budget")
    _need(isinstance(budget_raw, dict), "needs {'schema_tokens', 'argument_tokens'}", "$.budget")
    assert isinstance(budget_raw, dict)
    try:
        budget = Budget(budget_raw.get("schema_tokens"), budget_raw.get("argument_tokens"))  # type: ignore[arg-type]
    except InvalidInput as exc:
        raise InvalidInput(f"$.budget.{exc.where}: {exc}", where=f"$.budget.{exc.where}") from None
    pinned = _str_list(raw.get("pinned", []), "$.pinned")
    phases_raw = raw.get("phases", {})
    _need(isinstance(phases_raw, dict), "must map phase names to tool lists", "$.phases")
    phases = {k: _str_list(v, f"$.phases.{k}") for k, v in phases_raw.items()}
    overrides_raw = raw.get("overrides", {})
    _need(
        isinstance(overrides_raw, dict) and all(isinstance(v, dict) for v in overrides_raw.values()),
        "must map tool names to definitions",
        "$.overrides",
    )
    turns_raw = raw.get("turns")
    _need(isinstance(turns_raw, list) and bool(turns_raw), "needs a non-empty list", "$.turns")
    assert isinstance(turns_raw, list)
    turns = tuple(_parse_turn(t, f"$.turns[{i}]", phases) for i, t in enumerate(turns_raw))
    description = raw.get("description", "")
    return Trace(
        name=name,  # type: ignore[arg-type]
        description=description if isinstance(description, str) else "",
        servers=servers,
        budget=budget,
        pinned=pinned,
        phases=phases,
        overrides={k: dict(v) for k, v in overrides_raw.items()},
        turns=turns,
    )


def _parse_turn(raw: object, where: str, phases: Mapping[str, Any]) -> TraceTurn:
    _need(isinstance(raw, dict), "a turn must be a JSON object", where)
    assert isinstance(raw, dict)
    phase = raw.get("phase")
    _need(
        phase is None or phase in phases,
        f"unknown phase {phase!r}; known: {sorted(phases)}",
        f"{where}.phase",
    )
    evict = raw.get("evict_calls_before_turn", 0)
    _need(
        isinstance(evict, int) and not isinstance(evict, bool) and evict >= 0,
        "must be a non-negative integer",
        f"{where}.evict_calls_before_turn",
    )
    calls_raw = raw.get("calls", [])
    _need(isinstance(calls_raw, list), "must be a list", f"{where}.calls")
    calls = []
    for j, c in enumerate(calls_raw):
        cw = f"{where}.calls[{j}]"
        _need(isinstance(c, dict) and isinstance(c.get("tool"), str), "needs a string 'tool'", cw)
        _need(isinstance(c.get("arguments", {}), dict), "must be a JSON object", f"{cw}.arguments")
        query = c.get("query")
        _need(query is None or isinstance(query, str), "must be a string", f"{cw}.query")
        calls.append(
            TraceCall(
                c["tool"],
                dict(c.get("arguments", {})),
                _str_list(c.get("intent", []), f"{cw}.intent"),
                query,
                _result_tokens(c, cw),
            )
        )
    say = raw.get("say", "")
    return TraceTurn(
        phase=phase,
        calls=tuple(calls),
        evict_calls_before_turn=evict,
        upgrade=_str_list(raw.get("upgrade", []), f"{where}.upgrade"),
        say=say if isinstance(say, str) else "",
    )


def _result_tokens(call: Mapping[str, Any], where: str) -> int | None:
    size, text = call.get("result_tokens"), call.get("result")
    _need(size is None or text is None, "give result_tokens or result, not both", where)
    if text is not None:
        _need(isinstance(text, str), "must be a string", f"{where}.result")
        return count_tokens(text)
    _need(
        size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0),
        "must be a non-negative integer",
        f"{where}.result_tokens",
    )
    return size


def bind(trace: Trace, corpus: Mapping[str, list[JSONObject]]) -> Toolset:
    """Resolve a trace's servers and tool names against a corpus and check every call.

    Returns:
        The toolset the strategies replay the trace against.

    Raises:
        InvalidInput: an unknown server or tool, or call arguments that the definition served
            at that turn rejects (``where`` names the turn and call).
    """
    counts: dict[str, int] = {}
    for i, server in enumerate(trace.servers):
        _need(server in corpus, f"unknown server {server!r}; corpus has {sorted(corpus)}", f"$.servers[{i}]")
        for tool in corpus[server]:
            counts[tool["name"]] = counts.get(tool["name"], 0) + 1
    upgraded: dict[str, JSONObject] = {}
    server_of: dict[str, str] = {}
    for server in trace.servers:
        for tool in corpus[server]:
            name = tool["name"] if counts[tool["name"]] == 1 else f"{server}.{tool['name']}"
            upgraded[name] = {**tool, "name": name}
            server_of[name] = server
    initial = dict(upgraded)
    for name, definition in trace.overrides.items():
        _need(name in initial, "overrides a tool none of the servers has", f"$.overrides.{name}")
        initial[name] = {**definition, "name": name}
    for label, names in (("pinned", trace.pinned), *((f"phases.{k}", v) for k, v in trace.phases.items())):
        for name in names:
            _need(name in initial, f"unknown tool {name!r}", f"$.{label}")

    current = dict(initial)
    validators: dict[str, Any] = {}
    for i, turn in enumerate(trace.turns):
        for name in turn.upgrade:
            _need(name in trace.overrides, "only overridden tools can be upgraded", f"$.turns[{i}].upgrade")
            current[name] = upgraded[name]
            validators.pop(name, None)
        for j, call in enumerate(turn.calls):
            where = f"$.turns[{i}].calls[{j}]"
            _need(call.tool in current, f"unknown tool {call.tool!r}", f"{where}.tool")
            validator = validators.get(call.tool)
            if validator is None:
                schema = current[call.tool].get("inputSchema", {"type": "object"})
                validator = validators[call.tool] = jsonschema.validators.validator_for(schema)(schema)
            error = jsonschema.exceptions.best_match(validator.iter_errors(call.arguments))
            if error is not None:
                path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
                raise InvalidInput(
                    f"{where}.arguments{path}: {error.message} (against {call.tool}'s schema)",
                    where=f"{where}.arguments{path}",
                )
    return Toolset(initial=initial, upgraded=upgraded, server_of=server_of)
