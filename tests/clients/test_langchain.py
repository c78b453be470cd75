"""LangChain (langchain-mcp-adapters) runs the scripted task through ``residency serve``.

The adapters bring mcp 1.x, so they live in a venv of their own (``.ci/run`` builds it from
``tests/clients/versions.toml`` and exports ``RESIDENCY_LANGCHAIN_PYTHON``); the agent is
``tests/clients/langchain_task.py``, run by that venv's interpreter. mcp 1.x speaks the handshake
era only (it offers 2025-11-25), so every run here is in that era.

Two ways to use the adapters, both documented by them:

- a persistent session (``client.session(name)`` + ``load_mcp_tools(session)``): one MCP
  session, so one gateway session, for the whole task;
- the quick path (``client.get_tools()``): a NEW MCP session per tool call. Each call is then a
  new gateway session unless the client names one (the ``Residency-Session`` header over HTTP;
  ``--session`` with a persistent store over stdio, where each call starts a new gateway).

By reference (the gateway's default delivery, ``scenario.reference_config()``) the quick path
runs the whole task on the tools it loaded once: they are the session's list for good (the
pinned tool and the meta-tools with ``call_tool``); the model finds a withheld tool with
``search_tools`` (the hit carries its schema) and calls it through ``call_tool``. Every step
stands alone, so the task runs even when each call is a gateway session of its own (the
adapters' defaults); naming one session keeps its event log readable, which shows the calls
``via call_tool`` and no ghost. (mcp 1.x's ``ClientSession`` lists the tools again in each
per-call session whose call succeeds, to learn output schemas; it gets the same list.)

Over HTTP the tests share the module's gateways (``conftest.py``), each in sessions of its own;
every gateway, shared or started over stdio, serves once its desk is up (the scenario configs:
on a loaded machine the desk may start slowly).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._timing import READY_WAIT, scaled
from tests.clients import scenario
from tests.clients._serve import ROOT, Ran, Served, run_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
TASK = HERE / "langchain_task.py"
PINS = tomllib.loads((HERE / "versions.toml").read_text(encoding="utf-8"))["langchain"]
HANDSHAKE = "2025-11-25"
TASK_TIMEOUT = scaled(300) + READY_WAIT
"""Seconds one scripted run may take (the stdio quick path starts a gateway per tool call; a
gateway serves once its desk is up)."""

LIST_CHANGED = "notifications/tools/list_changed"
REFUSED, INVALID, IMPLICIT = 3, 4, 5
"""Indices in ``scenario.STEPS`` of the tombstoned call, the invalid and the valid evicted call."""
PUSH = 1 + [label for label, _, _ in scenario.STEPS].index("re-expand another tool (pushes two out)")
"""Index in the plan (the list comes first) of the step that pushes two tools out."""


@pytest.fixture
def langchain_python() -> str:
    """The interpreter of the langchain venv (``RESIDENCY_LANGCHAIN_PYTHON``)."""
    python = os.environ.get(PINS["python_env"])
    if not python:
        reason = (
            f"{PINS['python_env']} is unset: no langchain venv (.ci/run builds one at {PINS['venv']} "
            "from tests/clients/versions.toml)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so this is a failure, not a skip")
        pytest.skip(reason)
    if not Path(python).exists():
        pytest.fail(f"{PINS['python_env']}={python} does not exist")
    return python


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """The list scenario's config (``scenario.config()``, serving once its desk is up)."""
    return scenario.write_config(tmp_path)


def stdio_connection(config_path: Path, *extra: str) -> dict[str, Any]:
    command = scenario.serve_command(config_path, *extra)
    return {"transport": "stdio", "command": command[0], "args": command[1:], "cwd": str(ROOT)}


def shared(request: pytest.FixtureRequest, gateway: str = "gateway") -> Served:
    """The module's shared HTTP gateway of that fixture (``conftest.py``; started when first asked
    for, serving once its desk is up), and its log from then on."""
    served: Served = request.getfixturevalue(gateway)
    return Served(served.url, served.stderr, since=len(served.stderr))


def http_connection(url: str, session: str | None = None) -> dict[str, Any]:
    connection: dict[str, Any] = {"transport": "streamable_http", "url": url}
    if session is not None:
        connection["headers"] = {"Residency-Session": session}
    return connection


