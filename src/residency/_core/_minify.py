"""Schema minification that never loses a constraint.

Theory of operation. ``minify_tool`` walks a tool's ``inputSchema`` by keyword (never by key:
a property may be called ``title`` or ``default``) and rebuilds it:

- validation keywords are copied as they are, at every depth; ``enum``, ``const`` and
  unknown keywords are copied verbatim, never walked into;
- decoration goes at every level: ``title``, ``examples``, ``$comment``, ``default: null``,
  keywords equal to their defaults, ``$defs`` entries nothing references, and ``$schema``
  when the schema means the same under 2020-12 (see ``_minify_rewrites``);
- prose depends on the level: ``full-text`` keeps every description with its layout
  stripped; ``compact`` cuts the tool description to its opening and keeps a parameter
  description only for what its name and type do not say, cut at a real sentence end;
  ``minimal`` keeps no description inside the schema (and no ``default``);
- ``anyOf: [A, {"type": "null"}]`` becomes ``A`` with a type list where that is equivalent.

Every level is validation-equivalent to the input: every instance gets the same verdict
(``residency._verify`` checks this; ``_minify_constraints`` counts that nothing was lost). The
output is provider-valid: root ``type: object``, ``items`` on every array schema, every
``$ref`` resolvable, property names untouched. Keys other than ``description`` and
``inputSchema`` (``annotations``, ``outputSchema``, ``_meta`` ...) are passed through.
The result shares unchanged leaf values with the input: treat both as read-only.

Pure: no I/O. Token counting is the caller's (``residency.count_tokens``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from residency._core._minify_refs import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_ONE, join, resolve_ref, subschemas
from residency._core._minify_rewrites import (
    ANNOTATIONS,
    dialect_neutral,
    is_noop,
    merge_null_union,
    null_union,
)
from residency._core._minify_text import normalize_prose, opening, parameter_note
from residency._errors import InvalidInput, SchemaError

__all__ = [
    "DEFAULT_LEVEL",
    "LEVELS",
    "MINIFY_ALIASES",
    "MINIFY_LEVELS",
    "MinifyLevel",
    "MinifyReport",
    "minify_schema",
    "minify_tool",
    "minify_tool_with_report",
    "model_view",
]

MinifyLevel = Literal["full-text", "compact", "minimal"]
"""How much prose a minified schema keeps. Every level keeps every constraint."""

LEVELS: tuple[MinifyLevel, ...] = get_args(MinifyLevel)
DEFAULT_LEVEL: MinifyLevel = "compact"
"""The level everything minifies at unless told otherwise: ``minify_tool``, ``Session``,
``residency minify`` and the gateway's ``residency.minify``. Every constraint and the prose a
name and type do not say are kept; it is the level the benchmarks measure."""
MINIFY_LEVELS: tuple[str, ...] = ("none", *LEVELS)
"""The gateway config's minify levels: ``LEVELS``, or ``none`` for tools as sent."""
MINIFY_ALIASES = {"lossless": "full-text"}
"""Older spellings of a minify level, still read (and documented as such)."""

_DECORATION = ("title", "examples", "$comment")


@dataclass(frozen=True, slots=True)
class MinifyReport:
    """What minifying one tool removed or rewrote.

    Attributes:
        tool: the tool's name.
        level: the level used.
        changes: ``(what, count)`` pairs, sorted by ``what`` (e.g. ``("title", 3)``,
            ``("description dropped", 5)``, ``("anyOf null -> type list", 1)``).
    """

    tool: str
    level: MinifyLevel
    changes: tuple[tuple[str, int], ...]

    def summary(self) -> str:
        """One line: ``"description dropped x5, title x3"`` (or ``"nothing"``)."""
        return ", ".join(f"{what} x{n}" for what, n in self.changes) or "nothing"


def _refs(root: object) -> list[object]:
    """Every ``$ref`` value under ``root``, at any depth."""
    refs: list[object] = []
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if "$ref" in node:
            refs.append(node["$ref"])
        stack.extend(sub for _, sub in subschemas(node, ""))
    return refs


