"""``residency demo --model local``: the local model decides the calls (imported when it runs).

The gateway runs in-process on the demo desk, delivering by list under a tight schema budget,
and a real ``mcp.Client`` keeps the first list it got, as a client that caches it does. The
tour makes one call itself (``update_incident``, forwarded), pushes that tool out while its
arguments are in view (tombstoned), then hands the turns to the local model
(``residency.local_model``): its history shows the earlier call and its result, its tools are
the cached list, and it is asked to bump INC-7. Every call it decides goes through the gateway
and is shown with what the gateway did; the desk's own call log says what reached it.

What it shows is enforcement, not obedience: a 270M base model imitates the earlier call, and
the gateway refuses it. A run where the model calls something else shows that too.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console

from residency._errors import LocalModelUnavailable
from residency.local_model import LocalModel, local_model

if TYPE_CHECKING:
    import mcp_types as types

GHOST = "update_incident"
EARLIER = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
PUSH_OUT = ["get_timeline", "list_deploys", "query_metrics"]


def play_local(turns: int, seed: int) -> None:
    """Play the tour with the local model deciding ``turns`` turns at ``seed``, narrated on stdout.

    Raises:
        LocalModelUnavailable: the ``local-model`` extra is not installed, or its server did not start.
    """
    console = Console(highlight=False)
    console.print("[dim]Starting the local model (Gemma 3 270M, base, one thread)...[/dim]")
    with local_model(seed=seed) as model:
        anyio.run(_play, model, turns, seed, console)


def _text(result: types.CallToolResult) -> str:
    import mcp_types as types

    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def _play(model: LocalModel, turns: int, seed: int, console: Console) -> None:
    # The gateway is imported once the model is up (a missing extra is reported before).
    from mcp import Client

    from residency._gateway._config import parse_config
    from residency._gateway._demo import IncidentDesk
    from residency._gateway._server import Gateway

    desk = IncidentDesk()
    config = {
        "residency": {
            "budget": {"schema_tokens": 500, "planner": "greedy"},
            "minify": "compact",
            "delivery": "list",
        }
    }
    gateway = Gateway(
        parse_config(json.dumps(config)), upstreams={"desk": desk.server}, default_session="demo"
    )
    async with gateway, Client(gateway.server) as client:
        session = gateway.session("demo")
        await client.call_tool("reexpand_tools", {"names": [GHOST]})
        cached = (await client.list_tools()).tools
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in cached
        ]
        console.print(f"[bold]The client caches its list:[/bold] {', '.join(t.name for t in cached)}")
        earlier = await client.call_tool(GHOST, dict(EARLIER))
        console.print(f"turn 1 (scripted) {GHOST}({json.dumps(EARLIER)}) -> [green]ok[/green]")
        await client.call_tool("reexpand_tools", {"names": PUSH_OUT})
        state = session.state(GHOST).value
        console.print(
            f"turn 2 (scripted) reexpand_tools({PUSH_OUT}) -> {GHOST} is now [yellow]{state}[/yellow]"
        )
        call = {
            "id": "c-1",
            "type": "function",
            "function": {"name": GHOST, "arguments": json.dumps(EARLIER)},
        }
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Assign INC-7 to u-42 at SEV-2 and notify."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c-1", "content": _text(earlier)},
            {"role": "user", "content": "INC-7 got worse: bump it to SEV-1."},
        ]
        before = len(desk.calls)
        refused = 0
        console.print("\n[bold]The local model decides the next turns[/bold]")
        for turn in range(turns):
            try:
                answer = await anyio.to_thread.run_sync(
                    functools.partial(model.chat, messages, tools, seed=seed + turn)
                )
            except LocalModelUnavailable as exc:
                console.print(f"[red]{exc}[/red]")
                break
            message = answer["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            if not calls:
                console.print(f"model turn {turn + 1}: no call; it wrote {message.get('content', '')[:80]!r}")
                break
            usable = []
            for c in calls:
                name, raw = c["function"]["name"], c["function"]["arguments"]
                arguments = _object(raw)
                if arguments is None:
                    console.print(
                        f"model turn {turn + 1}: {name}({raw[:60]}) -> arguments are not an object; not sent"
                    )
                    continue
                usable.append((c, name, arguments))
            if not usable:
                break
            # The history keeps the calls that were sent (the template renders their arguments).
            messages.append({"role": "assistant", "content": None, "tool_calls": [c for c, _, _ in usable]})
            for c, name, arguments in usable:
                result = await client.call_tool(name, arguments)
                details = (result.meta or {}).get("residency/error") or {}
                outcome = details.get("reason", "error") if result.is_error else "ok"
                refused += name == GHOST and outcome == "tool_not_resident"
                style = "green" if outcome == "ok" else "red"
                shown = json.dumps(arguments)
                console.print(f"model turn {turn + 1}: {name}({shown[:70]}) -> [{style}]{outcome}[/{style}]")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": _text(result)[:400]})
        reached = [name for name, _ in desk.calls[before:]]
        console.print(
            f"\nCalls of the tombstoned {GHOST} refused by the gateway: {refused}. Calls that reached "
            f"the desk after the tombstone: {len(reached)} ({', '.join(reached) or 'none'}); "
            f"{GHOST} among them: {reached.count(GHOST)}. INC-7 is {desk.incidents['INC-7'].severity}."
        )
        console.print(
            "[dim]This shows the gateway's enforcement, not the model's obedience: a 270M base model "
            "imitates the earlier call; the gateway refuses what its schema no longer covers.[/dim]"
        )
