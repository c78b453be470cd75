"""The predicate language of archived tool chains (a chain's ``constraint``): JSON data, never ``eval``.

Theory of operation
-------------------
A constraint is checked once, when its chain is archived, against the chain's topology (and
the tools' pinned schemas), and evaluated by the small interpreter below over the arguments of
the steps of a fatal prefix:

* condition ``{"tool": T, "argument": P, "op": OP, "value": V}`` with an optional ``"step": I``.
  ``T`` is a tool of the fatal prefix. ``P`` is an argument name, or a list of keys and array
  indices for a nested one (``["options", "limit"]``). ``I`` is a 0-based index into the
  topology that pins one step when ``T`` occurs more than once; without it the condition holds
  if it holds at any step of ``T`` in the run.
* ``OP``: ``==`` and ``!=`` (any JSON value; ``true`` never equals ``1``); ``<``, ``<=``, ``>``,
  ``>=`` (a number); ``in`` and ``not in`` (a non-empty list of JSON values); and the size
  comparisons ``size ==``, ``size !=``, ``size <``, ``size <=``, ``size >``, ``size >=`` (a
  non-negative integer) over the argument's size: UTF-8 bytes of a string (payloads are
  measured in bytes), items of an array, members of an object.
* ``{"all": [c, ...]}`` and ``{"any": [c, ...]}`` combine non-empty lists of constraints.
* ``{"all": []}``, the empty conjunction, is the whole constraint when it tests no argument:
  the topology alone is fatal.

A condition on an argument the call does not pass, or of a type its op cannot compare, does
not hold. When a step's arguments are not known at all (a plan checked without them), the
condition is *unknown* (None); ``all``/``any`` follow three-valued (Kleene) logic.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from residency._core._tools import JSONObject
from residency._errors import InvalidInput

__all__ = [
    "OPS",
    "AllOf",
    "AnyOf",
    "Condition",
    "Constraint",
    "constraint_json",
    "holds",
    "is_json",
    "parse_constraint",
    "render_constraint",
    "tests_arguments",
]

ORDER_OPS = ("<", "<=", ">", ">=")
EQUALITY_OPS = ("==", "!=")
MEMBER_OPS = ("in", "not in")
SIZE_OPS = tuple(f"size {op}" for op in (*EQUALITY_OPS, *ORDER_OPS))
OPS = (*EQUALITY_OPS, *ORDER_OPS, *MEMBER_OPS, *SIZE_OPS)
"""Every op a condition may name."""

MAX_CONSTRAINT_DEPTH = 16
MAX_CONSTRAINT_NODES = 256
_CONDITION_KEYS = frozenset({"tool", "argument", "op", "value", "step"})


@dataclass(frozen=True, slots=True)
class Condition:
    """One argument test. ``steps`` are the topology indices it reads (resolved at parse)."""

    tool: str
    path: tuple[str | int, ...]
    op: str
    value: object = field(hash=False)
    step: int | None = None
    steps: tuple[int, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class AllOf:
    """Holds when every part holds; ``AllOf(())`` always holds (the topology alone)."""

    parts: tuple[Constraint, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Holds when some part holds."""

    parts: tuple[Constraint, ...]


Constraint = Condition | AllOf | AnyOf
"""A parsed negative constraint."""


def parse_constraint(
    raw: object,
    topology: Sequence[str],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    where: str = "constraint",
) -> Constraint:
    """Check a JSON constraint against a chain's topology and return its parsed form.

    Args:
        raw: the constraint as JSON data (see the module docstring for the language).
        topology: the chain's tool names in order; conditions may test only its fatal prefix.
        schemas: input schemas by tool name; an argument path a schema does not declare is
            refused as a likely typo.
        where: the name of ``raw`` in error messages.

    Raises:
        InvalidInput: an unknown op or key, a value of the wrong type, a tool outside the fatal
            prefix, a bad argument path or step, or a constraint nested too deeply. ``where``
            names the offending place.
    """
    if isinstance(raw, Mapping) and set(raw) == {"all"} and raw["all"] == []:
        return AllOf(())
    prefix = tuple(topology[:-1])
    counter = [0]
    return _parse(raw, prefix, schemas or {}, where, 0, counter)


