"""Count the validation constraints of a schema, so "constraints lost" is a number.

Theory of operation. A constraint is one assertion that can change a verdict, at a place in
the schema: ``(path, keyword, value)``. Walking is by keyword (``properties``, ``items``,
``anyOf`` ...) at every depth; a ``$ref`` is followed and its target's constraints count at
the place of use (a recursive reference counts once, as ``$ref cycle``). Counted:

- ``type`` (one per listed type), ``enum``, ``const``, ``required`` (one per name), ``format``,
  ``pattern``, bounds and lengths, ``multipleOf``, ``uniqueItems``, ``dependencies`` ...
- a ``false`` schema (``additionalProperties: false`` forbids extra properties).

Not counted: annotations (``description``, ``title``, ``default``, ``examples`` ...), unknown
keywords (validators ignore them), keywords equal to their defaults (``minLength: 0``,
``required: []``, ``additionalProperties: true``), ``$defs`` nothing reaches, and a ``type``
implied by the ``enum``/``const`` beside it. The count says what a keyword asserts, not how
it is spelled: ``anyOf: [A, {"type": "null"}]`` counts as ``A`` with types ``T`` and ``null``
(as the equivalent type list does), so a spelling change is not a loss, while a dropped
``items``, bound or nested property is.

``constraints_lost(original, other)`` is the number of the original's constraints that the
other schema no longer asserts at the same place.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from residency._core._minify_refs import SCHEMA_LISTS, join, resolve_ref
from residency._core._minify_rewrites import is_noop, null_union

__all__ = ["Constraint", "constraint_atoms", "constraints_added", "constraints_lost", "count_constraints"]

Constraint = tuple[str, str, str]
"""``(path, keyword, canonical JSON value)``: one assertion at one place."""

_LEAVES = frozenset(
    {
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems",
        "minContains", "maxContains", "minProperties", "maxProperties", "dependentRequired",
    }
)  # fmt: skip
_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties")  # fmt: skip
_MAX_ATOMS = 1_000_000


def _canon(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_type(value: object) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"}


def _implied_type(node: Mapping[str, Any], types: list[object]) -> bool:
    """Whether the node's ``enum``/``const`` already admits only values of ``types``."""
    if "const" in node:
        values: list[object] = [node["const"]]
    elif isinstance(node.get("enum"), list) and node["enum"]:
        values = node["enum"]
    else:
        return False
    return all(_json_type(v) & set(map(str, types)) for v in values)


class _Counter:
    def __init__(self, root: Mapping[str, Any], tool: str, where: str) -> None:
        self.root = root
        self.tool = tool
        self.where = where
        self.atoms: Counter[Constraint] = Counter()

    def add(self, path: str, keyword: str, value: object) -> None:
        self.atoms[(path, keyword, value if isinstance(value, str) else _canon(value))] += 1
        if len(self.atoms) > _MAX_ATOMS:  # a pathological fan-out of references
            raise OverflowError("too many constraints to count")

    def walk(self, node: object, path: str, active: tuple[str, ...]) -> None:
        if node is False:
            self.add(path, "false", "")
        if not isinstance(node, Mapping):
            return
        union = null_union(node)
        if union is not None:
            keyword, _, branch, _ = union
            merged = {k: v for k, v in node.items() if k != keyword}
            merged.update(branch)
            merged["type"] = [branch["type"], "null"]
            node = merged
        if "$ref" in node:
            pointer, target = resolve_ref(self.root, node["$ref"], tool=self.tool, where=self.where + path)
            if pointer in active:
                self.add(path, "$ref cycle", pointer)
            else:
                self.walk(target, path, (*active, pointer))
        for key, value in node.items():
            self.keyword(node, key, value, path, active)

    def keyword(
        self, node: Mapping[str, Any], key: str, value: object, path: str, active: tuple[str, ...]
    ) -> None:
        if key == "type":
            types = value if isinstance(value, list) else [value]
            if not _implied_type(node, types):
                for t in types:
                    self.add(path, "type", t)
        elif key in ("enum", "const"):
            canon = sorted(map(_canon, value)) if key == "enum" and isinstance(value, list) else value
            self.add(path, key, canon)
        elif key == "required" and isinstance(value, list):
            for name in value:
                self.add(path, "required", name)
        elif key in _LEAVES:
            if not is_noop(key, value):
                self.add(path, key, value)
        elif key == "exclusiveMinimum" or key == "exclusiveMaximum":
            self.add(path, key, value)
        elif key in ("properties", "patternProperties", "dependentSchemas") and isinstance(value, Mapping):
            for name, sub in value.items():
                self.walk(sub, join(path, key, name), active)
        elif key == "dependencies" and isinstance(value, Mapping):
            for name, sub in value.items():
                if isinstance(sub, list):
                    self.add(path, "dependencies", {name: sub})
                else:
                    self.walk(sub, join(path, key, name), active)
        elif key == "items":
            if isinstance(value, list):
                for i, sub in enumerate(value):
                    self.walk(sub, join(path, key, i), active)
            else:
                self.walk(value, join(path, key), active)
        elif key in _ONE:
            self.walk(value, join(path, key), active)
        elif key in SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                self.walk(sub, join(path, key, i), active)


def constraint_atoms(
    schema: Mapping[str, Any], *, tool: str = "", where: str = "/inputSchema"
) -> Counter[Constraint]:
    """Every constraint of ``schema`` as a multiset of ``(path, keyword, value)``.

    Raises:
        SchemaError: an unresolvable ``$ref`` (named by tool and JSON path).
    """
    counter = _Counter(schema, tool, where)
    counter.walk(schema, "", ("",))
    return counter.atoms


def count_constraints(schema: Mapping[str, Any]) -> int:
    """How many validation constraints ``schema`` asserts (see the module docstring)."""
    return sum(constraint_atoms(schema).values())


def constraints_lost(original: Mapping[str, Any], other: Mapping[str, Any]) -> Counter[Constraint]:
    """The original's constraints that ``other`` no longer asserts at the same place."""
    return constraint_atoms(original) - constraint_atoms(other)


def constraints_added(original: Mapping[str, Any], other: Mapping[str, Any]) -> Counter[Constraint]:
    """Constraints ``other`` asserts that the original does not (e.g. an invented ``type``)."""
    return constraint_atoms(other) - constraint_atoms(original)
