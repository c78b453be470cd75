"""The hostile side of the latency-isolation benchmark (``isolation.py``), in processes of its own.

``python hostile.py upstream`` serves an MCP upstream over stdio whose tools invite costly
work: ``match`` has the pattern ``^(a|a)*$`` (catastrophic backtracking), ``blob`` takes any
object, and ``churn`` sends ``count`` ``tools/list_changed`` notifications before it answers.

``python hostile.py client URL [KINDS]`` sends hostile ``tools/call`` requests to a gateway over HTTP
(2026-07-28 era, session ``hostile``), one after another (at most one per ``PACE``) while its
stdin says ``go``; on
``stop`` it finishes the request in flight, prints ``stopped N`` (N: requests sent so far) and
waits. After each answered request it prints ``sent TOOL``. Its payloads are
built once, so the client itself does little work per request. It prints ``ready`` first.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "name": "match",
        "description": "Check a text against a pattern.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "pattern": "^(a|a)*$"}},
            "required": ["text"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "blob",
        "description": "Store anything.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "churn",
        "description": "Announce a changed tool list, many times.",
        "inputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 0, "maximum": 5000}},
        },
        "annotations": {"readOnlyHint": True},
    },
]

PACE = 0.1
"""Seconds from one hostile request's start to the next one's, at least."""

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def serve_upstream() -> None:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from residency._gateway._connection import ListChangedServer, connection_of

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "churn":
            connection = connection_of(ctx)
            for _ in range(int((params.arguments or {}).get("count", 0))):
                await connection.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    server: Server[Any] = ListChangedServer("hostile", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def payloads() -> list[tuple[str, bytes]]:
    """``(tool, JSON-RPC body)`` of each hostile request, in the order they are sent."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("match", {"text": "a" * 26 + "b"}),  # 27 characters: seconds of backtracking unguarded
        ("blob", {"text": "x" * 3_000_000}),  # 3 MB without spaces: costly to count as tokens
        ("blob", {f"k{i}": i for i in range(50_000)}),  # 50,000 keys
        ("churn", {"count": 2000}),  # 2,000 tools/list_changed from the upstream
    ]
    bodies = []
    for i, (tool, arguments) in enumerate(calls):
        body = {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": ENVELOPE},
        }
        bodies.append((tool, json.dumps(body).encode()))
    return bodies


def run_client(url: str, kinds: str = "") -> None:
    import httpx2

    go = threading.Event()
    stop = threading.Event()
    eof = threading.Event()

    def control() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                stop.clear()
                go.set()
            elif line.strip() == "stop":
                stop.set()
        eof.set()
        stop.set()
        go.set()

    threading.Thread(target=control, daemon=True).start()
    bodies = payloads()
    if kinds:  # only some of them (indices into ``payloads()``), to measure one at a time
        bodies = [bodies[int(k)] for k in kinds.split(",")]
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Residency-Session": "hostile",
    }
    print("ready", flush=True)
    with httpx2.Client(timeout=httpx2.Timeout(120)) as http:
        i = 0
        while True:
            go.wait()
            if stop.is_set():
                go.clear()
                print(f"stopped {i}", flush=True)
                if eof.is_set():
                    return
                continue
            tool, body = bodies[i % len(bodies)]
            i += 1
            started = time.monotonic()
            try:
                http.post(url, content=body, headers={**headers, "Mcp-Name": tool})
            except httpx2.HTTPError as exc:
                print(f"error {type(exc).__name__}", file=sys.stderr, flush=True)
            print(f"sent {tool}", flush=True)
            # At most one request per PACE: each input's own cost shows, not a flood's (one
            # event loop cannot share its time fairly with a client that never stops).
            time.sleep(max(0.0, started + PACE - time.monotonic()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["upstream"]:
        serve_upstream()
    elif sys.argv[1:2] == ["client"] and len(sys.argv) in (3, 4):
        run_client(*sys.argv[2:])
    else:
        sys.exit("usage: hostile.py upstream | hostile.py client URL [KINDS]")
