"""A careless upstream MCP server that repeats its credential everywhere, run over stdio.

It reads ``SECRET_UPSTREAM_TOKEN`` from its environment (a value the gateway's config gives it,
so the gateway knows it is a secret) and prints it on stderr when it starts and on every call.
Tools: ``whoami`` returns it in a result, ``refuse`` in an ``isError`` result, ``explode`` in a
JSON-RPC error, and ``echo`` repeats its ``text`` argument. ``python secret_upstream.py``
serves it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ENV = "SECRET_UPSTREAM_TOKEN"

TOOLS = [
    {
        "name": "whoami",
        "description": "Say which credential this server runs with.",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "refuse",
        "description": "Fail as a tool, quoting the credential.",
        "inputSchema": {
            "type": "object",
            "properties": {"why": {"type": "string", "maxLength": 40}},
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "explode",
        "description": "Fail as a protocol error, quoting the credential.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "echo",
        "description": "Repeat the text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 200}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    },
]


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


def build() -> Server[Any]:
    secret = os.environ.get(ENV, "")

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        print(f"secret-upstream: {params.name} called with credential {secret}", file=sys.stderr, flush=True)
        args = params.arguments or {}
        if params.name == "whoami":
            result = _text(f"running as {secret}")
            result.structured_content = {"credential": secret}
            return result
        if params.name == "refuse":
            return _text(f"credential {secret} was refused: {args.get('why', '')}", error=True)
        if params.name == "explode":
            raise MCPError(code=types.INTERNAL_ERROR, message=f"credential {secret} exploded")
        if params.name == "echo":
            return _text(str(args.get("text")))
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name}")

    return Server("secret-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    print(f"secret-upstream: starting with credential {os.environ.get(ENV, '')}", file=sys.stderr, flush=True)
    server = build()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
