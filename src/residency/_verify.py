"""Check that a minified schema gives every instance the same verdict as the original.

Instances come from two sources, both derived from the *original* schema:

- ``hypothesis-jsonschema`` draws instances (derandomized: same schema, same instances;
  bounded by ``max_examples`` and ``time_limit``). Some schemas it cannot handle; those fall
  back to the second source alone and the result says so (``generator``).
- a witness (an instance built to satisfy the schema: required and optional properties,
  first enum value, values inside the bounds) and its mutations at every place: a missing
  required property, a wrong type, a value on and beyond each bound, a string too short or
  too long, a bad enum or const value, an extra property where it may be forbidden, too few
  or too many items. The mutations aim at every constraint; the drawn instances at the rest.

Tool arguments are always JSON objects (MCP), so only objects are tried at the root. Each
instance is judged by a ``jsonschema`` validator for the original (its declared dialect,
2020-12 when none) and for the minified schema (with format checking); any difference is a
``Disagreement`` naming the tool, the place in the instance and the mutation.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import validators

from residency._core._minify_refs import join, resolve_ref
from residency._errors import SchemaError

__all__ = ["Disagreement", "VerifyResult", "generate_instances", "verify_levels", "verify_tool"]

_OTHER_TYPES: tuple[object, ...] = (None, True, 0, 1.5, "x", [], {})
_FORMAT_SAMPLES = {
    "date-time": "2024-01-02T03:04:05Z",
    "date": "2024-01-02",
    "time": "03:04:05Z",
    "uri": "https://example.com/a",
    "url": "https://example.com/a",
    "email": "a@example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}
_MAX_DEPTH = 12


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One instance the two schemas judge differently.

    Attributes:
        tool: the tool's name.
        path: JSON Pointer of the place in the instance that was mutated ("" for a drawn one).
        kind: how the instance was made (``"drawn"``, ``"witness"``, ``"missing required"``,
            ``"wrong type"``, ``"bound"``, ``"bad enum"``, ``"extra property"`` ...).
        instance: the instance itself.
        original_valid: the original schema's verdict.
        minified_valid: the minified schema's verdict.
    """

    tool: str
    path: str
    kind: str
    instance: object
    original_valid: bool
    minified_valid: bool


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The verdict comparison for one tool and one minified schema.

    Attributes:
        tool: the tool's name.
        instances: how many instances both schemas judged.
        accepted: how many of them the original accepts.
        generator: where the instances came from, e.g. ``"hypothesis-jsonschema (20) +
            mutations (143)"`` or ``"mutations only (hypothesis-jsonschema: <why>)"``.
        disagreements: every instance judged differently.
        timed_out: the drawing stopped at ``time_limit`` before ``max_examples``.
    """

    tool: str
    instances: int
    accepted: int
    generator: str
    disagreements: tuple[Disagreement, ...]
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.disagreements


# --- instances ---------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised inside the hypothesis loop when the time limit is reached."""


