"""The gateway's own tools: ``search_tools``, ``reexpand_tools``, ``call_tool``, ``check_chain``,
``archive_chain`` and ``read_span``.

Kept small, and the same on every call: a host's prompt cache is keyed on the tool list, so
nothing that changes turn by turn goes in it. Which of them a session is shown is fixed by the
gateway's config, by the session's delivery (``call_tool`` is listed to a session that may get
tools by reference) and by whether its archive scope holds a chain (``listed_meta_tools``).
The definitions come in two variants, each the same byte for byte in every session and on
every call: without ``call_tool`` (delivery by list) and with it, where ``search_tools`` and
``reexpand_tools`` also say, in one sentence (``CALL_HINT``), how a tool that is not in the
model's list is called. Tombstones reach the model in the result of the call that creates them
(the gateway appends them to it) and in the ``residency://tombstones`` resource; a call to a
tombstoned tool is refused with its tombstone.

``call_tool`` is not handled here: its arguments name a call that takes the path of a direct
call (``_calls``); ``call_tool_target`` reads and checks them.

Each handler takes the session and the raw arguments and returns a ``CallToolResult``. Bad
arguments raise ``ArgumentsInvalid`` naming the field (``path``, e.g. ``$.query``), and so does
an argument naming something the session does not have (a span id, a tool of a topology); the
gateway's error table turns it into the ``isError`` result the model reads (see ``_errors``).
``reexpand_tools`` answers per name instead: the names it could not re-expand are listed in
its result, which is an error only when none could.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import mcp_types as types

from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject
from residency._errors import ArgumentsInvalid, IllegalTransition, InvalidInput, NotFound
from residency._gateway._aggregate import Catalog
from residency._gateway._resources import MAX_RANGE, span_range
from residency._gateway._search import SEARCH_META_KEY, catalog_index, ranker_now
from residency._runtime import Session

__all__ = [
    "ARCHIVE_CHAIN",
    "CALL_HINT",
    "CALL_TOOL",
    "CHECK_CHAIN",
    "LIST_META_TOOLS",
    "READ_SPAN",
    "META_TOOLS",
    "REEXPAND_TOOLS",
    "RESULT_META_KEY",
    "SEARCH_TOOLS",
    "archive_chain",
    "call_tool_target",
    "check_chain",
    "listed_meta_tools",
    "meta_tool_definitions",
    "read_span",
    "reexpand_tools",
    "search_tools",
]

SEARCH_TOOLS = "search_tools"
REEXPAND_TOOLS = "reexpand_tools"
CHECK_CHAIN = "check_chain"
ARCHIVE_CHAIN = "archive_chain"
READ_SPAN = "read_span"
CALL_TOOL = "call_tool"
META_TOOLS = (SEARCH_TOOLS, REEXPAND_TOOLS, CALL_TOOL, CHECK_CHAIN, ARCHIVE_CHAIN, READ_SPAN)
"""Every meta-tool, in listing order (their names are reserved: an upstream tool of one of
these names is namespaced)."""
LIST_META_TOOLS = tuple(n for n in META_TOOLS if n != CALL_TOOL)
"""The meta-tools a session delivered by list may be shown: every one but ``call_tool``."""

CALL_HINT = "A tool that is not in your tool list is called through call_tool(name, arguments)."
"""The one sentence that tells the model how to call a tool its list does not show."""

RESULT_META_KEY = "residency/result"
"""``_meta`` key of a result that showed tool schemas: its delivery id, which the host names in
``_meta["residency/dropped_results"]`` when it drops the result from its transcript."""

MAX_NAMES = 20
_WITHHELD = frozenset({ToolState.TOMBSTONED, ToolState.EVICTED})
_READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}

_REEXPAND_BASE = (
    "Bring withheld tools back: returns their full schemas and makes them callable by name. "
    "Call it before calling a tool whose schema was withheld."
)


def listed_meta_tools(*, chains: bool, offload: bool, call_tool: bool = False) -> tuple[str, ...]:
    """The meta-tools a session is shown, in listing order.

    ``search_tools``, ``reexpand_tools`` and ``archive_chain`` always; ``call_tool`` to a
    session that may get tools by reference (``call_tool``: delivery ``reference`` or ``auto``,
    from its first list on); ``check_chain`` once the session's archive scope holds a chain
    (before that it could only answer "safe"), and ``read_span`` when the gateway records
    results as spans (``offload``: offloading on, or a ``spans.tags`` rule; there is nothing to
    read otherwise). Each is listed every turn, so each one left out saves its tokens on every
    request; the list changes once, when the first chain is archived.
    """
    return tuple(
        name
        for name in META_TOOLS
        if (name != CHECK_CHAIN or chains)
        and (name != READ_SPAN or offload)
        and (name != CALL_TOOL or call_tool)
    )


def meta_tool_definitions(names: Iterable[str] = LIST_META_TOOLS) -> list[JSONObject]:
    """The meta-tools ``names`` as ``tools/list`` entries (when omitted, every one a session
    delivered by list may be shown), in listing order: the same definitions for every session
    on every call.

    When ``names`` holds ``call_tool``, ``search_tools``' and ``reexpand_tools``' descriptions
    are the variant that says how a tool missing from the list is called (``CALL_HINT``); the
    other meta-tools are the same in both variants. Tombstone lines are not in
    ``reexpand_tools``' description: they would change the list, and so the host's cached
    prompt, every time a tool was withheld.
    """
    wanted = set(names)
    definitions = _BY_REFERENCE if CALL_TOOL in wanted else _BY_LIST
    return [json.loads(json.dumps(d)) for d in definitions if d["name"] in wanted]


def _definitions(*, call_tool: bool) -> list[JSONObject]:
    if call_tool:
        search = (
            "Search tools that are not in your tool list (names, descriptions, argument names). "
            "Each hit comes with its schema. " + CALL_HINT
        )
        reexpand = (
            "Get the full schemas of tools by name, e.g. a withheld one or one you no longer see. "
            + CALL_HINT
        )
    else:
        search = (
            "Search tools whose schemas are withheld (names, descriptions, argument names). "
            "Returns names and one-line descriptions; re-expand one to call it."
        )
        reexpand = _REEXPAND_BASE
    proxy = [_CALL_TOOL_DEFINITION] if call_tool else []
    return [
        {
            "name": SEARCH_TOOLS,
            "description": search,
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 500},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            "annotations": _READ_ONLY,
        },
        {
            "name": REEXPAND_TOOLS,
            "description": reexpand,
            "inputSchema": {
                "type": "object",
                "properties": {
                    "names": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 1,
                        "maxItems": MAX_NAMES,
                    }
                },
                "required": ["names"],
                "additionalProperties": False,
            },
            "annotations": {**_READ_ONLY, "idempotentHint": True},
        },
        *proxy,
        {
            "name": CHECK_CHAIN,
            "description": "Check a planned sequence of tool calls against archived failed chains before "
            "running it. Optional arguments: one object (or null) per step.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "sequence": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": 100,
                    },
                    "arguments": {
                        "type": "array",
                        "items": {"type": ["object", "null"]},
                        "maxItems": 100,
                    },
                },
                "required": ["sequence"],
                "additionalProperties": False,
            },
            "annotations": _READ_ONLY,
        },
        _ARCHIVE_CHAIN_DEFINITION,
        _READ_SPAN_DEFINITION,
    ]


# Listed to a session that may get tools by reference; its arguments are checked in
# ``call_tool_target`` (the messages say what to do), the call itself like a direct one.
_CALL_TOOL_DEFINITION: JSONObject = {
    "name": CALL_TOOL,
    "description": "Call a tool that is not in your tool list: name is the tool (as search_tools or "
    "reexpand_tools gave it), arguments its arguments as one object. Checked against the tool's "
    "schema, like a direct call.",
    "inputSchema": {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1}, "arguments": {"type": "object"}},
        "required": ["name"],
        "additionalProperties": False,
    },
}


# Listed in every session: kept short (the field checks and their messages are in the handler).
_ARCHIVE_CHAIN_DEFINITION: JSONObject = {
    "name": ARCHIVE_CHAIN,
    "description": "Archive a chain you abandon after a deterministic failure of its last step, so no "
    'session re-runs it. constraint: {"all": []} if the topology alone is fatal.',
    # Keys in the order the wire model sends them, so the listed cost is the cost on the wire.
    "inputSchema": {
        "properties": {
            "topology": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "failure": {"type": "string"},
            "constraint": {"type": "object"},
            "credentials": {"type": "array", "items": {"type": "string"}},
            "deterministic": {"type": "boolean"},
        },
        "required": ["topology", "failure", "constraint"],
        "type": "object",
    },
}

_READ_SPAN_DEFINITION: JSONObject = {
    "name": READ_SPAN,
    "description": "Read an offloaded result by byte range; continue from next_offset until done.",
    "inputSchema": {
        "properties": {
            "id": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "length": {"type": "integer", "minimum": 1},
        },
        "required": ["id"],
        "type": "object",
    },
    "annotations": _READ_ONLY,
}


_BY_LIST = _definitions(call_tool=False)
_BY_REFERENCE = _definitions(call_tool=True)


def _result(text: str, data: JSONObject, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=data, is_error=error
    )


def _bad(tool: str, field: str, expected: str) -> ArgumentsInvalid:
    return ArgumentsInvalid(f"invalid arguments at $.{field}: {expected}", tool=tool, path=f"$.{field}")


def _path(where: str) -> str:
    """The JSON path of an argument an ``InvalidInput`` names by its ``where`` (``$`` if none)."""
    if not where:
        return "$"
    return where if where.startswith("$") else f"$.{where}"


def call_tool_target(arguments: Mapping[str, Any]) -> tuple[str, JSONObject]:
    """The call that ``call_tool``'s arguments name: the tool and its own arguments.

    Whether the tool exists is the caller's to check (it needs the session and the catalog).

    Raises:
        ArgumentsInvalid: ``name`` missing, not a string or a meta-tool's name, ``arguments``
            not an object, or another key (the tool's own arguments put beside ``name``); the
            path names the field.
    """
    extra = sorted(str(k) for k in arguments if k not in ("name", "arguments"))
    if extra:
        raise _bad(
            CALL_TOOL,
            extra[0],
            "call_tool takes only name and arguments: put the tool's own arguments in arguments",
        )
    name = arguments.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(
            CALL_TOOL, "name", "the name of the tool to call, a non-empty string (search_tools finds it)"
        )
    if name in META_TOOLS:
        raise _bad(
            CALL_TOOL,
            "name",
            f"{name} is one of the gateway's own tools: call it directly, not through {CALL_TOOL}",
        )
    inner = arguments.get("arguments", {})
    if not isinstance(inner, Mapping):
        raise _bad(CALL_TOOL, "arguments", "the tool's arguments as one JSON object ({} for none)")
    return name, dict(inner)


def search_tools(
    session: Session,
    catalog: Catalog,
    arguments: Mapping[str, Any],
    *,
    by_reference: bool = False,
    listed: Collection[str] = (),
) -> types.CallToolResult:
    """Rank the session's withheld tools (tombstoned or evicted; never archived) against a query.

    ``by_reference``: the session's list is fixed (``listed``: the tools it shows), so the
    tools searched are those the model does not see: neither listed nor carried by a result
    still in the transcript (``Session.carried``), never archived. Each hit carries its schema
    as the list would show it (the session's minify level): the result is recorded as a
    delivery (``Session.record_delivery``; the tools are resident while it is in the
    transcript) and names its id in ``_meta["residency/result"]``.

    Raises:
        ArgumentsInvalid: a malformed query or limit.
    """
    query = arguments.get("query")
    limit = arguments.get("limit", 5)
    if not isinstance(query, str) or not query.strip() or len(query) > 500:
        raise _bad(SEARCH_TOOLS, "query", "a non-empty string of at most 500 characters")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
        raise _bad(SEARCH_TOOLS, "limit", "an integer from 1 to 50")

    # The catalog's shared index, filtered to the tools this session's model does not see: by
    # list its withheld ones, by reference those neither listed nor carried; never archived
    # ones, never a tool the session does not know or the caller may not see. The test is asked
    # only of the best-ranked tools, so a query does not walk the session's whole catalog.
    shown = frozenset(listed)
    restricted = catalog is not catalog.source

    def withheld(name: str) -> bool:
        if restricted and name not in catalog:  # not the caller's (``_policy``)
            return False
        try:
            state = session.state(name)
        except NotFound:
            return False
        if by_reference:
            return state is not ToolState.ARCHIVED and name not in shown and not session.carried(name)
        return state in _WITHHELD

    index = catalog_index(catalog)
    ranker = ranker_now(index)
    hits = index.search(query, limit=limit, among=withheld, ranker=ranker, learned=session.learned_labels())
    session.note_search(query, [h.name for h in hits])  # a successful call of a hit teaches the scope
    if by_reference:
        delivered = _delivered_hits(session, query, [h.name for h in hits], {h.name: h.summary for h in hits})
        return _ranked(delivered, ranker)
    found = [{"name": h.name, "description": h.summary, "state": session.state(h.name).value} for h in hits]
    if not found:
        text = f"No withheld tool matches {query!r}."
    else:
        text = "\n".join(f"{h['name']}: {h['description']}" for h in found)
        text += f"\nCall {REEXPAND_TOOLS} with the names you need, then call them."
    return _ranked(_result(text, {"tools": found}), ranker)


def _ranked(result: types.CallToolResult, ranker: str) -> types.CallToolResult:
    """``result`` saying which ranker answered, in ``_meta["residency/search"]["ranker"]``."""
    result.meta = {**(result.meta or {}), SEARCH_META_KEY: {"ranker": ranker}}
    return result


def _delivered_hits(
    session: Session, query: str, names: list[str], summaries: Mapping[str, str]
) -> types.CallToolResult:
    """Search hits with their schemas, recorded as a delivery (see ``search_tools``)."""
    if not names:
        return _result(f"No tool outside your tool list matches {query!r}.", {"tools": []})
    delivery = session.record_delivery(names)
    found: list[JSONObject] = []
    lines: list[str] = []
    for name in names:
        spec = session.tool(name)
        found.append(
            {
                "name": name,
                "description": summaries[name],
                "state": session.state(name).value,
                "definition": spec.shown,
            }
        )
        lines.append(json.dumps(spec.shown, ensure_ascii=False, separators=(",", ":")))
    lines.append(CALL_HINT)
    # The hint in the structured content too: some clients hand the model that instead of the text.
    result = _result("\n".join(lines), {"tools": found, "hint": CALL_HINT})
    result.meta = {RESULT_META_KEY: delivery.id}
    return result


def reexpand_tools(
    session: Session,
    catalog: Catalog,
    arguments: Mapping[str, Any],
    *,
    call_tool: bool = False,
    deliver: bool = False,
) -> types.CallToolResult:
    """Make tools resident again and return their full definitions in the result itself.

    ``call_tool``: the session lists ``call_tool``, and the result says how a tool missing from
    the list is called (``CALL_HINT``). ``deliver``: the result is recorded as a delivery of the
    re-expanded tools (``Session.record_delivery``) and names its id in
    ``_meta["residency/result"]``.

    Raises:
        ArgumentsInvalid: ``names`` is not a list of 1 to ``MAX_NAMES`` names.
    """
    names = arguments.get("names")
    if (
        not isinstance(names, list)
        or not names
        or len(names) > MAX_NAMES
        or not all(isinstance(n, str) and n for n in names)
    ):
        raise _bad(REEXPAND_TOOLS, "names", f"a list of 1 to {MAX_NAMES} tool names")
    tools: list[JSONObject] = []
    errors: list[JSONObject] = []
    for name in dict.fromkeys(names):
        if name not in catalog:
            errors.append({"name": name, "reason": "not_found", "message": f"no tool named {name!r}"})
            continue
        try:
            tools.append(session.reexpand(name))
        except NotFound as exc:
            errors.append({"name": name, "reason": "not_found", "message": str(exc)})
        except IllegalTransition as exc:
            errors.append(
                {"name": name, "reason": "illegal_transition", "message": session.tombstone_text(name)}
            )
            del exc
    lines = []
    if tools:
        hint = f" {CALL_HINT}" if call_tool else ""
        lines.append(f"Re-expanded; these tools are callable now.{hint} Full definitions:")
        lines.extend(json.dumps(t, ensure_ascii=False, separators=(",", ":")) for t in tools)
    lines.extend(f"{e['name']}: {e['message']}" for e in errors)
    data: JSONObject = {"tools": tools, "errors": errors}
    if call_tool and tools:
        data["hint"] = CALL_HINT  # as for search hits: for clients that show the model this
    result = _result("\n".join(lines), data, error=not tools)
    if deliver and tools:
        delivery = session.record_delivery([str(t["name"]) for t in tools])
        result.meta = {RESULT_META_KEY: delivery.id}
    return result


def check_chain(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """The archive's verdict on a planned sequence.

    Raises:
        ArgumentsInvalid: a malformed sequence or arguments.
    """
    sequence = arguments.get("sequence")
    steps = arguments.get("arguments")
    if not isinstance(sequence, list) or not sequence or not all(isinstance(s, str) for s in sequence):
        raise _bad(CHECK_CHAIN, "sequence", "a non-empty list of tool names")
    if steps is not None and (
        not isinstance(steps, list) or not all(s is None or isinstance(s, dict) for s in steps)
    ):
        raise _bad(CHECK_CHAIN, "arguments", "a list with one object (or null) per step")
    try:
        verdict = session.check_chain(sequence, steps)
    except InvalidInput as exc:
        raise ArgumentsInvalid(str(exc), tool=CHECK_CHAIN, path=_path(exc.where)) from None
    data: JSONObject = {
        "safe": verdict.safe,
        "reason": verdict.reason,
        "rule": verdict.rule,
        "expected_failure": verdict.expected_failure,
        "conclusive": verdict.conclusive,
        # Of every chain the verdict was checked against (the scope's, adopted or not).
        "archive_digest": session.chains_digest(),
    }
    if verdict.span is not None:
        data["span"] = list(verdict.span)
    text = ("safe: " if verdict.safe else "collides: ") + verdict.reason
    if verdict.rule:
        text += f"\nrule: {verdict.rule}"
    return _result(text, data)


def archive_chain(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """Archive an abandoned chain in the session's archive scope, with the embedded API's refusals.

    Raises:
        ArgumentsInvalid: a malformed field, a topology naming an unknown tool, or a chain the
            session refuses to archive (the path names the field); nothing is archived.
    """
    del catalog
    topology = arguments.get("topology")
    failure = arguments.get("failure")
    constraint = arguments.get("constraint")
    credentials = arguments.get("credentials", [])
    deterministic = arguments.get("deterministic", True)
    if not isinstance(topology, list) or not all(isinstance(n, str) and n for n in topology):
        raise _bad(ARCHIVE_CHAIN, "topology", "a list of at least two tool names")
    if not isinstance(failure, str) or not failure.strip() or len(failure) > 2000:
        raise _bad(
            ARCHIVE_CHAIN, "failure", "the failure signature: a non-empty string of at most 2000 characters"
        )
    if not isinstance(constraint, dict):
        raise _bad(
            ARCHIVE_CHAIN, "constraint", 'a constraint object ({"all": []} when the topology alone is fatal)'
        )
    if not isinstance(credentials, list) or not all(isinstance(c, str) for c in credentials):
        raise _bad(ARCHIVE_CHAIN, "credentials", "a list of credential references (names, never values)")
    if not isinstance(deterministic, bool):
        raise _bad(ARCHIVE_CHAIN, "deterministic", "true or false")
    before = set(session.tools(ToolState.ARCHIVED))
    try:
        record = session.archive_chain(topology, failure, constraint, credentials, deterministic)
    except InvalidInput as exc:
        raise ArgumentsInvalid(f"not archived: {exc}", tool=ARCHIVE_CHAIN, path=_path(exc.where)) from None
    except NotFound as exc:
        raise ArgumentsInvalid(f"not archived: {exc}", tool=ARCHIVE_CHAIN, path="$.topology") from None
    retired = [n for n in session.tools(ToolState.ARCHIVED) if n not in before]
    data: JSONObject = {
        "digest": record.digest,
        "rule": record.rule,
        "retired": retired,
        "archive_digest": session.archive_digest(),
    }
    text = f"archived chain {record.digest[:12]}: {record.rule}"
    if retired:
        text += f"\nretired from the tool list: {', '.join(retired)}"
    return _result(text, data)


def read_span(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """A byte range of an offloaded result (or any stored span), as text.

    Raises:
        ArgumentsInvalid: a malformed id, offset or length, or an id the session does not have.
    """
    del catalog
    span_id = arguments.get("id")
    offset = arguments.get("offset", 0)
    length = arguments.get("length", MAX_RANGE)
    if not isinstance(span_id, str) or not span_id:
        raise _bad(READ_SPAN, "id", "a span id, e.g. the one an offloaded result names")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise _bad(READ_SPAN, "offset", "a whole number of bytes, 0 or more")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise _bad(
            READ_SPAN, "length", f"a whole number of bytes, 1 or more (at most {MAX_RANGE} are returned)"
        )
    try:
        data = span_range(session, span_id, offset, length)
    except InvalidInput as exc:
        raise ArgumentsInvalid(str(exc), tool=READ_SPAN, path=_path(exc.where)) from None
    except NotFound as exc:
        raise ArgumentsInvalid(str(exc), tool=READ_SPAN, path="$.id") from None
    text = str(data["text"])
    if not data["done"]:
        where = f"bytes {data['offset']}-{data['next_offset']} of {data['bytes']}"
        text += f"\n[residency: {where}; continue from offset {data['next_offset']}]"
    return _result(text, data)
