"""Downstream sessions: one ``residency.Session`` per session key, journaled to the store.

Theory of operation
-------------------
A session is opened on its first request and reopened from the store after a restart (same
key, same journal, so its tombstones come back). Its journal is the truth; the ``Session``
object in memory is a cache of it, and the table keeps that cache small:

- **Closed sessions leave.** A handshake-era session whose every connection has closed (the
  client's ``DELETE``, the end of a stdio pipe or an in-process client) is released from
  memory; its journal stays and its next request reopens it. The SDK unwinds a connection's
  ``exit_stack`` when the connection closes: the table registers one callback there per
  connection (``GatewaySession.connections.add``).
- **Live sessions are bounded.** At most ``limit`` sessions stay in memory; past it the least
  recently used goes back to the store, sessions without an open connection first. A session
  unused for ``idle`` seconds and without an open connection is released too (checked when a
  session is opened, so an idle gateway does no work).
- **One object per key.** A released session still held by a request in flight is found again
  (a weak map) instead of being opened a second time: one process never has two writers on
  one journal.
- **The memory store is bounded by keys.** Its journals live in memory and exist nowhere else,
  so releasing a session there frees only the cache. At most ``memory_limit`` session keys are
  journaled in it; a new key past that is refused with ``SessionLimitReached``, and every known
  key keeps working. Use a SQLite store for a gateway that meets many sessions.
- **Listen buses follow their session.** A session's 2026-07-28 ``subscriptions/listen``
  streams hang on its bus. A released session whose bus still has listeners parks the bus until
  its last listener leaves, so a reopened session publishes to the same streams; a bus with no
  listener leaves with its session. The bus also counts the streams that subscribe to tool-list
  changes (``_delivery``'s auto mode asks whether anyone hears them).
- **What the host told a session outlives its release.** Whether it reports evictions, sets
  the phase, and how its tools are delivered (``_delivery.DeliveryState``) are not journaled;
  a released session's are kept (for the last ``limit`` keys) and given back when it reopens.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any, NamedTuple

from mcp.server.connection import Connection
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ServerEvent

from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject
from residency._errors import SessionLimitReached
from residency._gateway._aggregate import Catalog
from residency._gateway._delivery import Delivery, DeliveryState
from residency._gateway._meta_tools import CHECK_CHAIN
from residency._gateway._policy import ANYONE, UNRESTRICTED, Access, Caller
from residency._runtime import Session
from residency._store._memory import MemoryStore
from residency._store._protocol import Store

__all__ = [
    "IDLE_SECONDS",
    "LIVE_LIMIT",
    "MEMORY_LIMIT",
    "GatewaySession",
    "SessionLimitReached",
    "SessionTable",
    "View",
    "store_id",
]


class View(NamedTuple):
    """What a client sees of a session: what its list shows, and its tombstone lines.

    ``listed`` holds the listed tools' names and definition hashes (a tool redefined under the
    same name changes the list too), and ``check_chain`` once it is listed.
    """

    listed: tuple[tuple[str, str], ...]
    tombstones: tuple[str, ...]


LIVE_LIMIT = 1000
"""Sessions held in memory at most; the least recently used goes back to the store."""

MEMORY_LIMIT = 1000
"""Session keys a gateway journals in a memory store at most; new keys past it are refused."""

IDLE_SECONDS = 900.0
"""A session unused this long, with no open connection, is released from memory."""

_PREFIX = "gateway/"
_ATTACHED = "residency.attached"
# How far from the least recently used end eviction looks for a session without a connection.
_SCAN = 64


def store_id(key: str) -> str:
    """The id a session key is journaled under."""
    return _PREFIX + key


class _Bus(InMemorySubscriptionBus):
    """A session's subscription bus that counts its listeners and says when the last one left."""

    def __init__(self, key: str, on_idle: Callable[[_Bus], None]) -> None:
        super().__init__()
        self.key = key
        self.listeners = 0
        self.tool_listeners = 0
        """Open listen streams that subscribe to tool-list changes (the listen handler counts them)."""
        self._on_idle = on_idle

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        left = False

        def leave() -> None:
            nonlocal left
            if left:  # the SDK's unsubscribe is idempotent; so is the count
                return
            left = True
            unsubscribe()
            self.listeners -= 1
            if self.listeners == 0:
                self._on_idle(self)

        return leave


def _connection_closed(ref: weakref.ref[Connection], attached: weakref.WeakSet[GatewaySession]) -> None:
    connection = ref()
    if connection is None:
        return
    for gs in list(attached):
        gs.connections.discard(connection)


