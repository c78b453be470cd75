"""The minifier's structural rewrites, each one validation-equivalent, and the facts they rest on.

Pure. Every rewrite here has a proof sketch in its docstring and tests in
``tests/core/test_minify_rewrites.py`` that check verdicts on both sides.

- **No-op keywords**: a keyword whose value is the keyword's default (``required: []``,
  ``minLength: 0``, ``additionalProperties: true`` ...) can never fail an instance.
- **Null unions**: ``anyOf: [A, {"type": "null"}]`` where ``A`` has a single non-null type
  ``T`` and otherwise only keywords that apply to ``T`` alone (``minLength`` for strings,
  ``minimum`` for numbers ...) equals ``A`` with ``type: [T, "null"]``: a null passes both;
  any other instance passes both exactly when it passes ``A``, because ``A``'s keywords
  ignore values of other types. ``oneOf`` is the same here since the branches are disjoint.
- **Dialect**: ``$schema`` may go (the reader then assumes 2020-12, as MCP says) only when
  nothing in the schema means something else under 2020-12 than under the declared draft.
- **Unused definitions**: a ``$defs`` entry that no ``$ref`` reaches cannot change a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from residency._core._minify_refs import subschemas

__all__ = [
    "ANNOTATIONS",
    "NOOP_VALUES",
    "TYPE_KEYWORDS",
    "dialect_neutral",
    "is_noop",
    "merge_null_union",
    "null_union",
]

ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"}
)

# keyword -> values that make it a no-op (compared with ``==`` and by JSON type).
NOOP_VALUES: dict[str, tuple[object, ...]] = {
    "required": ([],),
    "minLength": (0,),
    "minItems": (0,),
    "minProperties": (0,),
    "uniqueItems": (False,),
    "additionalProperties": (True, {}),
    "unevaluatedProperties": (True, {}),
    "additionalItems": (True, {}),
    "unevaluatedItems": (True, {}),
    "patternProperties": ({},),
    "properties": ({},),
    "dependentRequired": ({},),
    "dependentSchemas": ({},),
    "propertyNames": (True, {}),
    "allOf": ([],),
}

_STRING = frozenset({"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType"})
_NUMBER = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_ARRAY = frozenset(
    {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"}
)
_OBJECT = frozenset(
    {
        "properties", "patternProperties", "additionalProperties", "required", "minProperties",
        "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    }
)  # fmt: skip

TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    "string": _STRING,
    "number": _NUMBER,
    "integer": _NUMBER,
    "array": _ARRAY,
    "object": _OBJECT,
    "boolean": frozenset(),
}
"""Keywords that only ever judge instances of one JSON type (and pass every other type)."""


def _same_json(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def is_noop(keyword: str, value: object) -> bool:
    """Whether ``keyword: value`` can never fail an instance."""
    return any(_same_json(value, noop) for noop in NOOP_VALUES.get(keyword, ()))


def null_union(node: Mapping[str, Any]) -> tuple[str, int, Mapping[str, Any], Mapping[str, Any]] | None:
    """Find ``anyOf``/``oneOf`` ``[A, {"type": "null"}]`` that may be written as a type list.

    Returns ``(keyword, index of A, A, the null branch)``, or None when the rewrite does not
    apply: the node has its own ``type`` or a ``$ref`` (whose siblings some drafts ignore),
    ``A`` has no single non-null type or has a keyword that judges other types too (``enum``,
    ``const``, ``not``, ``$ref`` ...), or ``A`` and the node share a validation keyword.
    Annotations are not looked at here; the minifier decides whether their prose may move.
    """
    if "type" in node or "$ref" in node or "unevaluatedProperties" in node or "unevaluatedItems" in node:
        return None
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if not isinstance(branches, list) or len(branches) != 2:
            continue
        if not all(isinstance(b, Mapping) for b in branches):
            continue
        for i in (0, 1):
            other, null = branches[i], branches[1 - i]
            if null.get("type") != "null" or not set(null) - {"type"} <= ANNOTATIONS:
                continue
            t = other.get("type")
            if not isinstance(t, str) or t not in TYPE_KEYWORDS:
                continue
            rest = set(other) - {"type"} - ANNOTATIONS
            if not rest <= TYPE_KEYWORDS[t]:
                continue
            if rest & set(node):
                continue
            return keyword, i, other, null
    return None


def merge_null_union(
    node: Mapping[str, Any], keyword: str, index: int, branch: Mapping[str, Any]
) -> dict[str, Any]:
    """``node`` with ``keyword`` replaced by ``branch``'s keywords and ``type: [T, "null"]``.

    The branch's keywords take the combinator's place, so key order stays readable.
    """
    t = branch["type"]
    types = [t, "null"] if index == 0 else ["null", t]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key != keyword:
            out[key] = value
            continue
        out["type"] = types
        for k, v in branch.items():
            if k != "type":
                out[k] = v
    return out


_DRAFT6_PLUS = frozenset(
    {
        "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    }
)
_LATER_ONLY = frozenset(
    {
        "prefixItems", "dependentRequired", "dependentSchemas", "unevaluatedItems",
        "unevaluatedProperties", "minContains", "maxContains", "$dynamicRef", "$dynamicAnchor",
        "$recursiveRef", "$recursiveAnchor", "$anchor",
    }
)  # fmt: skip
_EARLIER_ONLY = frozenset({"additionalItems", "dependencies", "id"})


def dialect_neutral(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` validates alike under its declared ``$schema`` and under 2020-12.

    True when there is no ``$schema``. Otherwise the draft must be 6 or later and no keyword
    may change meaning between them: list-form ``items``, ``additionalItems``,
    ``dependencies``, keywords the older draft does not know, ``$ref`` with validating
    siblings (ignored before 2019-09), plain-name ``$id`` anchors, boolean exclusive bounds.
    """
    declared = schema.get("$schema")
    if declared is None:
        return True
    if not isinstance(declared, str) or declared.rstrip("#") not in _DRAFT6_PLUS:
        return False
    old = "draft-0" in declared
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if isinstance(node.get("items"), list) or _EARLIER_ONLY & set(node):
            return False
        if old and _LATER_ONLY & set(node):
            return False
        if old and "$ref" in node and set(node) - {"$ref", "$defs", "definitions"} - ANNOTATIONS:
            return False
        node_id = node.get("$id")
        if isinstance(node_id, str) and node_id.startswith("#"):
            return False
        if isinstance(node.get("exclusiveMinimum"), bool) or isinstance(node.get("exclusiveMaximum"), bool):
            return False
        stack.extend(sub for _, sub in subschemas(node, ""))
    return True
