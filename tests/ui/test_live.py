"""Live updates: a PostgreSQL store's notices reach a dashboard's event stream; SQLite pages poll.

The dashboard is served by uvicorn on a loopback port (the stream is the subject: an in-process
transport would buffer it), over a real PostgreSQL store (``RESIDENCY_PG_URL``); writes come
through another store object, whose connections are not the dashboard's.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from starlette.testclient import TestClient

from residency import SQLiteStore
from residency._gateway._http import bind
from residency._store._protocol import DEFAULT_SCOPE, JournalEntry, Store
from residency._ui._app import COOKIE, cookie_for
from residency._ui._front import store_dashboard
from residency._ui._live import LiveUpdates, stopping_server
from residency._ui._reads import ServedWith
from tests._timing import CLEANUP, NOTICE, START, STEP
from tests.postgres import drop_schema, new_schema, pg_url, schema_url, with_params

pytestmark = pytest.mark.anyio

TOKEN = "a-live-dashboard-token-of-32-chr"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SERVED = ServedWith("compact", delivery="list")


@pytest.fixture
def pg_store_url() -> Iterator[str]:
    with schema_url() as url:
        yield url


@pytest.fixture
def pg_store(pg_store_url: str) -> Iterator[Store]:
    from residency import PostgresStore

    store = PostgresStore(pg_store_url)
    store.append("gateway/first", [JournalEntry("turn", {"turn": 1}, 1.0)])
    yield store
    store.close()


@pytest.fixture
def writer(pg_store_url: str, pg_store: Store) -> Iterator[Any]:
    """The same store opened again: its own pool, as another process would write."""
    from residency import PostgresStore

    store = PostgresStore(pg_store_url)
    yield store
    store.close()


@asynccontextmanager
async def serving(store: Store, live: LiveUpdates) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """``residency ui``'s app over ``store`` on a free loopback port, stopped on exit (bounded)."""
    sock = bind("127.0.0.1", 0)
    app = store_dashboard(
        store, SERVED, where="the store", host="127.0.0.1", token=TOKEN, loopback=True, live=live
    )
    config = uvicorn.Config(app, log_level="warning", log_config=None, lifespan="off", ws="none")
    server = stopping_server(config, live)
    done = anyio.Event()

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(START):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
        finally:
            server.should_exit = True
            with anyio.fail_after(CLEANUP):  # an open stream must not hold the shutdown up
                await done.wait()


async def messages(response: Any) -> AsyncIterator[tuple[str, str]]:
    """A stream's messages as ``(event, data)``; a comment as ``(":", text)``."""
    event, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield ":", line[1:].strip()
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif not line and data:
            yield event, data
            event, data = "message", ""


async def next_change(stream: AsyncIterator[tuple[str, str]]) -> dict[str, Any]:
    with anyio.fail_after(NOTICE):
        async for event, data in stream:
            if event == "change":
                found: dict[str, Any] = json.loads(data)
                return found
    raise AssertionError("the stream ended without a change")


