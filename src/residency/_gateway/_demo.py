"""The bundled demo upstream: an incident desk (the setting of seed 000), as an in-process MCP server.

Fourteen tools over an in-memory incident table: nine read-only ones annotated
``readOnlyHint``, five that change the desk. The tool list lives in ``incident_desk.json`` (so
benchmarks can load it without a server); ``schema="v1"`` serves ``update_incident`` as it was
before its assignee became an object, and ``migrate()`` performs that mid-session migration and
tells connected clients that the tool list changed (handshake-era connections by
``tools/list_changed``, 2026-07-28 clients on their ``subscriptions/listen`` streams).

The desk validates arguments against its own schemas, as a real server would: a call rebuilt
from stale arguments fails here too, which is what sends a model to a sibling tool.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jsonschema
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from residency._core._tools import JSONObject
from residency._gateway._connection import ListChangedServer, connection_of, is_modern

__all__ = ["SCENARIO_READS", "IncidentDesk", "desk_tools", "main", "serve_stdio"]

SCENARIO_READS: tuple[tuple[str, JSONObject], ...] = (
    ("get_timeline", {"incident_id": "INC-7"}),
    ("get_service_health", {"service": "api"}),
    ("list_deploys", {"service": "api"}),
    ("query_metrics", {"service": "api", "metric": "error_rate"}),
    ("search_runbooks", {"query": "rollback"}),
    ("get_runbook", {"runbook_id": "RB-1"}),
    ("list_services", {}),
    ("list_incidents", {}),
)
"""Read-only calls of the seed-000 scenario, in order: the turns that push update_incident out."""


def _data() -> dict[str, Any]:
    text = resources.files("residency._gateway").joinpath("incident_desk.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def desk_tools(schema: str = "v2") -> list[JSONObject]:
    """The desk's tool definitions (``tools/list`` entries); ``v1`` is before the migration."""
    data = _data()
    tools: list[JSONObject] = data["tools"]
    if schema == "v1":
        old = data["v1"]
        tools = [old.get(t["name"], t) for t in tools]
    elif schema != "v2":
        raise ValueError(f"unknown desk schema {schema!r}; expected 'v1' or 'v2'")
    return copy.deepcopy(tools)


_SERVICES = {"api": "platform", "web": "frontend", "db": "storage", "queue": "platform", "auth": "identity"}
_RUNBOOKS = {
    "RB-1": (
        "Roll back a bad deploy",
        ["Find the last good deploy", "Run the rollback job", "Watch error_rate"],
    ),
    "RB-2": ("Database failover", ["Confirm replica lag", "Promote the replica", "Repoint the api"]),
    "RB-3": ("Shed load at the edge", ["Enable the queue", "Lower rps limits", "Page platform"]),
}


@dataclass
class Incident:
    id: str
    title: str
    severity: str
    service: str
    status: str = "open"
    assignee: dict[str, str] | None = None
    timeline: list[str] = field(default_factory=list)

    def view(self) -> JSONObject:
        return {
            "incident_id": self.id,
            "title": self.title,
            "severity": self.severity,
            "service": self.service,
            "status": self.status,
            "assignee": self.assignee,
        }


