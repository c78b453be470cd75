"""An upstream MCP server that reports the ``_meta`` of each call it receives.

``echo_meta`` answers with the call's ``params._meta`` as JSON text (so a test sees the trace
context the gateway sent), ``echo`` with its ``text`` argument alone (an answer the trace context
does not lengthen, for ``benchmarks/otel_overhead.py``), ``fail`` answers an ``isError`` result.
``server()`` builds it for in-process use; ``python traced_upstream.py`` serves it over stdio.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": False}

TOOLS = [
    types.Tool(name="echo_meta", description="Answer with the _meta of this call.", input_schema=_TEXT),
    types.Tool(name="echo", description="Answer with the text given.", input_schema=_TEXT),
    types.Tool(
        name="fail",
        description="Fail as a tool.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    ),
]


def server(received: list[dict[str, Any]] | None = None) -> Server[Any]:
    """The server; each call's ``_meta`` is appended to ``received`` too."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        meta = dict(ctx.meta or {})
        if received is not None:
            received.append(meta)
        if params.name == "echo":
            text = str((params.arguments or {}).get("text", ""))
        else:
            text = json.dumps(meta, sort_keys=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=params.name == "fail"
        )

    return Server("traced", on_list_tools=list_tools, on_call_tool=call_tool)


async def _main() -> None:
    async with stdio_server() as (read, write):
        upstream = server()
        await upstream.run(read, write, upstream.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_main)
