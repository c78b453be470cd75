"""A first session with `residency serve`: search, call_tool, a tombstone and a re-expansion."""

import sys

import anyio
from mcp import Client, StdioServerParameters

# `residency serve` with no config fronts the bundled demo incident desk over stdio.
GATEWAY = StdioServerParameters(command=sys.executable, args=["-m", "residency", "serve"])
UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def main() -> None:
    async with Client(GATEWAY) as client:
        print("listed:", [tool.name for tool in (await client.list_tools()).tools])

        # The tool that changes an incident is not listed: the model finds it by search.
        found = await client.call_tool("search_tools", {"query": "change an incident's severity", "limit": 1})
        print("found:", [hit["name"] for hit in found.structured_content["tools"]])
        result_id = found.meta["residency/result"]  # this result carries the tool's schema

        called = await client.call_tool("call_tool", {"name": "update_incident", "arguments": UPDATE})
        print("update_incident:", text(called).splitlines()[0])

        # The host drops the search result from its transcript: the schema leaves with it,
        # while the call's arguments are still visible, so the tool is tombstoned.
        await client.call_tool(
            "get_service_health", {"service": "api"}, meta={"residency/dropped_results": [result_id]}
        )
        tombstones = await client.read_resource("residency://tombstones")
        print("tombstones:", tombstones.contents[0].text)

        # A call rebuilt from the old arguments is refused with the tombstone, never forwarded.
        again = await client.call_tool("call_tool", {"name": "update_incident", "arguments": UPDATE})
        print("refused:", again.meta["residency/error"]["reason"])

        # Re-expansion brings the full schema back, and the call goes through.
        await client.call_tool("reexpand_tools", {"names": ["update_incident"]})
        again = await client.call_tool("call_tool", {"name": "update_incident", "arguments": UPDATE})
        print("after re-expansion:", "ok" if not again.is_error else text(again))


anyio.run(main)
