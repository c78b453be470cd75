"""An upstream MCP server with large results, for the span offloading tests.

``dump(size)`` answers with ``text_of(size)``: about ``size`` bytes of numbered lines with
multi-byte characters in them (so a byte range can fall inside a character). ``echo`` answers
with a short text. ``python big_upstream.py`` serves it over stdio.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    {
        "name": "dump",
        "description": "A large export.",
        "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "echo",
        "description": "A short answer.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
]


def text_of(size: int) -> str:
    """The deterministic text ``dump`` returns: whole lines, at least ``size`` bytes."""
    lines: list[str] = []
    total = 0
    n = 0
    while total < size:
        line = f"row {n:07d}: café ✓ naïve 日本 {'x' * (n % 13)}\n"
        lines.append(line)
        total += len(line.encode("utf-8"))
        n += 1
    return "".join(lines)


def build() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "dump":
            text = text_of(int(arguments.get("size", 0)))
        else:
            text = f"echo: {arguments.get('text', '')}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("big", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
