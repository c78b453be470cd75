"""Sessions leave memory: closed ones are released, live ones are bounded, the memory store is capped."""

from __future__ import annotations

import gc
import shutil
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import ToolsListChanged

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._http import bind, serve_http
from residency._gateway._sessions import MEMORY_LIMIT, SessionLimitReached, SessionTable, store_id
from residency._runtime import Session
from residency._store._memory import MemoryStore
from residency._store._protocol import JournalEntry, Store
from residency._store._sqlite import SQLiteStore
from tests._timing import START, STEP, scaled
from tests.gateway.conftest import config, running, session_meta

pytestmark = pytest.mark.anyio

CYCLES = 10_000
TRACED = 2_000
"""The last cycles, whose growth is measured: tracing every allocation makes a cycle about 2.5
times slower, and a leak per session shows in any stretch of them as well as in all (what grows
over the first ones and then stops is a bounded cache, which is allowed)."""
BYTES_PER_SESSION = 1024
"""The stated bound: average growth per session opened and closed, after a warm-up."""


def _tiny_upstream() -> Server[Any]:
    """One small tool: each session registers, plans and journals it like a real one."""
    tools = [
        types.Tool(
            name=name,
            description=f"The {name} tool.",
            input_schema={"type": "object", "properties": {"q": {"type": "string", "maxLength": 64}}},
        )
        for name in ("alpha",)
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    return Server("tiny", on_list_tools=list_tools)


class _Outbound:
    """A connection's standalone channel that goes nowhere (no client on the other end)."""

    async def send_raw_request(self, method: str, params: Any, opts: Any = None) -> dict[str, Any]:
        raise AssertionError("no request is expected")

    async def notify(self, method: str, params: Any, opts: Any = None) -> None:
        return None


def _connection() -> Connection:
    return Connection.for_loop(_Outbound())


async def _close(connection: Connection) -> None:
    # What the SDK does when a connection ends (mcp.server.runner.aclose_shielded).
    await connection.exit_stack.aclose()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    # On tmpfs when there is one: the test measures the heap, not the disk's fsync.
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path
    store = SQLiteStore(folder / "sessions.db")
    yield store
    store.close()
    if folder != tmp_path:
        shutil.rmtree(folder)


def _traced_bytes() -> int:
    gc.collect()
    return sum(stat.size for stat in tracemalloc.take_snapshot().statistics("filename"))


@pytest.mark.slow
async def test_ten_thousand_sessions_opened_and_closed_leave_memory_flat(sqlite_store: Store) -> None:
    async with running(upstreams={"tiny": _tiny_upstream()}, store=sqlite_store) as gw:

        async def cycle(i: int) -> None:
            key = f"s{i}"
            gw.session(key)  # the gateway's own open path: register the catalog, plan turn 0
            gs = gw._table.peek(key)
            assert gs is not None
            connection = _connection()
            gs.connections.add(connection)
            await _close(connection)

        for i in range(200):  # warm-up: caches, interned strings, the store's statements
            await cycle(-1 - i)
        with anyio.fail_after(scaled(300)):
            for i in range(CYCLES - TRACED):
                await cycle(i)
            tracemalloc.start(1)
            try:
                before = _traced_bytes()
                for i in range(CYCLES - TRACED, CYCLES):
                    await cycle(i)
                growth = _traced_bytes() - before
            finally:
                tracemalloc.stop()
        assert len(gw._table) == 0
        assert growth / TRACED < BYTES_PER_SESSION, f"{growth / TRACED:.0f} B per session"
        # Released, not lost: a session comes back from its journal.
        assert gw.session("s9999").tools() == ["alpha"]


async def test_clients_that_disconnect_leave_no_session_in_memory(sqlite_store: Store) -> None:
    async with running(desk=IncidentDesk(), store=sqlite_store) as gw:
        with anyio.fail_after(START):
            for _ in range(5):
                async with Client(gw.server, mode="legacy") as client:
                    await client.call_tool("reexpand_tools", {"names": ["get_incident"]})
                    assert len(gw._table) == 1
            for _ in range(5):  # a key the client repeats: the same session each time
                async with Client(gw.server, mode="legacy") as client:
                    await client.call_tool(
                        "get_incident", {"incident_id": "INC-1"}, meta=session_meta("again")
                    )
        assert len(gw._table) == 0
        again = gw.session("again")
        assert [again.call(f"c{i}").tool for i in range(1, 6)] == ["get_incident"] * 5


@pytest.mark.slow
async def test_an_http_session_leaves_memory_after_the_clients_delete() -> None:
    gateway = Gateway(config(), upstreams={"desk": IncidentDesk().server})
    ready = anyio.Event()
    urls: list[str] = []

    def started(url: str) -> None:
        urls.append(url)
        ready.set()

    async with gateway, anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(gateway, bind("127.0.0.1", 0), started=started))
        with anyio.fail_after(START):
            await ready.wait()
            for _ in range(3):
                async with (
                    httpx2.AsyncClient(timeout=httpx2.Timeout(STEP, read=None)) as http,
                    Client(streamable_http_client(urls[0], http_client=http), mode="legacy") as client,
                ):
                    await client.list_tools()
                    assert len(gateway._table) == 1
            # The DELETE is answered first; the session leaves as the server's side of its
            # connection winds down, in tasks of its own.
            while len(gateway._table):
                await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()


