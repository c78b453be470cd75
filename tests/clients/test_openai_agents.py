"""openai-agents runs the client scenario through ``residency serve`` (a scripted model, no network).

The agent is a real ``agents.Agent`` run by the real ``Runner`` with a real ``MCPServerStdio`` or
``MCPServerStreamableHttp``; only the model is scripted (a ``Model`` subclass that makes the calls
of ``scenario.STEPS``, or of the by-reference task's ``scenario.REFERENCE_STEPS``, one per turn,
and records the tool outputs the runner hands back to it).
Tracing is off and no OpenAI client is ever built: nothing leaves the machine. The gateway is a
real ``residency serve`` process: openai-agents launches it over stdio, or connects to it over
streamable HTTP (the module's shared gateway, ``conftest.py``, in a session of the test's own).

What openai-agents 0.24 (on mcp 2.3.0) does, read from its source and pinned by the tests below:

- Transports: ``MCPServerStdio`` (launches the command), ``MCPServerStreamableHttp`` (a URL, extra
  ``headers``), and the deprecated SSE one.
- Era: it builds ``mcp.Client(..., mode="auto")`` with no option to change it, so against a
  dual-era server such as residency it always negotiates 2026-07-28. The handshake era is only
  reached against a server that does not speak 2026-07-28; it cannot be chosen here.
- Tool list: with ``cache_tools_list=False`` (the default) it lists the tools again on every
  turn; with ``True`` it keeps the first list until ``invalidate_tools_cache()`` is called (so a
  tool re-expanded mid-run stays uncallable: openai-agents calls only listed tools). It
  does not react to ``notifications/tools/list_changed`` (a ``message_handler`` only sees it)
  and never opens ``subscriptions/listen``.
- Its own checks before a call is sent: a tool that is not in the current list is refused
  (``ModelBehaviorError`` ends the run by default; with
  ``RunConfig(tool_not_found_behavior="return_error_to_model")`` the model reads
  ``Tool 'NAME' not found.``); when a list is cached, the required properties of the cached
  schema must be present (``UserError``; the model reads the failure function's text, by default
  a fixed "An error occurred while running the tool. Please try again.").
- A result with ``isError`` is handed to the model as its text, like any other output.

By reference (the gateway's default delivery, ``scenario.reference_config()``), none of that is
in the way, cached list or not: the list openai-agents fetches first is the session's list for
good (the pinned tool and the meta-tools with ``call_tool``), so with ``cache_tools_list=True`` it
lists once and every turn offers the model exactly that list. The model finds a withheld tool
with ``search_tools`` (the hit carries its schema) and calls it through ``call_tool``, which is in
the list: openai-agents' own check sees only ``call_tool``'s schema (``name`` required), so even
invalid arguments reach the gateway, and the model reads its refusal with the full schema. The
event log shows those calls ``via call_tool`` and no ghost; the desk holds what they did.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
import pytest
from agents import Agent, ModelBehaviorError, RunConfig, RunContextWrapper, Runner, Usage, UserError
from agents.items import ModelResponse, TResponseInputItem
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, MCPServerStreamableHttpParams
from agents.mcp.util import MCPToolCustomDataContext
from agents.models.interface import Model
from agents.tool import default_tool_error_function
from agents.tool_context import ToolContext
from mcp.client.stdio import stdio_client
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from tests._timing import CLEANUP, NOTICE, READY_WAIT, SERVING, scaled
from tests.clients import scenario
from tests.clients._serve import HttpSession, Served
from tests.clients.scenario import (
    EVICTED_TOOL,
    INITIAL_TOOLS,
    META_TOOLS,
    PUSH_OUT,
    STEPS,
    TOMBSTONED_TOOL,
    serve_command,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_LIMIT = scaled(120) + READY_WAIT
"""Seconds one whole scripted run may take (two Python processes start; the machine is loaded;
over stdio the gateway serves once its desk is up)."""

REQUEST_TIMEOUT = SERVING
"""Seconds one MCP request may take (openai-agents' default, 5 s, is short on a loaded machine):
over stdio the first, ``initialize``, is answered once the gateway serves."""

MODERN = "2026-07-28"
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


def _call_id(step: int) -> str:
    return f"call-{step}"


@dataclass
class Reached:
    """What the gateway answered for one call that reached it (from the custom-data hook)."""

    is_error: bool | None
    reason: str | None


@dataclass
class Turn:
    """One scripted call and what the runner handed back to the model for it."""

    label: str
    tool: str
    arguments: dict[str, Any]
    offered: frozenset[str]
    """The tool names the runner offered the model on the turn that made this call."""
    listed: tuple[str, ...] = ()
    """The same names, in the order the runner offered them."""
    output: str = ""
    """The tool output the model read (text blocks joined); empty when it read none."""
    reached: Reached | None = None
    """The gateway's answer, when the call was sent at all."""
    failure: BaseException | None = None
    """The exception openai-agents turned into the model's text, when there was one."""


class ScriptedModel(Model):
    """The model: makes the scenario's calls in order, one per turn, and records the answers."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = steps
        self.turns: list[Turn] = []
        self.last_offered: frozenset[str] = frozenset()
        self.last_listed: tuple[str, ...] = ()

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        if self.turns and isinstance(input, list):
            self._record(input)
        self.last_listed = tuple(tool.name for tool in tools)
        self.last_offered = frozenset(self.last_listed)
        step = len(self.turns)
        if step == len(self.steps):
            text = ResponseOutputText(type="output_text", text="INC-7 is closed.", annotations=[])
            message = ResponseOutputMessage(
                id="done", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        label, tool, arguments = self.steps[step]
        self.turns.append(Turn(label, tool, dict(arguments), self.last_offered, self.last_listed))
        call = ResponseFunctionToolCall(
            type="function_call",
            id=f"fc-{step}",
            call_id=_call_id(step),
            name=tool,
            arguments=json.dumps(arguments),
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model is only run with Runner.run")

    def _record(self, items: list[Any]) -> None:
        call_id = _call_id(len(self.turns) - 1)
        for item in items:
            if (
                isinstance(item, Mapping)
                and item.get("type") == "function_call_output"
                and item.get("call_id") == call_id
            ):
                self.turns[-1].output = _text(item["output"])


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "".join(block["text"] for block in output if block.get("type") == "input_text")


@dataclass
class Recorder:
    """The public hooks of an MCP server, recording per tool call id."""

    reached: dict[str, Reached] = field(default_factory=dict)
    failures: dict[str, BaseException] = field(default_factory=dict)
    notifications: list[Any] = field(default_factory=list)

    def custom_data(self, context: MCPToolCustomDataContext) -> None:
        details = (context.result_meta or {}).get("residency/error")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        if isinstance(context.run_context, ToolContext):
            self.reached[context.run_context.tool_call_id] = Reached(context.is_error, reason)

    def failure(self, context: RunContextWrapper[Any], error: Exception) -> str:
        if isinstance(context, ToolContext):
            self.failures[context.tool_call_id] = error
        # The model reads exactly what it would read without this hook.
        return default_tool_error_function(context, error)

    async def message(self, message: Any) -> None:
        self.notifications.append(getattr(message, "root", message))


@dataclass
class Run:
    """A finished (or aborted) scripted run, with what the gateway logged for its session."""

    model: ScriptedModel
    recorder: Recorder
    events: list[dict[str, Any]]
    output: Any = None
    error: ModelBehaviorError | None = None
    cached: tuple[str, ...] | None = None
    """The names of the last list openai-agents fetched (``cached_tools``; None: it fetched none)."""
    timeline: list[str] | None = None
    """INC-7's timeline on the desk after the run, when the run asked for it."""

    @property
    def turns(self) -> list[Turn]:
        return self.model.turns

    def event_subjects(self, kind: str) -> list[str]:
        return [e["subject"] for e in self.events if e["kind"] == kind]


class LoggedStdio(MCPServerStdio):
    """``MCPServerStdio`` with the gateway's stderr in a file of the test's (``errlog``), which
    ``MCPServerStdio`` leaves to the interpreter's stderr; nothing else differs."""

    def __init__(self, *args: Any, errlog: TextIO, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errlog = errlog

    def create_streams(self) -> Any:
        return stdio_client(self.params, errlog=self.errlog)


@asynccontextmanager
async def server_for(
    config: Path,
    http: HttpSession | None,
    recorder: Recorder,
    *,
    cache_tools_list: bool,
    errlog: Path | None = None,
) -> AsyncIterator[MCPServerStdio | MCPServerStreamableHttp]:
    """A connected openai-agents MCP server on a ``residency serve``: a fresh process of
    ``config`` over stdio (``http`` None; its stderr to ``errlog`` if given), a fresh session
    of a shared one over HTTP."""
    hooks: dict[str, Any] = {
        "cache_tools_list": cache_tools_list,
        "client_session_timeout_seconds": REQUEST_TIMEOUT,
        "custom_data_extractor": recorder.custom_data,
        "failure_error_function": recorder.failure,
        "message_handler": recorder.message,
    }
    async with AsyncExitStack() as stack:
        server: MCPServerStdio | MCPServerStreamableHttp
        if http is None:
            command, *args = serve_command(config)
            if errlog is None:
                server = MCPServerStdio(params={"command": command, "args": args}, name="residency", **hooks)
            else:
                log = stack.enter_context(errlog.open("w", encoding="utf-8"))
                server = LoggedStdio(
                    params={"command": command, "args": args}, name="residency", errlog=log, **hooks
                )
        else:
            # 2026-07-28 HTTP has no protocol session: the client names its residency session.
            params: MCPServerStreamableHttpParams = {
                "url": http.url,
                "headers": {"Residency-Session": http.key},
                "timeout": REQUEST_TIMEOUT,
            }
            server = MCPServerStreamableHttp(params=params, name="residency", **hooks)

        async def cleanup() -> None:
            # Also after a timeout: the gateway process must not outlive the test.
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP):
                await server.cleanup()

        stack.push_async_callback(cleanup)
        await server.connect()
        yield server


async def run_scenario(
    tmp_path: Path,
    *,
    http: HttpSession | None = None,
    cache_tools_list: bool = False,
    raise_on_unknown_tool: bool = False,
    steps: Sequence[Step] = STEPS,
    config: Path | None = None,
    read_timeline: bool = False,
    errlog: Path | None = None,
) -> Run:
    """Run ``steps`` through openai-agents on a gateway of ``config`` (default the list scenario's,
    which serves once its desk is up; over HTTP, the gateway ``http`` names is already running its
    own). ``read_timeline``: read INC-7's timeline from the desk afterwards (through
    ``call_tool``, not through the model); ``errlog``: over stdio, where the gateway's stderr goes."""
    model = ScriptedModel(steps)
    recorder = Recorder()
    agent = Agent(name="incident-desk", instructions="Work incident INC-7.", model=model)
    run_config = RunConfig(
        tracing_disabled=True,
        tool_not_found_behavior="raise_error" if raise_on_unknown_tool else "return_error_to_model",
    )
    output: Any = None
    error: ModelBehaviorError | None = None
    timeline: list[str] | None = None
    config_path = config if config is not None else scenario.write_config(tmp_path)
    with anyio.fail_after(RUN_LIMIT):
        async with server_for(
            config_path, http, recorder, cache_tools_list=cache_tools_list, errlog=errlog
        ) as server:
            assert server.session is not None
            assert server.session.protocol_version == MODERN
            agent.mcp_servers = [server]
            try:
                result = await Runner.run(
                    agent, "Close INC-7.", run_config=run_config, max_turns=len(steps) + 2
                )
                output = result.final_output
            except ModelBehaviorError as exc:
                if not raise_on_unknown_tool:
                    raise
                error = exc
            read = await server.read_resource("residency://events")
            cached = server.cached_tools
            if read_timeline:
                timeline = await desk_timeline(server)
    for step, turn in enumerate(model.turns):
        turn.reached = recorder.reached.get(_call_id(step))
        turn.failure = recorder.failures.get(_call_id(step))
    events = read.contents[0]
    assert isinstance(events, types.TextResourceContents)
    names = None if cached is None else tuple(tool.name for tool in cached)
    return Run(model, recorder, json.loads(events.text), output, error, names, timeline)


async def desk_timeline(server: MCPServerStdio | MCPServerStreamableHttp) -> list[str]:
    """INC-7's timeline as the desk holds it, read through ``call_tool`` (the only way there)."""
    arguments = {"name": "get_timeline", "arguments": {"incident_id": "INC-7"}}
    result = await server.call_tool("call_tool", arguments)
    assert not result.is_error, result
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    # The desk's own answer comes first; an implicit re-expansion adds the schema in a block after.
    timeline: list[str] = json.loads(texts[0])["timeline"]
    return timeline


def http_session(
    transport: str, request: pytest.FixtureRequest, gateway: str = "gateway"
) -> HttpSession | None:
    """For a test run over ``transport``: over ``"http"`` a session of its own on the module's
    shared gateway of that fixture (``conftest.py``, serving once its desk is up); over stdio None
    (openai-agents starts the gateway itself)."""
    if transport == "stdio":
        return None
    served: Served = request.getfixturevalue(gateway)
    return HttpSession(served.url, request.getfixturevalue("session_key"))


def assert_common_steps(run: Run) -> None:
    """Steps every configuration gets the same: the first list, the resident calls, re-expansion."""
    assert len(run.turns) == len(STEPS)
    runbook, note, push, *_, reexpand, again = run.turns
    assert runbook.offered == FIRST_LIST
    assert runbook.reached == Reached(False, None) and '"runbook_id": "RB-1"' in runbook.output
    assert note.reached == Reached(False, None) and '"incident_id": "INC-7"' in note.output
    assert push.reached == Reached(False, None) and f'"name":"{PUSHED_OUT}"' in push.output
    assert reexpand.reached == Reached(False, None) and f'"name":"{TOMBSTONED_TOOL}"' in reexpand.output
    assert TOMBSTONED_TOOL in again.offered
    assert again.reached == Reached(False, None) and '"incident_id": "INC-7"' in again.output
    assert run.output == "INC-7 is closed."
    assert TOMBSTONED_TOOL in run.event_subjects("tombstoned")
    assert EVICTED_TOOL in run.event_subjects("evicted")
    # No list_changed in this era, and openai-agents opens no subscriptions/listen stream.
    assert not any(isinstance(n, types.ToolListChangedNotification) for n in run.recorder.notifications)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_openai_agents_relists_every_turn_and_refuses_withdrawn_tools_itself(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = await run_scenario(tmp_path, http=http_session(transport, request))
    assert_common_steps(run)
    after_push = run.turns[3].offered
    assert PUSHED_OUT in after_push
    assert TOMBSTONED_TOOL not in after_push and EVICTED_TOOL not in after_push
    for step in REFUSED_STEPS:
        turn = run.turns[step]
        # openai-agents' own refusal: the call was never sent.
        assert turn.reached is None and turn.failure is None
        assert turn.output == f"Tool '{turn.tool}' not found."
    assert run.event_subjects("refused") == []
    assert EVICTED_TOOL not in run.event_subjects("reexpanded")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_openai_agents_with_a_cached_list_sends_withdrawn_tools_to_the_gateway(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run = await run_scenario(tmp_path, http=http_session(transport, request), cache_tools_list=True)
    assert_common_steps(run)
    assert all(turn.offered == FIRST_LIST for turn in run.turns)
    refused, invalid, implicit = (run.turns[step] for step in REFUSED_STEPS)

    # The tombstoned tool: the gateway's refusal, read by the model, names the re-expansion tool.
    assert refused.reached == Reached(True, "tool_not_resident")
    assert refused.output.startswith(f"{TOMBSTONED_TOOL}: mutation tool schema withheld")
    assert "reexpand_tools" in refused.output

    # Invalid arguments for the evicted tool never leave openai-agents: the cached schema still
    # lists 'resolution' as required, so its own check refuses the call.
    assert invalid.reached is None
    assert isinstance(invalid.failure, UserError)
    assert "missing required parameters: resolution" in str(invalid.failure)
    assert invalid.output == "An error occurred while running the tool. Please try again."

    # Valid arguments: admitted by implicit re-expansion, and the desk really closed the incident.
    assert implicit.reached == Reached(False, None)
    result = json.loads(implicit.output)
    assert result["incident_id"] == "INC-7" and result["status"] == "resolved"
    assert run.event_subjects("refused") == [TOMBSTONED_TOOL]
    assert EVICTED_TOOL in run.event_subjects("reexpanded")


async def test_by_default_openai_agents_ends_the_run_when_the_model_calls_a_withdrawn_tool(
    tmp_path: Path,
) -> None:
    run = await run_scenario(tmp_path, raise_on_unknown_tool=True)
    assert isinstance(run.error, ModelBehaviorError)
    assert TOMBSTONED_TOOL in str(run.error)
    # The run stopped at the first call of a tool its refreshed list no longer had; never sent.
    assert [turn.tool for turn in run.turns] == [tool for _, tool, _ in STEPS[:4]]
    assert TOMBSTONED_TOOL not in run.turns[3].offered
    assert run.turns[3].reached is None and run.turns[3].output == ""
    assert run.output is None
    assert run.event_subjects("refused") == []


@pytest.mark.parametrize("cache_tools_list", [False, True])
async def test_a_tool_reexpanded_mid_run_is_callable_only_when_openai_agents_relists(
    cache_tools_list: bool, tmp_path: Path
) -> None:
    steps = (*STEPS[:3], CALL_THE_NEWCOMER)
    run = await run_scenario(tmp_path, cache_tools_list=cache_tools_list, steps=steps)
    newcomer = run.turns[3]
    if not cache_tools_list:
        assert PUSHED_OUT in newcomer.offered
        assert newcomer.reached == Reached(False, None)
        result = json.loads(newcomer.output)
        assert result["severity"] == "SEV-1" and result["notified"] is True
    else:
        # The re-expansion result carried the full schema, but the cached list is all the model
        # is offered, and openai-agents refuses any other name.
        assert newcomer.offered == FIRST_LIST
        assert newcomer.reached is None
        assert newcomer.output == f"Tool '{PUSHED_OUT}' not found."


# -- the by-reference task ------------------------------------------------------------------------

_FORWARDED = re.compile(
    r"call forwarded session=(\S+) tool=(\S+) upstream=\S+ \S+ (?:ok|error)(?: via=(\S+))?$"
)
_LISTED = re.compile(r"tools listed session=(\S+) ")


@dataclass
class GatewayLog:
    """What the gateway's stderr says it did for one session (its INFO lines, ``_telemetry``)."""

    forwarded: list[tuple[str, str]]
    """(tool, via) of each call forwarded upstream, in order; via is "" for a direct call."""
    lists: int
    """``tools/list`` requests answered."""


def gateway_log(text: str, session: str | None = None) -> GatewayLog:
    """Read ``text`` (a gateway's stderr) for ``session``, or for its only session (stdio)."""
    lines = text.splitlines()
    if session is None:
        sessions = {m.group(1) for line in lines if (m := _LISTED.search(line) or _FORWARDED.search(line))}
        assert len(sessions) == 1, sessions
        (session,) = sessions
    forwarded = [
        (m.group(2), m.group(3) or "")
        for line in lines
        if (m := _FORWARDED.search(line)) and m.group(1) == session
    ]
    lists = sum(1 for line in lines if (m := _LISTED.search(line)) and m.group(1) == session)
    return GatewayLog(forwarded, lists)


def reference_outcomes(run: Run) -> list[dict[str, Any]]:
    """Each turn's result as ``scenario.check_reference_outcomes`` reads it: the gateway's flag
    (every call reached it) and the text the model read."""
    got = []
    for turn in run.turns:
        assert turn.reached is not None and turn.failure is None, turn
        got.append({"is_error": bool(turn.reached.is_error), "text": turn.output})
    return got


@pytest.mark.parametrize("cache_tools_list", [True, False], ids=["cached", "relisted"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_openai_agents_runs_the_task_by_reference_with_its_first_list(
    transport: str, cache_tools_list: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With ``cache_tools_list=True`` openai-agents lists once and offers that list on every turn
    (on its default, ``False``, it lists every turn and gets the same list): by reference the list
    never changes, and the withheld tools are reached through ``call_tool``, a tool of that list.
    The search result hands the model the schema, and the call goes through."""
    http = http_session(transport, request, "reference_gateway")
    run = await run_scenario(
        tmp_path,
        http=http,
        cache_tools_list=cache_tools_list,
        steps=scenario.REFERENCE_STEPS,
        config=scenario.write_reference_config(tmp_path) if http is None else None,
        read_timeline=True,
        errlog=tmp_path / "gateway.log" if http is None else None,
    )
    assert run.output == "INC-7 is closed."
    assert run.cached == scenario.REFERENCE_FIRST_LIST
    assert all(turn.listed == scenario.REFERENCE_FIRST_LIST for turn in run.turns)
    scenario.check_reference_outcomes(reference_outcomes(run))
    _, _, note, invalid, closed = run.turns
    # Invalid arguments inside call_tool's "arguments" pass openai-agents' own check of the cached
    # schema (call_tool's), so the gateway's refusal, with the full schema, is what the model reads.
    assert invalid.reached == Reached(True, "arguments_invalid")
    assert note.reached == closed.reached == Reached(False, None)
    # Nothing was announced (this era has no list_changed; openai-agents opens no listen stream).
    assert not any(isinstance(n, types.ToolListChangedNotification) for n in run.recorder.notifications)

    # The event log: the pinned tool called by name, the withheld ones through call_tool (the
    # invalid call refused, not called), and no ghost: no tool was ever tombstoned.
    assert run.event_subjects("called") == [scenario.REFERENCE_PINNED, TOMBSTONED_TOOL, EVICTED_TOOL]
    assert scenario.calls_through_call_tool(run.events) == [TOMBSTONED_TOOL, EVICTED_TOOL]
    assert run.event_subjects("refused") == [EVICTED_TOOL]
    assert run.event_subjects("tombstoned") == []
    assert scenario.forwarded_ghosts(run.events) == 0
    # The desk has what the calls did: the note in INC-7's timeline where the desk's answer put it,
    # and the resolution.
    assert run.timeline is not None
    entries = json.loads(note.output)["entries"]
    assert run.timeline[entries - 1] == f"note: {scenario.FIRST_NOTE['note']}"
    assert f"resolved: {scenario.EVICTED_VALID['resolution']}" in run.timeline
    # And so does the gateway's log: openai-agents listed once (or once a turn, the final answer's
    # included), the withheld tools (and the desk read above) went through call_tool, and nothing
    # else was forwarded.
    if http is None:
        log = gateway_log((tmp_path / "gateway.log").read_text(encoding="utf-8"))
    else:
        served: Served = request.getfixturevalue("reference_gateway")
        # The gateway logs a forwarded call on its stderr as it answers it: on a loaded machine the
        # last line may reach this process just after the agent's answer did.
        with anyio.move_on_after(NOTICE):
            while len(gateway_log(served.log(), http.key).forwarded) < 4:
                await anyio.sleep(0.05)
        log = gateway_log(served.log(), http.key)
    assert log.lists == (1 if cache_tools_list else len(run.turns) + 1)
    assert log.forwarded == [
        (scenario.REFERENCE_PINNED, ""),
        (scenario.TOMBSTONED_TOOL, "call_tool"),
        (scenario.EVICTED_TOOL, "call_tool"),
        ("get_timeline", "call_tool"),
    ]
