"""A scripted LangChain agent that drives ``residency serve`` through langchain-mcp-adapters.

Runs in its OWN virtual environment (langchain-mcp-adapters brings mcp 1.x, the project pins mcp
2.x), so it imports nothing from the project. ``tests/clients/test_langchain.py`` starts it with
that venv's interpreter, writes a plan as JSON on stdin and reads one JSON report from stdout.

The plan::

    {"connection": {...},              # a langchain-mcp-adapters connection config
     "way": "session" | "quick",       # client.session() + load_mcp_tools, or client.get_tools()
     "relist_on_change": false,        # reload the tools after a step that brought list_changed
     "steps": [{"op": "list"}, {"op": "call", "tool": NAME, "args": {...}}, ...,
               {"op": "read", "uri": URI}, {"op": "raw_call", "tool": NAME, "args": {...}}]}

An agent calls tools through the LangChain tool objects it holds, the way a LangGraph
``ToolNode`` does (``tool.ainvoke`` with a model tool call, giving a ``ToolMessage``). A ``list``
step replaces the tools it holds with the server's current list (as does any call step that
brought a ``list_changed``, when the plan asks the agent to follow those). A ``call`` of a tool the agent
does not hold cannot be made through LangChain at all: the report says so (``held: false``) and
then shows what the gateway answers when the same call is sent on a raw MCP session of the same
client library, so both facts are on record. ``read`` (a resource) and ``raw_call`` are what the
test reads after the task, on a raw session (the quick path's: a new one), never through LangChain.

The by-reference task needs nothing more: its list is the tools the agent loads once (the
gateway never changes it), and every withheld tool is called through the ``call_tool`` it holds.

A recording tool interceptor (the adapters' public ``tool_interceptors`` hook) keeps each raw
``CallToolResult`` (``isError``, ``_meta``) that LangChain turns into a ``ToolMessage``; the
session's ``message_handler`` (passed through ``session_kwargs``) records server notifications.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import version
from typing import Any

import mcp.types as mt
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession
from pydantic import AnyUrl

SERVER = "residency"
STEP_TIMEOUT = 210.0 * float(os.environ.get("RESIDENCY_TEST_TIME_SCALE", "1"))
"""Seconds one step may take (a quick-path stdio call starts a whole gateway process, which serves
once its desk is up: ``SERVING + STEP`` of ``tests/_timing.py``), scaled as that module scales the
tests' waits (this script runs in another venv, without it)."""


class Recorder:
    """What came over the wire, beside what LangChain made of it."""

    def __init__(self) -> None:
        self.step = -1
        self.results: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []

    async def intercept(
        self, request: MCPToolCallRequest, handler: Callable[[MCPToolCallRequest], Awaitable[Any]]
    ) -> Any:
        result = await handler(request)
        if isinstance(result, mt.CallToolResult):
            self.results.append(raw(result))
        return result

    async def on_message(self, message: Any) -> None:
        if isinstance(message, mt.ServerNotification):
            self.notifications.append({"step": self.step, "method": message.root.method})


def raw(result: mt.CallToolResult) -> dict[str, Any]:
    return {
        "is_error": bool(result.isError),
        "meta": result.meta,
        "text": "\n".join(b.text for b in result.content if isinstance(b, mt.TextContent)),
    }


