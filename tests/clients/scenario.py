"""The scripted task every client runs through ``residency serve``.

The gateway fronts the bundled incident desk, served in the gateway's own process
(``residency serve --demo``: these tests are about the clients and the gateway they talk to,
not about how the gateway reaches its upstreams, which ``tests/gateway`` covers with real stdio
and HTTP upstreams; a desk process per gateway start would cost every stdio client step a
second interpreter), with a schema budget of
350 tokens at the ``compact`` level and the greedy planner (``"planner": "greedy"``): its list
follows the budget turn by turn, so a short script sees tools pushed out (the gateway's default,
stable planner, waits for 1.5 times the budget; ``tests/gateway`` covers it). Under that budget a
new session lists three desk tools (``close_incident``, ``add_timeline_note``, ``get_runbook``)
plus the three meta-tools. The steps
below then make one tool tombstoned (``add_timeline_note``: called, then pushed out while its
arguments are still in the transcript) and one evicted (``close_incident``: listed, never
called, then pushed out), in a fixed, deterministic order:

1. ``tools/list``                        -> ``INITIAL_TOOLS`` plus the meta-tools
2. call ``get_runbook`` (resident)        -> the desk's runbook RB-1
3. call ``add_timeline_note`` (resident)  -> ok; its arguments are now in the transcript
4. ``reexpand_tools(["update_incident"])`` -> ``add_timeline_note`` and ``get_runbook`` are
   tombstoned, ``close_incident`` is evicted; the list changes (``list_changed`` / listen) and
   the result ends with the new tombstones (``Withheld now:`` and their lines)
5. call ``add_timeline_note`` again       -> refused: ``tool_not_resident``, the text names
   ``reexpand_tools``; never forwarded
6. call ``close_incident`` with invalid arguments (no ``resolution``) -> ``arguments_invalid``,
   the text carries its full input schema
7. call ``close_incident`` with valid arguments -> admitted by implicit re-expansion, forwarded
8. ``reexpand_tools(["add_timeline_note"])`` then call it -> ok

A client that lets the model call only the tools in its current list may stop a step itself
(it refreshed its list after step 4, so ``add_timeline_note`` and ``close_incident`` are gone
from it): the client tests record that as the client's behaviour. That scenario delivers by
list (``"delivery": "list"``): it is about a list that changes.

The by-reference task (``REFERENCE_STEPS``, ``reference_config()``) is the gateway on its
default delivery: the list never changes (the pinned ``get_runbook`` and the meta-tools with
``call_tool``), and every other tool is reached through a result. Every client, on its
defaults, runs it; none needs to see a changed list:

1. ``tools/list``                        -> ``REFERENCE_FIRST_LIST``
2. call ``get_runbook`` (pinned)          -> the desk's runbook RB-1
3. ``search_tools`` for a timeline note   -> ``add_timeline_note`` with its schema
4. ``call_tool`` ``add_timeline_note``    -> ok (a tool the first list did not show)
5. ``call_tool`` ``close_incident`` with invalid arguments -> ``arguments_invalid``, with the
   full input schema in the text (the model has never seen it)
6. ``call_tool`` ``close_incident`` with valid arguments -> forwarded (implicitly re-expanded)

The search asks for one hit, so ``close_incident`` is a tool the model has never seen when it
calls it. The gateway's event log then shows the two ``call_tool`` calls admitted (``called``
events, ``calls_through_call_tool``) and none of a tombstoned tool (``forwarded_ghosts``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests._timing import UPSTREAMS_UP

BUDGET = 350
INITIAL_TOOLS = ("close_incident", "add_timeline_note", "get_runbook")
# What a fresh session is shown: check_chain joins once its scope holds a chain, read_span
# when the gateway offloads results (neither here).
META_TOOLS = ("search_tools", "reexpand_tools", "archive_chain")

RESIDENT_CALL = ("get_runbook", {"runbook_id": "RB-1"})
TOMBSTONED_TOOL = "add_timeline_note"
FIRST_NOTE = {"incident_id": "INC-7", "note": "investigating the 502s"}
SECOND_NOTE = {"incident_id": "INC-7", "note": "rolled back deploy 42"}
PUSH_OUT = ("reexpand_tools", {"names": ["update_incident"]})
EVICTED_TOOL = "close_incident"
EVICTED_INVALID = {"incident_id": "INC-7"}  # 'resolution' is required
EVICTED_VALID = {"incident_id": "INC-7", "resolution": "rolled back the bad deploy"}

STEPS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("call a resident tool", *RESIDENT_CALL),
    ("call a resident mutation tool", TOMBSTONED_TOOL, FIRST_NOTE),
    ("re-expand another tool (pushes two out)", *PUSH_OUT),
    ("call the tombstoned tool", TOMBSTONED_TOOL, SECOND_NOTE),
    ("call the evicted tool with invalid arguments", EVICTED_TOOL, EVICTED_INVALID),
    ("call the evicted tool with valid arguments", EVICTED_TOOL, EVICTED_VALID),
    ("re-expand the tombstoned tool", "reexpand_tools", {"names": [TOMBSTONED_TOOL]}),
    ("call it again", TOMBSTONED_TOOL, SECOND_NOTE),
)
"""(label, tool, arguments) for steps 2-8, in order."""


REFERENCE_PINNED = "get_runbook"
REFERENCE_META_TOOLS = ("search_tools", "reexpand_tools", "call_tool", "archive_chain")
REFERENCE_FIRST_LIST = (REFERENCE_PINNED, *REFERENCE_META_TOOLS)
"""What a session delivered by reference lists, first to last, for its whole life here."""
SEARCH_QUERY = "add a note to an incident timeline"
REFERENCE_STEPS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("call the pinned tool", *RESIDENT_CALL),
    ("search for a tool the list does not show", "search_tools", {"query": SEARCH_QUERY, "limit": 1}),
    (
        "call the found tool through call_tool",
        "call_tool",
        {"name": TOMBSTONED_TOOL, "arguments": FIRST_NOTE},
    ),
    (
        "call an unseen tool with invalid arguments",
        "call_tool",
        {"name": EVICTED_TOOL, "arguments": EVICTED_INVALID},
    ),
    (
        "call it with valid arguments",
        "call_tool",
        {"name": EVICTED_TOOL, "arguments": EVICTED_VALID},
    ),
)
"""(label, tool, arguments) for steps 2-6 of the by-reference task, in order."""


DEMO = "--demo"
"""The ``residency serve`` option that adds the desk (in-process) to the configs below, which
name no server of their own: ``serve_command`` passes it; a gateway started otherwise must too."""


def config() -> dict[str, Any]:
    """The gateway config (served with ``DEMO``): a tight schema budget, by list."""
    return {
        "mcpServers": {},
        "residency": {
            "budget": {"schema_tokens": BUDGET, "argument_tokens": 20000, "planner": "greedy"},
            "minify": "compact",
            "delivery": "list",
            # Serve once the desk is up: the first list is the one every client test asserts.
            **UPSTREAMS_UP,
        },
    }


def reference_config() -> dict[str, Any]:
    """The by-reference task's config (served with ``DEMO``): one pinned tool, the default delivery."""
    return {
        "mcpServers": {},
        "residency": {"pinned": [REFERENCE_PINNED], "minify": "compact", **UPSTREAMS_UP},
    }


