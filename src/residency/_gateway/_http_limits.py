"""The HTTP front's limits as data: the settings, what they come to under a file-descriptor limit,
the counts held against them, and which refusals and timeouts to log.

Theory of operation. Everything here is pure and sync and reads no clock: the shell
(``_http_guard``, ``_http_protocol``) counts through a ``Ledger`` and passes ``now`` to a
``Tally``.

- A connection, a request in flight and the bytes of a request body being received are each
  held against a per-client cap (the client is the source address) and a total cap; a ``take``
  over either is refused and changes nothing, a ``give`` returns what was taken.
- The total connection cap leaves room under the process's file-descriptor limit for upstreams,
  stores and logs, and for one burst of accepted connections that have not been counted yet
  (``Caps.under``): the process does not run out of descriptors because of its clients.
- An event the shell logs (a refusal, a timeout, a failed accept) is logged at once the first
  time in a quiet spell; repeats are counted and logged as one line per interval, so a flood of
  them costs a line every ``interval`` seconds, not a line (or a traceback) each.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "EVENTS",
    "FD_RESERVE",
    "FD_RESERVE_PER_UPSTREAM",
    "LOG_INTERVAL",
    "Caps",
    "Event",
    "Gauge",
    "HTTPSettings",
    "Ledger",
    "Tally",
]

MiB = 1 << 20

FD_RESERVE = 64
"""File descriptors kept free of client connections: the store, logs, the listener, spares."""

FD_RESERVE_PER_UPSTREAM = 16
"""And per upstream: a stdio upstream's pipes, an HTTP upstream's connection pool."""

LOG_INTERVAL = 10.0
"""Seconds over which repeats of a logged event are counted into one line."""


class HTTPSettings(BaseModel):
    """Limits of the HTTP front (``residency.http``).

    Behind a load balancer or proxy every request comes from its address: raise the per-client
    limits to the totals there (or to what the balancer itself sends at most).

    Attributes:
        header_timeout: seconds a connection may take to send a request's headers, from when it
            opens or from the first byte of a later request on it; then it is closed.
        idle_timeout: seconds a connection may stay open with no request after a response.
        body_timeout: seconds a request's body may take to arrive in full; then the request is
            answered 408 and the connection closed.
        max_body_bytes: the largest request body; a larger one is answered 413 (declared or
            not) without being read further.
        body_budget_bytes: bytes of request bodies being received at once, over all clients; a
            body that would pass it is answered 503 with ``Retry-After``.
        body_budget_per_client_bytes: the same, for one client address.
        max_connections: open connections, over all clients; the gateway also keeps this under
            its file-descriptor limit. A new connection past it is closed at once.
        max_connections_per_client: open connections from one client address.
        max_requests: requests in flight (an open SSE stream counts), over all clients; a new
            one past it is answered 503 with ``Retry-After``.
        max_requests_per_client: requests in flight from one client address.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    header_timeout: float = Field(default=10.0, gt=0)
    idle_timeout: float = Field(default=30.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)
    max_body_bytes: int = Field(default=4 * MiB, ge=1024)
    body_budget_bytes: int = Field(default=16 * MiB, ge=1024)
    body_budget_per_client_bytes: int = Field(default=8 * MiB, ge=1024)
    max_connections: int = Field(default=1024, ge=1)
    max_connections_per_client: int = Field(default=256, ge=1)
    max_requests: int = Field(default=512, ge=1)
    max_requests_per_client: int = Field(default=128, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> HTTPSettings:
        pairs = (
            ("max_connections_per_client", "max_connections"),
            ("max_requests_per_client", "max_requests"),
            ("body_budget_per_client_bytes", "body_budget_bytes"),
            ("max_body_bytes", "body_budget_per_client_bytes"),
        )
        for small, large in pairs:
            if getattr(self, small) > getattr(self, large):
                raise ValueError(
                    f"{small} ({getattr(self, small)}) is above {large} ({getattr(self, large)}): "
                    f"raise {large} too, or lower {small}"
                )
        return self


@dataclass(frozen=True)
class Caps:
    """The limits as enforced: ``HTTPSettings`` after the file-descriptor limit had its say.

    ``backlog`` is the listen queue, which is also how many connections one accept pass may take
    before any is counted; ``clamped`` says the descriptor limit lowered ``connections``.
    """

    connections: int
    connections_per_client: int
    requests: int
    requests_per_client: int
    body_bytes: int
    body_bytes_per_client: int
    backlog: int
    clamped: bool = False

    @classmethod
    def under(cls, settings: HTTPSettings, fd_limit: int | None, upstreams: int = 0) -> Caps:
        """The caps for ``settings`` in a process allowed ``fd_limit`` descriptors (None: no limit).

        What the reserve leaves is split: up to half for counted connections, a quarter for
        each of two accept passes that may land before the first of their connections is
        counted. The per-client connection cap shrinks in proportion when the total does, so
        one client still cannot take every connection.
        """
        connections, per_client, backlog = settings.max_connections, settings.max_connections_per_client, 2048
        clamped = False
        if fd_limit is not None:
            spare = max(fd_limit - FD_RESERVE - FD_RESERVE_PER_UPSTREAM * upstreams, 8)
            if connections > spare // 2:
                connections, clamped = max(spare // 2, 2), True
                per_client = max(
                    1, settings.max_connections_per_client * connections // settings.max_connections
                )
            backlog = max(min(backlog, spare // 4), 2)
        return cls(
            connections=connections,
            connections_per_client=per_client,
            requests=settings.max_requests,
            requests_per_client=settings.max_requests_per_client,
            body_bytes=settings.body_budget_bytes,
            body_bytes_per_client=settings.body_budget_per_client_bytes,
            backlog=backlog,
            clamped=clamped,
        )


@dataclass
class Gauge:
    """An amount held per client and in total, each under a cap."""

    cap: int
    cap_per_client: int
    total: int = 0
    per_client: Counter[str] = field(default_factory=Counter)

    def take(self, client: str, amount: int = 1) -> bool:
        """Hold ``amount`` for ``client`` if both caps allow it; else change nothing."""
        if self.total + amount > self.cap or self.per_client[client] + amount > self.cap_per_client:
            return False
        if amount == 0:
            return True
        self.total += amount
        self.per_client[client] += amount
        return True

    def give(self, client: str, amount: int = 1) -> None:
        """Return ``amount`` that ``client`` held."""
        if amount == 0:
            return
        self.total -= amount
        left = self.per_client[client] - amount
        if left > 0:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)  # a client that holds nothing takes no memory


@dataclass
class Ledger:
    """What the clients hold now: connections, requests in flight, body bytes being received."""

    connections: Gauge
    requests: Gauge
    body_bytes: Gauge

    @classmethod
    def of(cls, caps: Caps) -> Ledger:
        return cls(
            Gauge(caps.connections, caps.connections_per_client),
            Gauge(caps.requests, caps.requests_per_client),
            Gauge(caps.body_bytes, caps.body_bytes_per_client),
        )


class Event(enum.Enum):
    """Something the front logs, counted by ``Tally``."""

    ACCEPT_FAILED = "accept_failed"
    CONNECTION_REFUSED = "connection_refused"
    REQUEST_REFUSED = "request_refused"
    BODY_REFUSED = "body_refused"
    HEADERS_TIMED_OUT = "headers_timed_out"
    BODY_TIMED_OUT = "body_timed_out"
    DISCONNECTED_MID_BODY = "disconnected_mid_body"
    BAD_REQUEST = "bad_request"


EVENTS: dict[Event, tuple[int, str, str]] = {
    Event.ACCEPT_FAILED: (
        logging.WARNING,
        "could not accept a connection ({detail}); accepting resumes within a second",
        "could not accept {count} more connections in the last {interval:.0f} s",
    ),
    Event.CONNECTION_REFUSED: (
        logging.WARNING,
        "closed a new connection from {detail}: over the connection limits (residency.http)",
        "closed {count} more new connections over the connection limits in the last {interval:.0f} s",
    ),
    Event.REQUEST_REFUSED: (
        logging.WARNING,
        "answered 503 to {detail}: over the in-flight request limits (residency.http)",
        "answered 503 to {count} more requests over the in-flight request limits in the last "
        "{interval:.0f} s",
    ),
    Event.BODY_REFUSED: (
        logging.WARNING,
        "answered 503 to {detail}: its body would pass the body budget (residency.http)",
        "answered 503 to {count} more requests whose bodies would pass the body budget in the last "
        "{interval:.0f} s",
    ),
    Event.HEADERS_TIMED_OUT: (
        logging.INFO,
        "closed a connection from {detail} that sent no complete request headers in time",
        "closed {count} more connections that sent no complete request headers in time in the last "
        "{interval:.0f} s",
    ),
    Event.BODY_TIMED_OUT: (
        logging.INFO,
        "answered 408 to {detail}: its body did not arrive in time",
        "answered 408 to {count} more requests whose bodies did not arrive in time in the last "
        "{interval:.0f} s",
    ),
    Event.DISCONNECTED_MID_BODY: (
        logging.INFO,
        "{detail} disconnected while sending a request body",
        "{count} more clients disconnected while sending a request body in the last {interval:.0f} s",
    ),
    Event.BAD_REQUEST: (
        logging.INFO,
        "answered 400 to a malformed request or an unsupported upgrade ({detail})",
        "answered 400 to {count} more malformed requests or unsupported upgrades in the last "
        "{interval:.0f} s",
    ),
}
"""Each event's level, its line the first time (``{detail}`` filled in) and its count line."""


@dataclass
class Tally:
    """Which events to log: the first of a quiet spell at once, repeats as one count per interval.

    ``note`` says whether to log the event now; ``due`` gives the counts whose interval has
    passed. A kind whose interval passed with no repeat is quiet again: its next event is logged
    at once.
    """

    interval: float = LOG_INTERVAL
    _opened: dict[Event, float] = field(default_factory=dict)
    _repeats: Counter[Event] = field(default_factory=Counter)

    def note(self, event: Event, now: float) -> bool:
        """Count ``event``; True when it is the first of a quiet spell (log it now)."""
        if event in self._opened:
            self._repeats[event] += 1
            return False
        self._opened[event] = now
        return True

    def due(self, now: float) -> list[tuple[Event, int]]:
        """The repeats to log now, by event, for each interval that has passed."""
        lines: list[tuple[Event, int]] = []
        for event, opened in list(self._opened.items()):
            if now - opened < self.interval:
                continue
            repeats = self._repeats.pop(event, 0)
            if repeats:
                lines.append((event, repeats))
                self._opened[event] = now
            else:
                del self._opened[event]
        return lines

    def next_due(self) -> float | None:
        """When ``due`` next has something to do, or None while every kind is quiet."""
        return min(self._opened.values()) + self.interval if self._opened else None
