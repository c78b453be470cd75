"""Phases over MCP: the agent's calls select one, or the host names it in ``_meta``."""

from __future__ import annotations

from typing import Any, cast

import mcp_types as types
import pytest
from mcp import MCPError

from residency import ToolState
from residency._gateway import IncidentDesk
from residency._gateway._server import PHASE_META_KEY
from tests.gateway.conftest import Agent, agent, running

pytestmark = pytest.mark.anyio

# By list, with a budget that holds three or four desk tools, so what a phase favours shows (by
# reference a phase brings no tool back into the list: see ``_delivery``).
POLICY = {
    "delivery": "list",
    "budget": {"schema_tokens": 400},
    "phases": {"triage": ["get_incident", "get_timeline", "list_services"], "fix": ["update_incident"]},
}
UPDATE = {"incident_id": "INC-2", "severity": "SEV-2", "notify": False}


async def call_in_phase(
    a: Agent, name: str, arguments: dict[str, Any], phase: object
) -> types.CallToolResult:
    # _meta carries keys of our own beside the SDK's typed ones.
    meta = cast(types.RequestParamsMeta, {**a.meta, PHASE_META_KEY: phase})
    return await a.client.call_tool(name, arguments, meta=meta)


async def test_a_call_to_a_phase_tool_activates_its_phase_and_brings_its_tools_back(era: str) -> None:
    async with running(POLICY, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        assert s.phase is None
        assert s.state("get_timeline") is ToolState.EVICTED
        assert not (await a.use("get_incident", {"incident_id": "INC-2"})).is_error
        assert s.phase == "triage"
        assert s.state("get_timeline") is ToolState.RESIDENT
        assert s.state("list_services") is ToolState.RESIDENT
        if era == "legacy":
            assert {"get_timeline", "list_services"} <= set(await a.names())
        # A call outside every phase keeps the active one; a call in another phase moves to it.
        await a.use("list_deploys", {})
        assert s.phase == "triage"
        assert not (await a.use("update_incident", UPDATE)).is_error
        assert s.phase == "fix"


async def test_a_host_names_the_phase_and_from_then_on_chooses_it() -> None:
    async with running(POLICY, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        s = gw.session(a.key)
        assert s.state("update_incident") is ToolState.EVICTED
        result = await call_in_phase(a, "get_incident", {"incident_id": "INC-2"}, "fix")
        assert not result.is_error
        assert s.phase == "fix" and s.state("update_incident") is ToolState.RESIDENT
        assert "update_incident" in await a.names()
        # The agent's calls no longer move it; the host can clear it.
        await a.call("get_incident", {"incident_id": "INC-1"})
        assert s.phase == "fix"
        await call_in_phase(a, "get_incident", {"incident_id": "INC-1"}, "")
        assert s.phase is None


async def test_an_unknown_phase_is_refused_and_changes_nothing() -> None:
    async with running(POLICY, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        s = gw.session(a.key)
        before = s.snapshot()
        for bad in ("deploy", 3):
            with pytest.raises(MCPError) as raised:
                await call_in_phase(a, "get_incident", {"incident_id": "INC-2"}, bad)
            assert raised.value.code == types.INVALID_PARAMS
            assert raised.value.error.data["reason"] == "unknown_phase"
        assert s.snapshot() == before
        # The gateway keeps serving.
        assert not (await a.call("get_incident", {"incident_id": "INC-2"})).is_error