async def run_task(
    python: str, connection: dict[str, Any], way: str, *, relist_on_change: bool = False
) -> dict[str, Any]:
    """Run the scripted agent once; return its report (its versions checked against the pins)."""
    report, _ = await run_plan(python, connection, way, scenario.STEPS, relist_on_change=relist_on_change)
    return report


async def run_plan(
    python: str,
    connection: dict[str, Any],
    way: str,
    steps: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    relist_on_change: bool = False,
    after: Sequence[dict[str, Any]] = (),
) -> tuple[dict[str, Any], Ran]:
    """Run the scripted agent on a list then ``steps``, then the raw reads ``after``; return its
    report (its versions checked against the pins) and the finished process (its stderr holds
    what the stdio gateways it started printed)."""
    plan = {
        "connection": connection,
        "way": way,
        "relist_on_change": relist_on_change,
        "steps": [
            {"op": "list", "label": "list the tools"},
            *({"op": "call", "label": label, "tool": tool, "args": args} for label, tool, args in steps),
            *after,
        ],
    }
    ran = await run_client([python, str(TASK)], stdin=json.dumps(plan).encode(), timeout=TASK_TIMEOUT)
    assert ran.returncode == 0, ran.explain()
    try:
        report: dict[str, Any] = json.loads(ran.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the langchain task printed no JSON: {ran.explain()}")
    assert "failed" not in report, report["failed"]
    assert report["versions"] == PINS["packages"], "the langchain venv does not match versions.toml"
    assert report["client_protocol_version"] == HANDSHAKE
    assert len(report["steps"]) == 1 + len(steps) + len(after), report["steps"]
    for step in report["steps"]:
        assert "raised" not in step, step
    return report, ran


def wire(step: dict[str, Any]) -> dict[str, Any]:
    """What the gateway answered to a call step: through LangChain, or on the raw session."""
    answer: dict[str, Any] | None = step["wire"] if step["held"] else step["mcp_session"]
    assert answer is not None, step
    return answer


def outcomes(report: dict[str, Any], calls: int = len(scenario.STEPS)) -> list[dict[str, Any]]:
    """What the gateway answered to the plan's first ``calls`` call steps."""
    return [
        {"is_error": wire(s)["is_error"], "text": wire(s)["text"]} for s in report["steps"][1 : 1 + calls]
    ]


def reason(step: dict[str, Any]) -> str | None:
    details = (wire(step)["meta"] or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def initial_list(report: dict[str, Any]) -> set[str]:
    listed = report["steps"][0]
    return set(listed["tools"])


def check_what_the_model_sees(
    calls: list[dict[str, Any]], errors: Sequence[int] = (REFUSED, INVALID)
) -> None:
    """The ToolMessages LangChain builds: errors (the calls at ``errors``) as ``status="error"``,
    every one carrying the gateway's text."""
    for index, step in enumerate(calls):
        if not step["held"]:
            continue
        expected = "error" if index in errors else "success"
        assert step["status"] == expected, step
        assert step["text"] == step["wire"]["text"], "LangChain changed the gateway's text"


def changed_at(report: dict[str, Any]) -> list[int]:
    """Plan step indices during which a ``tools/list_changed`` arrived."""
    return [n["step"] for n in report["notifications"] if n["method"] == LIST_CHANGED]


# -- a persistent session ---------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_langchain_session_runs_the_whole_task_through_its_tools(
    langchain_python: str, config_path: Path, transport: str, request: pytest.FixtureRequest
) -> None:
    """The agent keeps the tools it loaded (the adapters have no list_changed hook), so every
    step, the tombstoned and the evicted tool included, goes through a LangChain tool."""
    connection = (
        stdio_connection(config_path) if transport == "stdio" else http_connection(shared(request).url)
    )
    report = await run_task(langchain_python, connection, "session")
    assert report["protocol_version"] == HANDSHAKE
    assert initial_list(report) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}
    calls = report["steps"][1:]
    assert all(step["held"] for step in calls)
    scenario.check_outcomes(outcomes(report))
    assert reason(calls[REFUSED]) == "tool_not_resident"
    assert reason(calls[INVALID]) == "arguments_invalid"
    assert reason(calls[IMPLICIT]) is None
    check_what_the_model_sees(calls)
    # The session hears the change that re-expanding another tool causes, during that step.
    assert PUSH in changed_at(report)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_langchain_agent_that_reloads_on_list_changed_loses_the_withheld_tools(
    langchain_python: str, config_path: Path, transport: str, request: pytest.FixtureRequest
) -> None:
    """An agent that reloads its tools on ``list_changed`` (via ``session_kwargs``'s
    message_handler) no longer holds the tombstoned and evicted tools: LangChain cannot call them
    (the client stops those steps); ``reexpand_tools`` brings the tombstoned one back into its list.
    The gateway's answers to the same calls on the raw session are still checked."""
    connection = (
        stdio_connection(config_path) if transport == "stdio" else http_connection(shared(request).url)
    )
    report = await run_task(langchain_python, connection, "session", relist_on_change=True)
    calls = report["steps"][1:]
    pushed = calls[PUSH - 1]
    assert set(pushed["relisted"]) == {"update_incident", *scenario.META_TOOLS}
    held = [step["held"] for step in calls]
    assert held == [True, True, True, False, False, False, True, True]
    reexpanded = calls[-2]
    assert scenario.TOMBSTONED_TOOL in reexpanded["relisted"]
    scenario.check_outcomes(outcomes(report))
    assert reason(calls[REFUSED]) == "tool_not_resident"
    assert reason(calls[INVALID]) == "arguments_invalid"
    check_what_the_model_sees(calls)


