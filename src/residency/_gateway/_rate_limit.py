"""Per-identity rate limits: token buckets keyed by the caller's identity (``residency.rate_limit``).

Theory of operation
-------------------
Each identity has a bucket of ``burst`` tokens that refills at ``requests_per_minute / 60`` per
second; every MCP request the gateway serves takes one, and a request that finds the bucket
empty is refused with the seconds until a token is back (``retry_after``). With
``calls_per_minute`` set, a call that goes upstream (``tools/call`` of an upstream tool, or
``call_tool``) also takes one from a second bucket of its own (``calls_burst`` deep), so lists,
searches and re-expansions can stay cheap while upstream calls are held to less. A request
takes from both buckets or from neither: a refused call leaves its request token in place.

The identity is what the HTTP front verified: an OAuth principal's, a static token's, or, for
a caller with neither (stdio, an unauthenticated HTTP front, in-process), the one identity
``ANONYMOUS_IDENTITY``. Limiting is per identity, so one caller past its limit leaves the
others served.

Memory. A bucket that has refilled to ``burst`` is the same as a new one, so it is dropped:
every ``SWEEP_EVERY`` takes the table drops its full buckets. At most ``max_identities``
buckets are held; past it the least recently used is dropped (its identity starts afresh: with
authenticated identities only a caller with that many credentials can cause this).

``RateLimiter`` is sans-I/O: it never reads a clock; the caller passes ``now`` (seconds of a
monotonic clock), so the tests drive it with a fake one.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ANONYMOUS_IDENTITY", "SWEEP_EVERY", "Over", "RateLimitSettings", "RateLimiter"]

ANONYMOUS_IDENTITY = "anonymous"
"""The identity of every caller the HTTP front did not authenticate (and of stdio)."""

SWEEP_EVERY = 1024
"""Takes between two sweeps of the full (so idle) buckets."""


class RateLimitSettings(BaseModel):
    """Per-identity rate limits (``residency.rate_limit``; absent: none).

    Attributes:
        requests_per_minute: MCP requests one identity may make per minute, sustained.
        burst: requests one identity may make at once before the rate applies (None: a tenth
            of a minute's worth, at least 1).
        calls_per_minute: upstream calls one identity may make per minute, on top of the
            request limit (None: calls are limited as requests only).
        calls_burst: upstream calls at once (None: a tenth of a minute's worth, at least 1).
        max_identities: buckets held at once; past it the least recently used is dropped.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: float = Field(gt=0, le=1_000_000)
    burst: int | None = Field(default=None, ge=1, le=1_000_000)
    calls_per_minute: float | None = Field(default=None, gt=0, le=1_000_000)
    calls_burst: int | None = Field(default=None, ge=1, le=1_000_000)
    max_identities: int = Field(default=10_000, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _calls_burst_needs_a_rate(self) -> RateLimitSettings:
        if self.calls_burst is not None and self.calls_per_minute is None:
            raise ValueError("calls_burst needs calls_per_minute (the rate its bucket refills at)")
        return self


def _default_burst(per_minute: float) -> int:
    return max(1, math.ceil(per_minute / 10))


@dataclass(frozen=True, slots=True)
class _Rate:
    per_second: float
    burst: float

    @classmethod
    def of(cls, per_minute: float, burst: int | None) -> _Rate:
        return cls(per_minute / 60.0, float(burst if burst is not None else _default_burst(per_minute)))


class _Bucket:
    """Tokens left at ``at`` (refill is computed, not ticked)."""

    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at

    def level(self, rate: _Rate, now: float) -> float:
        return min(rate.burst, self.tokens + max(0.0, now - self.at) * rate.per_second)


@dataclass(frozen=True, slots=True)
class Over:
    """A request refused by a limit: ``limit`` (``requests`` or ``calls``) is past, and a token
    is back in ``retry_after`` seconds."""

    retry_after: float
    limit: Literal["requests", "calls"]
    per_minute: float


class RateLimiter:
    """The buckets of every identity (see the module docstring).

    Args:
        settings: the limits.
    """

    def __init__(self, settings: RateLimitSettings) -> None:
        self.settings = settings
        self._requests = _Rate.of(settings.requests_per_minute, settings.burst)
        self._calls = (
            _Rate.of(settings.calls_per_minute, settings.calls_burst)
            if settings.calls_per_minute is not None
            else None
        )
        # identity -> (request bucket, call bucket or None); least recently used first.
        self._buckets: OrderedDict[str, tuple[_Bucket, _Bucket | None]] = OrderedDict()
        self._takes = 0

    def __len__(self) -> int:
        """Identities with a bucket held now."""
        return len(self._buckets)

    def take(self, identity: str, *, call: bool, now: float) -> Over | None:
        """Take a request (and, for an upstream call, a call) token for ``identity``.

        Args:
            identity: the caller's identity (``ANONYMOUS_IDENTITY`` when it has none).
            call: the request is a call that goes upstream.
            now: seconds of a monotonic clock.

        Returns:
            None when the request may go on (its tokens are taken); else the limit it is past
            and the seconds until it may go on (nothing is taken).
        """
        self._takes += 1
        if self._takes % SWEEP_EVERY == 0:
            self.sweep(now)
        held = self._buckets.get(identity)
        if held is None:
            held = (
                _Bucket(self._requests.burst, now),
                _Bucket(self._calls.burst, now) if self._calls is not None else None,
            )
            self._buckets[identity] = held
            while len(self._buckets) > self.settings.max_identities:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(identity)
        requests, calls = held
        wait = _wait(requests, self._requests, now)
        if wait > 0.0:
            return Over(wait, "requests", self.settings.requests_per_minute)
        if call and calls is not None and self._calls is not None:
            wait = _wait(calls, self._calls, now)
            if wait > 0.0:
                return Over(wait, "calls", self._calls.per_second * 60.0)
            _spend(calls, self._calls, now)
        _spend(requests, self._requests, now)
        return None

    def sweep(self, now: float) -> None:
        """Drop every bucket that has refilled (a new one would be the same)."""
        full = [
            identity
            for identity, (requests, calls) in self._buckets.items()
            if requests.level(self._requests, now) >= self._requests.burst
            and (calls is None or self._calls is None or calls.level(self._calls, now) >= self._calls.burst)
        ]
        for identity in full:
            del self._buckets[identity]


def _wait(bucket: _Bucket, rate: _Rate, now: float) -> float:
    level = bucket.level(rate, now)
    return 0.0 if level >= 1.0 else (1.0 - level) / rate.per_second


def _spend(bucket: _Bucket, rate: _Rate, now: float) -> None:
    bucket.tokens = bucket.level(rate, now) - 1.0
    bucket.at = now
