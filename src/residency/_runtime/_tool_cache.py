"""Tool definitions shared by every session of the process.

Theory of operation
-------------------
A gateway opens one session per client and every one registers the same upstream tools; an
embedded host may open many sessions over one catalog. Parsing, checking, minifying and counting
a definition is the costly part of registering it (milliseconds a tool), and the result depends
only on the definition and the minify function. So it is done once per process and the result,
a frozen ``ToolSpec``, is shared: a session holds its states and its own records, plus references.

Two maps find a spec, both keyed with the minify function (what a tool is shown as depends on it):

* by the definition's hash (``definition_hash``: sha256 of its canonical JSON): replay and
  checkpoint restore, which verify what they read against that hash;
* by a digest of the raw definition's ``marshal`` encoding: ``register_tools``' fast path,
  cheaper than a JSON encoding. ``marshal`` takes only the exact builtin types (a subclass, or
  anything else, is refused and takes the slow path) and its bytes decode to one object graph,
  so equal bytes mean an equal definition with equal types (``1``, ``1.0`` and ``true``
  differ), which ``parse_tool`` turns into the same copy. Format version 0: later versions
  encode an object seen twice, or an interned string, by reference (the bytes then depend on
  reference counts and interning), so an equal definition built another way, such as a copy
  parsed again from the same JSON, would miss. A definition is entered here only after it
  passed every check ``register_tools`` makes (depth, shape, JSON Schema, minify), so a hit
  means those checks passed for that very definition.

Both hold their values weakly: a spec lives as long as a session holds it, or while it is one
of the last ``SPECS_KEPT`` specs made (so a gateway whose sessions all closed does not pay for
its catalog again when the next client comes), and a long-running process forgets definitions
nobody uses any more. No bound thrashes on a large catalog: a spec in use is never dropped.
Compiled argument validators are shared the same way, by definition hash, and the verdict of
the JSON Schema metaschema check (about 1.5 ms a schema, the bulk of a gateway's startup) is
kept per distinct schema (``schema_problem``), for far more schemas than a large catalog has.

A shared spec is read-only by contract (``ToolSpec.definition`` and ``ToolSpec.shown`` are the
same objects in every session): the session API hands out copies where a caller may change them
(``reexpand``).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError as JSONSchemaError

from residency._core._minify import minify_tool
from residency._core._tools import (
    JSONObject,
    ToolSpec,
    canonical_json,
    definition_hash,
    is_mutation,
    parse_tool,
)
from residency._core._validation import ArgumentValidator
from residency._errors import SchemaError
from residency._runtime._inputs import check_definition_depth
from residency._tokens import count_tokens, tokenizer_name

__all__ = [
    "SCHEMA_CHECKS_KEPT",
    "SPECS_KEPT",
    "Minify",
    "SpecSource",
    "checked_spec",
    "checked_tool",
    "known_spec",
    "metaschema_problem",
    "remember_checked",
    "schema_problem",
    "shared_spec",
    "shared_validator",
]

Minify = Callable[[JSONObject], JSONObject]

_lock = threading.Lock()
_by_hash: weakref.WeakValueDictionary[tuple[Minify, str], ToolSpec] = weakref.WeakValueDictionary()
_by_raw: weakref.WeakValueDictionary[tuple[Minify, bytes], ToolSpec] = weakref.WeakValueDictionary()
_validators: weakref.WeakValueDictionary[str, ArgumentValidator] = weakref.WeakValueDictionary()

SPECS_KEPT = 1 << 14
"""Specs kept alive after the last session holding them let go (the most recently made)."""
_recent: deque[ToolSpec] = deque(maxlen=SPECS_KEPT)

SCHEMA_CHECKS_KEPT = 1 << 16
"""Distinct input schemas whose metaschema verdict is kept (a digest and a short text each)."""
_schema_checks: OrderedDict[bytes, str | None] = OrderedDict()


def _raw_key(raw: Any) -> bytes | None:
    """A digest of ``raw``'s marshal encoding, or None if it has no plain one (slow path)."""
    try:
        data = marshal.dumps(raw, 0)  # version 0: the bytes depend on the content alone
    except (ValueError, RecursionError):  # not exact builtin types, or nested too deep
        return None
    return hashlib.sha256(data).digest()


def known_spec(raw: object, minify: Minify) -> tuple[ToolSpec | None, bytes | None]:
    """The shared spec of a raw definition already checked in this process, and its key.

    Returns:
        ``(spec, key)``: ``spec`` is None when the definition was not seen (and ``key`` is None
        too when it has no plain encoding); pass ``key`` to ``remember_checked`` once the slow
        path has checked it.
    """
    key = _raw_key(raw)
    if key is None:
        return None, None
    return _by_raw.get((minify, key)), key


def remember_checked(key: bytes | None, spec: ToolSpec, minify: Minify) -> ToolSpec:
    """Record that the raw definition with key ``key`` passed every check as ``spec``."""
    if key is not None:
        with _lock:
            spec = _by_raw.setdefault((minify, key), spec)
    return spec


def checked_spec(tool: JSONObject, minify: Minify, *, digest: str | None = None) -> ToolSpec:
    """The shared spec of a parsed definition: made (minified and counted) on first use.

    Args:
        tool: the definition as ``parse_tool`` returns it; never changed afterwards.
        minify: what the session shows a resident tool as.
        digest: ``definition_hash(tool)`` when the caller has it.
    """
    digest = digest if digest is not None else definition_hash(tool)
    found = _by_hash.get((minify, digest))
    if found is not None:
        return found
    shown = minify(tool)
    spec = ToolSpec(tool["name"], tool, digest, is_mutation(tool), shown, count_tokens(shown))
    return _keep(minify, spec)


