"""An upstream MCP server whose results quote its own credentials, for the redaction tests.

``leak`` answers with an ``isError`` result that quotes the ``LEAKY_SECRET`` environment variable
and the request's ``Authorization`` header (over HTTP) in its text, structured content and
``_meta``. ``hang`` is a tool whose name is also an ordinary word an operator may put in an env
value. ``python leaky_upstream.py`` serves it over stdio; ``build()`` gives the server (its
``streamable_http_app()`` serves it over HTTP).
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ENV = "LEAKY_SECRET"
_READ_ONLY = {"readOnlyHint": True}
TOOLS = [
    {"name": "leak", "description": "Fail, quoting credentials.", "inputSchema": {"type": "object"}},
    {
        "name": "hang",
        "description": "Hang a picture.",
        "inputSchema": {
            "type": "object",
            "properties": {"wall": {"type": "string"}},
            "required": ["wall"],
        },
        "annotations": _READ_ONLY,
    },
]


def build() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name == "hang":
            wall = (params.arguments or {}).get("wall")
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"hang: on {wall}")])
        secret = os.environ.get(ENV, "")
        headers = getattr(ctx.request, "headers", None)
        header = headers.get("authorization", "") if headers is not None else ""
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"rejected: env {secret}, header {header}")],
            structured_content={"env": secret, "header": header, secret or "-": "as a key"},
            is_error=True,
            _meta={"leaky/echo": f"{secret} {header}"},
        )

    return Server("leaky", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
