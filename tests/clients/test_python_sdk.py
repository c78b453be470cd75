"""The Python SDK (``mcp.Client``, 2.3.0) runs the scripted task through ``residency serve``.

Both eras the client speaks: ``mode="legacy"`` (the initialize handshake, 2025-11-25) and
``mode="auto"`` (which negotiates 2026-07-28 with the gateway), over stdio (the client starts
``residency serve``) and streamable HTTP (a ``residency serve --transport http`` process).

How each era hears that the tool list changed: the handshake era by
``notifications/tools/list_changed`` (the client's ``message_handler``), 2026-07-28 by a
``ToolsListChanged`` event on a ``subscriptions/listen`` stream (``Client.listen``), which the
handshake era does not have. Who the session is: the stdio process; the ``Mcp-Session-Id`` on
handshake-era HTTP; the ``Residency-Session`` header on 2026-07-28 HTTP, without which each
request is a throwaway session of its own. The HTTP tests share the module's gateway
(``conftest.py``), each in sessions of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, Subscription, ToolsListChanged

from tests._timing import NOTICE, STEP, scaled
from tests.clients import scenario
from tests.clients._serve import ROOT, Served

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}
TASK_TIMEOUT = scaled(120)
"""Seconds the whole task may take over one connection (the machine is shared and loaded)."""
CHANGE_TIMEOUT = NOTICE
"""Seconds to wait for the list change the push-out step causes."""
PUSH = [label for label, _, _ in scenario.STEPS].index("re-expand another tool (pushes two out)")
REFUSED, INVALID, IMPLICIT = 3, 4, 5
"""Indices in ``scenario.STEPS`` of the tombstoned call, the invalid and the valid evicted call."""


@dataclass
class Heard:
    """The handshake-era notifications a client received."""

    list_changed: anyio.Event = field(default_factory=anyio.Event)
    methods: list[str] = field(default_factory=list)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.methods.append(message.method)
            self.list_changed.set()


@dataclass
class Run:
    """What one run of the task saw."""

    listed: list[types.Tool]
    results: list[types.CallToolResult]
    relisted: list[types.Tool]
    timeline: list[str]


def text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def reason(result: types.CallToolResult) -> str | None:
    details = (result.meta or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def names(tools: list[types.Tool]) -> set[str]:
    return {t.name for t in tools}


@asynccontextmanager
async def stdio_client(config_path: Path, mode: str, heard: Heard) -> AsyncIterator[Client]:
    command = scenario.serve_command(config_path)
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=ROOT)
    async with Client(params, mode=mode, message_handler=heard.on_message) as client:
        yield client


@asynccontextmanager
async def http_client(
    served: Served, mode: str, heard: Heard, session: str | None = None
) -> AsyncIterator[Client]:
    """A client of the HTTP gateway; ``session`` goes in a ``Residency-Session`` header."""
    headers = {"Residency-Session": session} if session is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(
            streamable_http_client(served.url, http_client=http), mode=mode, message_handler=heard.on_message
        ) as client,
    ):
        yield client


async def wait_for_change(mode: str, heard: Heard, events: Subscription | None) -> None:
    """Wait (bounded) for the announcement of a change to this session's tool list."""
    with anyio.fail_after(CHANGE_TIMEOUT):
        if events is None:
            await heard.list_changed.wait()
        else:
            assert isinstance(await events.__anext__(), ToolsListChanged)


async def desk_timeline_length(served: Served, session: str) -> int:
    """How long INC-7's timeline on the desk is now, read in a session of its own.

    The module's tests share the gateway's one desk: a test counts only the entries after this.
    """
    async with http_client(served, "auto", Heard(), session) as client:
        await client.call_tool("reexpand_tools", {"names": ["get_timeline"]})
        timeline = await client.call_tool("get_timeline", {"incident_id": "INC-7"})
    assert not timeline.is_error, text(timeline)
    return len(json.loads(text(timeline))["timeline"])


