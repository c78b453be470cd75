"""HTTP upstreams: the era spoken to them, and large tool lists that never drop an upstream.

The upstreams are real servers on loopback ports: an mcp 2.3.0 low-level server (both eras,
SSE responses) served in-process by uvicorn, with 1,200 tools in one page (about 1.3 MB, over
the SDK's 1 MiB SSE event limit), in pages, or with a cursor that never ends; and a
handshake-only mcp 1.30 server run as a subprocess in the langchain venv.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server

from residency._errors import ConfigError
from residency._gateway import IncidentDesk, parse_config
from residency._gateway._http import bind
from residency._gateway._http_upstream import MODERN_MAX_TOOLS
from residency._gateway._resources import upstream_status
from residency._gateway._run import ServeOptions, startup_summary
from tests._timing import scaled
from tests.gateway.conftest import agent, running, text
from tests.gateway.test_upstream_eras import HandshakeOnlyUpstream, reloads

COUNT = 1200
"""Tools besides ``echo``: their one-page list is over the SDK's 1 MiB SSE event limit."""

SDK_SSE_LIMIT = 1024 * 1024
WAIT = {"ready_wait": 120, "startup_timeout": 120}


def _tool(i: int) -> types.Tool:
    return types.Tool(
        name=f"tool_{i:05d}",
        description=f"Tool number {i}. " + "It does one small thing to a record, and says what it did. " * 16,
        input_schema={
            "type": "object",
            "properties": {"record": {"type": "string", "description": "The record's identifier."}},
        },
    )


