"""Access tokens held for upstreams: reused until shortly before they expire, fetched once at a time.

Rules, and why:

- A token is reused until ``margin`` seconds before it expires (but never less than half its
  lifetime: a token that lives 10 s with a 60 s margin would otherwise never be reused), so a
  request never leaves with a token that expires on its way.
- A token that comes with no lifetime is kept until the upstream refuses it (``invalidate``).
- A token never outlives a cap given with it (an exchanged token, the caller token it was
  exchanged for).
- Concurrent requests for one key share one fetch: the first fetches, the others wait for its
  outcome (a failure included: they fail with it rather than each wait for a token endpoint
  that is down). If the first is cancelled, the next in line fetches.
- At most ``size`` tokens are held (one per caller token, for exchanged ones): past that the
  expired go first, then the oldest. ``on_drop`` is told of every token let go (so it stops
  being scrubbed from text), ``on_hold`` of every token taken in.

The clock is injected (``clock``, seconds): tests drive it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

__all__ = ["Fetched", "TokenCache"]


@dataclass(frozen=True)
class Fetched:
    """A token as the token endpoint gave it.

    Attributes:
        value: the access token.
        lifetime: seconds it is valid from now (``expires_in``); None: not said.
        cap: seconds from now it may be held at most (None: no cap).
    """

    value: str = field(repr=False)
    lifetime: float | None = None
    cap: float | None = None


@dataclass
class _Held:
    value: str
    refresh_at: float  # inf: until refused


class _Flight:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: str | None = None
        self.error: Exception | None = None


class TokenCache:
    """Tokens by key (see the module docstring).

    Args:
        margin: seconds before expiry at which a token is renewed.
        size: tokens held at most.
        clock: seconds, monotonic (``time.monotonic``).
        on_hold: told of each token taken in.
        on_drop: told of each token let go.
    """

    def __init__(
        self,
        *,
        margin: float,
        size: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        on_hold: Callable[[str], None] | None = None,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.margin = margin
        self.size = size
        self._clock = clock
        self._on_hold = on_hold
        self._on_drop = on_drop
        self._held: dict[str, _Held] = {}
        self._flights: dict[str, _Flight] = {}
        self.fetches = 0
        """Fetches begun so far."""

    def __len__(self) -> int:
        return len(self._held)

    def fresh(self, key: str) -> str | None:
        """The token held for ``key`` if it need not be renewed yet, else None."""
        held = self._held.get(key)
        if held is None or self._clock() >= held.refresh_at:
            return None
        return held.value

    async def get(self, key: str, fetch: Callable[[], Awaitable[Fetched]]) -> str:
        """The token for ``key``: the one held while fresh, else the outcome of one ``fetch``.

        Raises:
            Exception: whatever ``fetch`` raised (every waiter of that fetch gets it).
        """
        while True:
            value = self.fresh(key)
            if value is not None:
                return value
            flight = self._flights.get(key)
            if flight is None:
                return await self._fetch(key, fetch)
            await flight.done.wait()
            if flight.value is not None:
                return flight.value
            if flight.error is not None:
                raise flight.error
            # the fetch was cancelled: the next in line fetches

    async def _fetch(self, key: str, fetch: Callable[[], Awaitable[Fetched]]) -> str:
        flight = self._flights[key] = _Flight()
        self.fetches += 1
        try:
            fetched = await fetch()
            self._put(key, fetched)
            flight.value = fetched.value
            return fetched.value
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()

    def _put(self, key: str, fetched: Fetched) -> None:
        now = self._clock()
        limits = [x for x in (fetched.lifetime, fetched.cap) if x is not None]
        if limits:
            life = max(0.0, min(limits))
            refresh_at = now + life - min(self.margin, life / 2)
        else:
            refresh_at = float("inf")
        old = self._held.pop(key, None)
        self._held[key] = _Held(fetched.value, refresh_at)
        if self._on_hold is not None:
            self._on_hold(fetched.value)
        if old is not None and old.value != fetched.value:
            self._dropped(old.value)
        self._trim(now)

    def _trim(self, now: float) -> None:
        if len(self._held) <= self.size:
            return
        for key in [k for k, h in self._held.items() if now >= h.refresh_at]:
            self._dropped(self._held.pop(key).value)
        while len(self._held) > self.size:
            oldest = next(iter(self._held))
            self._dropped(self._held.pop(oldest).value)

    def invalidate(self, key: str, value: str) -> None:
        """Forget the token held for ``key`` if it is still ``value`` (the upstream refused it)."""
        held = self._held.get(key)
        if held is not None and held.value == value:
            del self._held[key]
            self._dropped(value)

    def clear(self) -> None:
        """Forget every token."""
        held, self._held = self._held, {}
        for item in held.values():
            self._dropped(item.value)

    def _dropped(self, value: str) -> None:
        if self._on_drop is not None and all(h.value != value for h in self._held.values()):
            self._on_drop(value)
