"""The gateway's own tools: ``search_tools``, ``reexpand_tools``, ``check_chain``.

Always listed and kept small. ``reexpand_tools`` carries the session's tombstones in its
description in the handshake era (one line per tool, so the model sees them in ``tools/list``);
in the 2026-07-28 era the list must not vary per session, so the description stays fixed and
tombstones travel in results and the ``residency://tombstones`` resource.

Each handler takes the session and the raw arguments and returns a ``CallToolResult``; bad
arguments give an ``isError`` result naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types

from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject
from residency._errors import IllegalTransition, InvalidInput, NotFound
from residency._gateway._aggregate import Catalog
from residency._gateway._search import search
from residency._session import Session

__all__ = [
    "CHECK_CHAIN",
    "META_TOOLS",
    "REEXPAND_TOOLS",
    "SEARCH_TOOLS",
    "check_chain",
    "meta_tool_definitions",
    "reexpand_tools",
    "search_tools",
]

SEARCH_TOOLS = "search_tools"
REEXPAND_TOOLS = "reexpand_tools"
CHECK_CHAIN = "check_chain"
META_TOOLS = (SEARCH_TOOLS, REEXPAND_TOOLS, CHECK_CHAIN)

MAX_NAMES = 20
_READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}

_REEXPAND_BASE = (
    "Bring withheld tools back: returns their full schemas and makes them callable by name. "
    "Call it before calling a tool whose schema was withheld."
)


def meta_tool_definitions(tombstones: Sequence[str] | None) -> list[JSONObject]:
    """The meta-tools as ``tools/list`` entries; ``tombstones`` (handshake era) go in a description."""
    reexpand = _REEXPAND_BASE
    if tombstones:
        reexpand += "\nWithheld tools whose earlier arguments are still in the conversation:\n" + "\n".join(
            tombstones
        )
    return [
        {
            "name": SEARCH_TOOLS,
            "description": "Search tools whose schemas are withheld (names, descriptions, argument names). "
            "Returns names and one-line descriptions; re-expand one to call it.",
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
    ]


def _result(text: str, data: JSONObject, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=data, is_error=error
    )


def _bad(field: str, expected: str) -> types.CallToolResult:
    return _result(
        f"invalid arguments at $.{field}: {expected}",
        {"error": {"reason": "arguments_invalid", "path": f"$.{field}"}},
        error=True,
    )


def search_tools(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """BM25 over the session's withheld tools (tombstoned or evicted; never archived)."""
    query = arguments.get("query")
    limit = arguments.get("limit", 5)
    if not isinstance(query, str) or not query.strip() or len(query) > 500:
        return _bad("query", "a non-empty string of at most 500 characters")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
        return _bad("limit", "an integer from 1 to 50")
    withheld = {ToolState.TOMBSTONED, ToolState.EVICTED}
    states = {n: session.state(n) for n in session.tools() if n in catalog}
    docs = [catalog.get(n).definition for n, s in states.items() if s in withheld]  # type: ignore[union-attr]
    hits = search(query, docs, limit)
    found = [{"name": h.name, "description": h.summary, "state": states[h.name].value} for h in hits]
    if not found:
        text = f"No withheld tool matches {query!r}."
    else:
        text = "\n".join(f"{h['name']}: {h['description']}" for h in found)
        text += f"\nCall {REEXPAND_TOOLS} with the names you need, then call them."
    return _result(text, {"tools": found})


def reexpand_tools(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """Make tools resident again and return their full definitions in the result itself."""
    names = arguments.get("names")
    if (
        not isinstance(names, list)
        or not names
        or len(names) > MAX_NAMES
        or not all(isinstance(n, str) and n for n in names)
    ):
        return _bad("names", f"a list of 1 to {MAX_NAMES} tool names")
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
        lines.append("Re-expanded; these tools are callable now. Full definitions:")
        lines.extend(json.dumps(t, ensure_ascii=False, separators=(",", ":")) for t in tools)
    lines.extend(f"{e['name']}: {e['message']}" for e in errors)
    return _result("\n".join(lines), {"tools": tools, "errors": errors}, error=not tools)


def check_chain(session: Session, catalog: Catalog, arguments: Mapping[str, Any]) -> types.CallToolResult:
    """The archive's verdict on a planned sequence."""
    sequence = arguments.get("sequence")
    steps = arguments.get("arguments")
    if not isinstance(sequence, list) or not sequence or not all(isinstance(s, str) for s in sequence):
        return _bad("sequence", "a non-empty list of tool names")
    if steps is not None and (
        not isinstance(steps, list) or not all(s is None or isinstance(s, dict) for s in steps)
    ):
        return _bad("arguments", "a list with one object (or null) per step")
    try:
        verdict = session.check_chain(sequence, steps)
    except InvalidInput as exc:
        return _result(str(exc), {"error": {"reason": "invalid_input", "where": exc.where}}, error=True)
    data: JSONObject = {
        "safe": verdict.safe,
        "reason": verdict.reason,
        "rule": verdict.rule,
        "expected_failure": verdict.expected_failure,
        "conclusive": verdict.conclusive,
    }
    if verdict.span is not None:
        data["span"] = list(verdict.span)
    text = ("safe: " if verdict.safe else "collides: ") + verdict.reason
    if verdict.rule:
        text += f"\nrule: {verdict.rule}"
    return _result(text, data)
