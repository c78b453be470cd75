"""Schema positions and local ``$ref`` resolution, shared by the minifier and the constraint counter.

Pure. Which keywords hold subschemas is data here (``SCHEMA_MAPS``, ``SCHEMA_ONE``,
``SCHEMA_LISTS``): walking by keyword, never by key, is what keeps a property called
``title`` or ``description`` apart from the keyword of that name.

Resolvable references: ``#`` and ``#/json/pointer`` (RFC 6901, percent-decoded), plain-name
fragments ``#name`` (``$anchor``, or a draft-07 ``$id: "#name"``), and either form prefixed
by the root's ``$id``. Anything else (another document, a URL) cannot be resolved without I/O
and is an error naming the tool and the JSON path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from residency._errors import SchemaError

__all__ = [
    "SCHEMA_LISTS",
    "SCHEMA_MAPS",
    "SCHEMA_ONE",
    "escape",
    "join",
    "resolve_ref",
    "subschemas",
]

# keyword -> {name: subschema}
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
# keyword -> subschema (``items`` may also be a list, in drafts before 2020-12)
SCHEMA_ONE = frozenset(
    {
        "additionalProperties", "items", "additionalItems", "contains", "propertyNames", "not",
        "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
    }
)  # fmt: skip
# keyword -> [subschema, ...]
SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def join(path: str, *tokens: str | int) -> str:
    """``path`` (a JSON Pointer) extended by ``tokens``."""
    return path + "".join("/" + escape(str(t)) for t in tokens)


def subschemas(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, object]]:
    """Every direct subschema of ``node`` with its JSON Pointer (``dependencies`` included)."""
    for key, value in node.items():
        if key in SCHEMA_MAPS and isinstance(value, Mapping):
            for name, sub in value.items():
                yield join(path, key, name), sub
        elif key in SCHEMA_ONE:
            if isinstance(value, list):
                for i, sub in enumerate(value):
                    yield join(path, key, i), sub
            else:
                yield join(path, key), value
        elif key in SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                yield join(path, key, i), sub
        elif key == "dependencies" and isinstance(value, Mapping):
            for name, sub in value.items():
                if not isinstance(sub, list):
                    yield join(path, key, name), sub


def _anchors(node: object, found: dict[str, object]) -> None:
    if isinstance(node, Mapping):
        anchor = node.get("$anchor")
        if isinstance(anchor, str):
            found.setdefault(anchor, node)
        legacy = node.get("$id", node.get("id"))
        if isinstance(legacy, str) and legacy.startswith("#") and len(legacy) > 1:
            found.setdefault(legacy[1:], node)
        for _, sub in subschemas(node, ""):
            _anchors(sub, found)


def resolve_ref(
    root: Mapping[str, Any], ref: object, *, tool: str = "", where: str = ""
) -> tuple[str, object]:
    """Resolve a local ``$ref`` against ``root``; returns (pointer, target).

    ``pointer`` is the target's JSON Pointer (``#``-less), or ``"#anchor"`` for anchors.

    Raises:
        SchemaError: ``ref`` is not a string or does not resolve inside ``root``.
    """

    def fail(reason: str) -> SchemaError:
        label = f"tool {tool!r}: " if tool else ""
        return SchemaError(f"{label}$ref {ref!r} at {where or '/'} {reason}", where=where)

    if not isinstance(ref, str):
        raise fail("is not a string")
    base = root.get("$id")
    fragment = ref
    if isinstance(base, str) and base and ref.startswith(base.split("#")[0]) and "#" in ref:
        fragment = ref[len(base.split("#")[0]) :]
    if not fragment.startswith("#"):
        raise fail("points outside this schema (only local references can be resolved)")
    fragment = unquote(fragment[1:])
    if fragment and not fragment.startswith("/"):
        found: dict[str, object] = {}
        _anchors(root, found)
        if fragment not in found:
            raise fail(f"names an anchor {fragment!r} that no subschema declares")
        return "#" + fragment, found[fragment]
    node: object = root
    for raw in fragment.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise fail("does not resolve: no such location in the schema")
    if not isinstance(node, (Mapping, bool)):
        raise fail("resolves to something that is not a schema")
    return fragment, node