def _drawn(schema: Mapping[str, Any], max_examples: int, time_limit: float) -> tuple[list[object], str, bool]:
    if max_examples <= 0:
        return [], "hypothesis-jsonschema off", False
    try:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis_jsonschema import from_schema

        strategy = from_schema(dict(schema))
    except Exception as exc:
        return [], f"hypothesis-jsonschema: {type(exc).__name__}: {str(exc)[:80]}", False
    found: list[object] = []
    deadline = time.monotonic() + time_limit

    @settings(
        derandomize=True,
        database=None,
        max_examples=max_examples,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(instance: object) -> None:
        if time.monotonic() > deadline:
            raise _Stop
        found.append(instance)

    timed_out = False
    try:
        collect()
    except _Stop:
        timed_out = True
    except Exception as exc:
        if not found:
            return [], f"hypothesis-jsonschema: {type(exc).__name__}: {str(exc)[:80]}", False
    return found, "", timed_out


def _map(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = node.get(key)
    return value if isinstance(value, Mapping) else {}


def _list(node: Mapping[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    return value if isinstance(value, list) else []


class _Witness:
    """Builds an instance meant to satisfy a schema, and mutations of it at every place."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def deref(self, node: object, depth: int) -> object:
        while isinstance(node, Mapping) and "$ref" in node and depth < _MAX_DEPTH:
            _, target = resolve_ref(self.root, node["$ref"])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = {**target, **rest} if isinstance(target, Mapping) else target
            depth += 1
        return node

    def schema_type(self, node: Mapping[str, Any]) -> str | None:
        t = node.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), t[0] if t else None)
        if isinstance(t, str):
            return t
        if "properties" in node or "required" in node or "additionalProperties" in node:
            return "object"
        if "items" in node or "minItems" in node:
            return "array"
        if "minLength" in node or "maxLength" in node or "pattern" in node or "format" in node:
            return "string"
        if "minimum" in node or "maximum" in node or "exclusiveMinimum" in node:
            return "number"
        return None

    def build(self, node: object, depth: int = 0, full: bool = True) -> object:
        node = self.deref(node, depth)
        if not isinstance(node, Mapping) or depth > _MAX_DEPTH:
            return {} if node is not False else None
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return node["enum"][0]
        t = self.schema_type(node)
        if t is None:
            for keyword in ("anyOf", "oneOf", "allOf"):
                branches = node.get(keyword)
                if isinstance(branches, list) and branches:
                    return self.build(branches[0], depth + 1, full)
            return {}
        if t == "object":
            props = _map(node, "properties")
            required = _list(node, "required")
            return {
                name: self.build(sub, depth + 1, full)
                for name, sub in props.items()
                if full or name in required
            } | {name: "x" for name in required if isinstance(name, str) and name not in props}
        if t == "array":
            item = self.build(node.get("items", {}), depth + 1, full)
            n = max(int(node.get("minItems", 1) or 0), 1)
            n = min(n, int(node.get("maxItems", n)))
            if node.get("uniqueItems") is True:
                n = min(n, 1)
            return [item] * n
        if t == "string":
            fmt = node.get("format")
            if isinstance(fmt, str) and fmt in _FORMAT_SAMPLES:
                return _FORMAT_SAMPLES[fmt]
            n = max(int(node.get("minLength", 1)), 1)
            return "a" * min(n, int(node.get("maxLength", n)))
        if t in ("number", "integer"):
            return self.number(node, t)
        if t == "boolean":
            return True
        if t == "null":
            return None
        return {}

    def number(self, node: Mapping[str, Any], t: str) -> object:
        low = node.get("minimum", node.get("exclusiveMinimum"))
        high = node.get("maximum", node.get("exclusiveMaximum"))
        value: float = 1
        if isinstance(low, (int, float)) and not isinstance(low, bool):
            value = low + (1 if "exclusiveMinimum" in node and "minimum" not in node else 0)
        if isinstance(high, (int, float)) and not isinstance(high, bool) and value > high:
            value = high
        step = node.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            value = math.ceil(value / step) * step
        return int(value) if t == "integer" or float(value).is_integer() else value

    def mutations(
        self, node: object, value: object, path: str, depth: int = 0
    ) -> Iterator[tuple[str, str, object]]:
        """``(path, kind, replacement of value)`` for every mutation at or under ``path``."""
        node = self.deref(node, depth)
        if not isinstance(node, Mapping) or depth > _MAX_DEPTH:
            return
        if path:
            for other in _OTHER_TYPES:
                if type(other) is not type(value):
                    yield path, "wrong type", other
        facets = [
            node,
            *(self.deref(b, depth + 1) for k in ("anyOf", "oneOf", "allOf") for b in _list(node, k)),
        ]
        for facet in facets:
            if isinstance(facet, Mapping):
                yield from self.facet_mutations(facet, value, path)
        if isinstance(value, dict):
            yield from self.object_mutations(node, value, path, depth)
        elif isinstance(value, list) and value:
            items = node.get("items", {})
            for i, item in enumerate(value[:2]):
                sub = items[i] if isinstance(items, list) and i < len(items) else items
                for p, kind, m in self.mutations(sub, item, join(path, i), depth + 1):
                    yield p, kind, [*value[:i], m, *value[i + 1 :]]

    def facet_mutations(
        self, facet: Mapping[str, Any], value: object, path: str
    ) -> Iterator[tuple[str, str, object]]:
        if isinstance(facet.get("enum"), list):
            yield path, "bad enum", "__not_in_enum__"
            for other in facet["enum"][:8]:
                yield path, "enum value", other
        if "const" in facet:
            yield path, "bad const", "__not_the_const__"
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            bound = facet.get(key)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                for delta in (-1, -0.5, 0, 0.5, 1):
                    yield path, f"{key} bound", bound + delta
        step = facet.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            yield path, "multipleOf", step * 1.5
        for key, delta in (("minLength", -1), ("minLength", 0), ("maxLength", 0), ("maxLength", 1)):
            n = facet.get(key)
            if isinstance(n, int) and n + delta >= 0:
                yield path, f"{key} bound", "a" * (n + delta)
        if "pattern" in facet or "format" in facet:
            for text in ("", " ", "!!not valid!!", "0"):
                yield path, "pattern/format", text
        if isinstance(value, list):
            for key, delta in (("minItems", -1), ("maxItems", 1)):
                n = facet.get(key)
                if isinstance(n, int) and n + delta >= 0:
                    fill = value[0] if value else None
                    yield path, f"{key} bound", [fill] * (n + delta)
            if facet.get("uniqueItems") is True and value:
                yield path, "duplicate items", [value[0], value[0]]
            yield path, "empty array", []

    def object_mutations(
        self, node: Mapping[str, Any], value: dict[str, Any], path: str, depth: int
    ) -> Iterator[tuple[str, str, object]]:
        for name in _list(node, "required"):
            if name in value:
                yield join(path, name), "missing required", {k: v for k, v in value.items() if k != name}
        yield join(path, "__extra__"), "extra property", {**value, "__extra__": 1}
        yield path, "empty object", {}
        props = _map(node, "properties")
        for name, sub in props.items():
            if name in value:
                for p, kind, m in self.mutations(sub, value[name], join(path, name), depth + 1):
                    yield p, kind, {**value, name: m}
        for name in props:
            if name not in value:
                yield join(path, name), "optional present", {**value, name: None}


def generate_instances(
    schema: Mapping[str, Any], *, max_examples: int = 20, time_limit: float = 5.0, max_mutations: int = 400
) -> tuple[list[tuple[str, str, object]], str, bool]:
    """Instances to judge: ``(path, kind, instance)`` triples, the generator label, timed out.

    Deterministic for a given schema and bounds. Only JSON objects are returned.

    Raises:
        SchemaError: the schema has an unresolvable ``$ref``.
    """
    drawn, why, timed_out = _drawn(schema, max_examples, time_limit)
    witness = _Witness(schema)
    out: list[tuple[str, str, object]] = [("", "drawn", x) for x in drawn if isinstance(x, dict)]
    bases = [
        ("", "witness", witness.build(schema)),
        ("", "witness (required only)", witness.build(schema, full=False)),
    ]
    out.extend(b for b in bases if isinstance(b[2], dict))
    mutated: list[tuple[str, str, object]] = []
    for _, _, base in [*bases, *out[:1]]:
        if isinstance(base, dict):
            mutated.extend(m for m in witness.mutations(schema, base, "") if isinstance(m[2], dict))
    if len(mutated) > max_mutations:  # keep an even, deterministic spread
        stride = len(mutated) / max_mutations
        mutated = [mutated[int(i * stride)] for i in range(max_mutations)]
    out.extend(mutated)
    hyp = f"hypothesis-jsonschema ({len(drawn)})" if not why else f"mutations only ({why})"
    label = f"{hyp} + witnesses and mutations ({len(out) - len(drawn)})" if not why else hyp
    return out, label, timed_out


# --- verdicts ----------------------------------------------------------------------------------


def _judge(schema: Mapping[str, Any]) -> Any:
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def valid(instance: object) -> bool | str:
        try:
            return bool(validator.is_valid(instance))
        except Exception as exc:
            return f"error: {type(exc).__name__}"

    return valid


def _schema_of(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = tool.get("inputSchema", {"type": "object"})
    if not isinstance(schema, Mapping):
        raise SchemaError(
            f"tool {tool.get('name')!r}: 'inputSchema' must be a JSON object", where="/inputSchema"
        )
    return schema


def verify_levels(
    original: Mapping[str, Any],
    minified: Mapping[str, Mapping[str, Any]],
    *,
    max_examples: int = 20,
    time_limit: float = 5.0,
    max_mutations: int = 400,
) -> dict[str, VerifyResult]:
    """Compare verdicts of ``original``'s schema with each of several minified versions.

    Args:
        original: the original tool (``name``, ``inputSchema``).
        minified: label (e.g. a level) -> minified tool.
        max_examples: instances drawn by hypothesis-jsonschema (0: mutations only).
        time_limit: seconds allowed for drawing; mutations are bounded by ``max_mutations``.
        max_mutations: most mutated instances judged.

    Returns:
        label -> VerifyResult, in the order of ``minified``.
    """
    name = str(original.get("name", ""))
    schema = _schema_of(original)
    instances, label, timed_out = generate_instances(
        schema, max_examples=max_examples, time_limit=time_limit, max_mutations=max_mutations
    )
    judge = _judge(schema)
    verdicts = [judge(x) for _, _, x in instances]
    accepted = sum(v is True for v in verdicts)
    # A schema equal to one already judged gets the same verdicts: it is judged once. One equal
    # to the original cannot disagree with it (levels often leave a small schema as it was).
    judged: dict[str, tuple[Disagreement, ...]] = {}
    original_text = _text(schema)
    if original_text is not None:
        judged[original_text] = ()
    results: dict[str, VerifyResult] = {}
    for key, tool in minified.items():
        theirs_schema = _schema_of(tool)
        text = _text(theirs_schema)
        found = judged.get(text) if text is not None else None
        if found is None:
            found = _disagreements(name, instances, verdicts, _judge(theirs_schema))
            if text is not None:
                judged[text] = found
        results[key] = VerifyResult(name, len(instances), accepted, label, found, timed_out)
    return results


def _text(schema: Mapping[str, Any]) -> str | None:
    """The schema as exact JSON text (key order kept), or None when it is not plain JSON."""
    try:
        return json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _disagreements(
    name: str, instances: list[tuple[str, str, object]], verdicts: list[bool | str], other: Any
) -> tuple[Disagreement, ...]:
    found = []
    for (path, kind, instance), verdict in zip(instances, verdicts, strict=True):
        theirs = other(instance)
        if theirs != verdict:
            found.append(Disagreement(name, path, kind, instance, verdict is True, theirs is True))
    return tuple(found)


def verify_tool(
    original: Mapping[str, Any],
    minified: Mapping[str, Any],
    *,
    max_examples: int = 20,
    time_limit: float = 5.0,
    max_mutations: int = 400,
) -> VerifyResult:
    """Compare the verdicts of a tool's original and minified input schemas.

    See ``verify_levels`` for the arguments.
    """
    return verify_levels(
        original,
        {"minified": minified},
        max_examples=max_examples,
        time_limit=time_limit,
        max_mutations=max_mutations,
    )["minified"]