def message_text(message: ToolMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(
        b["text"] if isinstance(b, dict) and b.get("type") == "text" else str(b) for b in message.content
    )


class Agent:
    """A scripted agent: the tools it holds and a way to reach the server beyond them."""

    def __init__(self, client: MultiServerMCPClient, recorder: Recorder) -> None:
        self.client = client
        self.recorder = recorder
        self.session: ClientSession | None = None
        self.protocol_version: str | None = None
        self.tools: dict[str, BaseTool] = {}
        self.calls = 0

    async def list(self) -> dict[str, Any]:
        if self.session is not None:
            tools = await load_mcp_tools(
                self.session, tool_interceptors=[self.recorder.intercept], server_name=SERVER
            )
        else:
            tools = await self.client.get_tools(server_name=SERVER)
        self.tools = {t.name: t for t in tools}
        return {
            "tools": [t.name for t in tools],
            "descriptions": {t.name: t.description for t in tools},
        }

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        tool = self.tools.get(name)
        if tool is None:
            return {"held": False, "mcp_session": await self._raw_call(name, args)}
        before = len(self.recorder.results)
        call = {"name": name, "args": args, "id": f"call-{self.calls}", "type": "tool_call"}
        message = await tool.ainvoke(call)
        assert isinstance(message, ToolMessage), type(message)
        return {
            "held": True,
            "status": message.status,
            "text": message_text(message),
            "wire": self.recorder.results[before] if len(self.recorder.results) > before else None,
        }

    async def _raw_call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """The same call on a raw MCP session: what the gateway says to a client that can send it."""
        if self.session is not None:
            return raw(await self.session.call_tool(name, args))
        async with self.client.session(SERVER) as session:
            return raw(await session.call_tool(name, args))

    async def raw_call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """A call on a raw MCP session, outside the agent's tools (a read after the task)."""
        return {"tool": name, "mcp_session": await self._raw_call(name, args)}

    async def read(self, uri: str) -> dict[str, Any]:
        """A resource's text blocks, read on a raw MCP session (the quick path's: a new one)."""
        if self.session is not None:
            result = await self.session.read_resource(AnyUrl(uri))
        else:
            async with self.client.session(SERVER) as session:
                result = await session.read_resource(AnyUrl(uri))
        return {
            "uri": uri,
            "text": "".join(c.text for c in result.contents if isinstance(c, mt.TextResourceContents)),
        }


@asynccontextmanager
async def agent_for(plan: dict[str, Any], recorder: Recorder) -> AsyncIterator[Agent]:
    connection = dict(plan["connection"])
    connection["session_kwargs"] = {"message_handler": recorder.on_message}
    client = MultiServerMCPClient(
        {SERVER: connection},  # type: ignore[dict-item]
        tool_interceptors=[recorder.intercept],
    )
    agent = Agent(client, recorder)
    async with AsyncExitStack() as stack:
        if plan["way"] == "session":
            # auto_initialize=False only so the negotiated version can be recorded; the
            # adapters' own auto-initialize makes exactly this call.
            session = await stack.enter_async_context(client.session(SERVER, auto_initialize=False))
            initialized = await session.initialize()
            agent.session = session
            agent.protocol_version = initialized.protocolVersion
        yield agent


async def run(plan: dict[str, Any]) -> dict[str, Any]:
    recorder = Recorder()
    steps: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "versions": {p: version(p) for p in ("langchain-mcp-adapters", "langchain-core", "mcp")},
        "client_protocol_version": mt.LATEST_PROTOCOL_VERSION,
        "steps": steps,
    }
    try:
        async with agent_for(plan, recorder) as agent:
            report["protocol_version"] = agent.protocol_version
            for index, step in enumerate(plan["steps"]):
                recorder.step = index
                entry: dict[str, Any] = {"op": step["op"], "label": step.get("label")}
                try:
                    async with asyncio.timeout(STEP_TIMEOUT):
                        if step["op"] == "list":
                            entry.update(await agent.list())
                        elif step["op"] == "read":
                            entry.update(await agent.read(step["uri"]))
                        elif step["op"] == "raw_call":
                            entry.update(await agent.raw_call(step["tool"], step["args"]))
                        else:
                            heard = len(recorder.notifications)
                            entry.update(tool=step["tool"], **await agent.call(step["tool"], step["args"]))
                            changed = any(
                                n["method"] == "notifications/tools/list_changed"
                                for n in recorder.notifications[heard:]
                            )
                            if changed and plan.get("relist_on_change"):
                                entry["relisted"] = (await agent.list())["tools"]
                except Exception as exc:
                    entry["raised"] = f"{type(exc).__name__}: {exc}"
                steps.append(entry)
    except Exception as exc:
        report["failed"] = "".join(traceback.format_exception(exc))[-4000:]
    report["notifications"] = recorder.notifications
    return report


def main() -> int:
    plan = json.loads(sys.stdin.read())
    report = asyncio.run(run(plan))
    json.dump(report, sys.stdout, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
