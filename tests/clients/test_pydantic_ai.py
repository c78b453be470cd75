"""pydantic-ai runs the client scenarios through ``residency serve`` (a scripted model, no LLM).

The agent is a real ``pydantic_ai.Agent`` with a real ``MCPToolset``; only the model is scripted
(a ``FunctionModel`` that makes the calls of ``scenario.STEPS``, or of the by-reference task's
``scenario.REFERENCE_STEPS``, one per turn, and records what pydantic-ai hands back to it). The
gateway is a real ``residency serve`` process: pydantic-ai launches it over stdio, or connects to
it over streamable HTTP (the module's shared gateways, ``conftest.py``, in a session of the
test's own). The list scenario delivers by list (``scenario.config()``); the by-reference task
runs the gateway on its default delivery (``scenario.reference_config()``).

What pydantic-ai-slim 2.68 (on fastmcp 4.2.3 and mcp 2.3.0) does, read from its source and pinned
by the tests below:

- Transports: stdio (fastmcp's ``StdioTransport`` launches the command) and streamable HTTP (a
  URL; extra ``headers`` are sent on every request).
- Era: ``MCPToolset`` has no option for it; its fastmcp ``Client.mode`` decides. The default,
  ``"auto"``, probes ``server/discover`` and adopts 2026-07-28 against residency; ``"legacy"``
  uses the initialize handshake (2025-11-25). The list tests set ``mode`` on the toolset's own
  client: a pre-built ``fastmcp.Client`` (the documented way to configure one) would lose the
  handler that drops the tool cache on ``list_changed`` (pydantic-ai installs it only on a
  client it builds, and refuses its own client options next to a pre-built one).
- Tool list: cached while the toolset is entered (``cache_tools=True``, the default) and dropped
  on ``notifications/tools/list_changed``. fastmcp never opens ``subscriptions/listen``, so in the
  2026-07-28 era nothing refreshes it: the model keeps the first list for the whole run, so a
  tool re-expanded mid-run stays uncallable in that run (its schema is in the re-expansion
  result, but pydantic-ai calls only listed tools). ``cache_tools=False`` lists the tools again
  before every model request.
- When its list gains a tool it did not offer earlier in the run, pydantic-ai tells the model
  (a "now available" prompt part after the tool returns); a tool that comes back is not announced.
- A call of a tool that is not in its current list never leaves pydantic-ai: the model gets a
  retry whose cause is ``unknown_tool``. A tool result with ``isError`` becomes ``ModelRetry``:
  the model gets the server's text as a retried tool return (cause ``model_retry``). Both count
  against the agent's retry budget. Arguments are only checked to be a JSON object; the server
  validates them.
- A successful result whose blocks are all text and that has ``structuredContent`` reaches the
  model as the structured content alone (else its blocks, a JSON text parsed): the text is lost.
- By reference (the gateway's default delivery) the first list is the session's list for good
  (the pinned ``get_runbook`` and the meta-tools with ``call_tool``), so the frozen cache is
  true: on its defaults over stdio and HTTP (2026-07-28), and through a pre-built ``Client``
  in ``mode="legacy"`` (no list_changed handler, none needed), the model finds a withheld tool
  with ``search_tools`` and calls it through ``call_tool``; the gateway validates, refuses
  invalid arguments with the full schema, and forwards. The search result reaches the model as
  its structured content: the hits' schemas (``definition``) and the ``hint`` on calling them
  through ``call_tool`` (the text's own line does not reach the model).
  pydantic-ai lists the tools once per run and announces nothing. The forwarded calls are read
  from ``residency://events`` (``called`` events) and from the gateway's log (``via=call_tool``).
- A stdio toolset keeps its subprocess (hence its residency session) alive across agent runs
  unless ``keep_alive=False``; the tests turn it off so that every test's gateway ends with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from residency._gateway import CALL_HINT
from tests._timing import CLEANUP, READY_WAIT, SERVING, scaled
from tests.clients._serve import HttpSession, Served, http_session
from tests.clients.scenario import (
    EVICTED_TOOL,
    INITIAL_TOOLS,
    META_TOOLS,
    PUSH_OUT,
    REFERENCE_FIRST_LIST,
    REFERENCE_STEPS,
    STEPS,
    TOMBSTONED_TOOL,
    calls_through_call_tool,
    check_outcomes,
    check_reference_outcomes,
    forwarded_ghosts,
    serve_command,
    write_config,
    write_reference_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_LIMIT = scaled(120) + READY_WAIT
"""Seconds one whole scripted run may take (two Python processes start; the machine is loaded;
over stdio the gateway serves once its desk is up)."""

VERSIONS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
MODES = {"legacy": "legacy", "modern": "auto"}
"""The fastmcp ``Client.mode`` that gives each era against residency (``auto`` is the default)."""

FIRST_LIST = frozenset(INITIAL_TOOLS + META_TOOLS)
PUSHED_OUT = PUSH_OUT[1]["names"][0]
Step = tuple[str, str, dict[str, Any]]
CALL_THE_NEWCOMER: Step = (
    "call the tool re-expanded mid-run",
    PUSHED_OUT,
    {"incident_id": "INC-7", "severity": "SEV-1", "notify": True},
)
"""A call of the tool that step 2 re-expanded: it was not in the list the session started with."""
REFUSED_STEPS = (3, 4, 5)
"""Steps that call a tool the gateway withdrew at step 2 (the tombstoned one, then the evicted one)."""


@dataclass
class Turn:
    """One scripted call and what pydantic-ai handed back to the model for it."""

    label: str
    tool: str
    arguments: dict[str, Any]
    offered: frozenset[str]
    """The tool names pydantic-ai offered the model on the turn that made this call."""
    outcome: str = ""
    """``ToolReturnPart.outcome``: ``success``, or ``retried`` for an error the model must answer."""
    cause: str | None = None
    """The retry's cause: ``model_retry`` (the server's error) or ``unknown_tool`` (pydantic-ai's)."""
    content: Any = None
    notices: list[str] = field(default_factory=list)
    """User-prompt text pydantic-ai added after this call's return (e.g. tools now available)."""

    @property
    def text(self) -> str:
        """The returned content as text; pydantic-ai hands the model parsed JSON as an object."""
        return self.content if isinstance(self.content, str) else json.dumps(self.content)


class ScriptedModel:
    """The model: makes the scenario's calls in order, one per turn, and records the answers."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = steps
        self.turns: list[Turn] = []
        self.last_offered: frozenset[str] = frozenset()
        self.offered_lists: list[tuple[str, ...]] = []
        """The tool names offered on every model request, in pydantic-ai's order (the final answer's last)."""

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.turns:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            self._record(last)
        self.offered_lists.append(tuple(tool.name for tool in info.function_tools))
        self.last_offered = frozenset(self.offered_lists[-1])
        step = len(self.turns)
        if step == len(self.steps):
            return ModelResponse(parts=[TextPart("INC-7 is closed.")])
        label, tool, arguments = self.steps[step]
        self.turns.append(Turn(label, tool, dict(arguments), self.last_offered))
        return ModelResponse(parts=[ToolCallPart(tool, dict(arguments), tool_call_id=f"step-{step}")])

    def _record(self, request: ModelRequest) -> None:
        turn = self.turns[-1]
        call_id = f"step-{len(self.turns) - 1}"
        for part in request.parts:
            if isinstance(part, ToolReturnPart) and part.tool_call_id == call_id:
                turn.outcome = part.outcome
                turn.cause = part.retry.cause if part.retry is not None else None
                turn.content = part.content
            elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                turn.notices.append(part.content)


@dataclass
class Run:
    """A finished scripted run: the turns, the server notifications, and the gateway's event log."""

    model: ScriptedModel
    output: str
    notifications: list[Any]
    events: list[dict[str, Any]]
    answers: list[dict[str, Any]] = field(default_factory=list)
    """What the gateway answered each call, as the toolset's client received it (``record_answers``)."""
    log: str = ""
    """The gateway's stderr over the run (its telemetry lines among it)."""

    @property
    def turns(self) -> list[Turn]:
        return self.model.turns

    def saw_list_changed(self) -> bool:
        return any(isinstance(n, types.ToolListChangedNotification) for n in self.notifications)

    def event_subjects(self, kind: str) -> list[str]:
        return [e["subject"] for e in self.events if e["kind"] == kind]

    def model_outcomes(self) -> list[dict[str, Any]]:
        """What pydantic-ai handed the model for each call, as ``{"is_error", "text"}``."""
        return [{"is_error": turn.outcome != "success", "text": turn.text} for turn in self.turns]