def _keep(minify: Minify, spec: ToolSpec) -> ToolSpec:
    """Enter a new spec in the hash map (the first one made wins a race) and keep it a while."""
    with _lock:
        found = _by_hash.setdefault((minify, spec.hash), spec)
        if found is spec:
            _recent.append(spec)
    return found


def shared_spec(
    name: str, definition: JSONObject, digest: str, minify: Minify, shown: JSONObject | None, tokens: int
) -> ToolSpec:
    """The spec for a definition read back from a checkpoint, shared when its hash verifies.

    ``shown`` and ``tokens`` are reused when given (the checkpoint's minifier and tokenizer are
    this session's); otherwise the definition is minified and counted again. A definition that
    is not its hash's gets a private spec, never shared: the restore's state check refuses it.
    """
    found = _by_hash.get((minify, digest))
    if found is not None and found.name == name and found.definition == definition:
        return found
    if definition_hash(definition) != digest or definition.get("name") != name:
        return ToolSpec(name, definition, digest, is_mutation(definition), dict(shown or {}), int(tokens))
    if shown is None or not isinstance(shown, Mapping):
        return checked_spec(definition, minify, digest=digest)
    return _keep(
        minify, ToolSpec(name, definition, digest, is_mutation(definition), dict(shown), int(tokens))
    )


def shared_validator(spec: ToolSpec) -> ArgumentValidator:
    """The compiled argument validator of a spec's input schema, shared by definition hash."""
    found = _validators.get(spec.hash)
    if found is not None:
        return found
    validator = ArgumentValidator(spec.input_schema)
    with _lock:
        return _validators.setdefault(spec.hash, validator)


def metaschema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema, checked now against its dialect's metaschema
    (an unknown ``$schema`` is read as the latest one); None if it is. No cache: that is
    ``schema_problem``'s, which every caller but a benchmark's baseline uses."""
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(
            schema
        )
    except JSONSchemaError as exc:
        return f"'{'/'.join(str(p) for p in exc.path)}': {exc.message}"
    return None


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (where, and what), or None if it is.

    Checked against the metaschema of its dialect (an unknown ``$schema`` is read as the latest
    one), once per distinct schema in the process: the verdict is kept under a digest of the
    schema's canonical JSON, for the last ``SCHEMA_CHECKS_KEPT`` distinct schemas.
    """
    text = canonical_json(schema)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    with _lock:
        if digest in _schema_checks:
            _schema_checks.move_to_end(digest)
            return _schema_checks[digest]
    problem = metaschema_problem(json.loads(text))
    with _lock:
        _schema_checks[digest] = problem
        while len(_schema_checks) > SCHEMA_CHECKS_KEPT:
            _schema_checks.popitem(last=False)
    return problem


class SpecSource:
    """One session's way from a definition to its shared spec.

    A pure function of the definition for a given minifier. ``ahead`` holds the specs
    ``register_tools`` just checked, so its own commit does not look them up again.
    """

    def __init__(self, minify: Minify) -> None:
        self.minify = minify
        self.ahead: dict[str, ToolSpec] = {}

    def spec(self, tool: JSONObject) -> ToolSpec:
        """The spec of a registered definition (``SessionState``'s ``spec_of``)."""
        spec = self.ahead.get(tool["name"])
        if spec is not None and spec.definition is tool:
            return spec
        # Replay (or another writer's entry): found by hash, or made once for the process.
        return checked_spec(tool, self.minify)

    @property
    def shown_by(self) -> str | None:
        """What makes the minified views and counts, for checkpoints; None: not nameable.

        What a tool is shown as depends on the session's minifier, which a checkpoint cannot
        name; views are kept only for the default one (and the same tokenizer).
        """
        return f"minify_tool/{tokenizer_name()}" if self.minify is minify_tool else None

    def restore(
        self, name: str, definition: JSONObject, digest: str, shown: JSONObject | None, tokens: int
    ) -> ToolSpec:
        """A tool read back from a checkpoint: verified by hash, and shared (``shared_spec``)."""
        return shared_spec(name, definition, digest, self.minify, shown, tokens)


def checked_tool(raw: object, where: str) -> JSONObject:
    """``raw`` parsed, once it passed the checks ``register_tools`` makes of a new definition.

    The one place a definition's depth, shape and JSON Schema validity are checked: sessions
    check here before they journal a tool, and the gateway before it offers one.

    Raises:
        InvalidInput: a malformed definition, or one nested too deep.
        SchemaError: an ``inputSchema`` that is not a valid JSON Schema.
    """
    check_definition_depth(raw, where)  # before anything recurses into it
    tool = parse_tool(raw, where=where)
    problem = schema_problem(tool["inputSchema"])
    if problem is not None:
        raise SchemaError(
            f"{where} ({tool['name']}): inputSchema is not a valid JSON Schema at {problem}",
            where=f"{where}.inputSchema",
        )
    return tool


def _sizes() -> dict[str, Any]:
    """How many entries each map holds (for tests)."""
    return {
        "by_hash": len(_by_hash),
        "by_raw": len(_by_raw),
        "validators": len(_validators),
        "schema_checks": len(_schema_checks),
    }
