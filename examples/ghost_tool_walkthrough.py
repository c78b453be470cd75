"""Walk the ghost-tool scenario against ``residency serve`` with a plain ``mcp.Client``.

Run it from a checkout (``python examples/ghost_tool_walkthrough.py``): it launches
``python -m residency serve --delivery list`` (the demo incident desk, its tools delivered in
the tool list, so the schema budget decides what is listed) over stdio, calls ``update_incident``,
does read-only work until the schema budget withholds ``update_incident``, and shows that a
call rebuilt from the old arguments is refused with the tombstone text instead of reaching the
desk; then it re-expands the tool and makes the call properly.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

# Every read-only tool of the desk: enough recent work to push update_incident out of the
# demo's schema budget.
READ_ONLY = [
    ("list_incidents", {"status": "open"}),
    ("get_incident", {"incident_id": "INC-7"}),
    ("list_services", {}),
    ("get_timeline", {"incident_id": "INC-7"}),
    ("get_service_health", {"service": "api"}),
    ("list_deploys", {"service": "api"}),
    ("query_metrics", {"service": "api", "metric": "error_rate"}),
    ("search_runbooks", {"query": "rollback"}),
    ("get_runbook", {"runbook_id": "RB-1"}),
]


def show(label: str, result: object) -> object:
    text = result.content[0].text  # type: ignore[attr-defined]
    status = "refused" if result.is_error else "ok"  # type: ignore[attr-defined]
    print(f"{label}: {status}: {text[:160]}")
    return result


async def main() -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "residency", "serve", "--delivery", "list"]
    )
    async with Client(server, mode="legacy") as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        print("listed:", ", ".join(listed))

        results: list[Any] = []  # every result the model has seen, newest last

        async def use(name: str, arguments: dict[str, object]) -> object:
            if name not in [t.name for t in (await client.list_tools()).tools]:
                results.append(await client.call_tool("reexpand_tools", {"names": [name]}))
            results.append(await client.call_tool(name, arguments))
            return results[-1]

        update = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
        show("update_incident", await use("update_incident", update))
        for name, arguments in READ_ONLY:
            show(name, await use(name, arguments))
            tools = {t.name: t for t in (await client.list_tools()).tools}
            if "update_incident" not in tools:
                # The tombstone comes with the result of the call that created it (a re-expansion
                # that made room, or a call), as a text block of its own.
                notice = next(
                    block.text
                    for seen in reversed(results)
                    for block in seen.content
                    if block.text.startswith("Withheld now:") and "update_incident" in block.text
                )
                print("\nthe result that withheld it ends with:\n" + notice)
                break

        else:
            raise SystemExit("update_incident was never withheld: is the schema budget larger than the desk?")

        rebuilt = {"incident_id": "INC-7", "severity": "SEV-1", "assignee": {"id": "u-42"}}
        show("\nupdate_incident rebuilt from memory", await client.call_tool("update_incident", rebuilt))
        show("reexpand_tools", await client.call_tool("reexpand_tools", {"names": ["update_incident"]}))
        show("update_incident without notify", await client.call_tool("update_incident", rebuilt))
        show("update_incident", await client.call_tool("update_incident", {**rebuilt, "notify": True}))


if __name__ == "__main__":
    anyio.run(main)