def stdio_gateway(config: Path, tmp_path: Path, stack: AsyncExitStack) -> StdioTransport:
    """fastmcp's ``StdioTransport`` of ``residency serve`` on ``config``, its stderr in
    ``tmp_path/gateway.log``; ``stack`` closes it."""
    command, *args = serve_command(config)
    stdio = StdioTransport(command, args, keep_alive=False, log_file=tmp_path / "gateway.log")

    async def close_stdio() -> None:
        # Also after a timeout: the gateway process must not outlive the test.
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP):
            await stdio.close()

    stack.push_async_callback(close_stdio)
    return stdio


@asynccontextmanager
async def toolset_for(
    era: str, tmp_path: Path, http: HttpSession | None, *, cache_tools: bool = True
) -> AsyncIterator[tuple[MCPToolset[Any], list[Any]]]:
    """An ``MCPToolset`` on a ``residency serve`` of the scenario config, in ``era``: a fresh
    process over stdio (``http`` None), a fresh session of the shared one over HTTP."""
    notifications: list[Any] = []

    async def record(message: Any) -> None:
        # pydantic-ai runs its own handler (which drops the tool cache) first, then this one.
        notifications.append(getattr(message, "root", message))

    async with AsyncExitStack() as stack:
        if http is None:
            stdio = stdio_gateway(write_config(tmp_path), tmp_path, stack)
            # pydantic-ai bounds the handshake itself (5 s unless told): it covers a gateway
            # process starting and serving once its desk is up.
            toolset: MCPToolset[Any] = MCPToolset(
                stdio, cache_tools=cache_tools, message_handler=record, init_timeout=SERVING
            )
        else:
            # 2026-07-28 HTTP has no protocol session: the client names its residency session.
            headers = {"Residency-Session": http.key} if era == "modern" else None
            toolset = MCPToolset(
                http.url,
                headers=headers,
                cache_tools=cache_tools,
                message_handler=record,
                init_timeout=SERVING,
            )
        toolset.client.mode = MODES[era]
        yield toolset, notifications