async def test_live_sessions_are_bounded_and_sessions_with_a_connection_leave_last() -> None:
    store = MemoryStore()
    table = SessionTable(store, lambda key, st: Session(st, session_id=store_id(key)), limit=3)
    attached = _connection()
    table.get("kept")[0].connections.add(attached)
    for key in ("a", "b", "c", "d"):
        table.get(key)
    assert {gs.key for gs in table} == {"kept", "c", "d"}
    await _close(attached)
    assert {gs.key for gs in table} == {"c", "d"}


async def test_a_session_in_use_is_found_again_rather_than_opened_twice() -> None:
    table = SessionTable(MemoryStore(), lambda key, st: Session(st, session_id=store_id(key)))
    connection = _connection()
    held, _ = table.get("k")  # a request in flight holds it while its connection closes
    held.connections.add(connection)
    await _close(connection)
    assert table.peek("k") is None
    again, opened = table.get("k")
    assert again is held and opened


async def test_an_idle_session_without_a_connection_is_released() -> None:
    now = [0.0]
    table = SessionTable(
        MemoryStore(), lambda key, st: Session(st, session_id=store_id(key)), idle=60, clock=lambda: now[0]
    )
    table.get("idle")
    connection = _connection()  # open: the SDK holds it
    table.get("attached")[0].connections.add(connection)
    now[0] = 61.0
    table.get("fresh")
    assert {gs.key for gs in table} == {"attached", "fresh"}


async def test_the_memory_store_refuses_new_keys_past_its_limit_and_keeps_serving_known_ones() -> None:
    store = MemoryStore()
    for i in range(MEMORY_LIMIT - 1):  # keys journaled before: they count
        store.append(store_id(f"old-{i}"), [JournalEntry("note", {}, 0.0)])
    async with running(desk=IncidentDesk(), store=store) as gw:
        with anyio.fail_after(START):
            async with Client(gw.server, mode="legacy") as client:
                last = session_meta("last")
                assert (await client.list_tools(meta=last)).tools
                with pytest.raises(MCPError) as refused:
                    await client.list_tools(meta=session_meta("one-too-many"))
                assert refused.value.error.data["type"] == "SessionLimitReached"
                assert (await client.list_tools(meta=last)).tools  # a known key still works
        assert store_id("one-too-many") not in store.sessions()
        assert len(gw._table) == 0  # released from memory; its journal stays
        assert gw.session("last").tools()


def test_the_limit_error_says_what_to_do() -> None:
    table = SessionTable(MemoryStore(), lambda key, st: Session(st, session_id=store_id(key)), memory_limit=1)
    table.get("a")
    with pytest.raises(SessionLimitReached) as refused:
        table.get("b")
    assert refused.value.limit == 1
    assert "sqlite" in str(refused.value).lower()


async def test_a_listen_bus_outlives_its_session_only_while_someone_listens() -> None:
    table = SessionTable(MemoryStore(), lambda key, st: Session(st, session_id=store_id(key)), limit=1)
    gs, _ = table.get("listener")
    seen: list[Any] = []
    leave = gs.bus.subscribe(seen.append)
    table.get("other")  # evicts "listener" from memory
    assert table.peek("listener") is None and len(table.buses()) == 2
    del gs
    gc.collect()
    back, _ = table.get("listener")
    await back.bus.publish(ToolsListChanged())
    assert len(seen) == 1  # the stream opened before the eviction still hears its session
    table.get("other")
    leave()
    assert len(table.buses()) == 1  # only the open session's own bus
    for i in range(100):
        table.get(f"k{i}")
    assert len(table.buses()) == 1