async def test_a_subscribed_page_hears_of_an_append_by_another_connection(
    pg_store: Store, writer: Any, pg_store_url: str
) -> None:
    from residency import PostgresStore

    other = PostgresStore(with_params(pg_url(), schema=new_schema()))  # another store, same database
    live = LiveUpdates()
    try:
        async with (
            serving(pg_store, live) as (base, _),
            httpx2.AsyncClient(timeout=STEP) as client,
            client.stream("GET", f"{base}/ui/events", headers=AUTH) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = messages(response)
            assert await anext(stream) == (":", "listening")  # sent once LISTEN is active
            assert live.listening
            other.append("gateway/elsewhere", [JournalEntry("turn", {"turn": 1}, 2.0)])
            await anyio.to_thread.run_sync(
                lambda: writer.append("gateway/new", [JournalEntry("turn", {"turn": 1}, 3.0)])
            )
            assert await next_change(stream) == {"sessions": ["gateway/new"], "archive": False}
            await anyio.to_thread.run_sync(
                lambda: writer.archive_chain(DEFAULT_SCOPE, {"digest": "d-1", "rule": "r"})
            )
            assert await next_change(stream) == {"sessions": [], "archive": True}
    finally:
        schema = other.schema
        other.close()
        drop_schema(pg_url(), schema)


async def test_the_event_stream_needs_the_pages_credentials(pg_store: Store) -> None:
    live = LiveUpdates()
    async with serving(pg_store, live) as (base, _), httpx2.AsyncClient(timeout=STEP) as client:
        refused = await client.get(f"{base}/ui/events")
        assert refused.status_code == 401
        wrong = await client.get(f"{base}/ui/events", headers={"authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        assert live.streams == 0 and not live.listening
        cookie = {"cookie": f"{COOKIE}={cookie_for(TOKEN, int(time.time()))}"}
        async with client.stream("GET", f"{base}/ui/events", headers=cookie) as response:
            assert response.status_code == 200
            assert await anext(messages(response)) == (":", "listening")


async def test_streams_are_capped_and_a_refused_page_is_told_to_poll(pg_store: Store) -> None:
    live = LiveUpdates(max_streams=1)
    async with serving(pg_store, live) as (base, _), httpx2.AsyncClient(timeout=STEP) as client:
        async with client.stream("GET", f"{base}/ui/events", headers=AUTH) as first:
            assert await anext(messages(first)) == (":", "listening")
            second = await client.get(f"{base}/ui/events", headers=AUTH)
            assert second.status_code == 503
            assert "poll" in second.text and second.headers["retry-after"]
        with anyio.fail_after(STEP):  # the first one's end frees its place
            while live.streams:
                await anyio.sleep(0.01)
        async with client.stream("GET", f"{base}/ui/events", headers=AUTH) as third:
            assert third.status_code == 200


async def test_a_quiet_stream_gets_keepalives_then_ends_and_the_listener_follows(pg_store: Store) -> None:
    live = LiveUpdates(keepalive=0.05, idle=0.3, linger=0.1)
    async with serving(pg_store, live) as (base, _), httpx2.AsyncClient(timeout=STEP) as client:
        async with client.stream("GET", f"{base}/ui/events", headers=AUTH) as response:
            with anyio.fail_after(STEP):
                seen = [m async for m in messages(response)]  # ends by itself
        assert seen[0] == (":", "listening")
        assert (":", "keepalive") in seen
        with anyio.fail_after(STEP):
            while live.listening:
                await anyio.sleep(0.02)
        assert live.streams == 0


async def test_stopping_the_server_ends_open_streams(pg_store: Store) -> None:
    live = LiveUpdates()
    async with httpx2.AsyncClient(timeout=STEP) as client:
        async with (
            serving(pg_store, live) as (base, server),
            client.stream("GET", f"{base}/ui/events", headers=AUTH) as response,
        ):
            stream = messages(response)
            assert await anext(stream) == (":", "listening")
            server.should_exit = True
            with anyio.fail_after(STEP):
                rest = [m async for m in stream]
            assert not any(event == "change" for event, _ in rest)
        assert not live.listening and live.streams == 0


def test_pages_over_postgresql_subscribe_and_pages_over_sqlite_poll(pg_store: Store, tmp_path: Path) -> None:
    sqlite = SQLiteStore(tmp_path / "s.db")
    sqlite.append("gateway/first", [JournalEntry("turn", {"turn": 1}, 1.0)])
    try:
        for store, live in ((pg_store, True), (sqlite, False)):
            app = store_dashboard(store, SERVED, where="w", host="127.0.0.1", token=None, loopback=True)
            with TestClient(app, base_url="http://127.0.0.1") as c:
                for path in ("/ui/", "/ui/session/gateway%2Ffirst", "/ui/chains"):
                    page = c.get(path)
                    assert page.status_code == 200
                    assert ('data-live="events"' in page.text) is live, (store, path)
                    assert "data-stamp=" in page.text
                if not live:
                    assert c.get("/ui/events").status_code == 404
                    assert c.get("/ui/stamp", params={"path": "/ui/"}).status_code == 200
    finally:
        sqlite.close()


async def test_a_gateways_dashboard_streams_its_own_sessions_changes(pg_store: Store) -> None:
    from residency._gateway import IncidentDesk
    from tests.gateway.conftest import running, served_over_http
    from tests.test_cli_view import POLICY

    async with (
        running(POLICY, desk=IncidentDesk(), store=pg_store) as gw,
        served_over_http(gw, token=TOKEN) as url,
        httpx2.AsyncClient(timeout=STEP) as client,
        client.stream("GET", url.removesuffix("/mcp") + "/ui/events", headers=AUTH) as response,
    ):
        assert response.status_code == 200
        stream = messages(response)
        assert await anext(stream) == (":", "listening")
        session = gw.session("watched")
        await anyio.to_thread.run_sync(lambda: session.archive("get_timeline", "seen on the dashboard"))
        change = await next_change(stream)
        assert change["sessions"] is None or session.session_id in change["sessions"]
