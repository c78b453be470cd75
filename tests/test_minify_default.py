"""One minify default everywhere: ``minify_tool``, ``Session``, ``residency minify`` and the gateway."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
from mcp import Client

from residency import Session, minify_tool
from residency._cli import build_parser
from residency._core._minify import DEFAULT_LEVEL, minify_tool_with_report
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._config import parse_config
from residency._gateway._demo import desk_tools
from tests._timing import START
from tests.gateway.conftest import config


def test_every_entry_point_defaults_to_the_same_level() -> None:
    assert DEFAULT_LEVEL == "compact"
    assert inspect.signature(minify_tool).parameters["level"].default == DEFAULT_LEVEL
    assert parse_config("{}").residency.minify == DEFAULT_LEVEL
    assert build_parser().parse_args(["minify", "tools.json"]).level == DEFAULT_LEVEL


def _shown(tools: list[Any]) -> dict[str, Any]:
    return {t["name"]: t for t in tools}


def test_a_session_and_a_gateway_left_at_their_defaults_show_tools_alike() -> None:
    tools = desk_tools()
    expected = _shown([minify_tool_with_report(t, DEFAULT_LEVEL)[0] for t in tools])
    session = Session()
    session.register_tools(tools)
    assert _shown([session.tool(t["name"]).shown for t in tools]) == expected

    async def listed() -> list[Any]:
        # By list with room for every tool: the gateway shows each at its config's level.
        gateway = Gateway(
            config({"delivery": "list", "budget": {"schema_tokens": 100_000}}),
            upstreams={"desk": IncidentDesk().server},
        )
        with anyio.fail_after(START):
            async with gateway, Client(gateway.server, mode="legacy") as client:
                result = await client.list_tools()
        return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools]

    shown = _shown(anyio.run(listed))
    for name, tool in expected.items():
        assert shown[name]["description"] == tool["description"], name
        assert shown[name]["inputSchema"] == tool["inputSchema"], name