# -- the quick path: a new MCP session per tool call -------------------------------------------------


async def test_the_quick_path_over_http_without_a_session_header_forgets_between_calls(
    langchain_python: str, gateway: Served
) -> None:
    """Each tool call is a new MCP session and so a new gateway session: nothing the earlier
    calls did is known to the next. The tombstoned tool is not refused (a fresh session has it
    resident), and a re-expansion is lost as soon as its call returns."""
    report = await run_task(langchain_python, http_connection(gateway.url), "quick")
    assert initial_list(report) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}
    calls = report["steps"][1:]
    assert all(step["held"] for step in calls)
    got = outcomes(report)
    assert not got[REFUSED]["is_error"], "a fresh session refused the tombstoned tool"
    assert reason(calls[REFUSED]) is None
    # close_incident is resident in a fresh session: the invalid call is still checked against
    # its full schema and refused, the valid one forwarded.
    assert reason(calls[INVALID]) == "arguments_invalid"
    assert not got[IMPLICIT]["is_error"] and '"status": "resolved"' in got[IMPLICIT]["text"]
    # The one change is heard inside the re-expanding call's own session, which ends with it.
    assert changed_at(report) == [PUSH]


async def test_the_quick_path_over_http_with_a_session_header_runs_the_task(
    langchain_python: str, gateway: Served, session_key: str
) -> None:
    """``"headers": {"Residency-Session": ...}`` in the connection config names one gateway
    session across the per-call MCP sessions: the task runs as in a persistent session."""
    report = await run_task(langchain_python, http_connection(gateway.url, session_key), "quick")
    calls = report["steps"][1:]
    assert all(step["held"] for step in calls)
    scenario.check_outcomes(outcomes(report))
    assert reason(calls[REFUSED]) == "tool_not_resident"
    assert reason(calls[INVALID]) == "arguments_invalid"
    check_what_the_model_sees(calls)


async def test_the_quick_path_over_stdio_starts_a_fresh_gateway_session_per_call(
    langchain_python: str, config_path: Path
) -> None:
    """Over stdio each tool call starts a new ``residency serve`` (and a new session): as over
    HTTP without a header, the tombstone of the earlier calls is not there to refuse the call."""
    report = await run_task(langchain_python, stdio_connection(config_path), "quick")
    calls = report["steps"][1:]
    got = outcomes(report)
    assert not got[REFUSED]["is_error"] and reason(calls[REFUSED]) is None
    assert reason(calls[INVALID]) == "arguments_invalid"
    assert not got[IMPLICIT]["is_error"]


