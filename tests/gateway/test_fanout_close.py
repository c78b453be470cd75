"""The cross-replica notices' sending connection is closed with the gateway, whatever is in flight.

A request still running as a gateway stops may send a notice after the gateway closed its
fanout: that notice must not open a connection nobody will close (it would be left to the
garbage collector, still open on the server). Real PostgreSQL (``RESIDENCY_PG_URL``).
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from residency._gateway._fanout import Fanout
from tests._timing import STEP
from tests.postgres import new_schema, pg_url

pytestmark = pytest.mark.anyio


async def test_a_notice_after_close_opens_no_connection() -> None:
    fanout = Fanout(pg_url(), new_schema())
    await fanout.notify("before")  # opens the sending connection
    assert fanout._sender is not None and not fanout._sender.closed
    sender = fanout._sender
    await fanout.aclose()
    assert sender.closed and fanout._sender is None
    with anyio.fail_after(STEP):
        await fanout.notify("after")
    assert fanout._sender is None


async def test_a_notice_connecting_while_the_fanout_closes_closes_its_connection() -> None:
    fanout = Fanout(pg_url(), new_schema())
    with anyio.fail_after(STEP):
        async with anyio.create_task_group() as tg:
            tg.start_soon(fanout.notify, "in-flight")
            # The notice is now connecting (its first await); the gateway stops meanwhile.
            await anyio.sleep(0)
            await fanout.aclose()
    assert fanout._sender is None


async def test_the_listener_cancelled_while_a_notice_is_handled_closes_its_connection() -> None:
    """The gateway stops while a notice's handler is still running: the listening connection is
    closed all the same (the notice iterator, suspended in the handler, still holds the
    connection's lock, which a graceful exit of the connection would wait for)."""
    fanout = Fanout(pg_url(), new_schema())
    opened: list[psycopg.AsyncConnection[Any]] = []
    connect = fanout._connect

    async def recorded() -> psycopg.AsyncConnection[Any]:
        conn = await connect()
        opened.append(conn)
        return conn

    fanout._connect = recorded  # type: ignore[method-assign]  # to see the connection it opens
    handling = anyio.Event()

    async def slow_handler(session_id: str) -> None:
        handling.set()
        await anyio.sleep_forever()

    with anyio.fail_after(STEP):
        async with anyio.create_task_group() as tg:
            await tg.start(fanout.run, slow_handler)
            await fanout.notify("busy")
            await handling.wait()
            tg.cancel_scope.cancel()
        await fanout.aclose()
    listener, *_ = opened
    assert listener.closed, "the listening connection was left open"
