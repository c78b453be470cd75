"""pydantic-ai runs the client scenario through ``residency serve`` (a scripted model, no LLM).

The agent is a real ``pydantic_ai.Agent`` with a real ``MCPToolset``; only the model is scripted
(a ``FunctionModel`` that makes the calls of ``scenario.STEPS``, one per turn, and records what
pydantic-ai hands back to it). The gateway is a real ``residency serve`` process: pydantic-ai
launches it over stdio, or connects to it over streamable HTTP (the module's shared gateway,
``conftest.py``, in a session of the test's own).

What pydantic-ai-slim 2.68 (on fastmcp 4.2.3 and mcp 2.3.0) does, read from its source and pinned
by the tests below:

- Transports: stdio (fastmcp's ``StdioTransport`` launches the command) and streamable HTTP (a
  URL; extra ``headers`` are sent on every request).
- Era: ``MCPToolset`` has no option for it; its fastmcp ``Client.mode`` decides. The default,
  ``"auto"``, probes ``server/discover`` and adopts 2026-07-28 against residency; ``"legacy"``
  uses the initialize handshake (2025-11-25). The tests set ``mode`` on the toolset's own client:
  a pre-built ``fastmcp.Client`` (the documented way to configure one) would lose the handler
  that drops the tool cache on ``list_changed``.
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
- A stdio toolset keeps its subprocess (hence its residency session) alive across agent runs
  unless ``keep_alive=False``; the tests turn it off so that every test's gateway ends with it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
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

from tests._timing import CLEANUP, START, scaled
from tests.clients._serve import HttpSession, http_session
from tests.clients.scenario import (
    EVICTED_TOOL,
    INITIAL_TOOLS,
    META_TOOLS,
    PUSH_OUT,
    STEPS,
    TOMBSTONED_TOOL,
    check_outcomes,
    serve_command,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_LIMIT = scaled(120)
"""Seconds one whole scripted run may take (two Python processes start; the machine is loaded)."""

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

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.turns:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            self._record(last)
        self.last_offered = frozenset(tool.name for tool in info.function_tools)
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

    @property
    def turns(self) -> list[Turn]:
        return self.model.turns

    def saw_list_changed(self) -> bool:
        return any(isinstance(n, types.ToolListChangedNotification) for n in self.notifications)

    def event_subjects(self, kind: str) -> list[str]:
        return [e["subject"] for e in self.events if e["kind"] == kind]


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
            command, *args = serve_command(write_config(tmp_path))
            stdio = StdioTransport(command, args, keep_alive=False, log_file=tmp_path / "gateway.log")

            async def close_stdio() -> None:
                # Also after a timeout: the gateway process must not outlive the test.
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP):
                    await stdio.close()

            stack.push_async_callback(close_stdio)
            # pydantic-ai bounds the handshake itself (5 s unless told): it covers a gateway
            # process starting, so it is scaled like every other wait here.
            toolset: MCPToolset[Any] = MCPToolset(
                stdio, cache_tools=cache_tools, message_handler=record, init_timeout=START
            )
        else:
            # 2026-07-28 HTTP has no protocol session: the client names its residency session.
            headers = {"Residency-Session": http.key} if era == "modern" else None
            toolset = MCPToolset(
                http.url,
                headers=headers,
                cache_tools=cache_tools,
                message_handler=record,
                init_timeout=START,
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

    check_outcomes([{"is_error": turn.outcome != "success", "text": turn.text} for turn in run.turns])
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