def write_config(directory: Path, body: dict[str, Any] | None = None) -> Path:
    """Write ``body`` (default ``config()``) to ``directory/gateway.json`` and return its path."""
    path = directory / "gateway.json"
    path.write_text(json.dumps(body if body is not None else config(), indent=2), encoding="utf-8")
    return path


def write_reference_config(directory: Path) -> Path:
    """Write ``reference_config()`` to ``directory/reference.json`` and return its path."""
    path = directory / "reference.json"
    path.write_text(json.dumps(reference_config(), indent=2), encoding="utf-8")
    return path


def serve_command(config_path: Path, *extra: str) -> list[str]:
    """The command line of ``residency serve`` on this config and the desk (stdio unless ``extra`` says)."""
    return [sys.executable, "-m", "residency", "serve", "--config", str(config_path), DEMO, *extra]


def check_outcomes(outcomes: list[dict[str, Any]]) -> None:
    """Assert what a client that could send every step got back.

    Args:
        outcomes: one ``{"is_error": bool, "text": str}`` per step of ``STEPS``.
    """
    assert len(outcomes) == len(STEPS)
    runbook, note, push, refused, invalid, implicit, reexpanded, again = outcomes
    assert not runbook["is_error"] and "RB-1" in runbook["text"]
    assert not note["is_error"] and "INC-7" in note["text"]
    assert not push["is_error"] and "update_incident" in push["text"]
    assert refused["is_error"] and "reexpand_tools" in refused["text"]
    assert refused["text"].startswith(f"{TOMBSTONED_TOOL}: mutation tool schema withheld")
    assert invalid["is_error"] and "resolution" in invalid["text"] and '"minLength":10' in invalid["text"]
    assert not implicit["is_error"] and '"status": "resolved"' in implicit["text"]
    assert not reexpanded["is_error"]
    assert not again["is_error"] and "INC-7" in again["text"]


