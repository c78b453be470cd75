"""The Python SDK (``mcp.Client``, 2.3.0) runs the scripted tasks through ``residency serve``.

Both eras the client speaks: ``mode="legacy"`` (the initialize handshake, 2025-11-25) and
``mode="auto"`` (which negotiates 2026-07-28 with the gateway), over stdio (the client starts
``residency serve``) and streamable HTTP (a ``residency serve --transport http`` process).
Two tasks: the list scenario (``scenario.STEPS``, delivered by list: the list changes and the
client refetches it when told), and the by-reference task (``scenario.REFERENCE_STEPS``, the
gateway's default delivery).

By reference the client gets everything on its defaults: its list is the pinned tool and the
meta-tools for the whole session (no ``list_changed``, no listen event), a ``search_tools`` hit
carries the tool's schema, and ``call_tool(name, arguments)`` reaches a tool the list never
showed. The SDK can also send ``_meta`` on a call (``call_tool(..., meta=...)``), so it can be
the host that reports a result dropped from its transcript (``residency/dropped_results``): the
tools that result carried are then withheld before that call, and a call rebuilt from arguments
still in view is refused (``tool_not_resident``) until ``reexpand_tools``. The gateway's event
log (``residency://events``) shows it: each call admitted (and forwarded) through ``call_tool``,
the transitions and refusals.

How each era hears that the tool list changed: the handshake era by
``notifications/tools/list_changed`` (the client's ``message_handler``), 2026-07-28 by a
``ToolsListChanged`` event on a ``subscriptions/listen`` stream (``Client.listen``), which the
handshake era does not have. Who the session is: the stdio process; the ``Mcp-Session-Id`` on
handshake-era HTTP; the ``Residency-Session`` header on 2026-07-28 HTTP, without which each
request is a throwaway session of its own. The HTTP tests share the module's gateways
(``conftest.py``, one per task), each in sessions of its own. Every gateway a test uses serves
once its desk is up (the scenario configs), so it has its desk before the test lists.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, Subscription, ToolsListChanged

from tests._timing import NOTICE, READY_WAIT, STEP, scaled
from tests.clients import scenario
from tests.clients._serve import ROOT, Served

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}
TASK_TIMEOUT = scaled(120) + READY_WAIT
"""Seconds the whole task may take over one connection (the machine is shared and loaded; over
stdio the gateway serves once its desk is up)."""
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


# -- by reference ---------------------------------------------------------------------------------

FOUND, NOTE, REF_INVALID, CLOSED = 1, 2, 3, 4
"""Indices in ``scenario.REFERENCE_STEPS`` of the search, the note, the invalid and valid close."""
DROPPED_RESULTS = "residency/dropped_results"
"""The ``_meta`` key of a ``tools/call`` naming the results the host dropped from its transcript."""
QUIET = scaled(2)
"""Seconds a test listens for a list change that must not come (none is due by reference)."""


@dataclass
class ReferenceRun:
    """What one run of the by-reference task saw, in one session."""

    listed: list[types.Tool]
    results: list[types.CallToolResult]
    relisted: list[types.Tool]


def delivery_id(result: types.CallToolResult) -> str:
    """The delivery id a result that shows schemas names in ``_meta["residency/result"]``."""
    rid = (result.meta or {}).get("residency/result")
    assert isinstance(rid, str), result.meta
    return rid


async def events_of(client: Client) -> list[dict[str, Any]]:
    """The session's event log (``residency://events``)."""
    read = await client.read_resource("residency://events")
    (contents,) = read.contents
    assert isinstance(contents, types.TextResourceContents)
    events: list[dict[str, Any]] = json.loads(contents.text)
    return events


async def through_call_tool(
    client: Client, name: str, arguments: dict[str, Any], meta: types.RequestParamsMeta | None = None
) -> types.CallToolResult:
    """Call ``name`` the way a session delivered by reference does: ``call_tool(name, arguments)``."""
    return await client.call_tool("call_tool", {"name": name, "arguments": arguments}, meta=meta)