def model_view(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a tool a model is sent: ``name``, ``description``, ``inputSchema``.

    Provider tool formats (Anthropic ``input_schema``, OpenAI ``parameters``) carry these
    three; ``title``, ``annotations``, ``outputSchema`` and ``_meta`` stay with the client.
    Token figures are counted on this view.
    """
    return {k: tool[k] for k in ("name", "description", "inputSchema") if k in tool}


def _ref_targets(root: object) -> set[str]:
    """JSON Pointers of every ``#/...`` ``$ref`` target (the walk reports unresolvable ones)."""
    return {r[1:] for r in _refs(root) if isinstance(r, str) and r.startswith("#/")}


class _Walk:
    """One pass over one schema. ``changes`` counts what went."""

    def __init__(
        self, root: Mapping[str, Any], level: MinifyLevel, tool: str, where: str, *, refs: bool = True
    ) -> None:
        self.root = root
        self.level = level
        self.tool = tool
        self.where = where
        self.changes: Counter[str] = Counter()
        self.targets = _ref_targets(root) if refs else set()

    def fail(self, path: str, reason: str) -> SchemaError:
        return SchemaError(f"tool {self.tool!r}: {reason} at {self.where}{path}", where=self.where + path)

    def targeted(self, path: str) -> bool:
        """Whether some ``$ref`` points at ``path`` or inside it (so it must stay where it is)."""
        return any(t == path or t.startswith(path + "/") for t in self.targets)

    def description(self, text: object, name: str) -> object | None:
        if not isinstance(text, str):
            return text
        if self.level == "minimal":
            self.changes["description dropped"] += 1
            return None
        if self.level == "full-text":
            out = normalize_prose(text)
            if out != text:
                self.changes["description layout"] += 1
            return out
        note = parameter_note(text, name)
        if note is None:
            self.changes["description dropped"] += 1
        elif note != normalize_prose(text):
            self.changes["description cut"] += 1
        return note

    def schema(self, node: object, path: str, name: str) -> object:
        if isinstance(node, bool):
            return node
        if not isinstance(node, Mapping):
            raise self.fail(path, f"a schema must be an object or a boolean, not {type(node).__name__}")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DECORATION:
                self.changes[key] += 1
            elif key == "$schema" and path == "":
                if dialect_neutral(self.root):
                    self.changes["$schema"] += 1
                else:
                    out[key] = value
            elif key == "description":
                text = self.description(value, name)
                if text is not None:
                    out[key] = text
            elif key == "default":
                if value is None:
                    self.changes["default null"] += 1
                elif self.level == "minimal":
                    self.changes["default"] += 1
                else:
                    out[key] = value
            elif key in SCHEMA_MAPS and isinstance(value, Mapping):
                child_name = (
                    (lambda n: n) if key in ("properties", "$defs", "definitions") else (lambda n: name)
                )
                sub = {n: self.schema(s, join(path, key, n), child_name(n)) for n, s in value.items()}
                if is_noop(key, sub) and not (key == "properties" and path == ""):
                    self.changes[f"{key}: {{}}"] += 1
                else:
                    out[key] = sub
            elif key in SCHEMA_ONE:
                if isinstance(value, list):
                    out[key] = [self.schema(s, join(path, key, i), name) for i, s in enumerate(value)]
                    continue
                sub_schema = self.schema(value, join(path, key), name)
                if is_noop(key, sub_schema) and not self.targeted(join(path, key)):
                    self.changes[f"{key}: {'true' if sub_schema is True else '{}'}"] += 1
                else:
                    out[key] = sub_schema
            elif key in SCHEMA_LISTS and isinstance(value, list):
                if is_noop(key, value):
                    self.changes[f"{key}: []"] += 1
                    continue
                out[key] = [self.schema(s, join(path, key, i), name) for i, s in enumerate(value)]
            elif key == "dependencies" and isinstance(value, Mapping):
                out[key] = {
                    n: v if isinstance(v, list) else self.schema(v, join(path, key, n), name)
                    for n, v in value.items()
                }
            elif key == "$ref":
                resolve_ref(self.root, value, tool=self.tool, where=self.where + join(path, key))
                out[key] = value
            elif is_noop(key, value):
                self.changes[f"{key}: {value!r}".replace("True", "true").replace("False", "false")] += 1
            else:
                out[key] = value
        return self._finish(out, path)

    def _finish(self, out: dict[str, Any], path: str) -> dict[str, Any]:
        types = out.get("type")
        is_array = types == "array" or (isinstance(types, list) and "array" in types)
        if is_array and "items" not in out and "prefixItems" not in out:
            out["items"] = {}
            self.changes["items added to array"] += 1
        union = null_union(out)
        if union is not None:
            keyword, index, branch, null = union
            moving = (set(branch) & ANNOTATIONS) | (set(null) & ANNOTATIONS)
            if (
                not (set(out) & moving)
                and not (set(null) & ANNOTATIONS)
                and not self.targeted(join(path, keyword))
            ):
                out = merge_null_union(out, keyword, index, branch)
                self.changes[f"{keyword} null -> type list"] += 1
        return out


def _prune_definitions(schema: dict[str, Any], changes: Counter[str], *, refs: bool = True) -> dict[str, Any]:
    """Drop ``$defs``/``definitions`` entries that no ``$ref`` reaches from outside them
    (``refs``: whether the schema may hold a ``$ref``; without one, every entry goes).

    Skipped unless every reference is a ``#/`` JSON Pointer: an anchor could reach any entry.
    """
    if not refs:
        for keyword in ("$defs", "definitions"):
            defs = schema.get(keyword)
            if isinstance(defs, Mapping) and defs:
                changes["unused definition"] += len(defs)
                schema = {k: v for k, v in schema.items() if k != keyword}
        return schema
    if not all(isinstance(r, str) and r.startswith("#/") for r in _refs(schema)):
        return schema
    for keyword in ("$defs", "definitions"):
        defs = schema.get(keyword)
        if not isinstance(defs, Mapping):
            continue
        prefix = f"/{keyword}/"
        pending = list(_ref_targets({k: v for k, v in schema.items() if k != keyword}))
        used: set[str] = set()
        while pending:
            target = pending.pop()
            if not target.startswith(prefix):
                continue
            name = target[len(prefix) :].split("/")[0].replace("~1", "/").replace("~0", "~")
            if name in used or name not in defs:
                continue
            used.add(name)
            if isinstance(defs[name], Mapping):
                pending.extend(_ref_targets(defs[name]))
        if len(used) < len(defs):
            changes["unused definition"] += len(defs) - len(used)
            schema = {k: v for k, v in schema.items() if k != keyword}
            if used:
                schema[keyword] = {n: s for n, s in defs.items() if n in used}
    return schema


def _check_refs(schema: Mapping[str, Any], tool: str, where: str) -> None:
    stack: list[tuple[object, str]] = [(schema, "")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if "$ref" in node:
            resolve_ref(schema, node["$ref"], tool=tool, where=where + join(path, "$ref"))
        stack.extend((sub, p) for p, sub in subschemas(node, path))


def minify_schema(
    schema: Mapping[str, Any],
    level: MinifyLevel = DEFAULT_LEVEL,
    *,
    tool: str = "",
    where: str = "/inputSchema",
) -> tuple[dict[str, Any], Counter[str]]:
    """Minify one tool input schema; returns the schema and what changed (counts by kind).

    Raises:
        SchemaError: a subschema that is neither an object nor a boolean, an unresolvable
            ``$ref``, or a root that is not ``type: object``; ``where`` is the JSON Pointer.
    """
    refs = _mentions_ref(schema)
    walk = _Walk(schema, level, tool, where, refs=refs)
    root_type = schema.get("type", "object")
    if root_type != "object":
        raise walk.fail("", f"the root of an input schema must be type 'object', not {root_type!r}")
    out = walk.schema(schema, "", tool)
    assert isinstance(out, dict)  # a Mapping in gives a dict out
    if "type" not in out:
        out = {"type": "object", **out}
        walk.changes["root type object added"] += 1
    out = _prune_definitions(out, walk.changes, refs=refs)
    if refs:  # the walk adds no reference: without one in, there is none to check
        _check_refs(out, tool, where)
    return out, walk.changes


def _mentions_ref(schema: Mapping[str, Any]) -> bool:
    """Whether ``"$ref"`` appears anywhere in ``schema``'s JSON: as a key it is a reference
    (then the three passes over every subschema that references need are made); as a string
    it only costs those passes. One C-level encoding instead of a walk: most schemas have none."""
    return '"$ref"' in json.dumps(schema, ensure_ascii=False)


def _check_level(level: object) -> MinifyLevel:
    if level not in LEVELS:
        raise InvalidInput(
            f"unknown minify level {level!r}; choose one of {', '.join(LEVELS)}", where="level"
        )
    return level


def minify_tool_with_report(
    tool: Mapping[str, Any], level: MinifyLevel = DEFAULT_LEVEL, *, where: str = ""
) -> tuple[dict[str, Any], MinifyReport]:
    """Minify one MCP tool definition and say what was removed.

    Args:
        tool: a ``tools/list`` entry (``name``, ``description``, ``inputSchema``, ...).
        level: ``"full-text"``, ``"compact"`` (default) or ``"minimal"``.
        where: JSON Pointer of the tool in its document (e.g. ``"/tools/3"``), for errors.

    Returns:
        The minified tool (same keys, same order) and a ``MinifyReport``.

    Raises:
        InvalidInput: not an object, no non-empty string ``name``, or an unknown level.
        SchemaError: a non-object ``inputSchema`` or a schema that cannot be processed; the
            message names the tool and the JSON path.
    """
    lvl = _check_level(level)
    if not isinstance(tool, Mapping):
        raise InvalidInput(f"{where or '/'}: a tool must be a JSON object", where=where)
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}/name: a tool needs a non-empty string 'name'", where=f"{where}/name")
    schema = tool.get("inputSchema", {"type": "object"})
    if not isinstance(schema, Mapping):
        raise SchemaError(
            f"tool {name!r}: 'inputSchema' must be a JSON object at {where}/inputSchema",
            where=f"{where}/inputSchema",
        )
    out: dict[str, Any] = {}
    changes: Counter[str] = Counter()
    for key, value in tool.items():
        if key == "description" and isinstance(value, str):
            text = normalize_prose(value) if lvl == "full-text" else opening(value)
            if text != value:
                changes["tool description layout" if lvl == "full-text" else "tool description cut"] += 1
            out[key] = text
        elif key == "inputSchema":
            out[key], schema_changes = minify_schema(schema, lvl, tool=name, where=f"{where}/inputSchema")
            changes.update(schema_changes)
        else:
            out[key] = value
    if "inputSchema" not in out:
        out["inputSchema"] = {"type": "object"}
        changes["inputSchema added"] += 1
    return out, MinifyReport(name, lvl, tuple(sorted(changes.items())))


def minify_tool(tool: Mapping[str, Any], level: MinifyLevel = DEFAULT_LEVEL) -> dict[str, Any]:
    """Minify one MCP tool definition without losing a validation constraint.

    Args:
        tool: a ``tools/list`` entry (``name``, ``description``, ``inputSchema``, ...).
        level: ``"full-text"`` (decoration only), ``"compact"`` (default; informative prose
            only) or ``"minimal"`` (no descriptions inside the schema).

    Returns:
        The minified tool; every instance gets the same verdict from its ``inputSchema`` as
        from the original.

    Raises:
        InvalidInput: bad tool shape or level. SchemaError: a schema that cannot be processed.
    """
    return minify_tool_with_report(tool, level)[0]
