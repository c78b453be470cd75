"""Cross-replica change notices over PostgreSQL ``LISTEN/NOTIFY``.

Replicas on one PostgreSQL store each hold their own copy of a session. A request catches its
copy up before it acts, but a client that only listens (a handshake-era GET stream, a
2026-07-28 ``subscriptions/listen`` stream) sends no request to trigger that. So a replica whose
request changed what a session shows sends ``NOTIFY`` with the session's id on a channel of the
store's schema, and every replica ``LISTEN``s on it: a replica holding that session catches up
and announces the change to its own clients, as if the request had been its own.

Archived chains travel the same channel. The store itself notifies when a chain enters an
archive scope (in the transaction that adds it, so the notice is sent exactly when the chain
is visible). Every replica (the archiving one too) then has each session it holds adopt the
scope's new chains, and announces the sessions whose view that changed: a chain archived in one
session reaches every session of the scope on every replica without waiting for their next
request. Two replicas adopting for one session race like any two writers; the loser catches up.

A notice's payload is ``s:`` and a session id, or ``a:`` and an archive scope. The store itself
also sends ``j:`` and a session id on every append (``residency._store._postgres``): gateways
ignore those, the dashboard (``residency._ui._live``) listens for them.

A notice is a hint, never the source of truth: a lost one (the listening connection dropped,
the sender's connection failed) costs only a late ``list_changed``; the next request catches up
from the journal anyway. The listener reconnects by itself (TCP keepalives notice a vanished
server), and after a reconnect it treats every held session and every scope as changed, since
notices sent meanwhile are gone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing, suppress
from typing import Any

import anyio
import anyio.abc
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from residency._store._postgres import (
    ARCHIVE_NOTICE,
    JOURNAL_NOTICE,
    SESSION_NOTICE,
    PostgresStore,
    channel_of,
)
from residency._store._protocol import Store

__all__ = ["EVERY_SCOPE", "EVERY_SESSION", "Fanout", "channel_of", "fanout_for"]

logger = logging.getLogger("residency.gateway")

RECONNECT_SECONDS = 1.0
"""Wait between attempts to re-open the listening connection."""

_CONNECTION: dict[str, Any] = {
    "application_name": "residency-fanout",
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}

EVERY_SESSION = ""
"""The notice given to the session handler after a reconnect: any held session may have changed."""
EVERY_SCOPE = ""
"""The notice given to the archive handler after a reconnect: any scope may have grown."""

Handler = Callable[[str], Awaitable[None]]


class Fanout:
    """``LISTEN`` for, and ``NOTIFY`` of, sessions whose view changed on some replica.

    Args:
        conninfo: the libpq connection string of the store's database.
        schema: the store's schema (one channel per schema).
        connect_timeout: seconds one connection attempt may take.
    """

    def __init__(self, conninfo: str, schema: str, connect_timeout: int = 5) -> None:
        self._conninfo = conninfo
        self._given = set(conninfo_to_dict(conninfo))  # the URL's own libpq parameters win
        self._given.discard("connect_timeout")
        self._connect_timeout = connect_timeout
        self.channel = channel_of(schema)
        self._sender: psycopg.AsyncConnection[Any] | None = None
        self._sending = anyio.Lock()
        self._closed = False

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        extra: dict[str, Any] = {k: v for k, v in _CONNECTION.items() if k not in self._given}
        extra["connect_timeout"] = self._connect_timeout
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, **extra)

    async def run(
        self,
        on_notice: Handler,
        on_archive: Handler | None = None,
        *,
        on_journal: Handler | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen until cancelled. Started once the first ``LISTEN`` is active (or has failed).

        Args:
            on_notice: called with the id of a session whose view changed on some replica
                (``EVERY_SESSION`` after a reconnect).
            on_archive: called with an archive scope that gained a chain (``EVERY_SCOPE``
                after a reconnect); archive notices are ignored without it.
            on_journal: called with the id of a session whose journal grew (``""`` for a
                session whose id is too long for a notice); such notices are ignored without it.
        """
        started = False
        reconnecting = False
        while True:
            try:
                conn = await self._connect()
                # Closed in a shielded ``finally``, not by ``async with``: cancelled while a
                # handler runs, the notice iterator still holds the connection's lock, and the
                # connection's own exit would wait for it (cancelled again) and never close it.
                try:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    if not started:
                        started = True
                        task_status.started()
                    if reconnecting:
                        logger.info("cross-replica notices: listening again")
                        await _deliver(on_notice, EVERY_SESSION)
                        if on_archive is not None:
                            await _deliver(on_archive, EVERY_SCOPE)
                    async with aclosing(conn.notifies()) as notices:
                        async for notice in notices:
                            kind, _, name = notice.payload.partition(":")
                            if kind == SESSION_NOTICE:
                                await _deliver(on_notice, name)
                            elif kind == ARCHIVE_NOTICE and on_archive is not None:
                                await _deliver(on_archive, name)
                            elif kind == JOURNAL_NOTICE and on_journal is not None:
                                await _deliver(on_journal, name)
                finally:
                    with anyio.CancelScope(shield=True), suppress(psycopg.Error):
                        await conn.close()
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
            for retry in (False, True):
                # A connection kept from before a server restart (or a killed backend) fails on
                # its first use: the notice is then sent once more, on a fresh connection.
                fresh = self._sender is None or self._sender.closed
                try:
                    if self._sender is None or self._sender.closed:
                        if self._closed:
                            return  # the gateway is stopping: no new connection
                        sender = await self._connect()
                        if self._closed:  # closed while it connected: nothing will close it later
                            with anyio.CancelScope(shield=True), suppress(psycopg.Error):
                                await sender.close()
                            return
                        self._sender = sender
                    await self._sender.execute(
                        "SELECT pg_notify(%s, %s)", (self.channel, f"{SESSION_NOTICE}:{session_id}")
                    )
                    return
                except psycopg.Error as exc:
                    await self._close_sender()
                    if fresh or retry:
                        # A lost notice only delays a list_changed: the next request catches up.
                        logger.warning(
                            "cross-replica notice for %s not sent (%s)", session_id, type(exc).__name__
                        )
                        return

    async def aclose(self) -> None:
        """Close the sending connection (the listener closes when its task is cancelled); a
        notice sent after this opens none (a request still in flight as the gateway stops)."""
        self._closed = True
        await self._close_sender()

    async def _close_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            with anyio.CancelScope(shield=True):
                with suppress(psycopg.Error):
                    await sender.close()


async def _deliver(handler: Handler, name: str) -> None:
    """Hand one notice over; a failure is logged, never the end of listening (or the gateway)."""
    try:
        await handler(name)
    except Exception:
        logger.exception("cross-replica notice for %r could not be applied", name)


def fanout_for(store: Store) -> Fanout | None:
    """The fanout of a store that other replicas can share (PostgreSQL), else None."""
    if isinstance(store, PostgresStore):
        return Fanout(store._conninfo, store.schema, store._connect_timeout)
    return None