def _parse(
    raw: object,
    prefix: tuple[str, ...],
    schemas: Mapping[str, Mapping[str, Any]],
    where: str,
    depth: int,
    counter: list[int],
) -> Constraint:
    counter[0] += 1
    if depth > MAX_CONSTRAINT_DEPTH or counter[0] > MAX_CONSTRAINT_NODES:
        raise InvalidInput(
            f"{where}: constraint too large (at most {MAX_CONSTRAINT_DEPTH} levels and "
            f"{MAX_CONSTRAINT_NODES} nodes)",
            where=where,
        )
    if not isinstance(raw, Mapping):
        raise InvalidInput(
            f"{where}: a constraint is a JSON object (a condition, or 'all'/'any' of constraints), "
            f"not {type(raw).__name__}",
            where=where,
        )
    if "all" in raw or "any" in raw:
        key = "all" if "all" in raw else "any"
        if set(raw) != {key}:
            raise InvalidInput(f"{where}: {key!r} takes no other keys; got {sorted(raw)}", where=where)
        items = raw[key]
        if not isinstance(items, list) or not items:
            hint = " ({'all': []} alone means the topology itself is fatal)" if key == "all" else ""
            raise InvalidInput(
                f"{where}.{key}: must be a non-empty list of constraints{hint}", where=f"{where}.{key}"
            )
        parts = tuple(
            _parse(item, prefix, schemas, f"{where}.{key}[{i}]", depth + 1, counter)
            for i, item in enumerate(items)
        )
        return AllOf(parts) if key == "all" else AnyOf(parts)
    return _parse_condition(raw, prefix, schemas, where)


def _parse_condition(
    raw: Mapping[str, Any], prefix: tuple[str, ...], schemas: Mapping[str, Mapping[str, Any]], where: str
) -> Condition:
    unknown = sorted(str(k) for k in raw if k not in _CONDITION_KEYS)
    if unknown:
        raise InvalidInput(
            f"{where}: unknown key(s) {unknown}; a condition has tool, argument, op, value and an "
            f"optional step, a combination has 'all' or 'any'",
            where=f"{where}.{unknown[0]}",
        )
    missing = [k for k in ("tool", "argument", "op", "value") if k not in raw]
    if missing:
        raise InvalidInput(f"{where}: condition is missing {missing}", where=f"{where}.{missing[0]}")
    tool, op, value = raw["tool"], raw["op"], raw["value"]
    if not isinstance(tool, str) or tool not in prefix:
        raise InvalidInput(
            f"{where}.tool: {tool!r} is not a tool of the fatal prefix {list(prefix)} (a constraint "
            f"tests the arguments of the steps before the failing one)",
            where=f"{where}.tool",
        )
    if op not in OPS:
        raise InvalidInput(f"{where}.op: unknown op {op!r}; known: {list(OPS)}", where=f"{where}.op")
    _check_value(op, value, f"{where}.value")
    path = _parse_path(raw["argument"], f"{where}.argument")
    schema = schemas.get(tool)
    if schema is not None:
        _check_path(schema, path, tool, f"{where}.argument")
    step = raw.get("step")
    if step is None:
        steps = tuple(i for i, name in enumerate(prefix) if name == tool)
    elif (
        isinstance(step, int)
        and not isinstance(step, bool)
        and 0 <= step < len(prefix)
        and prefix[step] == tool
    ):
        steps = (step,)
    else:
        at = [i for i, name in enumerate(prefix) if name == tool]
        raise InvalidInput(
            f"{where}.step: {step!r} is not a step of {tool!r} in the fatal prefix (its steps: {at})",
            where=f"{where}.step",
        )
    return Condition(tool, path, op, _json_copy(value), step, steps)


def _parse_path(raw: object, where: str) -> tuple[str | int, ...]:
    if isinstance(raw, str) and raw:
        return (raw,)
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        out: list[str | int] = []
        for i, part in enumerate(raw):
            if (isinstance(part, str) and part) or (
                isinstance(part, int) and not isinstance(part, bool) and part >= 0
            ):
                out.append(part)
            else:
                raise InvalidInput(
                    f"{where}[{i}]: a path part is a non-empty key or a non-negative array index",
                    where=f"{where}[{i}]",
                )
        return tuple(out)
    raise InvalidInput(
        f"{where}: an argument name, or a list of keys and indices starting with an argument name",
        where=where,
    )


def _check_value(op: str, value: object, where: str) -> None:
    if not is_json(value):
        raise InvalidInput(f"{where}: not a JSON value", where=where)
    if op in ORDER_OPS and not _is_number(value):
        raise InvalidInput(f"{where}: {op!r} compares numbers; got {type(value).__name__}", where=where)
    if op in MEMBER_OPS and (not isinstance(value, list) or not value):
        raise InvalidInput(f"{where}: {op!r} needs a non-empty list of values", where=where)
    if op in SIZE_OPS and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise InvalidInput(f"{where}: {op!r} needs a non-negative integer size", where=where)


