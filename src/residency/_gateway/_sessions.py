"""Downstream sessions: one ``residency.Session`` per session key, journaled to the store.

A session is opened on its first request and reopened from the store after a restart (same
key, same journal, so its tombstones come back). The in-memory table is bounded: the least
recently used session is dropped from memory when it is full; its journal stays in the store
and the next request reopens it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from mcp.server.connection import Connection
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject
from residency._gateway._aggregate import Catalog
from residency._session import Session
from residency._store._protocol import Store

__all__ = ["GatewaySession", "SessionTable", "View", "store_id"]

View = tuple[tuple[str, ...], tuple[str, ...]]
"""What a handshake-era client sees of a session: resident tool names and tombstone lines."""


def store_id(key: str) -> str:
    """The id a session key is journaled under."""
    return f"gateway/{key}"


class GatewaySession:
    """A downstream session: its ``Session``, its connections and its listen streams."""

    def __init__(self, key: str, session: Session, bus: InMemorySubscriptionBus) -> None:
        self.key = key
        self.session = session
        self.bus = bus
        self.listen = ListenHandler(bus)
        self.connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.host_applies_evictions = False
        self.host_sets_phase = False
        self._view: tuple[int, Catalog, View] | None = None

    def view(self, catalog: Catalog) -> View:
        """What the client sees, made again only when the session's revision or the catalog moved."""
        s = self.session
        known = self._view
        if known is not None and known[0] == s.revision and known[1] is catalog:
            return known[2]
        resident = tuple(n for n in s.tools(ToolState.RESIDENT) if n in catalog)
        view = resident, tuple(s.tombstones())
        self._view = (s.revision, catalog, view)
        return view

    def resident_definitions(self, catalog: Catalog) -> list[tuple[str, str, JSONObject]]:
        """``(name, hash, shown)`` of the resident tools still offered upstream (shown: minified)."""
        s = self.session
        specs = (s.tool(n) for n in s.tools(ToolState.RESIDENT) if n in catalog)
        return [(spec.name, spec.hash, spec.shown) for spec in specs]


class SessionTable:
    """Open sessions by key, least recently used first out."""

    def __init__(self, store: Store, factory: Callable[[str, Store], Session], *, limit: int = 4096) -> None:
        self._store = store
        self._factory = factory
        self._limit = limit
        self._open: OrderedDict[str, GatewaySession] = OrderedDict()
        self._buses: dict[str, InMemorySubscriptionBus] = {}

    def __iter__(self) -> Iterator[GatewaySession]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def peek(self, key: str) -> GatewaySession | None:
        return self._open.get(key)

    def get(self, key: str) -> tuple[GatewaySession, bool]:
        """The session for ``key`` and whether it was just opened (new or reopened)."""
        found = self._open.get(key)
        if found is not None:
            self._open.move_to_end(key)
            return found, False
        session = self._factory(key, self._store)
        # Listen streams outlive a session's stay in memory: the bus is kept per key.
        bus = self._buses.setdefault(key, InMemorySubscriptionBus())
        opened = GatewaySession(key, session, bus)
        self._open[key] = opened
        while len(self._open) > self._limit:
            self._open.popitem(last=False)
        return opened, True

    def buses(self) -> list[Any]:
        return list(self._buses.values())
