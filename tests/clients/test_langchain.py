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

Over HTTP the tests share the module's gateway (``conftest.py``), each in sessions of its own.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests._timing import scaled
from tests.clients import scenario
from tests.clients._serve import ROOT, Served, run_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
TASK = HERE / "langchain_task.py"
PINS = tomllib.loads((HERE / "versions.toml").read_text(encoding="utf-8"))["langchain"]
HANDSHAKE = "2025-11-25"
TASK_TIMEOUT = scaled(300)
"""Seconds one scripted run may take (the stdio quick path starts a gateway per tool call)."""

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
    return scenario.write_config(tmp_path)


def stdio_connection(config_path: Path, *extra: str) -> dict[str, Any]:
    command = scenario.serve_command(config_path, *extra)
    return {"transport": "stdio", "command": command[0], "args": command[1:], "cwd": str(ROOT)}


def shared(request: pytest.FixtureRequest) -> Served:
    """The module's shared HTTP gateway, started when first asked for (``conftest.py``)."""
    served: Served = request.getfixturevalue("gateway")
    return served


def http_connection(url: str, session: str | None = None) -> dict[str, Any]:
    connection: dict[str, Any] = {"transport": "streamable_http", "url": url}
    if session is not None:
        connection["headers"] = {"Residency-Session": session}
    return connection


async def run_task(
    python: str, connection: dict[str, Any], way: str, *, relist_on_change: bool = False
) -> dict[str, Any]:
    """Run the scripted agent once; return its report (its versions checked against the pins)."""
    plan = {
        "connection": connection,
        "way": way,
        "relist_on_change": relist_on_change,
        "steps": [
            {"op": "list", "label": "list the tools"},
            *(
                {"op": "call", "label": label, "tool": tool, "args": args}
                for label, tool, args in scenario.STEPS
            ),
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
    assert len(report["steps"]) == 1 + len(scenario.STEPS), report["steps"]
    for step in report["steps"]:
        assert "raised" not in step, step
    return report


def wire(step: dict[str, Any]) -> dict[str, Any]:
    """What the gateway answered to a call step: through LangChain, or on the raw session."""
    answer: dict[str, Any] | None = step["wire"] if step["held"] else step["mcp_session"]
    assert answer is not None, step
    return answer


def outcomes(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"is_error": wire(s)["is_error"], "text": wire(s)["text"]} for s in report["steps"][1:]]


def reason(step: dict[str, Any]) -> str | None:
    details = (wire(step)["meta"] or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def initial_list(report: dict[str, Any]) -> set[str]:
    listed = report["steps"][0]
    return set(listed["tools"])


def check_what_the_model_sees(calls: list[dict[str, Any]]) -> None:
    """The ToolMessages LangChain builds: errors as ``status="error"`` carrying the gateway's text."""
    for index, step in enumerate(calls):
        if not step["held"]:
            continue
        expected = "error" if index in (REFUSED, INVALID) else "success"
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