class Connections:
    """The open handshake-era connections of a session.

    Weak: a connection the SDK drops leaves on its own. ``add`` also watches the connection so
    its close tells the session (see the module docstring).
    """

    def __init__(self, owner: GatewaySession) -> None:
        self._owner = weakref.ref(owner)
        self._live: weakref.WeakSet[Connection] = weakref.WeakSet()

    def add(self, connection: Connection) -> None:
        """Attach ``connection`` (a no-op when attached already)."""
        if connection in self._live:
            return
        owner = self._owner()
        if owner is None:
            return
        attached: weakref.WeakSet[GatewaySession] | None = connection.state.get(_ATTACHED)
        if attached is None:
            # One callback per connection, however many sessions it meets: it holds no session.
            attached = weakref.WeakSet()
            connection.state[_ATTACHED] = attached
            connection.exit_stack.callback(_connection_closed, weakref.ref(connection), attached)
        attached.add(owner)
        self._live.add(connection)

    def discard(self, connection: Connection) -> None:
        """Detach a closed connection; the session is released when it was the last one."""
        if connection not in self._live:
            return
        self._live.discard(connection)
        owner = self._owner()
        if not self._live and owner is not None:
            owner.last_connection_closed()

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._live))

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return len(self._live) > 0


class GatewaySession:
    """A downstream session: its ``Session``, its connections and its listen streams."""

    def __init__(
        self, key: str, session: Session, bus: InMemorySubscriptionBus, delivery: Delivery = "list"
    ) -> None:
        self.key = key
        self.session = session
        self.bus = bus
        self.listen = ListenHandler(bus)
        self.connections = Connections(self)
        self.host_applies_evictions = False
        self.host_sets_phase = False
        self.delivery = DeliveryState.of(delivery)
        self.used = 0.0
        """When a request last opened it (the table's clock)."""
        self.access: Access = UNRESTRICTED
        """What its caller may see (``_policy``); fixed for its life: its key carries it."""
        self.caller: Caller = ANYONE
        """Who last used it, as the policy sees them (a policy reload decides again from it)."""
        # (revision, delivery), catalog, view: the last view made.
        self._view: tuple[tuple[int, tuple[bool, str | None]], Catalog, View] | None = None
        self._on_closed: Callable[[GatewaySession], None] | None = None

    def last_connection_closed(self) -> None:
        """Every connection of this session has closed: the table may release it."""
        if self._on_closed is not None:
            self._on_closed(self)

    def view(self, catalog: Catalog) -> View:
        """What the client sees, made again only when the session's revision, its delivery or
        the catalog moved."""
        s = self.session
        known = self._view
        mode = (self.delivery.by_reference, self.delivery.fixed)
        if known is not None and known[0] == (s.revision, mode) and known[1] is catalog:
            return known[2]
        listed = tuple((n, s.tool(n).hash) for n in self.listed_tools(catalog))
        # check_chain is listed once the scope holds a chain: a change of the list too (the other
        # meta-tools are the same all session long).
        if self.has_chains():
            listed = (*listed, (CHECK_CHAIN, ""))
        view = View(listed, tuple(s.tombstones()))
        self._view = ((s.revision, mode), catalog, view)
        return view

    def listed_tools(self, catalog: Catalog) -> list[str]:
        """The upstream tools the session's list shows, in listing order: by list, its resident
        tools still offered upstream; by reference, only those that are pinned or in the list
        an auto session froze (at the definition it was frozen with; see ``_delivery``)."""
        s = self.session
        resident = [n for n in s.resident_tools() if n in catalog]
        if not self.delivery.by_reference:
            return resident
        frozen = self._frozen()
        return [n for n in resident if s.is_pinned(n) or n in frozen]

    def lists(self, name: str) -> bool:
        """Whether the session's list shows the tool (by name, whatever the catalog)."""
        s = self.session
        if not self.delivery.by_reference:
            return s.state(name) is ToolState.RESIDENT
        return s.is_pinned(name) or name in self._frozen()

    def _frozen(self) -> frozenset[str]:
        fixed = self.delivery.fixed
        if fixed is None:
            return frozenset()
        s = self.session
        record = s.delivery(fixed)
        return frozenset(
            n for n, digest in zip(record.tools, record.hashes, strict=True) if s.tool(n).hash == digest
        )

    def hears_tool_changes(self) -> bool:
        """Whether a 2026-07-28 listen stream of this session subscribes to tool-list changes."""
        bus = self.bus
        return isinstance(bus, _Bus) and bus.tool_listeners > 0

    @contextmanager
    def tool_listener(self) -> Iterator[None]:
        """Count an open listen stream that subscribes to tool-list changes while it lasts (on
        the bus, which follows the session across a release)."""
        bus = self.bus if isinstance(self.bus, _Bus) else None
        if bus is not None:
            bus.tool_listeners += 1
        try:
            yield
        finally:
            if bus is not None:
                bus.tool_listeners -= 1

    def has_chains(self) -> bool:
        """Whether the session's archive scope holds a chain (``check_chain`` is listed then)."""
        return bool(self.session.chains())

    def resident_definitions(self, catalog: Catalog) -> list[tuple[str, str, JSONObject]]:
        """``(name, hash, shown)`` of the listed tools (``listed_tools``; shown: minified)."""
        s = self.session
        specs = (s.tool(n) for n in self.listed_tools(catalog))
        return [(spec.name, spec.hash, spec.shown) for spec in specs]