async def assert_quiet(mode: str, heard: Heard, events: Subscription | None) -> None:
    """No change of the session's list was announced, nor comes within ``QUIET`` seconds."""
    with anyio.move_on_after(QUIET) as quiet:
        if events is None:
            await heard.list_changed.wait()
        else:
            await events.__anext__()
    assert quiet.cancelled_caught, f"the list changed by reference ({mode}): {heard.methods}"
    assert heard.methods == []


@asynccontextmanager
async def listening(client: Client, mode: str) -> AsyncIterator[Subscription | None]:
    """A listen stream for tool-list changes in the 2026-07-28 era (None in the handshake era,
    whose ``list_changed`` the ``Heard`` handler catches)."""
    if mode == "legacy":
        yield None
        return
    async with client.listen(tools_list_changed=True) as events:
        assert events.honored.tools_list_changed
        yield events


async def run_reference_task(client: Client) -> ReferenceRun:
    """List, run ``scenario.REFERENCE_STEPS``, list again."""
    listed = (await client.list_tools()).tools
    results = [await client.call_tool(tool, arguments) for _, tool, arguments in scenario.REFERENCE_STEPS]
    relisted = (await client.list_tools()).tools
    return ReferenceRun(listed, results, relisted)


def check_reference_run(
    version: str | None, mode: str, run: ReferenceRun, events: list[dict[str, Any]]
) -> None:
    """What a client of either era gets back from the by-reference task, in one session.

    ``version``: the protocol version the client negotiated; ``events``: the session's event log
    after the task.
    """
    assert version == ERAS[mode]
    # The list is the pinned tool and the meta-tools, the same before and after the task.
    assert [t.name for t in run.listed] == list(scenario.REFERENCE_FIRST_LIST)
    assert [t.name for t in run.relisted] == list(scenario.REFERENCE_FIRST_LIST)
    scenario.check_reference_outcomes([{"is_error": r.is_error, "text": text(r)} for r in run.results])
    found, note, invalid, closed = (run.results[i] for i in (FOUND, NOTE, REF_INVALID, CLOSED))
    assert delivery_id(found).startswith("r")
    assert reason(invalid) == "arguments_invalid"
    assert reason(note) is None and reason(closed) is None
    # The two withheld tools reached the desk through call_tool: the desk's answers, and the
    # event log's calls (it records a call once admitted, then forwarded).
    assert note.structured_content is not None and note.structured_content["incident_id"] == "INC-7"
    assert closed.structured_content is not None and closed.structured_content["status"] == "resolved"
    assert scenario.calls_through_call_tool(events) == [scenario.TOMBSTONED_TOOL, scenario.EVICTED_TOOL]
    assert scenario.forwarded_ghosts(events) == 0
    # The search delivered the note's schema, the invalid close was refused, nothing was tombstoned.
    kinds = [(e["kind"], e["subject"]) for e in events]
    assert ("reexpanded", scenario.TOMBSTONED_TOOL) in kinds
    assert ("refused", scenario.EVICTED_TOOL) in kinds
    assert not [e for e in events if e["kind"] == "tombstoned"], events


@dataclass
class HostReport:
    """What the host's report of a dropped search result, and what follows, got back."""

    before: types.CallToolResult
    ghost: types.CallToolResult
    reexpanded: types.CallToolResult
    after: types.CallToolResult
    again: types.CallToolResult
    relisted: list[types.Tool]


async def report_the_search_dropped(client: Client, run: ReferenceRun) -> HostReport:
    """After the task the model reads INC-7's timeline (``get_timeline``, which the search found
    too); then the host drops the search result from its transcript and says so on the next call,
    which the model rebuilt from the first note's arguments (still in view); then the model
    re-expands the note tool and the timeline reader, reads the timeline again, and retries."""
    before = await through_call_tool(client, "get_timeline", {"incident_id": "INC-7"})
    # An open map (extra_items=Any), which mypy does not model yet.
    dropped = cast(types.RequestParamsMeta, {DROPPED_RESULTS: [delivery_id(run.results[FOUND])]})
    ghost = await through_call_tool(client, scenario.TOMBSTONED_TOOL, dict(scenario.FIRST_NOTE), meta=dropped)
    reexpanded = await client.call_tool(
        "reexpand_tools", {"names": [scenario.TOMBSTONED_TOOL, "get_timeline"]}
    )
    after = await through_call_tool(client, "get_timeline", {"incident_id": "INC-7"})
    again = await through_call_tool(client, scenario.TOMBSTONED_TOOL, dict(scenario.FIRST_NOTE))
    relisted = (await client.list_tools()).tools
    return HostReport(before, ghost, reexpanded, after, again, relisted)


