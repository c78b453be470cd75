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
from mcp.client.subscriptions import ToolsListChanged

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._meta_tools import listed_meta_tools
from tests._timing import START, STEP, scaled
from tests.gateway.conftest import config, reason, served_over_http, text

META_TOOLS = listed_meta_tools(chains=False, offload=False)  # a fresh session: no chain yet, no offloading

pytestmark = pytest.mark.anyio

MODES = ("legacy", "auto")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_residency_serve_speaks_mcp_over_stdio(mode: str) -> None:
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    # by list: the probe is what the list shows (withheld, then listed after re-expansion)
    argv = ["-m", "residency", "serve", "--delivery", "list"]
    params = StdioServerParameters(command=sys.executable, args=argv)
    with anyio.fail_after(START):
        async with Client(params, mode=mode, message_handler=on_message) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert set(META_TOOLS) <= set(names)
            assert "update_incident" not in names  # withheld by the demo's schema budget
            expanded = await client.call_tool("reexpand_tools", {"names": ["update_incident"]})
            assert not expanded.is_error
            assert "update_incident" in [t.name for t in (await client.list_tools()).tools]
            if mode == "auto":
                assert client.protocol_version == "2026-07-28"
            else:
                assert any(isinstance(m, types.ToolListChangedNotification) for m in seen)
            result = await client.call_tool("update_incident", {"incident_id": "INC-7", "notify": False})
            assert "INC-7" in text(result)


@asynccontextmanager
async def http_gateway(token: str | None = None, **residency: Any) -> AsyncIterator[tuple[Gateway, str]]:
    desk = IncidentDesk()
    # by list: these tests probe sessions and streams through what each session's list shows
    gateway = Gateway(config({"delivery": "list", **residency}), upstreams={"desk": desk.server})
    async with gateway, served_over_http(gateway, token=token) as url:
        yield gateway, url


@asynccontextmanager
async def _client(url: str, mode: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(STEP, read=None)
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
        with anyio.fail_after(STEP):
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
        async with httpx2.AsyncClient(timeout=STEP) as http:
            rebinding = await http.post(url, json=body, headers={**accept, "Host": "evil.example:80"})
            assert rebinding.status_code == 421
            anonymous = await http.post(url, json=body, headers={"Accept": accept["Accept"]})
            assert anonymous.status_code == 401
            wrong = await http.post(url, json=body, headers={**accept, "Authorization": "Bearer nope"})
            assert wrong.status_code == 401
        with anyio.fail_after(STEP):
            async with _client(url, "legacy", {"Authorization": "Bearer t0ken-for-tests"}) as client:
                assert set(META_TOOLS) <= {t.name for t in (await client.list_tools()).tools}


@pytest.mark.slow
async def test_listen_streams_carry_tombstone_updates_to_their_own_session_only() -> None:
    async with http_gateway(budget={"schema_tokens": 350}) as (gw, url):
        with anyio.fail_after(STEP):
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
                # Her list changed too (a tools/list_changed event comes first); then the tombstones.
                uris = []
                while "residency://tombstones" not in uris:
                    uris.append(getattr(await alice_events.__anext__(), "uri", None))
                with anyio.move_on_after(scaled(0.5)) as quiet:
                    await bob_events.__anext__()
                assert quiet.cancelled_caught, "bob received alice's updates"


@pytest.mark.slow
async def test_a_modern_session_hears_of_its_own_list_changes_on_its_listen_stream() -> None:
    async with http_gateway(budget={"schema_tokens": 350}) as (_, url):
        with anyio.fail_after(STEP):
            async with (
                _client(url, "auto", {"Residency-Session": "alice"}) as alice,
                alice.listen(tools_list_changed=True) as events,
            ):
                assert "list_services" not in _names(await alice.list_tools())
                await alice.call_tool("reexpand_tools", {"names": ["list_services"]})
                assert isinstance(await events.__anext__(), ToolsListChanged)
                listed = await alice.list_tools()
                assert "list_services" in _names(listed)
                assert (listed.ttl_ms, listed.cache_scope) == (0, "private")


@pytest.mark.slow
async def test_anonymous_modern_callers_get_a_throwaway_session_per_request() -> None:
    async with http_gateway(budget={"schema_tokens": 350}) as (gw, url):
        with anyio.fail_after(STEP):
            async with (
                _client(url, "auto") as anonymous,
                _client(url, "auto", {"Residency-Session": "kept"}) as kept,
            ):
                for client in (anonymous, kept):
                    expanded = await client.call_tool("reexpand_tools", {"names": ["list_services"]})
                    assert not expanded.is_error
                assert "list_services" in _names(await kept.list_tools())
                # Nothing an anonymous caller does outlives its request, and nothing is shared.
                assert "list_services" not in _names(await anonymous.list_tools())
                # It can still call any tool with valid arguments (implicit re-expansion).
                found = await anonymous.call_tool("get_incident", {"incident_id": "INC-1"})
                assert "INC-1" in text(found)
                refused = await anonymous.call_tool("get_incident", {"incident_id": "seven"})
                assert reason(refused) == "arguments_invalid"
        assert "anonymous" not in [gs.key for gs in gw._table]


@pytest.mark.slow
async def test_modern_callers_without_a_session_key_share_their_bearer_token_identity() -> None:
    token = "t0ken-for-tests"
    async with http_gateway(token=token, budget={"schema_tokens": 350}) as (gw, url):
        auth = {"Authorization": f"Bearer {token}"}
        with anyio.fail_after(STEP):
            async with _client(url, "auto", auth) as first:
                await first.call_tool("reexpand_tools", {"names": ["list_services"]})
            async with _client(url, "auto", auth) as second:
                assert "list_services" in _names(await second.list_tools())
        (key,) = [gs.key for gs in gw._table]
        assert key.startswith("token-") and token not in key


def _names(listed: types.ListToolsResult) -> list[str]:
    return [t.name for t in listed.tools]


@pytest.mark.slow
async def test_handshake_http_clients_without_a_key_each_get_the_session_of_their_mcp_session_id() -> None:
    async with http_gateway(budget={"schema_tokens": 350}) as (gw, url):
        with anyio.fail_after(STEP):
            async with _client(url, "legacy") as first, _client(url, "legacy") as second:
                await first.call_tool("reexpand_tools", {"names": ["list_services"]})
                assert "list_services" in _names(await first.list_tools())
                assert "list_services" not in _names(await second.list_tools())
                keys = sorted(gs.key for gs in gw._table)
        assert len(keys) == 2 and all(k.startswith("http-") for k in keys)
