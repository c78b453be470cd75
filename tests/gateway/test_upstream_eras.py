"""In-process upstreams are spoken to in the cheaper 2026-07-28 era unless it loses their change notices."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._connection import ListChangedServer, connection_of
from residency._gateway._upstream import in_process_era
from tests._timing import NOTICE
from tests.gateway.conftest import agent, running, text

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}}


class HandshakeOnlyUpstream:
    """Advertises ``tools.listChanged`` and tells its connections directly; serves no listen stream."""

    def __init__(self) -> None:
        self.tools = [tool("alpha")]
        self.connections: list[Connection] = []

        async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
            connection = connection_of(ctx)
            if connection not in self.connections:
                self.connections.append(connection)
            return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in self.tools])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])

        self.server = ListChangedServer("handshake-only", on_list_tools=list_tools, on_call_tool=call_tool)

    async def add(self, name: str) -> None:
        self.tools.append(tool(name))
        for connection in self.connections:
            await connection.send_tool_list_changed()


def reloads(gw: Gateway) -> list[anyio.Event]:
    """Events set after each reload the gateway runs on its own (the real reload runs)."""
    done: list[anyio.Event] = [anyio.Event()]
    real = gw.reload

    async def reload(server: str | None = None) -> None:
        await real(server)
        done[-1].set()

    gw.reload = reload  # type: ignore[method-assign]
    return done


def test_the_era_is_chosen_by_where_a_server_can_announce_tool_changes() -> None:
    async def no_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])

    plain = Server("plain", on_list_tools=no_tools)
    assert in_process_era(plain) == "modern"  # it announces nothing in either era
    assert in_process_era(HandshakeOnlyUpstream().server) == "legacy"
    assert in_process_era(IncidentDesk().server) == "modern"  # it serves subscriptions/listen
    assert in_process_era(MCPServer("high-level")) == "legacy"  # as before: no capability probing


async def test_a_listen_stream_change_reloads_the_gateway_without_being_asked() -> None:
    desk = IncidentDesk(schema="v1")
    async with running(desk=desk) as gw:
        assert gw.upstreams["desk"].protocol_version == MODERN
        before = gw.catalog.get("update_incident")
        assert before is not None
        done = reloads(gw)
        await desk.migrate()
        with anyio.fail_after(NOTICE):
            await done[0].wait()
        after = gw.catalog.get("update_incident")
        assert after is not None and after.hash != before.hash


async def test_an_upstream_that_announces_changes_only_in_the_handshake_era_is_still_heard() -> None:
    upstream = HandshakeOnlyUpstream()
    async with running(upstreams={"up": upstream.server}) as gw:
        assert gw.upstreams["up"].protocol_version != MODERN
        assert gw.catalog.get("beta") is None
        done = reloads(gw)
        await upstream.add("beta")
        with anyio.fail_after(NOTICE):
            await done[0].wait()
        assert gw.catalog.get("beta") is not None


async def test_a_high_level_mcpserver_upstream_is_served_in_the_handshake_era() -> None:
    hl = MCPServer("high-level")

    @hl.tool()
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    async with running({"pinned": ["shout"]}, upstreams={"hl": hl}) as gw, agent(gw, "legacy") as a:
        assert gw.upstreams["hl"].protocol_version != MODERN
        assert text(await a.call("shout", {"text": "hi"})) == "HI"


async def test_an_upstreams_protocol_meta_stops_at_the_gateway(era: str) -> None:
    """The desk, spoken to in the 2026-07-28 era, stamps its ``serverInfo`` on every result; the
    gateway's client is told of the gateway instead: its stamp in that era, none in the
    handshake era (a stamp there would tell an older client of a server it never met)."""
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        assert gw.upstreams["desk"].protocol_version == "2026-07-28"
        with anyio.fail_after(NOTICE):
            result = await a.use("get_runbook", {"runbook_id": "RB-1"})
    assert not result.is_error and "RB-1" in text(result)
    stamp = (result.meta or {}).get(types.SERVER_INFO_META_KEY)
    if era == "legacy":
        assert stamp is None
    else:
        assert isinstance(stamp, dict) and stamp["name"] == gw.server.name != "incident-desk"
