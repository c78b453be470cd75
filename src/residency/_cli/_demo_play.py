"""The narrated scenario behind ``residency demo`` (imported when the command runs)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from rich.console import Console
from rich.table import Table

from residency._core._lifecycle import ToolState
from residency._gateway._config import parse_config
from residency._gateway._demo import SCENARIO_READS, IncidentDesk, desk_tools
from residency._gateway._server import Gateway
from residency._tokens import count_tokens


def play(budget: int) -> None:
    """Play the scenario on a schema budget of ``budget`` tokens per turn, narrated on stdout."""
    anyio.run(_play, budget, Console(highlight=False))


class _Narrator:
    def __init__(self, gateway: Gateway, client: Any, console: Console, full_tokens: int) -> None:
        self.gw = gateway
        self.client = client
        self.console = console
        self.full = full_tokens
        self.rows: list[tuple[str, ...]] = []
        self.turn = 0

    def say(self, text: str) -> None:
        self.console.print(text)

    async def call(self, name: str, arguments: dict[str, Any], note: str = "") -> types.CallToolResult:
        self.turn += 1
        result: types.CallToolResult = await self.client.call_tool(name, arguments)
        listed = await self.client.list_tools()
        tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
        session = self.gw.session("stdio")
        details = (result.meta or {}).get("residency/error") or {}
        outcome = details.get("reason", "refused") if result.is_error else "ok"
        shown = [
            t["name"] for t in tools if t["name"] not in ("search_tools", "reexpand_tools", "check_chain")
        ]
        self.rows.append(
            (
                str(self.turn),
                f"{name}",
                outcome,
                str(len(shown)),
                str(count_tokens(tools)),
                str(len(session.tombstones())),
            )
        )
        style = "green" if outcome == "ok" else "red"
        shown_call = f"{name}({_short(arguments)})"
        self.say(f"[bold]turn {self.turn}[/bold] {shown_call} -> [{style}]{outcome}[/{style}] {note}")
        if result.is_error:
            block = result.content[0]
            if isinstance(block, types.TextContent):
                self.say(f"    [dim]{block.text}[/dim]")
        return result

    def table(self) -> None:
        table = Table(title=f"What the model is shown (the whole desk, un-gated: {self.full} tokens)")
        for column in ("turn", "call", "outcome", "schemas shown", "tools/list tokens", "tombstones"):
            table.add_column(column, justify="right" if column not in ("call", "outcome") else "left")
        for row in self.rows:
            table.add_row(*row)
        self.console.print(table)


def _short(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, separators=(",", ":"))
    return text if len(text) <= 70 else text[:67] + "..."


async def _play(budget: int, console: Console) -> None:
    from mcp import Client

    desk = IncidentDesk(schema="v1")
    config = parse_config(
        # Seed 000 is a story of a list that changes: the demo delivers by list.
        json.dumps(
            {"residency": {"budget": {"schema_tokens": budget}, "minify": "compact", "delivery": "list"}}
        )
    )
    full = count_tokens(desk_tools(desk.schema))
    gateway = Gateway(config, upstreams={"desk": desk.server}, default_session="stdio")
    async with gateway, Client(gateway.server, mode="legacy") as client:
        n = _Narrator(gateway, client, console, full)
        listed = await client.list_tools()
        n.say(
            f"[bold]An agent connects.[/bold] The desk offers 14 tools ({full} tokens); under a "
            f"{budget}-token schema budget the gateway lists {len(listed.tools) - 3} of them "
            f"plus 3 meta-tools."
        )
        session = gateway.session("stdio")
        n.say("\n[bold]Act 1: a mutation tool demoted while its arguments are visible[/bold]")
        if session.state("update_incident") is not ToolState.RESIDENT:
            await n.call("reexpand_tools", {"names": ["update_incident"]}, "(its schema was withheld)")
        update = {"incident_id": "INC-7", "severity": "SEV-2", "assignee_id": "u-42", "notify": True}
        await n.call("update_incident", update, "(turn-2 call of the seed: SEV-2, u-42, notify)")
        for name, arguments in SCENARIO_READS:
            if session.state(name) is not ToolState.RESIDENT:
                await n.call("reexpand_tools", {"names": [name]})
            await n.call(name, arguments)
            if session.state("update_incident") is ToolState.TOMBSTONED:
                break
        n.say(
            "[yellow]update_incident was demoted by the schema budget; its arguments are still visible, so "
            "it is tombstoned:[/yellow]"
        )
        for line in session.tombstones():
            n.say(f"    {line}")
        rebuilt = {"incident_id": "INC-7", "severity": "SEV-1", "assignee_id": "u-42"}
        await n.call("update_incident", rebuilt, "('bump to SEV-1 and re-notify', rebuilt from memory)")
        n.say(
            "[green]Refused with the tombstone text, never forwarded: no validation error upstream, no "
            "sibling create_incident, no duplicate incident.[/green]"
        )
        await n.call("reexpand_tools", {"names": ["update_incident"]}, "(full schema in the result)")
        await n.call("update_incident", rebuilt, "(the stale call, now checked against the full schema)")
        await n.call("update_incident", {**rebuilt, "notify": True}, "(the corrected call)")

        n.say("\n[bold]Act 2: the upstream migrates update_incident (assignee_id -> assignee object)[/bold]")
        await desk.migrate()
        await gateway.reload("desk")
        n.say(f"    state after the migration: {session.state('update_incident').value}")
        await n.call("update_incident", {**rebuilt, "notify": True, "severity": "SEV-2"}, "(old shape)")
        await n.call("reexpand_tools", {"names": ["update_incident"]})
        await n.call(
            "update_incident",
            {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True},
            "(new shape)",
        )
        n.say("")
        n.table()
        creates = [c for c, _ in desk.calls if c == "create_incident"]
        reexpansions = sum(1 for e in session.events() if e.kind.value == "reexpanded")
        refusals = sum(1 for e in session.events() if e.kind.value == "refused")
        n.say(
            f"incidents on the desk: {len(desk.incidents)} (duplicates created: {len(creates)}); "
            f"INC-7 is {desk.incidents['INC-7'].severity}; re-expansion requests: {reexpansions}; "
            f"calls refused before reaching the desk: {refusals}."
        )