def _check_path(schema: Mapping[str, Any], path: tuple[str | int, ...], tool: str, where: str) -> None:
    """Refuse a path the schema cannot have; stop where the schema stops saying."""
    node: Mapping[str, Any] = schema
    for i, part in enumerate(path):
        kind = node.get("type")
        here = f"{where}[{i}]" if len(path) > 1 else where
        if isinstance(part, str):
            if isinstance(kind, str) and kind != "object":
                raise InvalidInput(
                    f"{here}: {tool} argument at this point is a {kind}, not an object", where=here
                )
            props = node.get("properties")
            if not isinstance(props, Mapping):
                return
            if part in props:
                sub = props[part]
            elif node.get("additionalProperties") not in (None, False) or node.get("patternProperties"):
                return
            else:
                raise InvalidInput(
                    f"{here}: {tool} takes no argument {part!r} (declared: {sorted(props)})", where=here
                )
        else:
            if isinstance(kind, str) and kind != "array":
                raise InvalidInput(
                    f"{here}: {tool} argument at this point is a {kind}, not an array", where=here
                )
            sub = node.get("items")
        if not isinstance(sub, Mapping):
            return
        node = sub


def constraint_json(c: Constraint) -> JSONObject:
    """The canonical JSON form of a parsed constraint (what the digest covers)."""
    if isinstance(c, AllOf):
        return {"all": [constraint_json(p) for p in c.parts]}
    if isinstance(c, AnyOf):
        return {"any": [constraint_json(p) for p in c.parts]}
    out: JSONObject = {
        "tool": c.tool,
        "argument": c.path[0] if len(c.path) == 1 else list(c.path),
        "op": c.op,
        "value": _json_copy(c.value),
    }
    if c.step is not None:
        out["step"] = c.step
    return out


def render_constraint(c: Constraint) -> str:
    """The constraint as one readable line, e.g. ``html_parser.payload_bytes > 5000000``."""
    if isinstance(c, AllOf | AnyOf):
        joiner = " and " if isinstance(c, AllOf) else " or "
        inner = [render_constraint(p) for p in c.parts]
        if len(inner) > 1:
            inner = [
                f"({s})" if isinstance(p, AllOf | AnyOf) else s for s, p in zip(inner, c.parts, strict=True)
            ]
        return joiner.join(inner)
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in c.path)
    step = f"[step {c.step}]" if c.step is not None else ""
    return f"{c.tool}{step}{path} {c.op} {json.dumps(c.value, ensure_ascii=False)}"


def tests_arguments(c: Constraint) -> bool:
    """Whether the constraint contains any argument condition."""
    return isinstance(c, Condition) or any(tests_arguments(p) for p in c.parts)


def holds(c: Constraint, arguments: Sequence[Mapping[str, Any] | None]) -> bool | None:
    """Evaluate a constraint over a run's arguments (index ``i`` is topology step ``i``).

    Returns:
        True or False, or None when it depends on arguments given as None (unknown).
    """
    if isinstance(c, AllOf):
        result: bool | None = True
        for part in c.parts:
            r = holds(part, arguments)
            if r is False:
                return False
            if r is None:
                result = None
        return result
    if isinstance(c, AnyOf):
        result = False
        for part in c.parts:
            r = holds(part, arguments)
            if r is True:
                return True
            if r is None:
                result = None
        return result
    result = False
    for step in c.steps:
        args = arguments[step]
        if args is None:
            result = None
        elif _test(c, args):
            return True
    return result


_MISSING = object()


def _test(c: Condition, args: Mapping[str, Any]) -> bool:
    node: object = args
    for part in c.path:
        if isinstance(part, str) and isinstance(node, Mapping):
            node = node.get(part, _MISSING)
        elif isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
        else:
            return False
        if node is _MISSING:
            return False
    op, value = c.op, c.value
    if op.startswith("size "):
        if isinstance(node, str):
            size = len(node.encode("utf-8"))
        elif isinstance(node, list | Mapping):
            size = len(node)
        else:
            return False
        return _compare(op[5:], size, value)
    if op == "==":
        return _json_equal(node, value)
    if op == "!=":
        return not _json_equal(node, value)
    if op in MEMBER_OPS and isinstance(value, list):
        found = any(_json_equal(node, v) for v in value)
        return found if op == "in" else not found
    return _is_number(node) and _compare(op, node, value)


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def is_json(v: object, depth: int = 0) -> bool:
    if depth > 32:
        return False
    if v is None or isinstance(v, str | bool | int):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(is_json(x, depth + 1) for x in v)
    if isinstance(v, Mapping):
        return all(isinstance(k, str) and is_json(x, depth + 1) for k, x in v.items())
    return False


def _json_copy(v: object) -> Any:
    return json.loads(json.dumps(v))
