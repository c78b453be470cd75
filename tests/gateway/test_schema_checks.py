"""The gateway's check of upstream input schemas: a bad one is skipped, each distinct one is checked once."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
import pytest
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from residency._runtime import _tool_cache
from residency._runtime._tool_cache import schema_problem
from tests.gateway.conftest import agent, running

pytestmark = pytest.mark.anyio

GOOD = {"type": "object", "properties": {"text": {"type": "string"}}}
BAD = {"type": "object", "properties": {"text": {"type": 7}}}


def _upstream(tools: list[dict[str, Any]]) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])

    return Server("checked", on_list_tools=list_tools)


async def test_an_upstream_tool_with_an_invalid_schema_is_skipped_and_logged(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    tools = [
        {"name": "fine", "description": "A tool.", "inputSchema": GOOD},
        {"name": "broken", "description": "A tool.", "inputSchema": BAD},
        {"name": "fine_too", "description": "Another.", "inputSchema": dict(GOOD)},
    ]
    # Pinned, so the list shows every tool the gateway took in (by reference, the default, it
    # shows the pinned tools only).
    pinned = {"pinned": [t["name"] for t in tools]}
    with caplog.at_level(logging.WARNING, logger="residency.gateway"):
        async with running(pinned, upstreams={"up": _upstream(tools)}) as gw, agent(gw, era) as a:
            names = await a.names()
    assert "fine" in names and "fine_too" in names
    assert "broken" not in names
    assert any(
        "broken" in r.getMessage() and "properties/text/type" in r.getMessage() for r in caplog.records
    )


def test_a_schema_problem_names_where_and_is_remembered_per_distinct_schema() -> None:
    bad = {"properties": {"deep": {"type": 7}}, "type": "object", "title": "distinct-for-this-test"}
    before = _tool_cache._sizes()["schema_checks"]
    problem = schema_problem(bad)
    assert problem is not None and problem.startswith("'properties/deep/type'")
    # The same schema with its keys in another order is the same schema: checked once.
    assert schema_problem(dict(reversed(list(bad.items())))) == problem
    assert _tool_cache._sizes()["schema_checks"] == before + 1
    assert schema_problem(GOOD) is None
