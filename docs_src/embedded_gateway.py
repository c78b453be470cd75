"""The gateway in-process: the demo desk as its upstream, an MCP client on its server."""

import anyio
from mcp import Client

from residency.demo import IncidentDesk
from residency.gateway import Gateway, parse_config

CONFIG = parse_config('{"mcpServers": {}, "residency": {"pinned": ["get_incident"]}}')


async def main() -> None:
    desk = IncidentDesk()
    async with Gateway(CONFIG, upstreams={"desk": desk.server}) as gateway, Client(gateway.server) as client:
        print([tool.name for tool in (await client.list_tools()).tools])
        incident = await client.call_tool("get_incident", {"incident_id": "INC-7"})
        print(incident.content[0].text)


anyio.run(main)
