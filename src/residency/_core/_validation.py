"""Validating call arguments against a tool's full input schema, fast where it is safe and
at a bounded cost everywhere.

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

* ``multipleOf``: exact decimal arithmetic there, binary floating point here (``0.3`` is a
  multiple of ``0.1`` there, not here);
* dynamic references (``$dynamicRef``, ``$recursiveRef``), numbers in the schema beyond
  2**53, and a dialect the two do not both recognise;
* arguments that are not plain JSON (tuples, non-string keys, NaN, integers beyond 2**53):
  callers say whether they are (``scan_arguments``).

Everywhere else it is checked: ``tests/core/test_validation.py`` judges tens of thousands of
instances made for every tool of the dev corpus, and hypothesis-drawn values, with both.

Regular expressions are the exception to "the reference decides". Python's ``re`` backtracks:
one 27-character string against ``^(a|a)*$`` takes seconds, and it cannot be interrupted. So a
schema with ``pattern`` or ``patternProperties`` is judged by the compiled validator alone,
with ECMA-262 patterns as JSON Schema specifies them (``\\d`` is ``[0-9]``; ``$`` is the end of
the string, not a final newline). A pattern without look-around or back-references runs on a
linear-time engine (no backtracking at all); one with them gets at most
``PATTERN_BACKTRACK_LIMIT`` backtracking steps per string, and a string that needs more is
refused unchecked. A pattern schema the compiled validator cannot read is refused for every
call (fail closed) rather than handed to ``re``.

Cost. Whatever the schema, the work per call is bounded before any of it starts: callers
refuse arguments nested deeper than ``MAX_ARGUMENT_DEPTH`` (``residency._core._tools``), with
more than ``MAX_ARGUMENT_VALUES`` values, or larger than ``MAX_ARGUMENT_BYTES`` (see
``measure_arguments``), and ``uniqueItems`` is checked in O(n) instead of the reference's O(n^2)
for unsortable items.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import jsonschema
import jsonschema_rs
from jsonschema.exceptions import ValidationError, best_match

__all__ = [
    "MAX_ARGUMENT_BYTES",
    "MAX_ARGUMENT_VALUES",
    "PATTERN_BACKTRACK_LIMIT",
    "PATTERN_KEYWORDS",
    "UNSAFE_KEYWORDS",
    "ArgumentShape",
    "ArgumentValidator",
    "measure_arguments",
    "oversize",
    "scan_arguments",
    "short_message",
    "unsafe_reason",
    "uses_patterns",
]

PATTERN_KEYWORDS = frozenset({"pattern", "patternProperties"})
"""Keywords holding regular expressions: their schemas are judged by the compiled validator alone."""

UNSAFE_KEYWORDS = frozenset({*PATTERN_KEYWORDS, "multipleOf", "$dynamicRef", "$recursiveRef"})
"""Keywords whose meaning differs between the two validators: no compiled-first path for them."""

MAX_ARGUMENT_BYTES = 1 << 20
"""Largest call arguments accepted: 1 MiB of compact UTF-8 JSON. A model writes far less in one
call (a 128k-token output is about 0.5 MB); the HTTP transport refuses bodies over 4 MiB."""

MAX_ARGUMENT_VALUES = 10_000
"""Most values call arguments may hold: each object member and each array item counts one.
Checking 10,000 values against a schema costs milliseconds, the reference ~0.1 s at worst."""

PATTERN_BACKTRACK_LIMIT = 10_000
"""Backtracking steps a pattern with look-around or back-references may take on one string.
Real patterns take a handful; a string that needs more is refused unchecked."""

# Keywords whose value maps names to schemas: the names are not keywords.
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_EXACT = 2**53
_MESSAGE_CHARS = 500


def _find(schema: object, keywords: frozenset[str], *, numbers: bool) -> str | None:
    """The first reason found in ``schema``: a keyword of ``keywords`` or (``numbers``) an inexact number."""
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if numbers and isinstance(node, (int, float)) and not isinstance(node, bool):
            if not math.isfinite(node) or abs(node) > _EXACT:
                return f"the number {node!r} is not exact as a double (beyond 2**53 or not finite)"
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            if key in keywords:
                return f"it uses {key!r}"
            if key in _NAMED_SCHEMAS and isinstance(value, Mapping):
                stack.extend(value.values())
            elif key == "dependencies" and isinstance(value, Mapping):
                stack.extend(v for v in value.values() if isinstance(v, Mapping))
            else:
                stack.append(value)
    return None


def unsafe_reason(schema: object) -> str | None:
    """Why the compiled validator must not answer first for ``schema`` (None: it may).

    Conservative: anything that might be a keyword is treated as one, also inside data such as
    ``enum`` or ``default`` (a ``$ref`` may point there). Iterative, so a deeply nested schema
    cannot exhaust the stack.
    """
    return _find(schema, UNSAFE_KEYWORDS, numbers=True)


def uses_patterns(schema: object) -> bool:
    """Whether ``schema`` may hold a regular expression (read as conservatively as ``unsafe_reason``)."""
    return _find(schema, PATTERN_KEYWORDS, numbers=False) is not None


class ArgumentShape(NamedTuple):
    """What ``measure_arguments`` found.

    Attributes:
        depth: how deeply the arguments nest (``limit + 1`` once past the depth limit).
        values: object members plus array items (``limit + 1`` once past the value limit).
        chars: characters of every string and object key.
        plain: plain JSON that the compiled validator reads as the reference does.
    """

    depth: int
    values: int
    chars: int
    plain: bool


def measure_arguments(obj: object, depth_limit: int, value_limit: int = 1 << 62) -> ArgumentShape:
    """Depth, value count, string size and plainness of ``obj``, in one pass.

    Plain: dicts with string keys, lists, strings, booleans, None, integers within 2**53 and
    finite floats. Counting stops as soon as a limit is passed, so the cost is bounded by the
    limits, not by the payload. Iterative, so a hostile payload cannot exhaust the stack.
    """
    deepest = values = chars = 0
    plain = True
    stack: list[tuple[object, int]] = [(obj, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()  # type: ignore[attr-defined]
            for k in item:  # type: ignore[attr-defined]
                if type(k) is str:
                    chars += len(k)
                else:
                    plain = False
        elif kind is list:
            children = item
        elif kind is str:
            chars += len(item)  # type: ignore[arg-type]
            continue
        elif kind is bool or item is None:
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
            if deepest > depth_limit:
                break
        values += len(children)
        if values > value_limit:
            break
        for child in children:
            push((child, depth))
    return ArgumentShape(deepest, values, chars, plain)


def scan_arguments(obj: object, limit: int) -> tuple[int, bool]:
    """How deeply ``obj`` nests, and whether it is plain JSON (see ``measure_arguments``).

    Counting stops past ``limit`` (the depth returned is then ``limit + 1``).
    """
    shape = measure_arguments(obj, limit)
    return shape.depth, shape.plain


def oversize(obj: object, shape: ArgumentShape) -> int | None:
    """The size of ``obj`` in bytes of compact UTF-8 JSON when over ``MAX_ARGUMENT_BYTES``, else None.

    None also for what is not JSON (the caller refuses that on its own terms). ``shape`` (from
    ``measure_arguments``) usually proves plain arguments small without encoding them: a
    character takes at most 6 bytes in JSON (``\\uXXXX``), and a plain value at most 32 with
    its punctuation, outside its strings (a float's repr has at most 24 characters).
    """
    if shape.plain and 6 * shape.chars + 32 * (shape.values + 1) <= MAX_ARGUMENT_BYTES:
        return None
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    # Characters never outnumber bytes, so most texts are judged without encoding them.
    if len(text) > MAX_ARGUMENT_BYTES:
        return len(text)
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > MAX_ARGUMENT_BYTES else None


# -- the reference, with uniqueItems in linear time --------------------------------------------


_UNKNOWN = object()


def _identity(value: object) -> object:
    """A hashable key, equal for JSON-Schema-equal values (``1 == 1.0``, ``true != 1``).

    ``_UNKNOWN`` for what is not plain JSON (the stock check judges those).
    """
    if isinstance(value, bool):
        return (bool, value)
    if value is None or isinstance(value, (str, int, float)):
        return value
    if type(value) is list:
        items = tuple(_identity(v) for v in value)
        return _UNKNOWN if _UNKNOWN in items else (list, items)
    if type(value) is dict:
        members = []
        for k, v in value.items():
            i = _identity(v)
            if type(k) is not str or i is _UNKNOWN:
                return _UNKNOWN
            members.append((k, i))
        return (dict, frozenset(members))
    return _UNKNOWN


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """``uniqueItems`` by hashing: the reference compares unsortable items pairwise (O(n^2))."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[object] = set()
    for item in instance:
        key = _identity(item)
        if key is _UNKNOWN:
            yield from _STOCK_UNIQUE_ITEMS(validator, unique, instance, schema)
            return
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


_STOCK_UNIQUE_ITEMS: Any = jsonschema.Draft202012Validator.VALIDATORS["uniqueItems"]


@functools.cache
def _reference_class(cls: Any) -> Any:
    if "uniqueItems" not in cls.VALIDATORS:
        return cls
    return jsonschema.validators.extend(cls, {"uniqueItems": _unique_items})


# -- the compiled validator as the sole judge of patterns --------------------------------------


def _pattern_judge(schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The compiled validator for a schema with patterns, or why there is none."""
    data = dict(schema)
    try:
        # Every pattern compiles on the linear-time engine: no backtracking can happen.
        return jsonschema_rs.validator_for(
            data, validate_formats=False, offline=True, pattern_options=jsonschema_rs.RegexOptions()
        ), None
    except Exception:
        pass
    try:
        return jsonschema_rs.validator_for(
            data,
            validate_formats=False,
            offline=True,
            pattern_options=jsonschema_rs.FancyRegexOptions(backtrack_limit=PATTERN_BACKTRACK_LIMIT),
        ), None
    except Exception as exc:
        return None, (
            "its patterns cannot be checked safely: the compiled validator refused the schema "
            f"({str(exc).splitlines()[0]})"
        )


def _from_compiled(error: Any) -> ValidationError:
    """A reference-style error from a compiled one (the fields ``residency._runtime._tools`` reads)."""
    kind = error.kind
    name = getattr(kind, "name", "") or type(kind).__name__
    message = str(error.message)
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.BacktrackLimitExceeded):
        name = "pattern"
        message = (
            f"the value needs more than {PATTERN_BACKTRACK_LIMIT:,} backtracking steps to check against "
            "its pattern; refused unchecked"
        )
    value: Any = [kind.property] if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required) else None
    return ValidationError(
        message,
        validator=name,
        path=list(error.instance_path),
        instance=error.instance,
        validator_value=value,
    )


class ArgumentValidator:
    """Judges call arguments against one input schema (see the module docstring).

    Args:
        schema: the tool's full input schema, already checked against its metaschema.
    """

    # __weakref__: one validator per distinct schema is shared by every session of the process.
    __slots__ = ("__weakref__", "_compiled", "_patterns", "_reference", "why_reference", "why_unchecked")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        # An unknown $schema is read as the latest dialect (what jsonschema does, minus its warning).
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        self._reference = _reference_class(cls)(schema)
        self._compiled: Any = None
        self._patterns: Any = None
        self.why_reference: str | None = None
        """Why the compiled validator does not answer first (None: it does)."""
        self.why_unchecked: str | None = None
        """Why no call can be checked, so every call is refused (None: calls are checked)."""
        reason = unsafe_reason(schema)
        if reason is not None and uses_patterns(schema):
            self._patterns, self.why_unchecked = _pattern_judge(schema)
        elif reason is None:
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

    @property
    def patterns(self) -> bool:
        """Whether the schema has patterns, so the compiled validator alone judges it."""
        return self._patterns is not None or self.why_unchecked is not None

    def first_error(self, arguments: object, *, plain: bool) -> ValidationError | None:
        """The best error for ``arguments``, or None when they are valid.

        Args:
            arguments: the call's arguments, within the limits of the module docstring.
            plain: ``measure_arguments`` found them plain JSON; otherwise only the reference
                judges (or, for a schema with patterns, the compiled validator on its own terms).
        """
        if self.why_unchecked is not None:
            return ValidationError(self.why_unchecked, validator="pattern")
        if self._patterns is not None:
            try:
                for found in self._patterns.iter_errors(arguments):
                    return _from_compiled(found)
            except Exception as exc:  # a non-string key or a lone surrogate: not JSON it can read
                return ValidationError(f"the arguments are not JSON text: {str(exc).splitlines()[0]}")
            return None
        compiled = self._compiled
        if plain and compiled is not None:
            try:
                if compiled.is_valid(arguments):
                    return None
            except Exception:  # e.g. a lone surrogate in a string: the reference judges
                pass
        error: ValidationError | None = best_match(self._reference.iter_errors(arguments))
        return error


def short_message(message: str) -> str:
    """``message`` cut to a readable length: a reference message may quote the whole value."""
    if len(message) <= _MESSAGE_CHARS:
        return message
    return message[: _MESSAGE_CHARS - 20] + f"... ({len(message):,} characters)"
