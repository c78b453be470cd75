"""The scripted task every client runs through ``residency serve``.

The gateway fronts the bundled incident desk as a real stdio upstream, with a schema budget of
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
from it): the client tests record that as the client's behaviour.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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


def config() -> dict[str, Any]:
    """The gateway config: the desk as a stdio upstream, a tight schema budget."""
    return {
        "mcpServers": {
            "desk": {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]},
        },
        "residency": {
            "budget": {"schema_tokens": BUDGET, "argument_tokens": 20000, "planner": "greedy"},
            "minify": "compact",
        },
    }


def write_config(directory: Path) -> Path:
    """Write ``config()`` to ``directory/gateway.json`` and return its path."""
    path = directory / "gateway.json"
    path.write_text(json.dumps(config(), indent=2), encoding="utf-8")
    return path


def serve_command(config_path: Path, *extra: str) -> list[str]:
    """The command line of ``residency serve`` on this config (stdio unless ``extra`` says)."""
    return [sys.executable, "-m", "residency", "serve", "--config", str(config_path), *extra]


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
