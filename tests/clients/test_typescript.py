"""The TypeScript SDK clients run the scripted tasks through ``residency serve``.

Two real client generations: ``@modelcontextprotocol/sdk`` 1.x (handshake era only) and
``@modelcontextprotocol/client`` 2.x (handshake era, ``auto`` negotiation and a pinned
2026-07-28), each over stdio (the client launches ``python -m residency serve``) and streamable
HTTP (the module's shared gateways, ``conftest.py``). One node process
(``tests/peers/scripted_task.mjs``) runs a whole task of ``tests.clients.scenario`` in one MCP
session and prints what came back; these tests assert on that. Two tasks: the list scenario
(``scenario.STEPS``, delivered by list: the client waits for each list change and lists again),
and the by-reference task (``scenario.REFERENCE_STEPS``, the gateway's default delivery).

By reference both generations get everything on their defaults: the list is the pinned tool and
the meta-tools for the whole session (no ``list_changed``, no listen event), a ``search_tools``
hit carries the tool's schema, and ``call_tool(name, arguments)`` reaches a tool the list never
showed. The plans send no ``_meta``, so these runs report no dropped result (the Python SDK's and
the Inspector's tests do).

The npm packages come from ``tests/peers/package.json`` (``.ci/run`` installs them); without
node or them these tests skip locally and fail when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, NoReturn

import pytest

from residency._gateway._demo import desk_tools
from tests._timing import READY_WAIT, SERVING, scaled
from tests.clients import scenario
from tests.clients._serve import ROOT, Ran, Served, run_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PEERS = ROOT / "tests" / "peers"
SCRIPT = PEERS / "scripted_task.mjs"
PACKAGES = {
    "1": PEERS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json",
    "2": PEERS / "node_modules" / "@modelcontextprotocol" / "client" / "package.json",
}
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

RUN_TIMEOUT = scaled(240) + READY_WAIT
"""Seconds one client run may take: node, the gateway, its desk (the gateway serves once it
is up), twelve requests."""
CONNECT_MS = round(SERVING * 1000)
"""Milliseconds the client may wait for its connection: over stdio, the gateway serving."""

CLIENTS = pytest.mark.parametrize(
    ("sdk", "era"),
    [("1", "legacy"), ("2", "legacy"), ("2", "auto"), ("2", "modern")],
    ids=["sdk1-legacy", "sdk2-legacy", "sdk2-auto", "sdk2-modern"],
)
TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])


def _missing(what: str) -> NoReturn:
    reason = f"{what} is not installed (run `npm install` in tests/peers; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so a missing client is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture
def node_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a node client: node present, a private HOME."""
    if shutil.which("node") is None:
        _missing("node")
    for package in PACKAGES.values():
        if not package.exists():
            _missing(str(package.parent.relative_to(ROOT)))
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home), "NO_COLOR": "1", "NODE_NO_WARNINGS": "1"}


# -- the plan ---------------------------------------------------------------------------------------


def plan() -> list[dict[str, Any]]:
    """The scenario's steps as a ``scripted_task.mjs`` plan.

    The initial list, then a subscriptions/listen stream (2026-07-28 only; in the handshake era
    list_changed arrives unsolicited), then every step of ``scenario.STEPS``. After each
    ``reexpand_tools`` call the client waits for the list change and lists again, as a client
    that follows list_changed does.
    """
    steps: list[dict[str, Any]] = [{"op": "list", "label": "initial"}, {"op": "listen", "label": "listen"}]
    for label, tool, arguments in scenario.STEPS:
        steps.append({"op": "call", "label": label, "name": tool, "arguments": arguments})
        if tool == "reexpand_tools":
            steps.append({"op": "await_list_changed", "since": len(steps) - 1, "label": f"changed: {label}"})
            steps.append({"op": "list", "label": f"listed: {label}"})
    return steps


EVENTS = "residency://events"
QUIET_MS = round(scaled(2) * 1000)
"""How long the by-reference plan listens, at its end, for a list change that must not come."""


def reference_plan() -> list[dict[str, Any]]:
    """The by-reference task as a ``scripted_task.mjs`` plan.

    The initial list and a subscriptions/listen stream (2026-07-28 only), every step of
    ``scenario.REFERENCE_STEPS``, the list again, the session's event log, then a short wait for
    a list change (none is due: the list never changes by reference).
    """
    steps: list[dict[str, Any]] = [{"op": "list", "label": "initial"}, {"op": "listen", "label": "listen"}]
    for label, tool, arguments in scenario.REFERENCE_STEPS:
        steps.append({"op": "call", "label": label, "name": tool, "arguments": arguments})
    steps.append({"op": "list", "label": "listed after"})
    steps.append({"op": "read", "uri": EVENTS, "label": "events"})
    steps.append({"op": "await_list_changed", "since": 0, "timeout": QUIET_MS, "label": "no change"})
    return steps


