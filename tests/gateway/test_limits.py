"""Requests over a limit are refused with a clear error, forward nothing, and stall no one."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from residency._core._validation import MAX_ARGUMENT_BYTES, MAX_ARGUMENT_VALUES
from residency._gateway._run import MAX_LINE_BYTES
from tests._timing import START, TEST
from tests.gateway.conftest import agent, reason, running, text
from tests.gateway.test_serve_cli import served

pytestmark = pytest.mark.anyio


def _recorder() -> tuple[Server[Any], list[dict[str, Any]]]:
    """An upstream with one tool, ``put``, that keeps the arguments of every call it gets."""
    calls: list[dict[str, Any]] = []
    tool = {"name": "put", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(tool)])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        calls.append(dict(params.arguments or {}))
        return types.CallToolResult(content=[types.TextContent(type="text", text="stored")])

    return Server("recorder", on_list_tools=list_tools, on_call_tool=call_tool), calls


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"blob": "x" * (MAX_ARGUMENT_BYTES + 1)}, f"{MAX_ARGUMENT_BYTES:,}-byte"),
        ({f"k{i}": i for i in range(MAX_ARGUMENT_VALUES + 1)}, f"{MAX_ARGUMENT_VALUES:,} values"),
    ],
    ids=["size", "values"],
)
async def test_a_call_over_a_limit_is_refused_naming_it_and_forwards_nothing(
    era: str, arguments: dict[str, Any], named: str
) -> None:
    server, calls = _recorder()
    async with running(upstreams={"rec": server}) as gw, agent(gw, era) as a:
        with anyio.fail_after(START):
            refused = await a.use("put", arguments)
            assert refused.is_error and reason(refused) == "arguments_invalid"
            assert (refused.meta or {})["residency/error"]["path"] == "$"
            assert named in text(refused)
            assert calls == []
            assert text(await a.use("put", {"small": 1})) == "stored"  # the gateway serves on
    assert calls == [{"small": 1}]


# -- stdio lines ------------------------------------------------------------------------------------


def _huge_call(request_id: int | str) -> bytes:
    """A ``tools/call`` line over the stdio limit, its id first as clients write it."""
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "get_incident", "arguments": {"incident_id": "x" * MAX_LINE_BYTES}},
    }
    return json.dumps(message).encode() + b"\n"


@pytest.mark.slow
async def test_a_stdio_line_over_the_limit_is_answered_with_an_error_and_the_gateway_reads_on() -> None:
    with anyio.fail_after(TEST):
        async with served() as s:
            assert "search_tools" in await s.handshake()
            assert s.process.stdin is not None
            await s.process.stdin.send(_huge_call(4242))
            answer = await s._line()
            assert answer["id"] == 4242
            assert answer["error"]["code"] == types.INVALID_REQUEST
            assert answer["error"]["data"] == {"reason": "message_too_large", "limit": MAX_LINE_BYTES}
            # A line whose id cannot be found is dropped without an answer; the next one is read.
            await s.process.stdin.send(
                b'{"params":{"blob":"' + b"y" * (MAX_LINE_BYTES + 10) + b'"},"id":7}\n'
            )
            listed = await s.request("tools/list")
            assert "search_tools" in [t["name"] for t in listed["result"]["tools"]]
            assert s.process.returncode is None
        assert b"dropped a stdin message" in s.stderr


@pytest.mark.slow
async def test_a_stdio_line_that_is_not_a_json_rpc_message_gets_a_parse_error_and_the_gateway_reads_on() -> (
    None
):
    with anyio.fail_after(TEST):
        async with served() as s:
            assert "search_tools" in await s.handshake()
            assert s.process.stdin is not None
            for line in (b"this is not json\n", b'"a string"\n', b'{"jsonrpc": "2.0", "id": 3,\n'):
                await s.process.stdin.send(line)
                answer = await s._line()
                assert answer["id"] is None
                assert answer["error"]["code"] == types.PARSE_ERROR
            listed = await s.request("tools/list")
            assert "search_tools" in [t["name"] for t in listed["result"]["tools"]]
            assert s.process.returncode is None
