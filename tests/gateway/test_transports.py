"""The gateway on the wire: stdio (``python -m residency serve``) and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._http import bind, serve_http
from residency._gateway._meta_tools import META_TOOLS
from tests.gateway.conftest import config, reason, text

pytestmark = pytest.mark.anyio

MODES = ("legacy", "auto")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_residency_serve_speaks_mcp_over_stdio(mode: str) -> None:
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    params = StdioServerParameters(command=sys.executable, args=["-m", "residency", "serve"])
    with anyio.fail_after(60):
        async with Client(params, mode=mode, message_handler=on_message) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert set(META_TOOLS) <= set(names)
            assert "update_incident" not in names  # withheld by the demo's schema budget
            expanded = await client.call_tool("reexpand_tools", {"names": ["update_incident"]})
            assert not expanded.is_error
            if mode == "auto":
                assert client.protocol_version == "2026-07-28"
                withheld = await client.call_tool("get_incident", {"incident_id": "INC-7"})
                assert reason(withheld) == "tool_not_resident"
                await client.call_tool("reexpand_tools", {"names": ["get_incident"]})
            else:
                assert any(isinstance(m, types.ToolListChangedNotification) for m in seen)
            result = await client.call_tool("update_incident", {"incident_id": "INC-7", "notify": False})
            assert "INC-7" in text(result)


@asynccontextmanager
async def http_gateway(token: str | None = None, **residency: Any) -> AsyncIterator[tuple[Gateway, str]]:
    desk = IncidentDesk()
    gateway = Gateway(config(residency), upstreams={"desk": desk.server})
    ready = anyio.Event()
    urls: list[str] = []

    def started(url: str) -> None:
        urls.append(url)
        ready.set()

    async with gateway, anyio.create_task_group() as tg:
        sock = bind("127.0.0.1", 0)
        tg.start_soon(lambda: serve_http(gateway, sock, token=token, started=started))
        with anyio.fail_after(10):
            await ready.wait()
        yield gateway, urls[0]
        tg.cancel_scope.cancel()


@asynccontextmanager
async def _client(url: str, mode: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(10, read=None)
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_the_gateway_serves_streamable_http_on_an_ephemeral_loopback_port(mode: str) -> None:
    async with http_gateway() as (gw, url):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        with anyio.fail_after(30):
            async with _client(url, mode, {"Residency-Session": "http-1"}) as client:
                await client.call_tool("reexpand_tools", {"names": ["get_incident"]})
                result = await client.call_tool("get_incident", {"incident_id": "INC-1"})
                assert "INC-1" in text(result)
        assert gw.session("http-1").call("c1").tool == "get_incident"


@pytest.mark.slow
async def test_http_refuses_foreign_host_headers_and_requests_without_the_token() -> None:
    async with http_gateway(token="t0ken-for-tests") as (_, url):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer t0ken-for-tests"}
        async with httpx2.AsyncClient(timeout=10) as http:
            rebinding = await http.post(url, json=body, headers={**accept, "Host": "evil.example:80"})
            assert rebinding.status_code == 421
            anonymous = await http.post(url, json=body, headers={"Accept": accept["Accept"]})
            assert anonymous.status_code == 401
            wrong = await http.post(url, json=body, headers={**accept, "Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        with anyio.fail_after(30):
            async with _client(url, "legacy", {"Authorization": "Bearer t0ken-for-tests"}) as client:
                assert set(META_TOOLS) <= {t.name for t in (await client.list_tools()).tools}


@pytest.mark.slow
async def test_listen_streams_carry_tombstone_updates_to_their_own_session_only() -> None:
    async with http_gateway(budget={"schema_tokens": 350}) as (gw, url):
        with anyio.fail_after(30):
            async with (
                _client(url, "auto", {"Residency-Session": "alice"}) as alice,
                _client(url, "auto", {"Residency-Session": "bob"}) as bob,
                alice.listen(resource_subscriptions=["residency://tombstones"]) as alice_events,
                bob.listen(resource_subscriptions=["residency://tombstones"]) as bob_events,
            ):
                # alice calls a mutation tool, then enough read-only tools to have it tombstoned.
                for name, arguments in (
                    ("update_incident", {"incident_id": "INC-1", "notify": False}),
                    ("get_timeline", {"incident_id": "INC-1"}),
                    ("list_services", {}),
                    ("get_runbook", {"runbook_id": "RB-2"}),
                ):
                    await alice.call_tool("reexpand_tools", {"names": [name]})
                    await alice.call_tool(name, arguments)
                assert gw.session("alice").tombstones()
                event = await alice_events.__anext__()
                assert getattr(event, "uri", None) == "residency://tombstones"
                with anyio.move_on_after(0.5) as quiet:
                    await bob_events.__anext__()
                assert quiet.cancelled_caught, "bob received alice's tombstone update"
