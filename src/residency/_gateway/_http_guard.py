"""The HTTP front's guards: what every request passes before MCP sees it, and the quiet logging
of what they refuse.

Order (outermost first): ``Admission`` (the in-flight request caps, then the ``Host`` and
``Origin`` check), the bearer token (``_http.BearerToken``, when one is set), then
``BoundedBody`` (the body, read as it streams in: the size cap, the body budget, the body
timeout). So no byte of a body is read, or held, for a request that is not admitted and
authorized. A refusal carries ``Connection: close``: the rest of an unread body is never read.

Refusals, timeouts, clients that disconnect mid-body and failed accepts are logged by ``Front``
through a ``Tally``: the first at once, repeats as one count per interval, none with a
traceback. The connection caps and the timeouts of a connection live in ``_http_protocol``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import math
import resource
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import anyio
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from residency._gateway._http_limits import EVENTS, Caps, Event, HTTPSettings, Ledger, Tally

__all__ = ["FD_TARGET", "Admission", "BoundedBody", "Front", "client_of", "raise_fd_limit", "refuse"]

logger = logging.getLogger("residency.gateway.http")

FD_TARGET = 1 << 16
"""The soft file-descriptor limit the gateway raises itself to, if its hard limit allows."""

RETRY_AFTER = b"1"
"""Seconds a client told 503 waits before it retries (``Retry-After``)."""

_Outcome = Literal["done", "too large", "over budget", "timed out", "disconnected"]
"""How reading a request's body ended."""

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]
"""An event loop's exception handler (``loop.set_exception_handler``)."""

_ACCEPT_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_UVICORN_BAD_REQUESTS = ("Invalid HTTP request received.", "Unsupported upgrade request.")
"""uvicorn's warnings (``uvicorn.error``) for a request it answers 400 or cannot upgrade: one
line per request, which a client could send at will."""
_UVICORN_NO_WEBSOCKETS = "No supported WebSocket library detected"


