"""A replica whose PostgreSQL goes away: clear errors while it is gone, no restart when it returns.

Each test runs a real ``residency serve --transport http`` process on a PostgreSQL schema of its
own and a real ``mcp.Client`` over HTTP (2026-07-28 era). Two outages, neither needing root:
the replica's server connections killed with ``pg_terminate_backend``, and its network link to
PostgreSQL cut and restored (it connects through a ``Relay`` the test controls). A second
replica, connected directly, checks that the first one's ``LISTEN`` came back.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from residency._gateway._meta_tools import REEXPAND_TOOLS
from residency._gateway._server import CALL_META_KEY
from residency._gateway._sessions import store_id
from residency._store import open_store
from tests._timing import scaled
from tests.clients._serve import Served, http_serve
from tests.postgres import Relay, drop_schema, new_schema, pg_url, terminate, with_params, with_password

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODERN = "2026-07-28"
PASSWORD = "outage-pw-5c1e"  # trust auth ignores it; it must never reach a client
READ = ("get_incident", {"incident_id": "INC-7"})
# Delivery by list: these tests probe the replica through what tools/list shows (re-expanded
# tools join it, list changes are heard across replicas); by reference the list is fixed.
LIST_DELIVERY = ("--delivery", "list")
RECOVERY = 60.0  # seconds a replica may take to serve again once PostgreSQL is back


@pytest.fixture
def schema() -> Iterator[str]:
    base = pg_url()
    name = new_schema()
    try:
        yield name
    finally:
        drop_schema(base, name)


@asynccontextmanager
async def client(served: Served, key: str) -> AsyncIterator[Client]:
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Residency-Session": key}, timeout=httpx2.Timeout(60, read=None))
        )
        c = await stack.enter_async_context(Client(streamable_http_client(served.url, http_client=http)))
        assert c.protocol_version == MODERN
        yield c


def store_failure(exc: MCPError) -> dict[str, Any]:
    """The error's data, checked to be a clear store-unavailable refusal with no password."""
    data = dict(exc.data or {})
    assert data.get("reason") == "store_unavailable", (exc.code, str(exc), data)
    assert data.get("type") == "StoreUnavailable"
    assert exc.code == types.INTERNAL_ERROR
    assert PASSWORD not in str(exc) and PASSWORD not in repr(data)
    return data


async def reexpand(c: Client, name: str) -> types.CallToolResult:
    result = await c.call_tool(REEXPAND_TOOLS, {"names": [name]})
    assert not result.is_error, result
    return result


async def until_served(c: Client, work: Any) -> Any:
    """Run ``work(c)`` until it succeeds; only store-unavailable errors are allowed meanwhile."""
    with anyio.fail_after(RECOVERY):
        while True:
            try:
                return await work(c)
            except MCPError as exc:
                store_failure(exc)
            await anyio.sleep(0.5)


async def call_read(c: Client) -> types.CallToolResult:
    result = await c.call_tool(*READ)
    if result.is_error:  # withheld by the demo's budget: re-expand it first
        await reexpand(c, READ[0])
        result = await c.call_tool(*READ)
    assert not result.is_error, result
    assert (result.meta or {}).get(CALL_META_KEY)
    return result


WITHHELD = ("list_services", "list_incidents", "page_oncall", "close_incident", "create_incident")


async def assert_listener_hears(listener: Client, writer: Client) -> None:
    """A re-expansion through ``writer`` reaches ``listener`` as a list change (LISTEN/NOTIFY)."""
    shown = {t.name for t in (await listener.list_tools(cache_mode="refresh")).tools}
    tool = next(name for name in WITHHELD if name not in shown)
    async with listener.listen(tools_list_changed=True) as events:
        await reexpand(writer, tool)
        with anyio.fail_after(scaled(30)):
            assert isinstance(await events.__anext__(), ToolsListChanged)
    listed = await listener.list_tools(cache_mode="refresh")
    assert tool in {t.name for t in listed.tools}


async def test_killed_server_connections_are_replaced_and_listening_resumes(schema: str) -> None:
    base = pg_url()
    app = f"outage-{uuid.uuid4().hex[:8]}"
    url = with_params(with_password(base, PASSWORD), schema=schema, application_name=app)
    key = "terminated-1"
    with anyio.fail_after(scaled(240)):
        async with (
            http_serve(*LIST_DELIVERY, "--store", url) as a,
            http_serve(*LIST_DELIVERY, "--store", with_params(base, schema=schema)) as b,
            client(a, key) as on_a,
            client(b, key) as on_b,
        ):
            await call_read(on_a)
            assert terminate(base, app) >= 2, "the replica's pool and LISTEN connections"
            # Reads and appends find their connection dead, and get a fresh one: the first
            # call after the kill already succeeds, or names the store as unavailable.
            await until_served(on_a, call_read)
            for _ in range(3):
                assert terminate(base, app) >= 1
                await until_served(on_a, call_read)
            # A's LISTEN connection was killed too: it listens again and hears B's change.
            await until_served(on_a, lambda c: c.list_tools(cache_mode="refresh"))
            await assert_listener_hears(on_a, on_b)
    assert PASSWORD not in a.log()


async def test_a_cut_link_gives_clear_errors_then_the_replica_serves_again_by_itself(schema: str) -> None:
    base = pg_url()
    key = "cut-1"
    async with Relay(base) as relay:
        # A short pool timeout keeps each refusal during the outage quick.
        url = relay.url_via(with_params(with_password(base, PASSWORD), schema=schema, pool_timeout="2"))
        with anyio.fail_after(scaled(300)):
            async with (
                http_serve(*LIST_DELIVERY, "--store", url) as a,
                http_serve(*LIST_DELIVERY, "--store", with_params(base, schema=schema)) as b,
                client(a, key) as on_a,
                client(b, key) as on_b,
            ):
                await call_read(on_a)
                relay.cut()

                # Mutating work is refused with a clear error naming the store, again and again.
                for work in (
                    lambda c: reexpand(c, "update_incident"),
                    call_read,
                    lambda c: c.list_tools(cache_mode="refresh"),
                ):
                    with pytest.raises(MCPError) as refused:
                        await work(on_a)
                    store_failure(refused.value)
                    assert "127.0.0.1" in str(refused.value)  # which store: its host, port...
                    assert f":{relay.port}/" in str(refused.value)
                # Nothing was changed by the refused work: B, on its own link, sees no
                # re-expansion of update_incident.
                listed = await on_b.list_tools(cache_mode="refresh")
                assert "update_incident" not in {t.name for t in listed.tools}

                # B keeps serving the same session meanwhile, and changes it.
                await call_read(on_b)
                await reexpand(on_b, "list_services")

                await relay.restore()
                # No restart: A serves again, on the state B left.
                listed = await until_served(on_a, lambda c: c.list_tools(cache_mode="refresh"))
                assert "list_services" in {t.name for t in listed.tools}
                await call_read(on_a)
                # A's LISTEN reconnected through the restored link.
                await assert_listener_hears(on_a, on_b)
        assert PASSWORD not in a.log()

    with open_store(with_params(base, schema=schema)) as store:  # type: ignore[attr-defined]
        seqs = [entry.seq for entry in store.load(store_id(key))]
    assert seqs and seqs == list(range(1, len(seqs) + 1))
