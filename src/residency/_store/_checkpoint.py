"""Checkpoint blobs: a session's state after journal entry ``seq``, and a decoder that trusts none.

A checkpoint lets a session reopen without replaying its whole journal: the session restores
the saved state and replays only the entries after ``seq``. It is derived data; the journal
stays the source of truth, and any doubt about a checkpoint means a full replay instead.

Format::

    b"residency-checkpoint\\n"  header (one line of JSON)  b"\\n"  payload (pickle protocol 5)

The header names the format version, the residency version that wrote it, the session id,
``seq``, the *layout* (the session's state attribute names, in order), and the payload's length
and CRC-32. The decoder checks all of them before the payload is unpickled, so a checkpoint
from another version, another session, another session class, or with damaged bytes is
rejected without reading the payload.

Trust model
-----------
A checkpoint lives in the same store as the journal and is trusted no more than the journal:
whoever can write the store file can already rewrite a session's history, so a checkpoint may
hold any state a journal could lead to. What it must never add is a way to run code. Unpickling
with ``pickle.loads`` would call whatever importable callable a blob names; the decoder here uses
an ``Unpickler`` whose ``find_class`` resolves only the record and enum classes listed in
``_ALLOWED`` (frozen dataclasses whose constructors only store their arguments, and enums) and
refuses every other name, builtins included. Containers and scalars (dict, list, tuple, set,
frozenset, str, bytes, int, float, bool, None) are pickle opcodes and need no lookup. A forged
blob can therefore at worst describe a wrong state, as a forged journal can; it cannot execute
code. The CRC-32 catches accidental damage, not forgery.

The encoder refuses to write what the decoder would refuse: any object of a class outside
``_ALLOWED`` (and the builtin containers and scalars) in the state raises ``StoreError``.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

from residency._core._events import Event, EventKind
from residency._core._lifecycle import SpanState, ToolState
from residency._core._spans import SpanRecord
from residency._core._tools import CallRecord
from residency._errors import StoreError

__all__ = ["FORMAT", "columns", "decode_checkpoint", "encode_checkpoint", "from_columns"]

FORMAT = 1
"""The checkpoint format this module writes and reads."""

_MAGIC = b"residency-checkpoint\n"
_ALLOWED: dict[tuple[str, str], type] = {
    (cls.__module__, cls.__qualname__): cls
    for cls in (Event, EventKind, SpanRecord, SpanState, ToolState, CallRecord)
}


# Frozen slotted dataclasses pickle by default through a ``__setstate__`` that looks up their
# fields once per object; rebuilding each from its constructor arguments is about twice as fast.
def _fields(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = [f.name for f in dataclasses.fields(cls)]
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda obj: (get(obj),)


_RECORDS = {cls: _fields(cls) for cls in _ALLOWED.values() if dataclasses.is_dataclass(cls)}
_PLAIN = frozenset({bool, type(None), int, float, str, bytes, dict, list, tuple, set, frozenset})
_ENUMS = frozenset(cls for cls in _ALLOWED.values() if issubclass(cls, enum.Enum))
_CLASSES = frozenset(_ALLOWED.values())


def _version() -> str:
    from residency import __version__

    return __version__


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        fields = _RECORDS.get(cls)
        if fields is not None:
            return cls, fields(obj)
        if cls in _PLAIN or cls in _ENUMS or (isinstance(obj, type) and obj in _CLASSES):
            return NotImplemented
        raise pickle.PicklingError(f"a checkpoint cannot hold a {cls.__module__}.{cls.__qualname__}")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        cls = _ALLOWED.get((module, name))
        if cls is None:
            raise pickle.UnpicklingError(f"a checkpoint may not name {module}.{name}")
        return cls


def columns(records: Iterable[Any], cls: type, shared: Iterable[str] = ()) -> list[list[Any]]:
    """Records of a dataclass as one list per field, for ``from_columns``.

    Many small records pickle and unpickle faster this way than one object at a time. Equal
    values of the ``shared`` fields become one object, which the pickle then writes once
    (e.g. the same tag set or event detail on thousands of records).
    """
    rows = list(records)
    out: list[list[Any]] = []
    for f in dataclasses.fields(cls):
        column = [getattr(r, f.name) for r in rows]
        if f.name in shared:
            one: dict[Any, Any] = {}
            column = [one.setdefault(v, v) for v in column]
        out.append(column)
    return out


def from_columns(cls: type, data: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """The records ``columns`` took apart, in order.

    Raises:
        StoreError: not one column per field of ``cls``.
    """
    if len(data) != len(dataclasses.fields(cls)) or len({len(c) for c in data}) > 1:
        raise StoreError(f"a checkpoint holds malformed {cls.__name__} columns")
    return map(cls, *data)


def encode_checkpoint(session_id: str, seq: int, layout: Sequence[str], state: Mapping[str, Any]) -> bytes:
    """The blob of a session's ``state`` (attribute name -> value, in ``layout`` order).

    Raises:
        StoreError: the state holds an object the decoder would refuse.
    """
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=5).dump([state[name] for name in layout])
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise StoreError(f"session {session_id!r}: cannot checkpoint its state: {exc}") from None
    payload = buffer.getvalue()
    header = {
        "format": FORMAT,
        "residency": _version(),
        "session": session_id,
        "seq": seq,
        "layout": list(layout),
        "length": len(payload),
        "crc32": zlib.crc32(payload),
    }
    return _MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n" + payload


def decode_checkpoint(blob: bytes, session_id: str, seq: int, layout: Sequence[str]) -> dict[str, Any] | None:
    """The state in a blob written by ``encode_checkpoint``, checked against what is expected.

    Args:
        blob: the stored checkpoint.
        session_id: the session it must belong to.
        seq: the journal entry the store says it covers.
        layout: the state attribute names the opening session has, in order.

    Returns:
        Attribute name -> value, in ``layout`` order; None for a checkpoint written by another
        residency version or in another format (routine after an upgrade).

    Raises:
        StoreError: the blob is damaged, of another session, ``seq`` or layout, or names a
            class outside the allowed set. The caller replays instead.
    """
    where = f"session {session_id!r}: checkpoint at entry {seq}"
    if not blob.startswith(_MAGIC):
        raise StoreError(f"{where} is not a residency checkpoint")
    end = blob.find(b"\n", len(_MAGIC))
    try:
        header = json.loads(blob[len(_MAGIC) : end]) if end > 0 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise StoreError(f"{where} has a damaged header")
    if header.get("format") != FORMAT or header.get("residency") != _version():
        return None
    if header.get("session") != session_id or header.get("seq") != seq:
        raise StoreError(
            f"{where} claims to be of session {header.get('session')!r} at {header.get('seq')!r}"
        )
    if header.get("layout") != list(layout):
        raise StoreError(f"{where} holds another session layout: {header.get('layout')!r}")
    payload = memoryview(blob)[end + 1 :]
    if len(payload) != header.get("length") or zlib.crc32(payload) != header.get("crc32"):
        raise StoreError(f"{where} is damaged (length or CRC-32 mismatch)")
    stream = io.BytesIO(blob)  # shares the bytes object's buffer: no copy
    stream.seek(end + 1)
    try:
        values = _Unpickler(stream).load()
    except Exception as exc:  # anything a damaged or forged payload can raise while decoding
        raise StoreError(f"{where} cannot be decoded: {type(exc).__name__}: {exc}") from None
    if not isinstance(values, list) or len(values) != len(layout):
        raise StoreError(f"{where} does not hold {len(layout)} state values")
    return dict(zip(layout, values, strict=True))