class IncidentDesk:
    """The desk's state and its MCP server (``desk.server``).

    Args:
        schema: ``"v2"`` (current: ``update_incident`` takes an ``assignee`` object) or ``"v1"``
            (``assignee_id`` string, before the migration).
    """

    def __init__(self, schema: str = "v2") -> None:
        self.schema = schema
        self._tools = desk_tools(schema)
        self.incidents: dict[str, Incident] = {}
        self.pages: list[tuple[str, str]] = []
        self.calls: list[tuple[str, JSONObject]] = []
        self._connections: list[Connection] = []
        self._bus = InMemorySubscriptionBus()
        self._seed()
        self.server = self._build_server()

    def _seed(self) -> None:
        for iid, title, sev, service in (
            ("INC-1", "Checkout latency above SLO", "SEV-3", "api"),
            ("INC-2", "Login errors for a subset of users", "SEV-2", "auth"),
            ("INC-7", "Payment API returning 502s", "SEV-2", "api"),
        ):
            self.incidents[iid] = Incident(iid, title, sev, service, timeline=[f"opened: {title}"])

    # -- the migration -----------------------------------------------------------------------

    async def migrate(self) -> None:
        """Move ``update_incident`` to the current schema and tell connected clients."""
        self.schema = "v2"
        self._tools = desk_tools("v2")
        for connection in list(self._connections):
            await connection.send_tool_list_changed()
        await self._bus.publish(ToolsListChanged())

    # -- MCP ---------------------------------------------------------------------------------

    def _build_server(self) -> Server[Any]:
        desk = self

        async def list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            # A handshake-era connection is told of changes directly; 2026-07-28 requests each
            # get a connection of their own, and are told on their listen streams instead.
            connection = connection_of(ctx)
            if not is_modern(ctx) and connection not in desk._connections:
                desk._connections.append(connection)
            return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in desk._tools])

        async def call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return desk.call(params.name, dict(params.arguments or {}))

        return ListChangedServer(
            "incident-desk",
            version="1.0",
            instructions="An incident desk: incidents, timelines, services, runbooks, metrics and deploys.",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_subscriptions_listen=ListenHandler(self._bus),
        )

    def call(self, name: str, arguments: JSONObject) -> types.CallToolResult:
        """Run one tool against the table (what ``tools/call`` does)."""
        tool = next((t for t in self._tools if t["name"] == name), None)
        if tool is None:
            return _error(f"unknown tool {name!r}")
        errors = sorted(
            jsonschema.Draft202012Validator(tool["inputSchema"]).iter_errors(arguments),
            key=lambda e: list(e.path),
        )
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
            return _error(f"{name}: invalid arguments at {where}: {errors[0].message}")
        self.calls.append((name, copy.deepcopy(arguments)))
        try:
            result = getattr(self, f"_{name}")(**arguments)
        except KeyError as exc:
            return _error(f"{name}: {exc.args[0]}")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, sort_keys=True))],
            structured_content=result if isinstance(result, dict) else {"items": result},
        )

    def _incident(self, incident_id: str) -> Incident:
        try:
            return self.incidents[incident_id]
        except KeyError:
            raise KeyError(f"no incident {incident_id}") from None

    # -- the tools ---------------------------------------------------------------------------

    def _list_incidents(
        self, status: str | None = None, severity: str | None = None, limit: int = 20
    ) -> JSONObject:
        found = [
            i.view()
            for i in reversed(self.incidents.values())
            if (status is None or i.status == status) and (severity is None or i.severity == severity)
        ]
        return {"incidents": found[:limit]}

    def _get_incident(self, incident_id: str) -> JSONObject:
        return self._incident(incident_id).view()

    def _create_incident(
        self, title: str, severity: str, service: str, notify: bool, assignee: dict[str, str] | None = None
    ) -> JSONObject:
        iid = f"INC-{max(int(k[4:]) for k in self.incidents) + 1}"
        incident = Incident(iid, title, severity, service, assignee=assignee, timeline=[f"opened: {title}"])
        self.incidents[iid] = incident
        if notify:
            self.pages.append((_SERVICES[service], f"{iid} opened at {severity}"))
        return incident.view()

    def _update_incident(
        self,
        incident_id: str,
        notify: bool,
        severity: str | None = None,
        status: str | None = None,
        assignee: dict[str, str] | None = None,
        assignee_id: str | None = None,
    ) -> JSONObject:
        incident = self._incident(incident_id)
        changes = []
        if severity is not None and severity != incident.severity:
            changes.append(f"severity {incident.severity} -> {severity}")
            incident.severity = severity
        if status is not None and status != incident.status:
            changes.append(f"status {incident.status} -> {status}")
            incident.status = status
        if assignee_id is not None:
            assignee = {"id": assignee_id}
        if assignee is not None and assignee != incident.assignee:
            changes.append(f"assignee -> {assignee['id']}")
            incident.assignee = dict(assignee)
        incident.timeline.append("updated: " + (", ".join(changes) or "no change"))
        if notify:
            self.pages.append(
                (_SERVICES[incident.service], f"{incident_id}: " + (", ".join(changes) or "update"))
            )
        return {**incident.view(), "notified": notify}

    def _close_incident(self, incident_id: str, resolution: str) -> JSONObject:
        incident = self._incident(incident_id)
        if incident.status != "resolved":
            incident.status = "resolved"
            incident.timeline.append(f"resolved: {resolution}")
        return incident.view()

    def _add_timeline_note(self, incident_id: str, note: str) -> JSONObject:
        incident = self._incident(incident_id)
        incident.timeline.append(f"note: {note}")
        return {"incident_id": incident_id, "entries": len(incident.timeline)}

    def _get_timeline(self, incident_id: str) -> JSONObject:
        return {"incident_id": incident_id, "timeline": list(self._incident(incident_id).timeline)}

    def _page_oncall(self, team: str, message: str, urgency: str = "high") -> JSONObject:
        self.pages.append((team, message))
        return {"paged": team, "urgency": urgency}

    def _list_services(self) -> JSONObject:
        return {"services": [{"service": s, "team": t} for s, t in _SERVICES.items()]}

    def _get_service_health(self, service: str) -> JSONObject:
        degraded = any(i.service == service and i.status == "open" for i in self.incidents.values())
        return {
            "service": service,
            "status": "degraded" if degraded else "healthy",
            "error_rate": 0.042 if degraded else 0.001,
            "p99_ms": 1840 if degraded else 210,
        }

    def _search_runbooks(self, query: str) -> JSONObject:
        words = query.lower().split()
        hits = [
            {"runbook_id": rid, "title": title}
            for rid, (title, steps) in _RUNBOOKS.items()
            if any(w in (title + " " + " ".join(steps)).lower() for w in words)
        ]
        return {"runbooks": hits}

    def _get_runbook(self, runbook_id: str) -> JSONObject:
        if runbook_id not in _RUNBOOKS:
            raise KeyError(f"no runbook {runbook_id}")
        title, steps = _RUNBOOKS[runbook_id]
        return {"runbook_id": runbook_id, "title": title, "steps": steps}

    def _query_metrics(self, service: str, metric: str, minutes: int = 15) -> JSONObject:
        base = {"error_rate": 0.02, "p99_ms": 900.0, "rps": 1200.0, "cpu": 0.55}[metric]
        return {
            "service": service,
            "metric": metric,
            "minutes": minutes,
            "min": base / 2,
            "max": base * 2,
            "last": base,
        }

    def _list_deploys(self, service: str, limit: int = 5) -> JSONObject:
        deploys = [
            {"service": service, "version": f"2026.11.{n}", "by": "u-7"} for n in range(12, 12 - limit, -1)
        ]
        return {"deploys": deploys}


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def serve_stdio(schema: str = "v2") -> None:
    """Serve the desk on stdin/stdout: ``python -m residency.demo [--schema v1|v2]``.

    Lets a gateway config put the desk behind any policy as an ordinary stdio upstream; with
    ``--schema v1`` it serves ``update_incident`` as it was before the migration, so a gateway
    restarted on the other version sees the definition change.
    """
    from mcp.server.stdio import stdio_server

    desk = IncidentDesk(schema)
    async with stdio_server() as (read, write):
        await desk.server.run(read, write, desk.server.create_initialization_options())


def main(argv: list[str] | None = None, *, prog: str = "python -m residency.demo") -> None:
    """The desk's command line: ``--schema v1|v2``, then serve it on stdio until stdin closes."""
    import argparse

    import anyio

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve the demo incident desk (14 tools) as an MCP server on stdin/stdout.",
    )
    parser.add_argument(
        "--schema",
        choices=["v1", "v2"],
        default="v2",
        help="update_incident's version: v2 (assignee object, the default) or v1 (assignee_id string)",
    )
    args = parser.parse_args(argv)
    anyio.run(serve_stdio, args.schema)
