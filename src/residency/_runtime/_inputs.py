"""Checks of what an embedding host passes a Session, before anything is built from it.

Each check raises ``InvalidInput`` naming the parameter (``where``) instead of the
``TypeError``, ``AttributeError`` or ``RecursionError`` the value would cause later, and
returns the value in the form the session keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from residency._errors import InvalidInput, SchemaError

__all__ = [
    "MAX_DEFINITION_DEPTH",
    "callable_param",
    "check_definition_depth",
    "name_set",
    "nesting_depth",
    "phase_map",
    "tool_list",
]

MAX_DEFINITION_DEPTH = 100
"""Deepest nesting of a tool definition accepted (JSON levels; real schemas stay under 20).

Schema processing (validation, minification) recurses about five Python frames per level: at
this depth it stays well inside the interpreter's stack, even under a server's own frames.
"""


def nesting_depth(obj: object, limit: int) -> int:
    """How deeply ``obj`` nests (a scalar is 0), counting no further than ``limit + 1``.

    Level by level, not recursive, so a hostile value cannot exhaust the stack while being
    measured.
    """
    depth = 0
    level: list[Any] = [obj]
    while depth <= limit:
        below: list[Any] = []
        containers = 0
        for item in level:
            kind = type(item)
            if kind is dict or (kind is not list and isinstance(item, Mapping)):
                below.extend(item.values())
            elif kind is list or isinstance(item, tuple):
                below.extend(item)
            else:
                continue
            containers += 1
        if not containers:
            return depth
        depth += 1
        level = below
    return depth


def check_definition_depth(raw: object, where: str) -> None:
    """Refuse a tool definition nested deeper than ``MAX_DEFINITION_DEPTH``.

    Raises:
        SchemaError: its ``inputSchema`` is what nests too deeply.
        InvalidInput: another part of it does.
    """
    if nesting_depth(raw, MAX_DEFINITION_DEPTH) <= MAX_DEFINITION_DEPTH:
        return
    limit = MAX_DEFINITION_DEPTH - 1
    if isinstance(raw, Mapping) and nesting_depth(raw.get("inputSchema"), limit) > limit:
        raise SchemaError(
            f"{where}: inputSchema nests deeper than {limit} levels", where=f"{where}.inputSchema"
        )
    raise InvalidInput(
        f"{where}: the definition nests deeper than {MAX_DEFINITION_DEPTH} levels", where=where
    )


def _names(value: object, where: str, what: str) -> frozenset[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInput(f"{where} must be a list of {what}, not {type(value).__name__}", where=where)
    names = list(value)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise InvalidInput(f"{where} must hold non-empty strings, not {bad[0]!r}", where=where)
    return frozenset(names)


def name_set(value: object, where: str) -> frozenset[str]:
    """A list of tool names as a set (``pinned=["a", "b"]``).

    Raises:
        InvalidInput: not a list (a string is refused: it would be read letter by letter), or
            an entry that is not a non-empty string.
    """
    return _names(value, where, "tool names")


def phase_map(value: object, where: str = "phases") -> dict[str, frozenset[str]]:
    """Phase name -> its tool names (``phases={"triage": ["search"]}``); None means none.

    Raises:
        InvalidInput: not a mapping of non-empty names to lists of tool names.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(
            f"{where} must map phase names to lists of tool names, not {type(value).__name__}",
            where=where,
        )
    out: dict[str, frozenset[str]] = {}
    for phase, tools in value.items():
        if not isinstance(phase, str) or not phase:
            raise InvalidInput(
                f"{where}: a phase name must be a non-empty string, not {phase!r}", where=where
            )
        out[phase] = _names(tools, f"{where}[{phase!r}]", "tool names")
    return out


def callable_param(value: object, where: str, what: str) -> Callable[..., Any]:
    """``value`` if it can be called.

    Raises:
        InvalidInput: it cannot; the message says what was expected (``what``).
    """
    if not callable(value):
        raise InvalidInput(f"{where} must be {what}, not {type(value).__name__}", where=where)
    return value


def tool_list(tools: object, where: str = "tools") -> list[object]:
    """The tool definitions passed to ``register_tools``, as a list.

    Raises:
        InvalidInput: not a list of definitions (one definition on its own, a string or None).
    """
    if isinstance(tools, Mapping):
        raise InvalidInput(
            f"{where} must be a list of tool definitions; wrap a single definition in a list",
            where=where,
        )
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise InvalidInput(
            f"{where} must be a list of tool definitions (tools/list entries), not {type(tools).__name__}",
            where=where,
        )
    return list(tools)
