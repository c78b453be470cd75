"""Request ids in flight per HTTP session: a request whose id collides with one in flight is refused.

Why. The SDK's streamable HTTP transport (mcp 2.3.0) keys each request's response stream by
``str(id)``: a request with id ``"5"`` that arrives while ``5`` is in flight in the same session
takes over the first one's stream, and the first request is never answered (its POST hangs).
The transport also keys its standalone GET stream as ``"_GET_stream"``, so a request with that
id steals the session's notifications. Its dispatcher keys requests by ``coerce_request_id``
(``"7"`` and ``7`` are one id for cancellation, as in the TypeScript SDK). JSON-RPC asks a client
for ids unique among its requests in flight; this holds it to that, in the SDK's own terms.

Rules (``RequestIds``, ASGI middleware around the SDK's app):

- Only POSTs to the MCP path of a handshake-era session are looked at: they carry an
  ``Mcp-Session-Id`` and no 2026-07-28 ``Mcp-Protocol-Version`` (2026-07-28 requests are one
  exchange each and cannot collide). Everything else passes untouched.
- Two ids collide when ``coerce_request_id`` makes them equal (``5``, ``"5"``, ``"05"``); that
  covers ``str(id)`` equality. ``"_GET_stream"`` always collides.
- A colliding request is not forwarded: it is answered 409 with a JSON-RPC error (``-32600``,
  ``data.reason`` ``request_id_in_flight``) under its own id, and the request in flight is
  answered as if the second had never come. An id is held from when its request is admitted
  until the app has answered it (its response, SSE stream included, is done).
- The body is read to find the id, at most ``max_body_bytes`` of it (a declared larger one is
  not read at all): a larger body passes unchecked, to the body limit that refuses it. Behind
  a middleware that has already read the body (``_http_guard.BoundedBody``) this is one
  ``receive``; the app then gets the same bytes as one message. The id is read from the JSON
  members at the body's two ends when that settles it (``request_id_of``), else by parsing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any

import mcp_types as types
import pydantic_core
from mcp.server.streamable_http import GET_STREAM_KEY, MCP_SESSION_ID_HEADER
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["IN_FLIGHT_REASON", "InFlightIds", "RequestIds", "collision_error", "request_id_of"]

IN_FLIGHT_REASON = "request_id_in_flight"
"""``data.reason`` of the JSON-RPC error that refuses a colliding request."""

_SESSION = MCP_SESSION_ID_HEADER.encode()
_VERSION = MCP_PROTOCOL_VERSION_HEADER.encode()
_LENGTH = b"content-length"
_HANDSHAKE = frozenset(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)


class InFlightIds:
    """Which request ids each session has in flight (sans-I/O: the caller admits and releases).

    Keys are ``coerce_request_id`` of the ids; each maps to the id as its request gave it.
    A session with nothing in flight holds nothing.

    Args:
        reserved: ids (in their ``str`` form) that are always in use, e.g. a transport's own
            stream key.
    """

    def __init__(self, reserved: Collection[str] = ()) -> None:
        self._held: dict[str, dict[types.RequestId, types.RequestId]] = {}
        self._reserved = frozenset(reserved)

    def admit(self, session: str, request_id: types.RequestId) -> types.RequestId | None:
        """Hold ``request_id`` for ``session``; None when admitted, else the id in flight it
        collides with (nothing changes then)."""
        if str(request_id) in self._reserved:
            return request_id
        key = coerce_request_id(request_id)
        held = self._held.setdefault(session, {})
        if key in held:
            return held[key]
        held[key] = request_id
        return None

    def release(self, session: str, request_id: types.RequestId) -> None:
        """Forget an admitted ``request_id`` of ``session`` (its request was answered)."""
        held = self._held.get(session)
        if held is None:
            return
        held.pop(coerce_request_id(request_id), None)
        if not held:
            del self._held[session]

    def in_flight(self, session: str) -> int:
        """How many requests of ``session`` are held."""
        return len(self._held.get(session, ()))

    def __len__(self) -> int:
        """How many sessions hold a request."""
        return len(self._held)


def collision_error(request_id: types.RequestId, held: types.RequestId) -> types.JSONRPCError:
    """The JSON-RPC error that answers ``request_id``, refused because ``held`` is in flight."""
    if str(request_id) == GET_STREAM_KEY:
        text = (
            f"request id {request_id!r} is reserved by the transport for the session's stream; use another id"
        )
    else:
        text = (
            f"request id {request_id!r} is in use: request {held!r} of this session has not been "
            f"answered yet. Give each request in flight an id of its own (ids that read as the "
            f'same number, like 5 and "5", are one id); this one was not run'
        )
    data = {"reason": IN_FLIGHT_REASON, "id": request_id, "in_flight": held}
    error = types.ErrorData(code=types.INVALID_REQUEST, message=text, data=data)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


# -- finding a request's id in its body ---------------------------------------------------------

_WS = rb"[ \t\n\r]*"
_STRING = rb'"(?:[^"\\]|\\.)*"'
_SCALAR = rb'(?:"(?:[^"\\]|\\.)*"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)'
_OPEN = re.compile(_WS + rb"\{")
_MEMBER = re.compile(
    _WS + rb"(" + _STRING + rb")" + _WS + rb":" + _WS + rb"(" + _SCALAR + rb")" + _WS + rb"([,}])"
)
_SPACE = frozenset(b" \t\n\r")
_BARE = frozenset(b"0123456789+-.eEtrufalsn")
"""The bytes of a number, ``true``, ``false`` or ``null``."""
_MEMBERS = 16
"""Members read at each end of a body before parsing it instead."""


def _head(body: bytes) -> tuple[dict[str, Any], bool]:
    """The object's first members while their values are scalars, and whether that is all of it.

    Read left to right from the opening brace, each match where the last one ended: a
    tokenization, exact for valid JSON.
    """
    opened = _OPEN.match(body)
    if opened is None:
        return {}, False
    found: dict[str, Any] = {}
    at = opened.end()
    for _ in range(_MEMBERS):
        member = _MEMBER.match(body, at)
        if member is None:
            break
        found[json.loads(member[1])] = json.loads(member[2])
        at = member.end()
        if member[3] == b"}":
            return found, True
    return found, False


def _left_of_space(body: bytes, i: int) -> int:
    while i >= 0 and body[i] in _SPACE:
        i -= 1
    return i


def _string_start(body: bytes, close: int) -> int:
    """Where the string whose closing quote is at ``close`` opens (-1: nowhere).

    Inside a string every quote is escaped, by an odd run of backslashes before it; so the
    nearest quote to the left that is not is the opening one.
    """
    quote = body.rfind(b'"', 0, close)
    while quote > 0:
        slashes = 0
        while quote - slashes - 1 >= 0 and body[quote - slashes - 1] == 0x5C:
            slashes += 1
        if slashes % 2 == 0:
            return quote
        quote = body.rfind(b'"', 0, quote)
    return quote


def _tail(body: bytes) -> dict[str, Any]:
    """The object's last members while their values are scalars, read right to left from its
    closing brace (exact for valid JSON, see ``_string_start``)."""
    found: dict[str, Any] = {}
    i = _left_of_space(body, len(body) - 1)
    if i < 0 or body[i] != 0x7D:  # }
        return found
    i -= 1
    for _ in range(_MEMBERS):
        i = _left_of_space(body, i)
        if i < 0:
            break
        if body[i] == 0x22:  # a string value
            start = _string_start(body, i)
        else:
            start = i
            while start >= 0 and body[start] in _BARE:
                start -= 1
            start += 1
        if start < 0 or start > i:
            break  # an object or array: the members left of it are not read from here
        value = body[start : i + 1]
        i = _left_of_space(body, start - 1)
        if i < 1 or body[i] != 0x3A:  # :
            break
        i = _left_of_space(body, i - 1)
        if i < 0 or body[i] != 0x22:
            break
        key_start = _string_start(body, i)
        if key_start < 0:
            break
        found.setdefault(json.loads(body[key_start : i + 1]), json.loads(value))  # the later one wins
        i = _left_of_space(body, key_start - 1)
        if i < 0 or body[i] != 0x2C:  # a comma: another member; a brace: the object's start
            break
        i -= 1
    return found


def _ends(body: bytes) -> dict[str, Any] | None:
    """The top-level members that settle what ``body`` is, read at its two ends, or None.

    Exact for valid JSON, and a later member wins, as in a parser. Only a body holding two
    ``"id"`` members, one of them in its middle, could be read otherwise than a parser reads it.
    """
    head, complete = _head(body)
    if complete or ("method" in head and "id" in head):
        return head
    members = {**head, **_tail(body)}
    return members if "method" in members and "id" in members else None


def request_id_of(body: bytes) -> types.RequestId | None:
    """The id of the JSON-RPC request ``body`` holds; None for anything else.

    Anything else: a notification, a response, a batch, a malformed body, an id that is not a
    string or an integer (the SDK does not take those for a request's).
    """
    try:
        members = _ends(body)
    except ValueError:  # a token that is not valid JSON text after all
        members = None
    if members is None:
        try:
            parsed = pydantic_core.from_json(body)
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        members = parsed
    if "method" not in members:
        return None
    return as_request_id(members.get("id"))


# -- the middleware -----------------------------------------------------------------------------


class RequestIds:
    """ASGI middleware: refuse a request whose id collides with one in flight in its session.

    See the module docstring for what is looked at and how the body is read. Self-contained:
    put it innermost, around the SDK's app and inside any middleware that bounds or reads the
    body, so it peeks bytes already read.

    Args:
        app: the app serving the MCP path (the SDK's streamable HTTP app).
        path: the MCP endpoint's path.
        max_body_bytes: the most body bytes read to find an id; a larger body passes unchecked.
    """

    def __init__(
        self, app: ASGIApp, *, path: str = "/mcp", max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE
    ) -> None:
        self._app = app
        self._path = path.rstrip("/")
        self._max = max_body_bytes
        self.ids = InFlightIds(reserved=(GET_STREAM_KEY,))  # the session's standalone stream

    def _session(self, scope: Scope) -> str | None:
        """The ``Mcp-Session-Id`` of a handshake-era POST to the MCP path, else None."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            return None
        if str(scope.get("path", "")).rstrip("/") != self._path:
            return None
        session: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == _SESSION:
                session = value
            elif name == _VERSION and value not in _HANDSHAKE:
                return None  # 2026-07-28 (or unknown): one exchange per request, its own stream
        return session.decode("latin-1") if session else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = self._session(scope)
        if session is None:
            await self._app(scope, receive, send)
            return
        messages, body = await self._peek(scope, receive)
        replay = _replaying(messages, receive)
        request_id = request_id_of(body) if body is not None else None
        if request_id is None:
            await self._app(scope, replay, send)
            return
        held = self.ids.admit(session, request_id)
        if held is not None:
            await _refuse(send, collision_error(request_id, held), session)
            return
        try:
            await self._app(scope, replay, send)
        finally:
            self.ids.release(session, request_id)

    async def _peek(self, scope: Scope, receive: Receive) -> tuple[list[Message], bytes | None]:
        """The messages received (to give the app) and the whole body, or None if not read."""
        if _declared(scope.get("headers", ())) > self._max:
            return [], None
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages, None
            size += len(message.get("body", b""))
            if size > self._max:
                return messages, None
            if not message.get("more_body", False):
                break
        if len(messages) == 1:
            return messages, bytes(messages[0].get("body", b""))
        body = b"".join(m.get("body", b"") for m in messages)
        return [{"type": "http.request", "body": body, "more_body": False}], body


def _declared(headers: Any) -> int:
    """The body size a request declares (-1: none, or not a number)."""
    for name, value in headers:
        if name == _LENGTH:
            try:
                return int(value)
            except ValueError:
                return -1
    return -1


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` first, then what the connection sends next."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _refuse(send: Send, error: types.JSONRPCError, session: str) -> None:
    body = error.model_dump_json(by_alias=True, exclude_none=True).encode()
    headers: Mapping[bytes, bytes] = {
        b"content-type": b"application/json",
        b"content-length": str(len(body)).encode(),
        _SESSION: session.encode("latin-1"),
    }
    await send({"type": "http.response.start", "status": 409, "headers": list(headers.items())})
    await send({"type": "http.response.body", "body": body})