async def run_task(
    sdk: str, era: str, target: list[str], env: dict[str, str], steps: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any], Ran]:
    """Run a whole task (``steps``, default ``plan()``) in one client process on ``target``
    (``--stdio CMD`` or ``--url URL``)."""
    argv = [
        "node",
        str(SCRIPT),
        "--sdk",
        sdk,
        "--era",
        era,
        "--plan",
        json.dumps(plan() if steps is None else steps),
        "--timeout",
        "60000",
        "--connect-timeout",
        str(CONNECT_MS),
        "--notify-timeout",
        "20000",
    ]
    ran = await run_client([*argv, *target], env=env, timeout=RUN_TIMEOUT)
    return _report(ran), ran


def _report(ran: Ran) -> dict[str, Any]:
    try:
        report: dict[str, Any] = json.loads(ran.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the client printed no JSON report: {ran.explain()}")
    assert ran.returncode == 0 and report["ok"] is True, ran.explain()
    return report


def steps_by_label(
    report: dict[str, Any], planned: list[dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    steps = report["steps"]
    assert [s["label"] for s in steps] == [s["label"] for s in (plan() if planned is None else planned)]
    thrown = [s for s in steps if "thrown" in s]
    assert not thrown, f"steps threw in the client: {thrown}"
    return {s["label"]: s for s in steps}


def reason(step: dict[str, Any]) -> str | None:
    details = (step.get("meta") or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def full_schema(name: str) -> dict[str, Any]:
    (tool,) = [t for t in desk_tools() if t["name"] == name]
    schema: dict[str, Any] = tool["inputSchema"]
    return schema


def schema_in(text: str) -> Any:
    """The JSON object embedded in a refusal text (the tool's input schema)."""
    start = text.find("{")
    assert start >= 0, text
    value, _ = json.JSONDecoder().raw_decode(text[start:])
    return value


# -- the task -------------------------------------------------------------------------------------


@CLIENTS
@TRANSPORTS
async def test_a_typescript_client_runs_the_scripted_task_in_one_session(
    sdk: str,
    era: str,
    transport: str,
    tmp_path: Path,
    session_key: str,
    request: pytest.FixtureRequest,
    node_env: dict[str, str],
) -> None:
    if transport == "stdio":
        stdio = ["--stdio", *scenario.serve_command(scenario.write_config(tmp_path))]
        report, ran = await run_task(sdk, era, stdio, node_env)
        log = str(report.get("server_stderr_tail") or "")
    else:
        served: Served = request.getfixturevalue("gateway")
        # Handshake era: the Mcp-Session-Id the client keeps is the gateway session, as for any
        # client. 2026-07-28 has no protocol session: the Residency-Session header names it.
        session = [] if era == "legacy" else ["--session", session_key]
        report, ran = await run_task(sdk, era, [*session, "--url", served.url], node_env)
        log = served.log()  # what the gateway printed during this test only
    steps = steps_by_label(report)
    modern = era != "legacy"

    # The era the client asked for is the era it got (auto picks 2026-07-28 on this gateway).
    assert report["protocol_version"] == (MODERN if modern else HANDSHAKE), ran.explain()
    assert report["protocol_era"] == ("modern" if modern else "legacy")
    assert report["advertised_list_changed"] is True

    # 1. The session's view: the tools planned to the budget plus the meta-tools.
    initial = steps["initial"]
    assert set(initial["names"]) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}
    if modern:
        assert (initial["ttlMs"], initial["cacheScope"]) == (0, "private")
        assert steps["listen"]["honoredFilter"] == {"toolsListChanged": True}
    else:
        assert "skipped" in steps["listen"]

    # 2-8. What the gateway answered, step by step, as the scenario defines it.
    calls = [steps[label] for label, _, _ in scenario.STEPS]
    scenario.check_outcomes([{"is_error": s["isError"], "text": s["text"]} for s in calls])
    _, _, _, refused, invalid, implicit, reexpanded, again = calls

    # The re-expansion pushed the two out and the client was told (list_changed / listen event).
    push_label = scenario.STEPS[2][0]
    assert steps[f"changed: {push_label}"]["arrived"] is True, ran.explain()
    after_push = steps[f"listed: {push_label}"]
    assert scenario.TOMBSTONED_TOOL not in after_push["names"]
    assert scenario.EVICTED_TOOL not in after_push["names"]
    assert "update_incident" in after_push["names"]
    reexpand_description = {t["name"]: t for t in after_push["tools"]}["reexpand_tools"]["description"]
    assert scenario.TOMBSTONED_TOOL not in reexpand_description  # the same in every session

    # The tombstoned tool: refused with its tombstone line, which the push's result gave the model.
    assert reason(refused) == "tool_not_resident"
    assert refused["text"] in calls[2]["text"]
    assert "reexpand_tools" in refused["text"]

    # The evicted tool: invalid arguments get its full schema, valid ones the desk's result.
    assert reason(invalid) == "arguments_invalid"
    assert schema_in(invalid["text"]) == full_schema(scenario.EVICTED_TOOL)
    assert reason(implicit) is None
    assert implicit["structuredContent"]["incident_id"] == "INC-7"
    assert implicit["structuredContent"]["status"] == "resolved"
    assert re.search(rf"re-expanded .*tools={scenario.EVICTED_TOOL} \(implicit\)", log), log

    # Re-expanded by name: listed again (after the change was announced) and callable.
    reexpand_label = scenario.STEPS[6][0]
    assert reexpanded["structuredContent"]["tools"][0]["name"] == scenario.TOMBSTONED_TOOL
    assert steps[f"changed: {reexpand_label}"]["arrived"] is True, ran.explain()
    assert scenario.TOMBSTONED_TOOL in steps[f"listed: {reexpand_label}"]["names"]
    assert again["structuredContent"]["incident_id"] == "INC-7"

    # 2026-07-28: the changes came on the subscriptions/listen stream, not unsolicited.
    notes = report["notifications"]
    assert notes
    if modern:
        assert all((n["meta"] or {}).get(SUBSCRIPTION_ID) for n in notes), notes


@CLIENTS
@TRANSPORTS
async def test_a_typescript_client_runs_the_reference_task_in_one_session(
    sdk: str,
    era: str,
    transport: str,
    tmp_path: Path,
    session_key: str,
    request: pytest.FixtureRequest,
    node_env: dict[str, str],
) -> None:
    """On its defaults: a list that never changes, schemas in search results, calls through
    ``call_tool``."""
    planned = reference_plan()
    if transport == "stdio":
        stdio = ["--stdio", *scenario.serve_command(scenario.write_reference_config(tmp_path))]
        report, ran = await run_task(sdk, era, stdio, node_env, planned)
    else:
        served: Served = request.getfixturevalue("reference_gateway")
        session = [] if era == "legacy" else ["--session", session_key]
        report, ran = await run_task(sdk, era, [*session, "--url", served.url], node_env, planned)
    steps = steps_by_label(report, planned)
    modern = era != "legacy"
    assert report["protocol_version"] == (MODERN if modern else HANDSHAKE), ran.explain()
    assert report["protocol_era"] == ("modern" if modern else "legacy")
    if modern:
        assert steps["listen"]["honoredFilter"] == {"toolsListChanged": True}
    else:
        assert "skipped" in steps["listen"]

    # 1. The list: the pinned tool and the meta-tools, the same after the task; no change told.
    assert steps["initial"]["names"] == list(scenario.REFERENCE_FIRST_LIST)
    assert steps["listed after"]["names"] == list(scenario.REFERENCE_FIRST_LIST)
    assert steps["no change"]["arrived"] is False, ran.explain()
    assert report["notifications"] == []

    # 2-6. What the gateway answered, step by step.
    calls = [steps[label] for label, _, _ in scenario.REFERENCE_STEPS]
    scenario.check_reference_outcomes([{"is_error": s["isError"], "text": s["text"]} for s in calls])
    _, found, note, invalid, closed = calls
    assert isinstance((found["meta"] or {}).get("residency/result"), str), found
    (hit, *_) = found["structuredContent"]["tools"]
    assert hit["name"] == scenario.TOMBSTONED_TOOL
    assert hit["definition"]["inputSchema"]["required"] == ["incident_id", "note"]
    assert reason(invalid) == "arguments_invalid"
    assert schema_in(invalid["text"]) == full_schema(scenario.EVICTED_TOOL)
    # The two withheld tools reached the desk through call_tool: the desk's answers, and the
    # session's event log (a call is logged once admitted, then forwarded).
    assert note["structuredContent"]["incident_id"] == "INC-7"
    assert closed["structuredContent"]["status"] == "resolved"
    (contents,) = steps["events"]["contents"]
    events = json.loads(contents["text"])
    assert scenario.calls_through_call_tool(events) == [scenario.TOMBSTONED_TOOL, scenario.EVICTED_TOOL]
    assert scenario.forwarded_ghosts(events) == 0
