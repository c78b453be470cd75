"""Tool definitions and call records: parsing, pinning, and the mutation rule.

Pure: no I/O, no clock. A tool definition is an MCP ``tools/list`` entry (``name``,
``description``, ``inputSchema``, ``annotations``, ...). It is pinned by the sha256 of its
canonical JSON (the whole definition, not just its description), so any upstream change,
however small, is seen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from residency._errors import InvalidInput

__all__ = [
    "CallRecord",
    "DeliveryRecord",
    "JSONObject",
    "ToolSpec",
    "MAX_ARGUMENT_DEPTH",
    "canonical_json",
    "definition_hash",
    "is_mutation",
    "parse_tool",
]

JSONObject = dict[str, Any]
"""A JSON object as decoded by ``json.loads``."""


def canonical_json(obj: object) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def definition_hash(tool: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of a whole tool definition."""
    return hashlib.sha256(canonical_json(tool).encode()).hexdigest()


def is_mutation(tool: Mapping[str, Any]) -> bool:
    """Whether calling the tool may change the world, from its MCP annotations.

    ``readOnlyHint: true`` makes a tool read-only unless ``destructiveHint: true`` says
    otherwise. No annotations at all means mutation: failing safe costs a tombstone line,
    failing open costs a duplicate incident.
    """
    annotations = tool.get("annotations")
    if not isinstance(annotations, Mapping):
        return True
    if annotations.get("destructiveHint") is True:
        return True
    return annotations.get("readOnlyHint") is not True


@dataclass(frozen=True, slots=True, weakref_slot=True)
class ToolSpec:
    """A registered tool definition, pinned by hash.

    Shared, read-only, by every session of the process that registers the same definition
    (see ``residency._runtime._tool_cache``): never change ``definition`` or ``shown`` in place.

    Attributes:
        name: the tool's name as the model sees it.
        definition: the whole definition as registered (the full schema lives here).
        hash: sha256 of the canonical JSON of ``definition``.
        mutation: whether calls may change the world (see ``is_mutation``).
        shown: what the model is shown while the tool is resident (minified).
        tokens: tokens of ``shown``.
    """

    name: str
    definition: JSONObject
    hash: str
    mutation: bool
    shown: JSONObject
    tokens: int

    @property
    def input_schema(self) -> JSONObject:
        schema = self.definition.get("inputSchema")
        return schema if isinstance(schema, dict) else {"type": "object"}

    @property
    def description(self) -> str:
        text = self.definition.get("description")
        return text if isinstance(text, str) else ""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A call the host made: its id, tool, turn and arguments (a private copy).

    Whether its arguments are still resident is session state (``Session.arguments_resident``),
    not a field: the record itself never changes.

    Attributes:
        via: what the call came through when the model did not call the tool by its own name
            (a proxy tool such as the gateway's ``call_tool``); empty for a direct call.
    """

    id: str
    tool: str
    turn: int
    arguments: JSONObject
    argument_tokens: int
    via: str = ""


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """A result that showed the model tool schemas: a tool delivered by reference.

    A host whose tool list stays fixed shows other tools' schemas in results (a search hit with
    its schema, a re-expansion); such a tool is resident while a result that showed its current
    definition is still in the transcript. Whether the result still is, is session state
    (``Session.deliveries``); the record never changes.

    Attributes:
        id: ``r<n>``, which the host names when it drops the result.
        tools: the tools whose schemas the result showed, in order.
        hashes: the definition hash of each, as shown (a later redefinition is not carried).
        turn: the turn the result was delivered in.
    """

    id: str
    tools: tuple[str, ...]
    hashes: tuple[str, ...]
    turn: int


def parse_tool(raw: object, *, where: str = "tools") -> JSONObject:
    """Check one MCP tool definition and return a private, JSON-clean copy.

    Raises:
        InvalidInput: not an object, no string ``name``, or a non-object ``inputSchema``.
    """
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}: a tool must be a JSON object", where=where)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}: a tool needs a non-empty string 'name'", where=where)
    schema = raw.get("inputSchema", {"type": "object"})
    if not isinstance(schema, Mapping):
        raise InvalidInput(
            f"{where} ({name}): 'inputSchema' must be a JSON object", where=f"{where}.inputSchema"
        )
    try:
        copy: JSONObject = json.loads(json.dumps(raw))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where} ({name}): not JSON-serializable: {exc}", where=where) from exc
    copy.setdefault("inputSchema", {"type": "object"})
    return copy


MAX_ARGUMENT_DEPTH = 64
"""Deepest nesting of call arguments accepted (real tool arguments rarely pass 6)."""
