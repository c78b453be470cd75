"""Checkpoint blobs: a session's state after journal entry ``seq``, and a decoder that trusts none.

A checkpoint lets a session reopen without replaying its whole journal: the session restores
the saved state and replays only the entries after ``seq``. It is derived data; the journal
stays the source of truth, and any doubt about a checkpoint means a full replay instead.

Format::

    b"residency-checkpoint\\n"  header (one line of JSON)  b"\\n"  payload (pickle protocol 5)

The header names the blob format (``FORMAT``), the residency version that wrote it, the session
id, ``seq``, the state format (``STATE_VERSION`` and the declared ``FIELDS`` of
``residency._core._state_format``), and the payload's length and CRC-32. The decoder checks all
of them before the payload is unpickled, so a checkpoint from another version, another session,
another state format, or with damaged bytes is rejected without reading the payload.

Trust model
-----------
A checkpoint lives in the same store as the journal and is trusted no more than the journal:
whoever can write the store file can already rewrite a session's history, so a checkpoint may
hold any state a journal could lead to. What it must never add is a way to run code. Unpickling
with ``pickle.loads`` would call whatever importable callable a blob names; the payload here is
plain data only (dict, list, tuple, set, frozenset, str, bytes, int, float, bool, None: pickle
opcodes that need no lookup), and the decoder's ``Unpickler`` refuses every name ``find_class``
is asked for, builtins included. A forged blob can therefore at worst describe a wrong state, as
a forged journal can; it cannot execute code. Such a state is refused by the session's invariant
check before it is used. The CRC-32 catches accidental damage, not forgery.

The encoder refuses to write what the decoder would refuse: any object other than those plain
types raises ``StoreError``.
"""

from __future__ import annotations

import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from residency._core._state_format import FIELDS, STATE_VERSION
from residency._errors import StoreError

__all__ = ["FORMAT", "decode_checkpoint", "encode_checkpoint"]

FORMAT = 2
"""The checkpoint format this module writes and reads (1: the attribute dump of older releases)."""

_MAGIC = b"residency-checkpoint\n"
_PLAIN = frozenset({bool, type(None), int, float, str, bytes, dict, list, tuple, set, frozenset})


def _version() -> str:
    from residency import __version__

    return __version__


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if cls in _PLAIN:
            return NotImplemented
        raise pickle.PicklingError(f"a checkpoint cannot hold a {cls.__module__}.{cls.__qualname__}")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a checkpoint may not name {module}.{name}")


def encode_checkpoint(session_id: str, seq: int, state: Mapping[str, Any]) -> bytes:
    """The blob of a session's state saved as plain data (``state_data``: one value per field).

    Raises:
        StoreError: the state holds an object the decoder would refuse, or not the declared fields.
    """
    if list(state) != list(FIELDS):
        raise StoreError(f"session {session_id!r}: a checkpoint holds the fields {list(FIELDS)}")
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=5).dump([state[name] for name in FIELDS])
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise StoreError(f"session {session_id!r}: cannot checkpoint its state: {exc}") from None
    payload = buffer.getvalue()
    header = {
        "format": FORMAT,
        "residency": _version(),
        "session": session_id,
        "seq": seq,
        "state": STATE_VERSION,
        "fields": list(FIELDS),
        "length": len(payload),
        "crc32": zlib.crc32(payload),
    }
    return _MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n" + payload


def decode_checkpoint(blob: bytes, session_id: str, seq: int) -> dict[str, Any] | None:
    """The state in a blob written by ``encode_checkpoint``, checked against what is expected.

    Args:
        blob: the stored checkpoint.
        session_id: the session it must belong to.
        seq: the journal entry the store says it covers.

    Returns:
        Field name -> plain value, in ``FIELDS`` order; None for a checkpoint written by another
        residency version or in another format (routine after an upgrade).

    Raises:
        StoreError: the blob is damaged, of another session, ``seq`` or fields, or names a
            class. The caller replays instead.
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
    if (
        header.get("format") != FORMAT
        or header.get("residency") != _version()
        or header.get("state") != STATE_VERSION
    ):
        return None
    if header.get("session") != session_id or header.get("seq") != seq:
        raise StoreError(
            f"{where} claims to be of session {header.get('session')!r} at {header.get('seq')!r}"
        )
    if header.get("fields") != list(FIELDS):
        raise StoreError(f"{where} holds other state fields: {header.get('fields')!r}")
    payload = memoryview(blob)[end + 1 :]
    if len(payload) != header.get("length") or zlib.crc32(payload) != header.get("crc32"):
        raise StoreError(f"{where} is damaged (length or CRC-32 mismatch)")
    stream = io.BytesIO(blob)  # shares the bytes object's buffer: no copy
    stream.seek(end + 1)
    try:
        values = _Unpickler(stream).load()
    except Exception as exc:  # anything a damaged or forged payload can raise while decoding
        raise StoreError(f"{where} cannot be decoded: {type(exc).__name__}: {exc}") from None
    if not isinstance(values, list) or len(values) != len(FIELDS):
        raise StoreError(f"{where} does not hold {len(FIELDS)} state values")
    return dict(zip(FIELDS, values, strict=True))
