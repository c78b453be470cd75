"""uvicorn's h11 protocol with the front's connection caps and timeouts.

uvicorn closes a connection on its own only after a response (its keep-alive timeout): one that
opens and never completes a request's headers stays open for good. Here a connection is always
in one of three states, each with its own bound:

- waiting for a request's headers (fresh, or a later request's first byte has come): closed
  after ``header_timeout``, counted as a header timeout;
- idle after a response: closed after ``idle_timeout``, quietly (uvicorn's keep-alive timer is
  replaced by this one);
- busy with a request: no timer here; its body has ``body_timeout`` (``BoundedBody``), its
  response is the app's.

A new connection past a connection cap is aborted as soon as it is made, before a byte is read,
and counted in the ``Front``'s tally instead of logged. h11 is pinned (uvicorn picks httptools
when it is installed): this is the protocol the caps and timers are written against.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any, ClassVar

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from residency._gateway._http_guard import Front
from residency._gateway._http_limits import Event

__all__ = ["GuardedH11Protocol", "guarded_protocol"]


class GuardedH11Protocol(H11Protocol):
    """One connection: counted against the connection caps, never left without a timer while
    no request is being served (see the module docstring)."""

    front: ClassVar[Front]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._timer: asyncio.TimerHandle | None = None
        self._awaiting_headers = False
        self._address = ""
        self._counted = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = self.client[0] if self.client else ""
        if not self.front.ledger.connections.take(self._address):
            self.front.note(Event.CONNECTION_REFUSED, self._address or "an unknown address")
            transport.abort()
            return
        self._counted = True
        self._start_timer(headers=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self._counted:
            self._counted = False
            self.front.ledger.connections.give(self._address)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None and not self._awaiting_headers:
            self._start_timer(headers=True)  # idle until now: this request's headers are due
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._unset_keepalive_if_required()  # replaced by the idle timer
        self._follow()

    def _busy(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _follow(self) -> None:
        """Stop the timer while a request is served; start one when none runs and none is."""
        if self.transport.is_closing() or self._busy():
            self._stop_timer()
        elif self._timer is None:
            self._start_timer(headers=bool(self.conn.trailing_data[0]))

    def _start_timer(self, *, headers: bool) -> None:
        self._stop_timer()
        settings = self.front.settings
        self._awaiting_headers = headers
        delay = settings.header_timeout if headers else settings.idle_timeout
        self._timer = self.loop.call_later(delay, self._expired)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing() or self._busy():
            return
        if self._awaiting_headers:
            self.front.note(Event.HEADERS_TIMED_OUT, self._address or "an unknown address")
        with suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()


def guarded_protocol(front: Front) -> type[GuardedH11Protocol]:
    """The protocol class to give uvicorn (``Config(http=...)``) for connections of ``front``."""

    class Guarded(GuardedH11Protocol):
        pass

    Guarded.front = front
    return Guarded
