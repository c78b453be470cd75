"""Problems of a configuration text: each placed on its line, worded for people, near-misses named.

Validation collects every problem of a file (``_Problems``) instead of stopping at the first;
pydantic's error kinds are reworded here (``_expected``), and an unknown key or a value outside
its choices gets the closest valid one (difflib over the model's keys, or the allowed values).
Values are never echoed: those of ``env`` and ``headers`` are secrets.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from residency._errors import ConfigError, ConfigProblem

__all__ = ["Problems", "line_of", "validate"]


class Problems:
    """The problems found in one configuration text, each placed on its line."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.text = text
        self.found: list[ConfigProblem] = []

    def __bool__(self) -> bool:
        return bool(self.found)

    def add(self, loc: tuple[str, ...], message: str, suggestion: str | None = None) -> None:
        if suggestion is not None:
            message += f"; did you mean {suggestion!r}?"
        key = ".".join(loc) if loc else "$"
        self.found.append(ConfigProblem(self.source, key, message, line_of(self.text, loc), suggestion))

    def error(self) -> ConfigError:
        # In file order; a problem with no line (rare: its key was not found) last.
        ordered = sorted(self.found, key=lambda p: p.line if p.line is not None else len(self.text) + 1)
        return ConfigError.of(ordered)


_M = TypeVar("_M", bound=BaseModel)

_INTERNAL_FIELDS = frozenset({"source"})
"""Fields set by the loader, not written in a file (never suggested)."""


def validate(model: type[_M], data: Any, found: Problems, prefix: tuple[str, ...]) -> _M | None:
    """``data`` as ``model``, or None with every validation error added to ``found``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(str(p) for p in error["loc"])
            # Values of env/headers are secrets: name the key, never echo the value.
            message, suggestion = _expected(model, loc, error)
            found.add(prefix + loc, message, suggestion)
        return None


_PLAIN = {
    "missing": "required key is missing",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "string_too_short": "expected a non-empty string",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "expected {} or more"),
    "greater_than": ("gt", "expected more than {}"),
    "less_than_equal": ("le", "expected {} or less"),
    "less_than": ("lt", "expected less than {}"),
}


def _expected(model: type[BaseModel], loc: tuple[str, ...], error: Any) -> tuple[str, str | None]:
    """What a validation error at ``loc`` (within ``model``) expects, and a near-miss suggestion."""
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        keys = [] if parent is None else _keys_of(parent)
        return "unknown key", near(loc[-1] if loc else "", keys)
    if kind in _PLAIN:
        return _PLAIN[kind], None
    if kind in _BOUNDS:
        bound, wording = _BOUNDS[kind]
        return wording.format(ctx.get(bound)), None
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        given = error.get("input")
        meant = near(given, re.findall(r"'([^']*)'", expected)) if isinstance(given, str) else None
        return f"expected one of {expected}", meant
    if kind == "string_pattern_mismatch" and str(ctx.get("pattern", "")).startswith("^https?://"):
        return "expected an http:// or https:// URL", None
    return str(error.get("msg", "invalid value")).removeprefix("Value error, "), None


def _model_at(model: type[BaseModel], loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The model whose keys sit at ``loc`` under ``model`` (None: not a model there)."""
    for part in loc:
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        annotation = field.annotation if field is not None else None
        # An optional section (``Model | None``) holds the keys of its model.
        annotation = next((a for a in get_args(annotation) if isinstance(a, type)), annotation)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a file may write in ``model``'s object (aliases where a field has one)."""
    return [f.alias or n for n, f in model.model_fields.items() if n not in _INTERNAL_FIELDS]


def near(given: str, choices: list[str]) -> str | None:
    """The choice ``given`` was most likely meant to be (difflib), or None."""
    close = difflib.get_close_matches(given, choices, n=1, cutoff=0.7)
    if not close:
        close = difflib.get_close_matches(given.casefold(), choices, n=1, cutoff=0.7)
    return close[0] if close else None


def line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """Best effort: the line where the last key of ``loc`` appears, searched after its parents.

    Args:
        text: the configuration text.
        loc: the path of keys (or string values, such as a name in ``pinned``) to look for.

    Returns:
        The 1-based line number, or None when not even the first key is found.
    """
    pos = 0
    found: int | None = None
    for part in loc:
        if part.isdigit():
            continue
        at = text.find(json.dumps(part), pos)
        if at < 0:
            break
        pos = at
        found = at
    return None if found is None else text.count("\n", 0, found) + 1