def check_host_report(run: ReferenceRun, report: HostReport, events: list[dict[str, Any]]) -> None:
    """The rebuilt call was refused before the plan could forward it; re-expanded, it goes through."""
    ghost = report.ghost
    assert ghost.is_error and reason(ghost) == "tool_not_resident", text(ghost)
    assert "reexpand_tools" in text(ghost)
    assert text(ghost).startswith(f"{scenario.TOMBSTONED_TOOL}: mutation tool schema withheld"), text(ghost)
    assert not report.reexpanded.is_error, text(report.reexpanded)
    assert delivery_id(report.reexpanded) != delivery_id(run.results[FOUND])
    # The refused call never reached the desk: INC-7's timeline is the same before and after it
    # (the module's tests share one desk: what came before this test is there too), and the
    # retry adds one entry.
    for read in (report.before, report.after):
        assert not read.is_error and read.structured_content is not None, text(read)
    timeline = report.before.structured_content["timeline"]
    assert report.after.structured_content["timeline"] == timeline
    assert f"note: {scenario.FIRST_NOTE['note']}" in timeline
    assert not report.again.is_error, text(report.again)
    assert report.again.structured_content == {"incident_id": "INC-7", "entries": len(timeline) + 1}
    # The list stayed what it was.
    assert [t.name for t in report.relisted] == list(scenario.REFERENCE_FIRST_LIST)
    # The report tombstoned the note tool (its arguments are in view), the rebuilt call was
    # refused and is no call of the log: the calls through call_tool are the task's two, the two
    # timeline reads and the retry.
    kinds = [(e["kind"], e["subject"]) for e in events]
    assert ("tombstoned", scenario.TOMBSTONED_TOOL) in kinds
    assert ("refused", scenario.TOMBSTONED_TOOL) in kinds
    assert scenario.calls_through_call_tool(events) == [
        scenario.TOMBSTONED_TOOL,
        scenario.EVICTED_TOOL,
        "get_timeline",
        "get_timeline",
        scenario.TOMBSTONED_TOOL,
    ]
    assert scenario.forwarded_ghosts(events) == 0


@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_runs_the_reference_task_over_stdio(tmp_path: Path, mode: str) -> None:
    """On its defaults: a list that never changes, schemas in search results, calls through
    ``call_tool``. Then, as the host, it reports the search result dropped."""
    heard = Heard()
    with anyio.fail_after(TASK_TIMEOUT):
        async with stdio_client(scenario.write_reference_config(tmp_path), mode, heard) as client:
            async with listening(client, mode) as events:
                run = await run_reference_task(client)
                check_reference_run(client.protocol_version, mode, run, await events_of(client))
                report = await report_the_search_dropped(client, run)
                await assert_quiet(mode, heard, events)
            check_host_report(run, report, await events_of(client))


@pytest.mark.parametrize("mode", ERAS)
async def test_the_sdk_runs_the_reference_task_over_http(
    reference_gateway: Served, session_key: str, mode: str
) -> None:
    """Handshake era: the ``Mcp-Session-Id`` is the session. 2026-07-28: the
    ``Residency-Session`` header names it (the listen stream is on the same session). Then the
    host report, as over stdio."""
    heard = Heard()
    session = session_key if mode == "auto" else None
    with anyio.fail_after(TASK_TIMEOUT):
        async with http_client(reference_gateway, mode, heard, session) as client:
            async with listening(client, mode) as events:
                run = await run_reference_task(client)
                check_reference_run(client.protocol_version, mode, run, await events_of(client))
                report = await report_the_search_dropped(client, run)
                await assert_quiet(mode, heard, events)
            check_host_report(run, report, await events_of(client))
            if mode == "auto":
                page = await client.list_tools()
                assert (page.ttl_ms, page.cache_scope) == (0, "private")
