"""Fourteen incident-desk tools in MCP ``tools/list`` shape, for the seed-000 scenario."""

from __future__ import annotations

from typing import Any

SEVERITY = {"type": "string", "enum": ["SEV-1", "SEV-2", "SEV-3", "SEV-4"]}
READ_ONLY = {"readOnlyHint": True}


def _tool(
    name: str, description: str, props: dict[str, Any], required: list[str], read_only: bool
) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        },
    }
    if read_only:
        tool["annotations"] = READ_ONLY
    return tool


def incident_tools(*, assignee_as_object: bool = False) -> list[dict[str, Any]]:
    """The desk's tools; ``assignee_as_object`` is the mid-session schema migration of seed 000."""
    assignee: dict[str, Any] = (
        {
            "type": "object",
            "properties": {"id": {"type": "string"}, "team": {"type": "string"}},
            "required": ["id"],
        }
        if assignee_as_object
        else {"type": "string"}
    )
    iid = {"incident_id": {"type": "string", "pattern": "^INC-[0-9]+$"}}
    return [
        _tool("list_incidents", "List open incidents.", {"status": {"type": "string"}}, [], True),
        _tool("get_incident", "Get one incident.", iid, ["incident_id"], True),
        _tool(
            "create_incident",
            "Open a new incident.",
            {"title": {"type": "string"}, "severity": SEVERITY, "notify": {"type": "boolean"}},
            ["title", "severity", "notify"],
            False,
        ),
        _tool(
            "update_incident",
            "Change an incident's severity or assignee and optionally notify responders.",
            {
                **iid,
                "severity": SEVERITY,
                ("assignee" if assignee_as_object else "assignee_id"): assignee,
                "notify": {"type": "boolean"},
            },
            ["incident_id", "severity", "notify"],
            False,
        ),
        _tool(
            "close_incident",
            "Resolve an incident.",
            {**iid, "resolution": {"type": "string"}},
            ["incident_id"],
            False,
        ),
        _tool(
            "add_timeline_note",
            "Append a note to the timeline.",
            {**iid, "note": {"type": "string"}},
            ["incident_id", "note"],
            False,
        ),
        _tool("get_timeline", "Read an incident timeline.", iid, ["incident_id"], True),
        _tool("page_oncall", "Page the on-call responder.", {"team": {"type": "string"}}, ["team"], False),
        _tool("list_services", "List services.", {}, [], True),
        _tool(
            "get_service_health", "Health of one service.", {"service": {"type": "string"}}, ["service"], True
        ),
        _tool("search_runbooks", "Search runbooks.", {"query": {"type": "string"}}, ["query"], True),
        _tool("get_runbook", "Read a runbook.", {"runbook_id": {"type": "string"}}, ["runbook_id"], True),
        _tool(
            "query_metrics",
            "Query a metric.",
            {"metric": {"type": "string"}, "minutes": {"type": "integer", "minimum": 1}},
            ["metric"],
            True,
        ),
        _tool(
            "list_deploys", "Recent deploys of a service.", {"service": {"type": "string"}}, ["service"], True
        ),
    ]
