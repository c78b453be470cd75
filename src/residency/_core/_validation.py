"""Validating call arguments against a tool's full input schema, fast where it is safe.

Theory of operation
-------------------
``jsonschema`` (the Python reference implementation) is the authority: its verdict decides
and its error names the field. It costs about 14 us for a two-property schema, which is most
of what the gateway adds to a forwarded call, so a compiled validator (``jsonschema-rs``)
answers first where the two are known to agree:

* a call the compiled validator accepts is accepted;
* a call it rejects, or cannot judge, goes to the reference, whose verdict decides (so a
  stricter compiled verdict, such as on NaN, costs time but never refuses a valid call).

So the only trust placed in the compiled validator is "it accepts only what the reference
accepts". That holds by construction where the two read a schema differently, because the
compiled validator is not used there:

* regular expressions (``pattern``, ``patternProperties``): ECMA-262 there, Python ``re``
  here; they differ on ``\\d``, ``$`` before a newline, and more;
* ``multipleOf``: exact decimal arithmetic there, binary floating point here (``0.3`` is a
  multiple of ``0.1`` there, not here);
* dynamic references (``$dynamicRef``, ``$recursiveRef``), numbers in the schema beyond
  2**53, and a dialect the two do not both recognise;
* arguments that are not plain JSON (tuples, non-string keys, NaN, integers beyond 2**53):
  callers say whether they are (``scan_arguments``).

Everywhere else it is checked: ``tests/core/test_validation.py`` judges tens of thousands of
instances made for every tool of the dev corpus, and hypothesis-drawn values, with both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema_rs
from jsonschema.exceptions import ValidationError, best_match

__all__ = ["ArgumentValidator", "UNSAFE_KEYWORDS", "scan_arguments", "unsafe_reason"]

UNSAFE_KEYWORDS = frozenset({"pattern", "patternProperties", "multipleOf", "$dynamicRef", "$recursiveRef"})
"""Keywords whose meaning differs between the two validators: their schemas use the reference."""

# Keywords whose value maps names to schemas: the names are not keywords.
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_EXACT = 2**53


def unsafe_reason(schema: object) -> str | None:
    """Why the compiled validator must not judge ``schema`` (None: it may).

    Conservative: anything that might be a keyword is treated as one, also inside data such as
    ``enum`` or ``default`` (a ``$ref`` may point there). Iterative, so a deeply nested schema
    cannot exhaust the stack.
    """
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            if not math.isfinite(node) or abs(node) > _EXACT:
                return f"the number {node!r} is not exact as a double (beyond 2**53 or not finite)"
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            if key in UNSAFE_KEYWORDS:
                return f"it uses {key!r}"
            if key in _NAMED_SCHEMAS and isinstance(value, Mapping):
                stack.extend(value.values())
            elif key == "dependencies" and isinstance(value, Mapping):
                stack.extend(v for v in value.values() if isinstance(v, Mapping))
            else:
                stack.append(value)
    return None


def scan_arguments(obj: object, limit: int) -> tuple[int, bool]:
    """How deeply ``obj`` nests, and whether it is plain JSON the compiled validator reads alike.

    Plain: dicts with string keys, lists, strings, booleans, None, integers within 2**53 and
    finite floats. Counting stops past ``limit`` (the depth returned is then ``limit + 1``).
    Iterative, so a hostile payload cannot exhaust the interpreter's stack.
    """
    deepest = 0
    plain = True
    stack: list[tuple[object, int]] = [(obj, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()  # type: ignore[attr-defined]
            if plain and not all(type(k) is str for k in item):  # type: ignore[attr-defined]
                plain = False
        elif kind is list:
            children = item
        elif kind is str or kind is bool or item is None:
            continue
        elif kind is int:
            if plain and abs(item) > _EXACT:  # type: ignore[arg-type]
                plain = False
            continue
        elif kind is float:
            if plain and not math.isfinite(item):  # type: ignore[arg-type]
                plain = False
            continue
        elif isinstance(item, Mapping):
            plain = False
            children = item.values()
        elif isinstance(item, (list, tuple)):
            plain = False
            children = item
        else:
            plain = False
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest, plain
        for child in children:
            push((child, depth))
    return deepest, plain


class ArgumentValidator:
    """Judges call arguments against one input schema (see the module docstring).

    Args:
        schema: the tool's full input schema, already checked against its metaschema.
    """

    __slots__ = ("_compiled", "_reference", "why_reference")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        # An unknown $schema is read as the latest dialect (what jsonschema does, minus its warning).
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        self._reference = cls(schema)
        self._compiled: Any = None
        self.why_reference: str | None = None
        """Why every call is judged by the reference alone (None: the compiled validator answers first)."""
        reason = unsafe_reason(schema)
        if reason is None:
            try:
                compiled = jsonschema_rs.validator_for(dict(schema), validate_formats=False, offline=True)
            except Exception as exc:  # it refuses what it cannot compile; the reference judges
                reason = f"the compiled validator refused it: {str(exc).splitlines()[0]}"
            else:
                # Both must read the schema in the same dialect.
                if type(compiled).__name__ == cls.__name__:
                    self._compiled = compiled
                else:
                    reason = f"the dialects differ ({type(compiled).__name__} and {cls.__name__})"
        self.why_reference = reason

    @property
    def compiled(self) -> bool:
        """Whether the compiled validator answers first for this schema."""
        return self._compiled is not None

    def first_error(self, arguments: object, *, plain: bool) -> ValidationError | None:
        """The reference's best error for ``arguments``, or None when they are valid.

        Args:
            arguments: the call's arguments.
            plain: ``scan_arguments`` found them plain JSON; otherwise only the reference judges.
        """
        compiled = self._compiled
        if plain and compiled is not None:
            try:
                if compiled.is_valid(arguments):
                    return None
            except Exception:  # e.g. a lone surrogate in a string: the reference judges
                pass
        error: ValidationError | None = best_match(self._reference.iter_errors(arguments))
        return error