async def run_task(client: Client, mode: str, heard: Heard) -> Run:
    """List, run ``scenario.STEPS``, refetch the list when told it changed, read the timeline."""
    async with AsyncExitStack() as stack:
        events = None
        if mode == "auto":
            events = await stack.enter_async_context(client.listen(tools_list_changed=True))
            assert events.honored.tools_list_changed
        else:
            with pytest.raises(ListenNotSupportedError):
                await stack.enter_async_context(client.listen(tools_list_changed=True))
        listed = (await client.list_tools()).tools
        results: list[types.CallToolResult] = []
        relisted: list[types.Tool] = []
        for index, (_, tool, arguments) in enumerate(scenario.STEPS):
            results.append(await client.call_tool(tool, arguments))
            if index == PUSH:
                await wait_for_change(mode, heard, events)
                relisted = (await client.list_tools()).tools
    # After the task, as a careful agent would: re-expand the timeline and read it.
    await client.call_tool("reexpand_tools", {"names": ["get_timeline"]})
    timeline = await client.call_tool("get_timeline", {"incident_id": "INC-7"})
    assert not timeline.is_error, text(timeline)
    return Run(listed, results, relisted, json.loads(text(timeline))["timeline"])


def check_run(client: Client, mode: str, run: Run, desk_before: int = 0) -> None:
    """What a session-keeping client of either era gets back from the whole task.

    ``desk_before``: the timeline entries the desk had before the task (a shared desk).
    """
    assert client.protocol_version == ERAS[mode]
    assert names(run.listed) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}
    scenario.check_outcomes([{"is_error": r.is_error, "text": text(r)} for r in run.results])
    assert reason(run.results[REFUSED]) == "tool_not_resident"
    assert reason(run.results[INVALID]) == "arguments_invalid"
    assert reason(run.results[IMPLICIT]) is None
    # After the push-out only the re-expanded tool is left. The tombstone line of the tool whose
    # arguments are still in the transcript came in the result of the call that pushed it out;
    # reexpand_tools' description is the same in every session, so the list names no tool.
    assert names(run.relisted) == {"update_incident", *scenario.META_TOOLS}
    reexpand = next(t for t in run.relisted if t.name == "reexpand_tools")
    assert scenario.TOMBSTONED_TOOL not in (reexpand.description or "")
    assert f"Withheld now:\n{text(run.results[REFUSED])}" in text(run.results[PUSH])
    # The refused call never reached the desk: the second note is there once, from the last step.
    added = run.timeline[desk_before:]
    assert added.count(f"note: {scenario.SECOND_NOTE['note']}") == 1, added
    assert added.count(f"note: {scenario.FIRST_NOTE['note']}") == 1, added


@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_runs_the_task_over_stdio(tmp_path: Path, mode: str) -> None:
    heard = Heard()
    with anyio.fail_after(TASK_TIMEOUT):
        async with stdio_client(scenario.write_config(tmp_path), mode, heard) as client:
            run = await run_task(client, mode, heard)
            check_run(client, mode, run)
    if mode == "legacy":
        assert "notifications/tools/list_changed" in heard.methods


@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_runs_the_task_over_http(gateway: Served, session_key: str, mode: str) -> None:
    """Handshake era: the ``Mcp-Session-Id`` is the session, no header needed. 2026-07-28: the
    ``Residency-Session`` header names it (the listen stream is on the same session)."""
    heard = Heard()
    session = session_key if mode == "auto" else None
    with anyio.fail_after(TASK_TIMEOUT):
        desk_before = await desk_timeline_length(gateway, f"{session_key}-desk")
        async with http_client(gateway, mode, heard, session) as client:
            run = await run_task(client, mode, heard)
            check_run(client, mode, run, desk_before)
            if mode == "auto":
                page = await client.list_tools()
                assert (page.ttl_ms, page.cache_scope) == (0, "private")


async def test_an_anonymous_2026_http_client_gets_a_throwaway_session_per_request(gateway: Served) -> None:
    """No ``Residency-Session`` header and no token on 2026-07-28 HTTP: every request is a new
    session that shares nothing. The push-out changes nothing anyone sees again, so the listen
    stream stays quiet, the list is the initial one and the "tombstoned" tool is forwarded."""
    heard = Heard()
    with anyio.fail_after(TASK_TIMEOUT):
        async with http_client(gateway, "auto", heard) as client:
            assert client.protocol_version == ERAS["auto"]
            async with client.listen(tools_list_changed=True) as events:
                results = [await client.call_tool(tool, args) for _, tool, args in scenario.STEPS]
                with anyio.move_on_after(scaled(2)) as quiet:
                    await events.__anext__()
                assert quiet.cancelled_caught, "a throwaway session's change reached a listener"
            listed = (await client.list_tools()).tools
    assert names(listed) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}
    refused = results[REFUSED]
    assert not refused.is_error and reason(refused) is None, text(refused)
    assert reason(results[INVALID]) == "arguments_invalid"
    assert '"status": "resolved"' in text(results[IMPLICIT])
