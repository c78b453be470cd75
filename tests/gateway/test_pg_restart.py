"""A replica whose PostgreSQL server is restarted, or stopped and started again, while it serves.

Each test runs a PostgreSQL server of its own (``tests.pg_cluster``: the shared server behind
``RESIDENCY_PG_URL`` is never restarted), real ``residency serve --transport http`` processes on
it and real ``mcp.Client`` sessions over HTTP (2026-07-28 era). The server is restarted with
``pg_ctl restart -m fast``, or stopped while the replica keeps taking requests and then started
again. The same replica processes serve again afterwards, without a restart of their own, the
journal has no gap, and every call acknowledged before the outage is in it. A second replica
checks that ``LISTEN`` resumes: changes made on one replica after the restart reach the other's
listening clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from residency._gateway._server import CALL_META_KEY
from residency._gateway._sessions import store_id
from residency._store import open_store
from tests._timing import NOTICE, TEST
from tests.clients._serve import http_serve
from tests.gateway.test_pg_outage import (
    LIST_DELIVERY,
    PASSWORD,
    assert_listener_hears,
    call_read,
    client,
    reexpand,
    store_failure,
    until_served,
)
from tests.pg_cluster import private_cluster
from tests.postgres import with_params, with_password

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OUTAGE_ROUNDS = 2  # rounds of refused work while the server is stopped
LISTENING_AGAIN = "cross-replica notices: listening again"  # a replica's log, once LISTEN is back


def call_id(result: Any) -> str:
    """The id under which the gateway journaled an acknowledged call."""
    return str((result.meta or {})[CALL_META_KEY])


def journal(url: str, key: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The journal of session ``key``, read straight from the store: ``(seq, op, data)`` each."""
    with open_store(url, create=False) as store:  # type: ignore[attr-defined]
        entries = [(entry.seq, entry.op, dict(entry.data)) for entry in store.load(store_id(key))]
    assert entries, f"no journal for session {key!r}"
    return entries


def assert_sound(entries: Sequence[tuple[int, str, dict[str, Any]]], acknowledged: Sequence[str]) -> None:
    """Gap-free seqs from 1, and every acknowledged call id journaled as a call, once."""
    assert [seq for seq, _, _ in entries] == list(range(1, len(entries) + 1))
    calls = [data["id"] for _, op, data in entries if op == "call"]
    assert len(calls) == len(set(calls)), calls
    missing = set(acknowledged) - set(calls)
    assert not missing, f"acknowledged calls missing from the journal: {missing}"


async def test_a_restarted_server_is_served_again_by_the_same_replicas_and_listening_resumes() -> None:
    key = "restarted-1"
    async with private_cluster() as pg:
        url = with_params(with_password(pg.url, PASSWORD), pool_timeout="2")
        with anyio.fail_after(TEST):
            async with (
                http_serve(*LIST_DELIVERY, "--store", url) as a,
                http_serve(*LIST_DELIVERY, "--store", with_params(pg.url, pool_timeout="2")) as b,
                client(a, key) as on_a,
                client(b, key) as on_b,
            ):
                acknowledged = [call_id(await call_read(on_a)), call_id(await call_read(on_b))]
                await pg.restart()
                # Every pooled and LISTEN connection died with the old server. Only clear
                # store-unavailable errors are allowed until each replica serves again.
                acknowledged.append(call_id(await until_served(on_a, call_read)))
                acknowledged.append(call_id(await until_served(on_b, call_read)))
                # A's LISTEN connection came back: it hears B's change.
                await until_served(on_a, lambda c: c.list_tools(cache_mode="refresh"))
                await assert_listener_hears(on_a, on_b)
                # A second restart is no different from the first.
                await pg.restart()
                acknowledged.append(call_id(await until_served(on_a, call_read)))
            assert PASSWORD not in a.log()
        assert_sound(journal(pg.url, key), acknowledged)


async def test_a_stopped_server_gives_clear_errors_and_changes_nothing_until_it_starts_again() -> None:
    key = "stopped-1"
    async with private_cluster() as pg:
        url = with_params(with_password(pg.url, PASSWORD), pool_timeout="2")
        with anyio.fail_after(TEST):
            async with http_serve(*LIST_DELIVERY, "--store", url) as a, client(a, key) as on_a:
                acknowledged = [call_id(await call_read(on_a))]
                shown = {t.name for t in (await on_a.list_tools(cache_mode="refresh")).tools}
                assert "update_incident" not in shown  # withheld by the demo's policy
                before = journal(pg.url, key)
                await pg.stop()

                # Mutating work is refused with a clear error naming the store, round after round.
                for _ in range(OUTAGE_ROUNDS):
                    for work in (
                        lambda c: reexpand(c, "update_incident"),
                        call_read,
                        lambda c: c.list_tools(cache_mode="refresh"),
                    ):
                        with pytest.raises(MCPError) as refused:
                            await work(on_a)
                        store_failure(refused.value)
                        assert f"127.0.0.1:{pg.port}/" in str(refused.value)  # which store
                    await anyio.sleep(0.5)

                await pg.start()
                # Nothing the refused work asked for was written.
                assert journal(pg.url, key) == before
                # No restart of the replica: it serves again, and shows what it showed before.
                listed = await until_served(on_a, lambda c: c.list_tools(cache_mode="refresh"))
                assert {t.name for t in listed.tools} == shown
                acknowledged.append(call_id(await call_read(on_a)))
                await reexpand(on_a, "update_incident")
                listed = await on_a.list_tools(cache_mode="refresh")
                assert "update_incident" in {t.name for t in listed.tools}
            assert PASSWORD not in a.log()
        assert_sound(journal(pg.url, key), acknowledged)


async def test_the_first_change_after_a_restart_reaches_the_other_replica() -> None:
    key = "restarted-2"
    async with private_cluster() as pg:
        url = with_params(pg.url, pool_timeout="2")
        with anyio.fail_after(TEST):
            async with (
                http_serve(*LIST_DELIVERY, "--store", url) as a,
                http_serve(*LIST_DELIVERY, "--store", url) as b,
                client(a, key) as on_a,
                client(b, key) as on_b,
            ):
                await assert_listener_hears(on_b, on_a)  # A has sent a notice: it holds a connection
                await pg.restart()
                # Requests that change nothing (a change would spend A's one failing notice).
                await until_served(on_a, lambda c: c.list_tools(cache_mode="refresh"))
                # B listens again (and its reconnect has caught up); A's next change must reach it.
                with anyio.fail_after(NOTICE):
                    while LISTENING_AGAIN not in b.log():
                        await anyio.sleep(0.2)
                await until_served(on_b, lambda c: c.list_tools(cache_mode="refresh"))
                await assert_listener_hears(on_b, on_a)
