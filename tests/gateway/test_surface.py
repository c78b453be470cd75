"""The gateway's MCP surface in process, in both eras: lists, meta-tools, refusals, resources."""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from mcp import MCPDeprecationWarning, MCPError

from residency import EventKind, ToolState
from residency._gateway import IncidentDesk
from residency._gateway._meta_tools import listed_meta_tools
from residency._runtime._tools import IMPLICIT_REEXPANSION
from tests.gateway.conftest import agent, reason, running, text

META_TOOLS = listed_meta_tools(chains=False, offload=False)  # a fresh session: no chain yet, no offloading

pytestmark = pytest.mark.anyio

TIGHT = {"budget": {"schema_tokens": 350}, "minify": "compact"}
"""A budget the desk is far past: a session starts with none of its tools listed (none was asked for)."""

BY_LIST = {"delivery": "list"}
"""For the tests of what the list shows as tools become resident or are withheld: by reference
(the default) the list stays the pinned tools and the meta-tools (see ``_delivery``)."""


async def test_the_handshake_era_lists_resident_tools_with_the_meta_tools_and_advertises_list_changed() -> (
    None
):
    async with running(BY_LIST, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        caps = a.client.server_capabilities
        assert caps.tools is not None and caps.tools.list_changed is True
        names = await a.names()
        resident = gw.session(a.key).tools(ToolState.RESIDENT)
        assert names == [*resident, *META_TOOLS]
        assert len(resident) == 14  # the default budget holds the whole desk


async def test_the_modern_era_lists_each_callers_own_session_view_as_a_private_list() -> None:
    async with (
        running({**TIGHT, **BY_LIST}, desk=IncidentDesk()) as gw,
        agent(gw, "modern", "one") as a,
        agent(gw, "modern", "two") as b,
    ):
        assert (
            await a.names() == await b.names() == [*gw.session("one").tools(ToolState.RESIDENT), *META_TOOLS]
        )
        assert "list_services" not in await a.names()
        await a.call("reexpand_tools", {"names": ["list_services"]})
        assert "list_services" in await a.names()  # frameworks call listed tools only
        assert "list_services" not in await b.names()
        listed = await a.client.list_tools(meta=a.meta, cache_mode="refresh")
        assert (listed.ttl_ms, listed.cache_scope) == (0, "private")


async def test_an_evicted_tool_called_with_valid_arguments_is_reexpanded_implicitly_and_forwarded(
    era: str,
) -> None:
    desk = IncidentDesk()
    async with running({**TIGHT, **BY_LIST}, desk=desk) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        assert session.state("get_incident") is ToolState.EVICTED
        found = await a.call("get_incident", {"incident_id": "INC-1"})
        assert not found.is_error
        assert json.loads(text(found))["incident_id"] == "INC-1"
        assert desk.calls == [("get_incident", {"incident_id": "INC-1"})]
        assert "get_incident" in await a.names()
        (event,) = [e for e in session.events(EventKind.REEXPANDED) if e.subject == "get_incident"]
        assert event.detail == IMPLICIT_REEXPANSION


async def test_an_evicted_tool_called_with_invalid_arguments_is_refused_with_its_full_schema(
    era: str,
) -> None:
    desk = IncidentDesk()
    async with running(TIGHT, desk=desk) as gw, agent(gw, era) as a:
        refused = await a.call("get_incident", {"incident_id": "incident seven"})
        assert reason(refused) == "arguments_invalid"
        schema = json.dumps(
            gw.session(a.key).tool("get_incident").input_schema, separators=(",", ":"), ensure_ascii=False
        )
        assert schema in text(refused)
        assert "stale" not in text(refused)
        assert desk.calls == []
        assert gw.session(a.key).state("get_incident") is ToolState.EVICTED


async def test_a_refusal_for_a_tool_with_no_earlier_arguments_does_not_call_them_stale(era: str) -> None:
    async with running(TIGHT, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        session.reexpand("close_incident")
        session.tombstone("close_incident")  # withheld with no call of it in the transcript
        refused = await a.call("close_incident", {"incident_id": "INC-1", "resolution": "fixed the config"})
        assert reason(refused) == "tool_not_resident"
        assert "reexpand_tools" in text(refused)
        assert "stale" not in text(refused)


async def test_invalid_arguments_are_refused_naming_the_field_and_never_forwarded(era: str) -> None:
    desk = IncidentDesk()
    async with running(desk=desk) as gw, agent(gw, era) as a:
        refused = await a.use(
            "create_incident", {"title": "Disk full", "severity": "SEV-9", "service": "db", "notify": True}
        )
        assert reason(refused) == "arguments_invalid"
        assert (refused.meta or {})["residency/error"]["path"] == "$.severity"
        assert desk.calls == []
        assert len(desk.incidents) == 3


async def test_a_forwarded_call_returns_the_upstream_result_and_names_its_call_id(era: str) -> None:
    desk = IncidentDesk()
    async with running(desk=desk) as gw, agent(gw, era) as a:
        result = await a.use(
            "create_incident",
            {"title": "Disk full on db-3", "severity": "SEV-3", "service": "db", "notify": False},
        )
        assert not result.is_error
        assert json.loads(text(result))["incident_id"] == "INC-8"
        call_id = (result.meta or {})["residency/call"]
        assert gw.session(a.key).call(call_id).tool == "create_incident"


async def test_an_unknown_tool_is_a_protocol_error(era: str) -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        with pytest.raises(MCPError) as raised:
            await a.call("drop_database", {})
        assert raised.value.code == types.INVALID_PARAMS


async def test_search_finds_withheld_tools_by_argument_name_but_never_archived_ones() -> None:
    budget = {"budget": {"schema_tokens": 700}, "minify": "compact"}  # get_runbook starts withheld
    async with running(budget, desk=IncidentDesk()) as gw, agent(gw, "modern") as a:
        session = gw.session(a.key)
        found = await a.call("search_tools", {"query": "runbook_id"})
        assert next(t["name"] for t in (found.structured_content or {})["tools"]) == "get_runbook"
        session.archive("get_runbook", "abandoned chain")
        again = await a.call("search_tools", {"query": "runbook_id", "limit": 10})
        assert "get_runbook" not in [t["name"] for t in (again.structured_content or {})["tools"]]
        archived = await a.call("get_runbook", {"runbook_id": "RB-1"})
        assert reason(archived) == "tool_archived"
        expanded = await a.call("reexpand_tools", {"names": ["get_runbook"]})
        assert expanded.is_error
        assert (expanded.structured_content or {})["errors"][0]["reason"] == "illegal_transition"


async def test_meta_tools_refuse_bad_arguments_naming_the_field(era: str) -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        for name, arguments, field in (
            ("search_tools", {"query": ""}, "$.query"),
            ("search_tools", {"query": "x", "limit": 0}, "$.limit"),
            ("reexpand_tools", {"names": []}, "$.names"),
            ("check_chain", {"sequence": "get_incident"}, "$.sequence"),
        ):
            result = await a.call(name, arguments)
            assert result.is_error
            assert (result.structured_content or {})["error"]["path"] == field


async def test_check_chain_reports_a_sequence_that_reassembles_an_archived_chain(era: str) -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        safe = await a.call("check_chain", {"sequence": ["get_incident", "update_incident"]})
        assert (safe.structured_content or {})["safe"] is True
        session.mark_shared("get_incident", "query_metrics")
        session.archive_chain(
            ["get_incident", "query_metrics", "page_oncall"],
            failure="page_oncall: 403 team not found",
            constraint={"all": []},
        )
        verdict = await a.call(
            "check_chain", {"sequence": ["list_services", "get_incident", "query_metrics"]}
        )
        assert (verdict.structured_content or {})["safe"] is False
        chains = json.loads(await a.read("residency://chains"))
        assert chains[0]["topology"] == ["get_incident", "query_metrics", "page_oncall"]


async def test_sessions_with_different_keys_do_not_share_state(era: str) -> None:
    async with (
        running({"budget": {"schema_tokens": 400}}, desk=IncidentDesk()) as gw,
        agent(gw, era, "alice") as alice,
        agent(gw, era, "bob") as bob,
    ):
        await alice.use("update_incident", {"incident_id": "INC-1", "notify": False})
        assert gw.session("alice").arguments_resident("update_incident")
        assert not gw.session("bob").arguments_resident("update_incident")
        rows = {r["name"]: r for r in json.loads(await bob.read("residency://tools"))}
        assert rows["update_incident"]["arguments_resident"] is False
        assert gw.session("bob").resident_calls() == []


async def test_resources_show_the_session_state(era: str) -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        await a.use("get_incident", {"incident_id": "INC-2"})
        listed = await a.client.list_resources(meta=a.meta)
        assert {str(r.uri) for r in listed.resources} == {
            "residency://tombstones",
            "residency://tools",
            "residency://chains",
            "residency://spans",
            "residency://events",
            "residency://upstreams",
        }
        templates = await a.client.list_resource_templates(meta=a.meta)
        assert [t.uri_template for t in templates.resource_templates] == ["residency://spans/{id}"]
        table = {row["name"]: row for row in json.loads(await a.read("residency://tools"))}
        assert table["get_incident"]["arguments_resident"] is True
        assert table["get_incident"]["server"] == "desk"
        assert table["update_incident"]["mutation"] is True and table["get_incident"]["mutation"] is False
        assert await a.read("residency://tombstones") == ""
        span = gw.session(a.key).add_span("db-3 is read-only until the migration ends", tags=["constraint"])
        shown = json.loads(await a.read(f"residency://spans/{span.id}"))
        assert shown["tags"] == ["constraint"]
        with pytest.raises(MCPError) as raised:
            await a.read("residency://spans/s999")
        assert raised.value.code == types.INVALID_PARAMS


async def test_a_tombstone_change_is_announced_to_subscribers_of_the_tombstones_resource() -> None:
    async with (
        # By list, the budget demotes the tools used earlier as the work goes on: tombstones.
        running({"budget": {"schema_tokens": 300}, **BY_LIST}, desk=IncidentDesk()) as gw,
        agent(gw, "legacy") as a,
    ):
        with pytest.warns(MCPDeprecationWarning):  # resources/subscribe is the handshake era's way
            await a.client.session.subscribe_resource("residency://tombstones")
        await a.use("update_incident", {"incident_id": "INC-1", "notify": False})
        for name, arguments in (
            ("get_timeline", {"incident_id": "INC-1"}),
            ("list_services", {}),
            ("get_runbook", {"runbook_id": "RB-2"}),
            ("list_deploys", {"service": "api"}),
        ):
            await a.use(name, arguments)
            if gw.session(a.key).state("update_incident") is not ToolState.RESIDENT:
                break
        assert gw.session(a.key).state("update_incident") is ToolState.TOMBSTONED
        updated = [n for n in a.notifications if isinstance(n, types.ResourceUpdatedNotification)]
        assert updated and str(updated[0].params.uri) == "residency://tombstones"


async def test_read_only_and_mutating_overrides_replace_what_the_annotations_say() -> None:
    overrides = {"read_only": ["update_incident"], "mutating": ["get_incident"]}
    # By list, so both tools are listed with the annotations the overrides gave them.
    async with running({**overrides, **BY_LIST}, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        listed = {t.name: t for t in await a.tools()}
        shown = listed["get_incident"].annotations
        assert shown is not None and shown.read_only_hint is False
        shown = listed["update_incident"].annotations
        assert shown is not None and shown.read_only_hint is True and shown.destructive_hint is False
        table = {row["name"]: row for row in json.loads(await a.read("residency://tools"))}
        assert table["get_incident"]["mutation"] is True
        assert table["update_incident"]["mutation"] is False
        # The tombstone says what kind of tool it withholds.
        await a.use("get_incident", {"incident_id": "INC-2"})
        gw.session(a.key).tombstone("get_incident")
        assert "get_incident: mutation tool schema withheld" in await a.read("residency://tombstones")