ECHO = types.Tool(
    name="echo",
    description="Return the arguments it was given.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


def build(count: int, page: int = 0, *, endless: bool = False) -> Server[Any]:
    """``echo`` plus ``count`` tools; ``page`` > 0 lists them in pages of that size; ``endless``
    answers every page with a next cursor (the same one again)."""
    tools = [ECHO, *(_tool(i) for i in range(count))]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if endless:
            return types.ListToolsResult(tools=tools[:1], next_cursor="again")
        if not page:
            return types.ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + page
        return types.ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        body = json.dumps(params.arguments or {}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} {body}")])

    return Server("http-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


@asynccontextmanager
async def served(server: Server[Any]) -> AsyncIterator[str]:
    """``server`` over streamable HTTP (SSE responses) on an ephemeral loopback port; its URL."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    sock = bind("127.0.0.1", 0)
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: web.serve(sockets=[sock]))
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
            finally:
                web.should_exit = True
    finally:
        sock.close()


def _listed(gw: Any) -> list[str]:
    return [str(t["name"]) for t in gw.upstreams["big"].tools]


def _expected() -> list[str]:
    return ["echo", *(f"tool_{i:05d}" for i in range(COUNT))]


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["auto", "modern"])
async def test_a_small_http_upstream_is_spoken_to_in_the_2026_era(era: str) -> None:
    with anyio.fail_after(scaled(60)):
        async with (
            served(build(MODERN_MAX_TOOLS - 1)) as url,
            running(WAIT, servers={"big": {"url": url, "era": era}}) as gw,
        ):
            upstream = gw.upstreams["big"]
            assert upstream.protocol_version == "2026-07-28"
            assert len(upstream.tools) == MODERN_MAX_TOOLS
            async with agent(gw, "legacy") as a:
                result = await a.use("echo", {"text": "hi"})
                assert not result.is_error and text(result) == 'echo {"text": "hi"}'


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("page", [0, 100], ids=["one-page", "pages-of-100"])
async def test_a_large_http_upstream_is_spoken_to_in_the_handshake_era_with_its_whole_list(page: int) -> None:
    everything = [ECHO, *map(_tool, range(COUNT))]
    one_page = json.dumps([t.model_dump(mode="json", by_alias=True) for t in everything])
    assert len(one_page) > SDK_SSE_LIMIT  # one page is an SSE event the SDK's default refuses
    with anyio.fail_after(scaled(150)):
        async with served(build(COUNT, page)) as url, running(WAIT, servers={"big": {"url": url}}) as gw:
            upstream = gw.upstreams["big"]
            assert upstream.status == "connected"
            assert upstream.protocol_version == "2025-11-25"
            assert _listed(gw) == _expected()
            async with agent(gw, "modern") as a:
                result = await a.use("echo", {"text": "hi"})
                assert not result.is_error and text(result) == 'echo {"text": "hi"}'


@pytest.mark.slow
@pytest.mark.anyio
async def test_era_modern_keeps_the_2026_era_for_a_large_upstream_and_reads_its_list_whole() -> None:
    with anyio.fail_after(scaled(150)):
        async with (
            served(build(COUNT)) as url,
            running(WAIT, servers={"big": {"url": url, "era": "modern"}}) as gw,
        ):
            upstream = gw.upstreams["big"]
            assert upstream.protocol_version == "2026-07-28"
            assert _listed(gw) == _expected()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_list_over_the_message_limit_fails_the_upstream_visibly_and_the_gateway_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = {"era": "legacy", "max_message_bytes": SDK_SSE_LIMIT}
    with anyio.fail_after(scaled(150)):
        async with (
            served(build(COUNT)) as big_url,
            served(build(0)) as small_url,
            running(WAIT, servers={"big": {**entry, "url": big_url}, "small": {"url": small_url}}) as gw,
        ):
            big = gw.upstreams["big"]
            # The gateway starts a failed upstream again (after 1 s, then longer): on a loaded
            # machine a retry may be under way by now. The checks below, with no await among
            # them, read a moment when none is.
            while big.status == "starting":
                await anyio.sleep(0.05)
            assert big.status == "failed" and not big.tools
            assert f"over the {SDK_SSE_LIMIT}-byte limit" in big.last_error
            assert "max_message_bytes" in big.last_error
            (shown,) = [s for s in upstream_status(gw.upstreams, gw.config.secrets()) if s["name"] == "big"]
            assert shown["status"] == "failed" and shown["last_error"] == big.last_error
            options = ServeOptions(config=gw.config)
            assert f"upstream big (http): failed: {big.last_error}" in startup_summary(gw, options)
            logged = [r.getMessage() for r in caplog.records if r.name == "residency.gateway"]
            assert any(line.startswith("upstream big (http)") and big.last_error in line for line in logged)
            assert gw.upstreams["small"].status == "connected"
            async with agent(gw, "modern") as a:
                assert not (await a.use("echo", {"text": "on"})).is_error


@pytest.mark.anyio
async def test_a_tools_list_cursor_that_repeats_fails_the_start_instead_of_cutting_the_list() -> None:
    with anyio.fail_after(scaled(60)):
        async with served(build(0, endless=True)) as url, running(WAIT, servers={"loop": {"url": url}}) as gw:
            upstream = gw.upstreams["loop"]
            assert upstream.status == "failed" and not upstream.tools
            assert "cursor" in upstream.last_error and "twice" in upstream.last_error


# -- a handshake-only upstream (mcp 1.30, in its own venv) -----------------------------------

LEGACY_SERVER = """
import json, sys
import mcp.types as types
from mcp.server.fastmcp import FastMCP

port, count = int(sys.argv[1]), int(sys.argv[2])
app = FastMCP("legacy-only", host="127.0.0.1", port=port, log_level="WARNING")
tools = [types.Tool(name="echo", description="Echo.", inputSchema={"type": "object"})] + [
    types.Tool(name=f"tool_{i:05d}", description="It does one small thing to a record. " * 24,
               inputSchema={"type": "object", "properties": {"record": {"type": "string"}}})
    for i in range(count)
]

@app._mcp_server.list_tools()
async def list_tools():
    return tools

@app._mcp_server.call_tool(validate_input=False)
async def call_tool(name, arguments):
    return [types.TextContent(type="text", text=name + " " + json.dumps(arguments, sort_keys=True))]

app.run("streamable-http")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def legacy_only(python: str, count: int) -> AsyncIterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [python, "-c", LEGACY_SERVER, str(port), str(count)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(scaled(60)):
            while True:
                assert process.poll() is None, "the handshake-only upstream exited"
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_handshake_only_upstream_is_spoken_to_in_the_handshake_era_with_its_whole_list() -> None:
    python = os.environ.get("RESIDENCY_LANGCHAIN_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("RESIDENCY_LANGCHAIN_PYTHON (a venv with mcp 1.30) is not set")
    with anyio.fail_after(scaled(150)):
        async with legacy_only(python, COUNT) as url, running(WAIT, servers={"old": {"url": url}}) as gw:
            upstream = gw.upstreams["old"]
            assert upstream.status == "connected"
            assert upstream.protocol_version == "2025-11-25"
            assert len(upstream.tools) == COUNT + 1
            async with agent(gw, "modern") as a:
                result = await a.use("echo", {"text": "old"})
                assert not result.is_error and text(result) == 'echo {"text": "old"}'


# -- tool changes over HTTP, in each era -------------------------------------------------------


@pytest.mark.anyio
async def test_a_change_on_an_http_upstreams_listen_stream_reloads_the_gateway() -> None:
    desk = IncidentDesk(schema="v1")
    with anyio.fail_after(scaled(60)):
        async with served(desk.server) as url, running(WAIT, servers={"desk": {"url": url}}) as gw:
            assert gw.upstreams["desk"].protocol_version == "2026-07-28"
            before = gw.catalog.get("update_incident")
            assert before is not None
            done = reloads(gw)
            await desk.migrate()
            await done[0].wait()
            after = gw.catalog.get("update_incident")
            assert after is not None and after.hash != before.hash


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_an_upstream_that_announces_changes_only_in_the_handshake_era_is_heard_over_http(
    era: str,
) -> None:
    upstream = HandshakeOnlyUpstream()
    with anyio.fail_after(scaled(60)):
        async with (
            served(upstream.server) as url,
            running(WAIT, servers={"up": {"url": url, "era": era}}) as gw,
        ):
            assert gw.upstreams["up"].protocol_version == "2025-11-25"
            assert gw.catalog.get("beta") is None
            done = reloads(gw)
            await upstream.add("beta")
            await done[0].wait()
            assert gw.catalog.get("beta") is not None


@pytest.mark.parametrize(
    ("key", "value"), [("era", "2026"), ("max_message_bytes", 100), ("max_message_bytes", "big")]
)
def test_a_bad_era_or_message_limit_is_a_config_error_naming_the_key(key: str, value: object) -> None:
    text = json.dumps({"mcpServers": {"up": {"url": "http://127.0.0.1:1/mcp", key: value}}})
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.json")
    assert caught.value.where == f"mcpServers.up.{key}"
