"""Aggregation: unique names kept, collisions namespaced the same way whatever the order."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from residency import ToolState
from residency._gateway import IncidentDesk
from residency._gateway._aggregate import build_catalog, gateway_names
from residency._gateway._meta_tools import META_TOOLS
from residency._gateway._search import search
from tests.gateway.conftest import agent, reason, running, text


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}}


def test_unique_names_are_kept_and_collisions_get_the_server_prefix() -> None:
    catalog = build_catalog(
        {
            "github": [_tool("create_issue"), _tool("search_tools")],
            "gitlab": [_tool("create_issue"), _tool("merge")],
        },
        reserved=META_TOOLS,
    )
    assert catalog.names() == [
        "github__create_issue",
        "github__search_tools",
        "gitlab__create_issue",
        "merge",
    ]
    entry = catalog.get("gitlab__create_issue")
    assert entry is not None and (entry.server, entry.upstream_name) == ("gitlab", "create_issue")
    assert entry.definition["name"] == "gitlab__create_issue"


def test_a_namespaced_name_that_an_upstream_really_offers_gets_a_suffix() -> None:
    catalog = build_catalog({"a": [_tool("x"), _tool("b__x")], "b": [_tool("x")]})
    assert sorted(catalog.names()) == ["a__x", "b__x", "b__x__2"]


def test_server_names_are_reduced_to_safe_characters() -> None:
    names = gateway_names([("my server.v2", "t"), ("other", "t")])
    assert names[("my server.v2", "t")] == "my_server_v2__t"


@given(st.permutations([("s1", "a"), ("s2", "a"), ("s1", "b"), ("s3", "search_tools"), ("s2", "s1__a")]))
def test_naming_does_not_depend_on_the_order_upstreams_answer_in(pairs: list[tuple[str, str]]) -> None:
    reference = gateway_names(sorted(pairs), META_TOOLS)
    assert gateway_names(pairs, META_TOOLS) == reference
    assert len(set(reference.values())) == len(pairs)


def test_search_ranks_by_name_arguments_and_description() -> None:
    tools = [
        {
            "name": "get_runbook",
            "description": "Read steps.",
            "inputSchema": {"properties": {"runbook_id": {}}},
        },
        {"name": "listDeploys", "description": "Recent deploys of a service.", "inputSchema": {}},
        {"name": "noise", "description": "Nothing relevant.", "inputSchema": {}},
    ]
    assert [h.name for h in search("list deploys", tools)] == ["listDeploys"]
    assert [h.name for h in search("runbook", tools)] == ["get_runbook"]
    assert search("zebra", tools) == []


@pytest.mark.anyio
async def test_two_desks_behind_one_gateway_are_namespaced_and_stay_so_after_a_reload(era: str) -> None:
    first, second = IncidentDesk(), IncidentDesk()
    async with running(upstreams={"east": first.server, "west": second.server}) as gw, agent(gw, era) as a:
        names = list(gw.catalog.names())
        assert "east__get_incident" in names and "west__get_incident" in names and "get_incident" not in names
        result = await a.use("west__get_incident", {"incident_id": "INC-2"})
        assert json.loads(text(result))["incident_id"] == "INC-2"
        assert second.calls == [("get_incident", {"incident_id": "INC-2"})] and first.calls == []
        await gw.reload()
        assert gw.catalog.names() == names
        assert gw.session(a.key).state("west__get_incident") is ToolState.RESIDENT


@pytest.mark.anyio
async def test_an_unchanged_reload_tombstones_nothing_and_a_changed_definition_is_pinned_anew(
    era: str,
) -> None:
    desk = IncidentDesk(schema="v1")
    async with running(desk=desk) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        await a.use("get_incident", {"incident_id": "INC-1"})
        await gw.reload()
        assert session.tombstones() == []
        old_hash = session.tool("update_incident").hash
        await desk.migrate()
        await gw.reload("desk")
        assert session.tool("update_incident").hash != old_hash
        # No arguments of it were visible: the new definition simply replaces the old one.
        assert session.state("update_incident") in (ToolState.RESIDENT, ToolState.EVICTED)
        assert reason(await a.call("get_incident", {"incident_id": "INC-1"})) is None