async def run_scenario(
    era: str,
    tmp_path: Path,
    *,
    http: HttpSession | None = None,
    cache_tools: bool = True,
    steps: Sequence[Step] = STEPS,
) -> Run:
    model = ScriptedModel(steps)
    # Every refusal is a retry the model must answer; leave room for all of them.
    agent = Agent(FunctionModel(model.respond), retries=len(steps))
    with anyio.fail_after(RUN_LIMIT):
        async with AsyncExitStack() as stack:
            toolset, notifications = await stack.enter_async_context(
                toolset_for(era, tmp_path, http, cache_tools=cache_tools)
            )
            await stack.enter_async_context(toolset)
            assert toolset.client.protocol_version == VERSIONS[era]
            result = await agent.run("Work incident INC-7 and close it.", toolsets=[toolset])
            events = await toolset.read_resource("residency://events")
    assert isinstance(events, str)
    assert len(model.turns) == len(steps), model.turns
    return Run(model, result.output, notifications, json.loads(events))


def assert_common_steps(run: Run) -> None:
    """Steps every configuration gets the same: the first list, the resident calls, re-expansion."""
    runbook, note, push, *_, reexpand, again = run.turns
    assert runbook.offered == FIRST_LIST
    assert runbook.outcome == "success" and runbook.content["runbook_id"] == "RB-1"
    assert note.outcome == "success" and note.content["incident_id"] == "INC-7"
    assert push.outcome == "success"
    assert [t["name"] for t in push.content["tools"]] == [PUSHED_OUT]
    assert reexpand.outcome == "success"
    assert [t["name"] for t in reexpand.content["tools"]] == [TOMBSTONED_TOOL]
    assert TOMBSTONED_TOOL in again.offered
    assert again.outcome == "success" and again.content["incident_id"] == "INC-7"
    assert run.output == "INC-7 is closed."
    assert TOMBSTONED_TOOL in run.event_subjects("tombstoned")
    assert EVICTED_TOOL in run.event_subjects("evicted")