async def test_the_quick_path_over_stdio_keeps_its_session_with_a_name_and_a_store(
    langchain_python: str, config_path: Path, tmp_path: Path
) -> None:
    """``residency serve --session KEY --store sqlite:///...`` in the stdio command: every
    per-call gateway resumes the same session, and the task runs as in a persistent session."""
    store = f"sqlite:///{(tmp_path / 'sessions.db').resolve()}"
    connection = stdio_connection(config_path, "--session", "langchain-quick", "--store", store)
    report = await run_task(langchain_python, connection, "quick")
    calls = report["steps"][1:]
    scenario.check_outcomes(outcomes(report))
    assert reason(calls[REFUSED]) == "tool_not_resident"
    assert reason(calls[INVALID]) == "arguments_invalid"
    check_what_the_model_sees(calls)


# -- the by-reference task on the quick path ---------------------------------------------------------

REFERENCE_INVALID = [label for label, _, _ in scenario.REFERENCE_STEPS].index(
    "call an unseen tool with invalid arguments"
)
"""Index in ``scenario.REFERENCE_STEPS`` of the call the gateway refuses (invalid arguments)."""
READ_EVENTS = {"op": "read", "label": "read the event log", "uri": "residency://events"}
READ_TIMELINE = {
    "op": "raw_call",
    "label": "read INC-7's timeline from the desk",
    "tool": "call_tool",
    "args": {"name": "get_timeline", "arguments": {"incident_id": "INC-7"}},
}
FORWARDED_BY_REFERENCE = [
    (scenario.REFERENCE_PINNED, ""),
    (scenario.TOMBSTONED_TOOL, "call_tool"),
    (scenario.EVICTED_TOOL, "call_tool"),
]
"""(tool, via) of the calls the by-reference task has forwarded upstream, in order."""

_FORWARDED = re.compile(
    r"call forwarded session=(\S+) tool=(\S+) upstream=\S+ \S+ (?:ok|error)(?: via=(\S+))?$"
)
_LISTED = re.compile(r"tools listed session=(\S+) ")


@dataclass(frozen=True)
class Forwarded:
    """One ``call forwarded`` line of a gateway's stderr (``_telemetry``)."""

    session: str
    tool: str
    via: str
    """The proxy tool the call came through (``call_tool``); "" for a direct call."""


def forwarded(log: str) -> list[Forwarded]:
    """The calls a gateway's stderr says it forwarded upstream, in order."""
    return [
        Forwarded(m.group(1), m.group(2), m.group(3) or "")
        for line in log.splitlines()
        if (m := _FORWARDED.search(line))
    ]


def listed(log: str) -> list[str]:
    """The session of each ``tools/list`` a gateway's stderr says it answered.

    The quick path lists once (``get_tools()``), and then mcp 1.x lists again in each per-call
    session whose call succeeded: its ``ClientSession`` learns a tool's output schema from the
    list before it validates a result. The list is the same fixed one every time."""
    return [m.group(1) for line in log.splitlines() if (m := _LISTED.search(line))]


def subjects(events: list[dict[str, Any]], kind: str) -> list[str]:
    """The subjects of the ``kind`` events of ``residency://events``, in order."""
    return [str(e["subject"]) for e in events if e["kind"] == kind]


