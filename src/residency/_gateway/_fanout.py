"""Cross-replica change notices over PostgreSQL ``LISTEN/NOTIFY``.

Replicas on one PostgreSQL store each hold their own copy of a session. A request catches its
copy up before it acts, but a client that only listens (a handshake-era GET stream, a
2026-07-28 ``subscriptions/listen`` stream) sends no request to trigger that. So a replica whose
request changed what a session shows sends ``NOTIFY`` with the session's id on a channel of the
store's schema, and every replica ``LISTEN``s on it: a replica holding that session catches up
and announces the change to its own clients, as if the request had been its own.

A notice is a hint, never the source of truth: a lost one (the listening connection dropped,
the sender's connection failed) costs only a late ``list_changed``; the next request catches up
from the journal anyway. The listener reconnects by itself, and after a reconnect it treats
every held session as changed, since notices sent meanwhile are gone.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import anyio
import anyio.abc
import psycopg
from psycopg import sql

from residency._store._postgres import PostgresStore
from residency._store._protocol import Store

__all__ = ["Fanout", "fanout_for"]

logger = logging.getLogger("residency.gateway")

RECONNECT_SECONDS = 1.0
"""Wait between attempts to re-open the listening connection."""

EVERY_SESSION = ""
"""The notice given to the handler after a reconnect: any held session may have changed."""


def channel_of(schema: str) -> str:
    """The notification channel of a store schema (bounded to PostgreSQL's 63-byte names)."""
    return "residency_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


class Fanout:
    """``LISTEN`` for, and ``NOTIFY`` of, sessions whose view changed on some replica.

    Args:
        conninfo: the libpq connection string of the store's database.
        schema: the store's schema (one channel per schema).
    """

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self.channel = channel_of(schema)
        self._sender: psycopg.AsyncConnection[Any] | None = None
        self._sending = anyio.Lock()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, application_name="residency-fanout", connect_timeout=10
        )

    async def run(
        self,
        on_notice: Callable[[str], Awaitable[None]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen until cancelled; ``on_notice(session_id)`` for each notice (``EVERY_SESSION``
        after a reconnect). Started once the first ``LISTEN`` is active (or has failed)."""
        started = False
        reconnecting = False
        while True:
            try:
                async with await self._connect() as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    if not started:
                        started = True
                        task_status.started()
                    if reconnecting:
                        logger.info("cross-replica notices: listening again")
                        await _deliver(on_notice, EVERY_SESSION)
                    async for notice in conn.notifies():
                        await _deliver(on_notice, notice.payload)
            except psycopg.Error as exc:
                logger.warning(
                    "cross-replica notices: listening failed (%s); retrying in %g s",
                    type(exc).__name__,
                    RECONNECT_SECONDS,
                )
            if not started:
                started = True
                task_status.started()
            reconnecting = True
            await anyio.sleep(RECONNECT_SECONDS)

    async def notify(self, session_id: str) -> None:
        """Tell every replica (this one too) that ``session_id``'s view changed; best effort."""
        async with self._sending:
            try:
                if self._sender is None or self._sender.closed:
                    self._sender = await self._connect()
                await self._sender.execute("SELECT pg_notify(%s, %s)", (self.channel, session_id))
            except psycopg.Error as exc:
                # A lost notice only delays a list_changed: the next request catches up anyway.
                logger.warning("cross-replica notice for %s not sent (%s)", session_id, type(exc).__name__)
                await self.aclose()

    async def aclose(self) -> None:
        """Close the sending connection (the listener closes when its task is cancelled)."""
        sender, self._sender = self._sender, None
        if sender is not None:
            with anyio.CancelScope(shield=True):
                with suppress(psycopg.Error):
                    await sender.close()


async def _deliver(on_notice: Callable[[str], Awaitable[None]], session_id: str) -> None:
    """Hand one notice over; a failure is logged, never the end of listening (or the gateway)."""
    try:
        await on_notice(session_id)
    except Exception:
        logger.exception("cross-replica notice for %r could not be applied", session_id)


def fanout_for(store: Store) -> Fanout | None:
    """The fanout of a store that other replicas can share (PostgreSQL), else None."""
    if isinstance(store, PostgresStore):
        return Fanout(store._conninfo, store.schema)
    return None