def assert_refreshed_list_refuses_withdrawn_tools(run: Run) -> None:
    """A client that refreshed its list stops the calls of withdrawn tools itself."""
    after_push = run.turns[3].offered
    assert PUSHED_OUT in after_push
    assert TOMBSTONED_TOOL not in after_push and EVICTED_TOOL not in after_push
    for step in REFUSED_STEPS:
        turn = run.turns[step]
        # pydantic-ai's own refusal: the call was never sent.
        assert (turn.outcome, turn.cause) == ("retried", "unknown_tool"), turn
        assert turn.tool in turn.text
    assert run.event_subjects("refused") == []
    assert EVICTED_TOOL not in run.event_subjects("reexpanded")
    # pydantic-ai told the model about the tool that joined mid-run.
    assert any(PUSHED_OUT in notice for notice in run.turns[2].notices)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_in_the_handshake_era_pydantic_ai_follows_list_changed_and_refuses_withdrawn_tools(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = await run_scenario("legacy", tmp_path, http=http_session(transport, request))
    assert_common_steps(run)
    assert run.saw_list_changed()
    assert_refreshed_list_refuses_withdrawn_tools(run)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_in_the_2026_era_pydantic_ai_keeps_its_first_list_so_the_gateway_answers_every_call(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = await run_scenario("modern", tmp_path, http=http_session(transport, request))
    assert_common_steps(run)
    # No list_changed in this era and no subscriptions/listen in fastmcp: the list never changes.
    assert not run.saw_list_changed()
    assert all(turn.offered == FIRST_LIST for turn in run.turns)
    assert run.model.last_offered == FIRST_LIST
    assert all(not turn.notices for turn in run.turns)

    check_outcomes(run.model_outcomes())
    refused, invalid, implicit = (run.turns[step] for step in REFUSED_STEPS)
    # The gateway's refusal reaches the model as a retry naming the re-expansion tool.
    assert (refused.outcome, refused.cause) == ("retried", "model_retry")
    assert "reexpand_tools" in refused.text
    # Invalid arguments for the evicted tool: refused with its full schema.
    assert (invalid.outcome, invalid.cause) == ("retried", "model_retry")
    assert '"required":["incident_id","resolution"]' in invalid.text
    # Valid arguments: admitted by implicit re-expansion, and the desk really closed the incident.
    assert implicit.outcome == "success"
    assert implicit.content["incident_id"] == "INC-7" and implicit.content["status"] == "resolved"
    assert run.event_subjects("refused") == [TOMBSTONED_TOOL, EVICTED_TOOL]
    assert EVICTED_TOOL in run.event_subjects("reexpanded")


async def test_pydantic_ai_without_a_tool_cache_relists_every_turn_and_refuses_withdrawn_tools(
    tmp_path: Path,
) -> None:
    run = await run_scenario("modern", tmp_path, cache_tools=False)
    assert_common_steps(run)
    assert not run.saw_list_changed()
    assert_refreshed_list_refuses_withdrawn_tools(run)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_tool_reexpanded_mid_run_is_callable_only_where_pydantic_ai_refreshes_its_list(
    era: str, tmp_path: Path
) -> None:
    run = await run_scenario(era, tmp_path, steps=(*STEPS[:3], CALL_THE_NEWCOMER))
    newcomer = run.turns[3]
    if era == "legacy":
        assert PUSHED_OUT in newcomer.offered
        assert newcomer.outcome == "success"
        assert newcomer.content["severity"] == "SEV-1" and newcomer.content["notified"] is True
    else:
        # The re-expansion result carried the full schema, but pydantic-ai offers and calls only
        # the tools of its cached list, which nothing refreshes in this era.
        assert newcomer.offered == FIRST_LIST
        assert (newcomer.outcome, newcomer.cause) == ("retried", "unknown_tool")


# -- by reference: the gateway's default delivery ------------------------------------------------

REFERENCE_OFFERED = frozenset(REFERENCE_FIRST_LIST)
FORWARDED = re.compile(r"call forwarded session=(?P<session>\S+) tool=(?P<tool>\S+) .* via=call_tool$", re.M)
"""The gateway's telemetry line for a call forwarded through ``call_tool`` (``_telemetry.py``)."""
LISTED = re.compile(r"tools listed session=(?P<session>\S+) ", re.M)
"""The gateway's telemetry line for a ``tools/list`` it served."""


def record_answers(client: Client[Any]) -> list[dict[str, Any]]:
    """Keep what the gateway answers each ``tools/call`` of ``client``, as ``{"is_error", "text"}``
    (its text blocks): pydantic-ai calls through ``client.call_tool`` and hands the model only
    its own mapping of the result. The wrapper returns the result unchanged."""
    answers: list[dict[str, Any]] = []
    call_tool = client.call_tool

    async def recording(*args: Any, **kwargs: Any) -> Any:
        result = await call_tool(*args, **kwargs)
        text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
        answers.append({"is_error": result.is_error, "text": text})
        return result

    client.call_tool = recording  # type: ignore[method-assign]
    return answers


def forwarded_via_call_tool(log: str, session: str | None = None) -> list[str]:
    """The tools the gateway's log shows forwarded through ``call_tool`` (of ``session``, if given).

    ``residency://events`` records no calls (its kinds are tool states, re-expansions and
    refusals), so the gateway's telemetry line is its own record of what it forwarded.
    """
    return [m["tool"] for m in FORWARDED.finditer(log) if session is None or m["session"] == session]


def lists_served(log: str, session: str | None = None) -> int:
    """How many ``tools/list`` requests the gateway's log shows served (to ``session``, if given)."""
    return sum(1 for m in LISTED.finditer(log) if session is None or m["session"] == session)


@asynccontextmanager
async def reference_toolset(
    how: str, tmp_path: Path, http: HttpSession | None
) -> AsyncIterator[tuple[MCPToolset[Any], list[Any]]]:
    """An ``MCPToolset`` on a ``residency serve`` of ``scenario.reference_config()``, built the way
    ``how`` says: ``"defaults"`` (over stdio when ``http`` is None, else a session of the shared
    gateway over HTTP), or ``"client"``: a pre-built ``fastmcp.Client`` over stdio in
    ``mode="legacy"``. No ``mode`` and no ``cache_tools`` are set on a toolset of its own."""
    notifications: list[Any] = []

    async def record(message: Any) -> None:
        notifications.append(getattr(message, "root", message))

    async with AsyncExitStack() as stack:
        if how == "client":
            stdio = stdio_gateway(write_reference_config(tmp_path), tmp_path, stack)
            # Configured on the Client, as pydantic-ai requires for one it is handed: the toolset
            # installs no handler of its own on it (none drops its tool cache on list_changed).
            client: Client[Any] = Client(stdio, mode="legacy", init_timeout=SERVING, message_handler=record)
            toolset: MCPToolset[Any] = MCPToolset(client)
        elif http is None:
            stdio = stdio_gateway(write_reference_config(tmp_path), tmp_path, stack)
            toolset = MCPToolset(stdio, message_handler=record, init_timeout=SERVING)
        else:
            # fastmcp's default mode adopts 2026-07-28: no protocol session, the client names its own.
            toolset = MCPToolset(
                http.url,
                headers={"Residency-Session": http.key},
                message_handler=record,
                init_timeout=SERVING,
            )
        yield toolset, notifications


async def run_reference(how: str, tmp_path: Path, *, served: Served | None = None, key: str = "") -> Run:
    """The by-reference task (``scenario.REFERENCE_STEPS``) through a ``reference_toolset``."""
    model = ScriptedModel(REFERENCE_STEPS)
    agent = Agent(FunctionModel(model.respond), retries=len(REFERENCE_STEPS))
    http = HttpSession(served.url, key) if served is not None else None
    with anyio.fail_after(RUN_LIMIT):
        async with AsyncExitStack() as stack:
            toolset, notifications = await stack.enter_async_context(reference_toolset(how, tmp_path, http))
            answers = record_answers(toolset.client)
            await stack.enter_async_context(toolset)
            assert toolset.client.protocol_version == VERSIONS["legacy" if how == "client" else "modern"]
            result = await agent.run("Work incident INC-7 and close it.", toolsets=[toolset])
            events = await toolset.read_resource("residency://events")
    assert isinstance(events, str)
    assert len(model.turns) == len(REFERENCE_STEPS), model.turns
    # A stdio gateway has exited by now, so its log file is complete.
    log = served.log() if served is not None else (tmp_path / "gateway.log").read_text(errors="replace")
    return Run(model, result.output, notifications, json.loads(events), answers, log)


def assert_reference_task(run: Run, session: str | None = None) -> None:
    """What pydantic-ai gets by reference, however the toolset was built."""
    # The list never changes: the model is offered the first list on every request, the last
    # one (its final answer's) included, and pydantic-ai announces nothing.
    assert run.model.offered_lists == [REFERENCE_FIRST_LIST] * (len(REFERENCE_STEPS) + 1)
    assert all(turn.offered == REFERENCE_OFFERED for turn in run.turns)
    assert not run.saw_list_changed()
    assert all(not turn.notices for turn in run.turns)
    assert run.output == "INC-7 is closed."
    # The cache is filled once and never dropped: one tools/list for the whole run.
    assert lists_served(run.log, session) == 1, run.log

    # What the gateway answered, as pydantic-ai received it.
    check_reference_outcomes(run.answers)
    # What pydantic-ai handed the model: the same errors and successes, ...
    assert [o["is_error"] for o in run.model_outcomes()] == [a["is_error"] for a in run.answers]
    runbook, found, note, invalid, closed = run.turns
    assert runbook.outcome == "success" and runbook.content["runbook_id"] == "RB-1"
    # ... but a result whose blocks are all text reaches the model as its structuredContent
    # alone: the search hits keep their schemas, and the line on calling them through call_tool
    # comes as the structured content's hint (the text's own line does not reach the model).
    assert found.outcome == "success"
    hits = {hit["name"]: hit for hit in found.content["tools"]}
    assert hits[TOMBSTONED_TOOL]["definition"]["inputSchema"]["required"] == ["incident_id", "note"]
    assert found.content["hint"] == CALL_HINT and CALL_HINT in run.answers[1]["text"]
    # The withheld tool, called through call_tool: the desk really added the note.
    assert note.outcome == "success" and note.content["incident_id"] == "INC-7"
    assert isinstance(note.content["entries"], int)
    # Invalid arguments: a retry whose text is the gateway's refusal, full schema included.
    assert (invalid.outcome, invalid.cause) == ("retried", "model_retry")
    assert invalid.text == run.answers[3]["text"]
    assert invalid.text.startswith(f"{EVICTED_TOOL}: invalid arguments") and '"minLength":10' in invalid.text
    # Valid arguments: forwarded, and the desk closed the incident.
    assert closed.outcome == "success"
    assert closed.content["incident_id"] == "INC-7" and closed.content["status"] == "resolved"

    # The gateway forwarded both call_tool calls, refused only the invalid one, and tombstoned
    # nothing, so no call of a tombstoned tool can have been forwarded.
    assert forwarded_via_call_tool(run.log, session) == [TOMBSTONED_TOOL, EVICTED_TOOL], run.log
    assert calls_through_call_tool(run.events) == [TOMBSTONED_TOOL, EVICTED_TOOL]
    assert run.event_subjects("refused") == [EVICTED_TOOL]
    assert run.event_subjects("tombstoned") == []
    assert forwarded_ghosts(run.events) == 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_by_reference_pydantic_ai_on_its_defaults_calls_a_withheld_tool_through_call_tool(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if transport == "stdio":
        run = await run_reference("defaults", tmp_path)
        assert_reference_task(run)
    else:
        served: Served = request.getfixturevalue("reference_gateway")
        key: str = request.getfixturevalue("session_key")
        run = await run_reference("defaults", tmp_path, served=served, key=key)
        assert_reference_task(run, session=key)


async def test_by_reference_a_prebuilt_fastmcp_client_needs_no_list_changed_handler(tmp_path: Path) -> None:
    run = await run_reference("client", tmp_path)
    assert_reference_task(run)
