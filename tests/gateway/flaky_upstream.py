"""A small upstream MCP server for the gateway's failure tests, run as a real subprocess over stdio.

Tools: ``echo`` answers, ``crash`` kills the process mid-call, ``hang`` never answers, ``leak``
fails with a message that contains the ``FLAKY_SECRET`` environment variable.
``python flaky_upstream.py`` serves it; ``build()`` gives the server for in-process use.
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
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "annotations": {"readOnlyHint": True},
    },
    {"name": "crash", "description": "Exit the process mid-call.", "inputSchema": {"type": "object"}},
    {"name": "hang", "description": "Never answer.", "inputSchema": {"type": "object"}},
    {"name": "leak", "description": "Fail, quoting a secret.", "inputSchema": {"type": "object"}},
]


def build() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "echo":
            text = f"{args.get('text')} (pid {os.getpid()})"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "crash":
            os._exit(3)
        if params.name == "hang":
            await anyio.sleep_forever()
        if params.name == "leak":
            raise MCPError(
                code=types.INTERNAL_ERROR, message=f"token {os.environ.get('FLAKY_SECRET', '')} rejected"
            )
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name}")

    return Server("flaky", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