class SessionTable:
    """Open sessions by key, bounded (see the module docstring).

    Args:
        store: where sessions are journaled.
        factory: opens (or reopens from the store) the ``Session`` of a key.
        limit: sessions held in memory at most.
        memory_limit: with a ``MemoryStore``, session keys journaled at most.
        idle: seconds after which an unused session without an open connection is released.
        clock: monotonic seconds (a test's clock).
        delivery: how a new session's tools are delivered (``residency.delivery``).
    """

    def __init__(
        self,
        store: Store,
        factory: Callable[[str, Store], Session],
        *,
        limit: int = LIVE_LIMIT,
        memory_limit: int = MEMORY_LIMIT,
        idle: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        delivery: Delivery = "list",
    ) -> None:
        self._store = store
        self._delivery: Delivery = delivery
        self._factory = factory
        self._limit = max(1, limit)
        self._memory_limit = memory_limit
        self._idle = idle
        self._clock = clock
        self._open: OrderedDict[str, GatewaySession] = OrderedDict()
        # Every session object still alive (held by the table or by a request in flight).
        self._alive: weakref.WeakValueDictionary[str, GatewaySession] = weakref.WeakValueDictionary()
        # Buses of released sessions that still have listeners.
        self._parked: dict[str, _Bus] = {}
        # What a released session's host had told it (not journaled): (evictions, phase, delivery).
        self._hosts: OrderedDict[str, tuple[bool, bool, DeliveryState]] = OrderedDict()
        self._memory_keys: set[str] | None = None
        if isinstance(store, MemoryStore):
            self._memory_keys = {s[len(_PREFIX) :] for s in store.sessions() if s.startswith(_PREFIX)}

    def __iter__(self) -> Iterator[GatewaySession]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def peek(self, key: str) -> GatewaySession | None:
        """The session of ``key`` if it is held in memory, without opening it."""
        return self._open.get(key)

    def get(self, key: str) -> tuple[GatewaySession, bool]:
        """The session for ``key`` and whether it was just opened (new, reopened or found again).

        Raises:
            SessionLimitReached: a new key past the memory store's limit.
            ResidencyError: the store could not reopen the session.
        """
        now = self._clock()
        found = self._open.get(key)
        if found is not None:
            self._open.move_to_end(key)
            found.used = now
            return found, False
        self._release_idle(now)
        found = self._alive.get(key)
        if found is None:
            found = self._new(key)
        else:
            self._parked.pop(key, None)  # the bus is this session's own again
        found.used = now
        found._on_closed = self._closed
        self._open[key] = found
        self._evict_over_limit(keep=key)
        return found, True

    def buses(self) -> list[Any]:
        """The buses of sessions in memory and of released sessions that still have listeners."""
        return [gs.bus for gs in self._open.values()] + list(self._parked.values())

    def _new(self, key: str) -> GatewaySession:
        keys = self._memory_keys
        if keys is not None and key not in keys and len(keys) >= self._memory_limit:
            raise SessionLimitReached(
                f"the gateway's memory store holds its limit of {self._memory_limit} session keys: "
                f"a new session cannot be opened. Repeat an existing session key "
                f"(Residency-Session), or serve with a SQLite store (--store sqlite:///path.db)",
                limit=self._memory_limit,
            )
        session = self._factory(key, self._store)
        if keys is not None:
            keys.add(key)
        bus = self._parked.pop(key, None) or _Bus(key, self._bus_idle)
        gs = GatewaySession(key, session, bus, self._delivery)
        flags = self._hosts.pop(key, None)
        if flags is not None:
            gs.host_applies_evictions, gs.host_sets_phase, gs.delivery = flags
        self._alive[key] = gs
        return gs

    def _closed(self, gs: GatewaySession) -> None:
        if self._open.get(gs.key) is gs and not gs.connections:
            self._release(gs.key)

    def _release(self, key: str) -> None:
        gs = self._open.pop(key)
        bus = gs.bus
        if isinstance(bus, _Bus) and bus.listeners:
            self._parked[key] = bus
        if gs.host_applies_evictions or gs.host_sets_phase or gs.delivery.auto:
            self._hosts[key] = (gs.host_applies_evictions, gs.host_sets_phase, gs.delivery)
            self._hosts.move_to_end(key)
            while len(self._hosts) > self._limit:
                self._hosts.popitem(last=False)

    def _release_idle(self, now: float) -> None:
        # Oldest first; a session with an open connection stays however idle (its client is
        # there), and is stepped over. Each entry is looked at once.
        for key in list(islice(self._open, _SCAN)):
            gs = self._open[key]
            if now - gs.used < self._idle:
                break
            if not gs.connections:
                self._release(key)

    def _evict_over_limit(self, *, keep: str) -> None:
        while len(self._open) > self._limit:
            oldest = [k for k in islice(self._open, _SCAN) if k != keep]
            victim = next((k for k in oldest if not self._open[k].connections), oldest[0])
            self._release(victim)

    def _bus_idle(self, bus: _Bus) -> None:
        if self._parked.get(bus.key) is bus:
            del self._parked[bus.key]