def raise_fd_limit(target: int = FD_TARGET) -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` toward ``target``, as far as the hard limit allows.

    Returns:
        The soft limit now in force; None when there is none (unlimited).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # e.g. macOS caps it below an unlimited hard limit
            logger.debug("could not raise the file-descriptor limit from %d to %d", soft, wanted)
    return None if soft == resource.RLIM_INFINITY else soft


def client_of(scope: Scope) -> str:
    """The client's address: what the per-client caps count by (empty when unknown)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


class Front:
    """The HTTP front's shared state: its settings, caps, what clients hold, and the logging.

    Args:
        settings: the ``residency.http`` settings.
        caps: the caps in force (``Caps.under``); None: the settings' own, with no descriptor limit.
    """

    def __init__(self, settings: HTTPSettings | None = None, caps: Caps | None = None) -> None:
        self.settings = settings if settings is not None else HTTPSettings()
        self.caps = caps if caps is not None else Caps.under(self.settings, None)
        self.ledger = Ledger.of(self.caps)
        self._tally = Tally()
        self._flush: asyncio.TimerHandle | None = None

    def note(self, event: Event, detail: str) -> None:
        """Log ``event`` (the first of a quiet spell at once; repeats as a count per interval)."""
        loop = asyncio.get_running_loop()
        if self._tally.note(event, loop.time()):
            level, first, _ = EVENTS[event]
            logger.log(level, first.format(detail=detail))
        self._schedule(loop)

    def close(self) -> None:
        """Log the repeats still counted and stop the interval timer."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._log(self._tally.due(math.inf))
        self._tally = Tally(self._tally.interval)  # every kind quiet again

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        at = self._tally.next_due()
        if self._flush is None and at is not None:
            self._flush = loop.call_at(at, self._flushed, loop)

    def _flushed(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush = None
        self._log(self._tally.due(loop.time()))
        self._schedule(loop)

    def _log(self, repeats: Iterable[tuple[Event, int]]) -> None:
        for event, count in repeats:
            level, _, line = EVENTS[event]
            logger.log(level, line.format(count=count, interval=self._tally.interval))

    @contextlib.contextmanager
    def counting(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """While serving on ``loop``: failed accepts and uvicorn's per-request warnings are
        counted (``exception_handler``, ``log_filter``) instead of logged each; at the end the
        counts left are logged (``close``)."""
        previous = loop.get_exception_handler()
        handler = self.exception_handler(previous)
        loop.set_exception_handler(handler)
        counted = self.log_filter()
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addFilter(counted)
        try:
            yield
        finally:
            uvicorn_log.removeFilter(counted)
            if loop.get_exception_handler() is handler:  # else another server set its own since
                loop.set_exception_handler(previous)
            self.close()

    def exception_handler(self, previous: ExceptionHandler | None) -> ExceptionHandler:
        """An event-loop exception handler that counts failed accepts (``EMFILE`` and the like:
        asyncio logs each with a traceback, many times a second) and hands the rest on to
        ``previous`` (or the loop's default)."""

        def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS and "socket" in context:
                self.note(
                    Event.ACCEPT_FAILED, f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
                )
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        return handle

    def log_filter(self) -> logging.Filter:
        """A filter for ``uvicorn.error`` that counts its per-request warnings instead."""
        front = self

        class _Counted(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                message = record.msg if isinstance(record.msg, str) else ""
                if message in _UVICORN_BAD_REQUESTS:
                    front.note(Event.BAD_REQUEST, message.rstrip("."))
                    return False
                return not message.startswith(_UVICORN_NO_WEBSOCKETS)

        return _Counted()


async def refuse(send: Send, status: int, message: str, *, retry_after: bool = False) -> None:
    """Answer ``status`` with a JSON error and close the connection (an unread body stays unread)."""
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after:
        headers.append((b"retry-after", RETRY_AFTER))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Admission:
    """ASGI middleware, outermost: the in-flight request caps, then the ``Host``/``Origin`` check.

    Both run on the headers alone. The SDK checks ``Host`` too, but only after it has read the
    body; a request refused here has none of it read.
    """

    def __init__(self, app: ASGIApp, front: Front, security: TransportSecuritySettings) -> None:
        self._app = app
        self._front = front
        self._checks = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = client_of(scope)
        requests = self._front.ledger.requests
        if not requests.take(client):
            self._front.note(Event.REQUEST_REFUSED, f"a request from {client}")
            await refuse(send, 503, "too many requests in flight; retry later", retry_after=True)
            return
        try:
            refused = await self._checks.validate_request(Request(scope))
            if refused is not None:
                refused.headers["connection"] = "close"
                await refused(scope, receive, send)
                return
            await self._app(scope, receive, send)
        finally:
            requests.give(client)


def _declared_body(scope: Scope) -> int | None:
    """The body's length as ``Content-Length`` gives it; -1 for a chunked body; None for none.

    (The HTTP parser has already refused a malformed or conflicting length.)
    """
    length: int | None = None
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return -1
        if name == b"content-length":
            length = int(value)
    return length or None


class BoundedBody:
    """ASGI middleware, inside the token check: read a request's body before the app does, bounded.

    The body streams in up to ``max_body_bytes`` (past it: 413, declared or not), held against
    the body budget (a declared length is reserved at once, a chunked body as it arrives; past
    the budget: 503 with ``Retry-After``), within ``body_timeout`` (then 408). A client that
    disconnects mid-body is counted and forgotten: the app never sees its request. The budget
    is returned when the whole body is handed to the app, which gets it as one message.
    """

    def __init__(self, app: ASGIApp, front: Front) -> None:
        self._app = app
        self._front = front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared_body(scope) if scope["type"] == "http" else None
        if declared is None:
            await self._app(scope, receive, send)
            return
        settings = self._front.settings
        if declared > settings.max_body_bytes:
            await refuse(send, 413, f"request body over {settings.max_body_bytes} bytes")
            return
        client = client_of(scope)
        budget = self._front.ledger.body_bytes
        held = max(declared, 0)
        if held and not budget.take(client, held):
            self._front.note(Event.BODY_REFUSED, f"a request from {client}")
            await refuse(send, 503, "too many request bodies arriving at once; retry later", retry_after=True)
            return
        chunks: list[bytes] = []
        outcome = await self._read(receive, client, held, chunks)
        if outcome == "done":
            body = b"".join(chunks)
            chunks.clear()
            await self._app(scope, _replay(body, receive), send)
        elif outcome == "too large":
            await refuse(send, 413, f"request body over {settings.max_body_bytes} bytes")
        elif outcome == "over budget":
            self._front.note(Event.BODY_REFUSED, f"a request from {client}")
            await refuse(send, 503, "too many request bodies arriving at once; retry later", retry_after=True)
        elif outcome == "timed out":
            self._front.note(Event.BODY_TIMED_OUT, f"a request from {client}")
            await refuse(send, 408, f"the request body did not arrive within {settings.body_timeout:g} s")
        else:
            self._front.note(Event.DISCONNECTED_MID_BODY, f"a client at {client}")

    async def _read(self, receive: Receive, client: str, held: int, chunks: list[bytes]) -> _Outcome:
        """Receive the body into ``chunks`` and say how that ended; the budget ``held`` for it
        (and whatever a chunked body takes on the way) is returned in any case."""
        settings = self._front.settings
        budget = self._front.ledger.body_bytes
        size = 0
        try:
            with anyio.move_on_after(settings.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return "disconnected"
                    body: bytes = message.get("body", b"")
                    size += len(body)
                    if size > settings.max_body_bytes:
                        return "too large"
                    if size > held:  # a chunked body: held as it arrives
                        if not budget.take(client, size - held):
                            return "over budget"
                        held = size
                    if body:
                        chunks.append(body)
                    if not message.get("more_body", False):
                        return "done"
            return "timed out"
        finally:
            budget.give(client, held)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` whole, then whatever the connection sends next."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
