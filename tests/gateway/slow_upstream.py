"""An upstream MCP server whose one mutating tool takes a while, for the replica-kill test.

Tools: ``work`` (mutating) writes its ``ticket`` argument as a line to the file named by
``SLOW_UPSTREAM_LOG`` (so a test knows the call reached the upstream), waits
``SLOW_UPSTREAM_DELAY`` seconds (default 0.5) and answers ``done TICKET``; ``look``
(read-only) answers at once. ``python slow_upstream.py`` serves it over stdio.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    {
        "name": "work",
        "description": "Record a ticket, slowly.",
        "inputSchema": {
            "type": "object",
            "properties": {"ticket": {"type": "string"}},
            "required": ["ticket"],
        },
        "annotations": {"readOnlyHint": False},
    },
    {
        "name": "look",
        "description": "Answer at once.",
        "inputSchema": {
            "type": "object",
            "properties": {"ticket": {"type": "string"}},
            "required": ["ticket"],
        },
        "annotations": {"readOnlyHint": True},
    },
]


def build() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        ticket = str((params.arguments or {}).get("ticket", ""))
        if params.name == "work":
            log = os.environ.get("SLOW_UPSTREAM_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(ticket + "\n")
            await anyio.sleep(float(os.environ.get("SLOW_UPSTREAM_DELAY", "0.5")))
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"done {ticket}")])
        if params.name == "look":
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"seen {ticket}")])
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name}")

    return Server("slow", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