def check_reference_outcomes(outcomes: list[dict[str, Any]]) -> None:
    """Assert what a client got back for each step of ``REFERENCE_STEPS``.

    Args:
        outcomes: one ``{"is_error": bool, "text": str}`` per step (the result's text blocks).
    """
    assert len(outcomes) == len(REFERENCE_STEPS)
    runbook, found, note, invalid, closed = outcomes
    assert not runbook["is_error"] and "RB-1" in runbook["text"]
    # The hit carries its schema (compact JSON), and says how to call it.
    assert not found["is_error"] and f'"name":"{TOMBSTONED_TOOL}"' in found["text"]
    assert '"inputSchema"' in found["text"] and "call_tool" in found["text"]
    assert not note["is_error"] and "INC-7" in note["text"]
    assert invalid["is_error"] and "resolution" in invalid["text"] and '"minLength":10' in invalid["text"]
    assert not closed["is_error"] and '"status": "resolved"' in closed["text"]


_STATE_OF = {
    "registered": "resident",
    "reexpanded": "resident",
    "readmitted": "resident",
    "tombstoned": "tombstoned",
    "evicted": "evicted",
    "archived": "archived",
}
"""The tool state each tool event of ``residency://events`` leaves its subject in."""


def forwarded_ghosts(events: list[dict[str, Any]]) -> int:
    """Calls admitted while their tool was tombstoned, read from ``residency://events``.

    Replays the tool states the event log records (``registered``, ``tombstoned``,
    ``reexpanded``...; each names its tool as ``subject``) and counts the ``called`` events
    (a call admitted, then forwarded) of a tool whose last state was ``tombstoned``: a ghost
    call that reached the upstream. The gateway's admission makes this 0.
    """
    state: dict[str, str] = {}
    ghosts = 0
    for event in events:
        kind, subject = event.get("kind"), str(event.get("subject", ""))
        if kind in _STATE_OF:
            state[subject] = _STATE_OF[str(kind)]
        elif kind == "called" and state.get(subject) == "tombstoned":
            ghosts += 1
    return ghosts


def calls_through_call_tool(events: list[dict[str, Any]]) -> list[str]:
    """The tools of the ``called`` events that came through ``call_tool``, in order."""
    return [
        str(e.get("subject"))
        for e in events
        if e.get("kind") == "called" and str(e.get("detail", "")).endswith(" via call_tool")
    ]