def check_reference_task(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What the quick path gets by reference, however its gateway sessions are kept; returns the
    call steps. The tools are loaded once, and they are all the task needs."""
    assert report["steps"][0]["tools"] == list(scenario.REFERENCE_FIRST_LIST)
    calls: list[dict[str, Any]] = report["steps"][1 : 1 + len(scenario.REFERENCE_STEPS)]
    assert [step["tool"] for step in calls] == [tool for _, tool, _ in scenario.REFERENCE_STEPS]
    assert all(step["held"] for step in calls)
    scenario.check_reference_outcomes(outcomes(report, len(scenario.REFERENCE_STEPS)))
    assert [reason(step) for step in calls] == [
        "arguments_invalid" if index == REFERENCE_INVALID else None for index in range(len(calls))
    ]
    check_what_the_model_sees(calls, errors=(REFERENCE_INVALID,))
    assert changed_at(report) == []
    return calls


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_quick_path_runs_the_reference_task_in_a_named_session(
    langchain_python: str, transport: str, tmp_path: Path, session_key: str, request: pytest.FixtureRequest
) -> None:
    """By reference the tools ``get_tools()`` loads once are the session's list for good: the
    withheld tools are found with ``search_tools`` and called through ``call_tool``. Here one
    gateway session spans the per-call MCP sessions (``--session`` and a store over stdio, the
    ``Residency-Session`` header over HTTP), so its event log can be read afterwards."""
    served: Served | None = None
    after: list[dict[str, Any]] = [READ_EVENTS]
    if transport == "stdio":
        store = f"sqlite:///{(tmp_path / 'sessions.db').resolve()}"
        config = scenario.write_reference_config(tmp_path)
        connection = stdio_connection(config, "--session", session_key, "--store", store)
    else:
        served = shared(request, "reference_gateway")
        connection = http_connection(served.url, session_key)
        after.append(READ_TIMELINE)  # over stdio each call's gateway starts a desk of its own
    report, ran = await run_plan(langchain_python, connection, "quick", scenario.REFERENCE_STEPS, after=after)
    calls = check_reference_task(report)
    reads = report["steps"][1 + len(calls) :]

    # The event log: the pinned tool called by name, the withheld ones through call_tool (the
    # invalid call refused, not called), and no ghost: no tool was ever tombstoned.
    events = json.loads(reads[0]["text"])
    withheld = [scenario.TOMBSTONED_TOOL, scenario.EVICTED_TOOL]
    assert subjects(events, "called") == [scenario.REFERENCE_PINNED, *withheld]
    assert scenario.calls_through_call_tool(events) == withheld
    assert subjects(events, "refused") == [scenario.EVICTED_TOOL]
    assert subjects(events, "tombstoned") == []
    assert scenario.forwarded_ghosts(events) == 0
    # The gateway's log says what was forwarded, all in the one named session: the withheld tools
    # through call_tool, and (over HTTP) the timeline read; and that it listed once for
    # get_tools(), then once in each per-call MCP session whose call succeeded (``listed``).
    log = ran.stderr if served is None else served.log()
    expected = [*FORWARDED_BY_REFERENCE, *([("get_timeline", "call_tool")] if served else [])]
    assert [(f.tool, f.via) for f in forwarded(log) if f.session == session_key] == expected
    succeeded = sum(not wire(step)["is_error"] for step in calls) + (1 if served else 0)
    assert listed(log) == [session_key] * (1 + succeeded)
    if served is not None:
        # And the desk holds what the calls did: the note where its answer put it, the resolution.
        entries = json.loads(wire(calls[2])["text"])["entries"]
        timeline = json.loads(reads[1]["mcp_session"]["text"].split("\n")[0])["timeline"]
        assert timeline[entries - 1] == f"note: {scenario.FIRST_NOTE['note']}"
        assert f"resolved: {scenario.EVICTED_VALID['resolution']}" in timeline


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_quick_path_runs_the_reference_task_with_no_session_named(
    langchain_python: str, transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On the adapters' defaults every tool call is a gateway session of its own (over stdio, a
    gateway of its own), and the task still runs: by reference each step stands alone, since a
    search result carries the schema and a valid ``call_tool`` call re-expands what it names."""
    served: Served | None = None
    if transport == "stdio":
        connection = stdio_connection(scenario.write_reference_config(tmp_path))
    else:
        served = shared(request, "reference_gateway")
        connection = http_connection(served.url)
    report, ran = await run_plan(langchain_python, connection, "quick", scenario.REFERENCE_STEPS)
    check_reference_task(report)
    # No session outlives its call, so there is no event log to read: the gateway's log shows the
    # withheld tools forwarded through call_tool, each call in a new session, after one list.
    log = ran.stderr if served is None else served.log()
    calls = forwarded(log)
    assert [(f.tool, f.via) for f in calls] == FORWARDED_BY_REFERENCE
    sessions = listed(log)
    succeeded = sum(not wire(step)["is_error"] for step in report["steps"][1:])
    assert len(set(sessions)) == len(sessions) == 1 + succeeded
    assert len({f.session for f in calls}) == len(calls) and {f.session for f in calls} <= set(sessions[1:])
    assert "reason=tool_not_resident" not in log
