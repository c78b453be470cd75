"""Delivery by reference and ``residency.delivery``: a fixed list, schemas in results, auto's choice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import ToolsListChanged

from residency import ConfigError, SQLiteStore, ToolState
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._meta_tools import CALL_HINT, CALL_TOOL, RESULT_META_KEY
from residency._search import RANKER_ENV, clear_shared_indexes
from tests._timing import scaled
from tests.gateway.conftest import Agent, agent, config, reason, running, text
from tests.gateway.test_telemetry import metrics

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _bm25_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # BM25 alone: the semantic ranker joins in whenever its vectors happen to be ready, and
    # which tools a search hits (and so delivers) must not depend on that.
    monkeypatch.setenv(RANKER_ENV, "bm25")
    clear_shared_indexes()


PINNED = ["list_incidents"]
REFERENCE = {"delivery": "reference", "pinned": PINNED, "minify": "compact"}
META = ["search_tools", "reexpand_tools", CALL_TOOL, "archive_chain"]
NOTE = {"incident_id": "INC-1", "note": "rolled back the deploy"}
DROPPED = "residency/dropped_results"
EVICTED = "residency/evicted_calls"


def list_changes(gw: Gateway) -> float:
    (line,) = [
        x for x in metrics(gw.telemetry).splitlines() if x.startswith("residency_tool_list_changes_total")
    ]
    return float(line.split()[-1])


def hits(result: types.CallToolResult) -> list[str]:
    return [t["name"] for t in (result.structured_content or {})["tools"]]


async def call_with(a: Agent, name: str, arguments: dict[str, Any], **meta: Any) -> types.CallToolResult:
    # _meta carries keys of our own beside the SDK's typed ones.
    full = cast(types.RequestParamsMeta, {**a.meta, **meta})
    return await a.client.call_tool(name, arguments, meta=full)


async def proxied(a: Agent, name: str, arguments: dict[str, Any], **meta: Any) -> types.CallToolResult:
    return await call_with(a, CALL_TOOL, {"name": name, "arguments": arguments}, **meta)


# -- by reference ---------------------------------------------------------------------------------


async def test_by_reference_the_list_is_the_pinned_tools_and_the_meta_tools(era: str) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        assert await a.names() == [*PINNED, *META]
        s = gw.session(a.key)
        assert s.resident_tools() == PINNED
        assert all(s.state(n) is ToolState.EVICTED for n in s.tools() if n not in PINNED)


async def test_a_session_that_searches_and_calls_many_tools_keeps_one_list(era: str) -> None:
    desk = IncidentDesk()
    async with running({**REFERENCE, "budget": {"schema_tokens": 1}}, desk=desk) as gw, agent(gw, era) as a:
        first = [t.model_dump_json() for t in await a.tools()]
        calls = [
            ("timeline note", "add_timeline_note", NOTE),
            ("incident details", "get_incident", {"incident_id": "INC-2"}),
            ("deploys of a service", "list_deploys", {"service": "api"}),
            ("metrics", "query_metrics", {"service": "api", "metric": "p99_ms"}),
            ("page on call", "page_oncall", {"team": "payments", "message": "p99 up"}),
            ("service health", "get_service_health", {"service": "db"}),
            ("runbook", "search_runbooks", {"query": "rollback"}),
        ]
        s = gw.session(a.key)
        searched = 0
        for query, tool, arguments in calls:
            if not s.carried(tool):  # else an earlier search showed it already
                seen = {n for n in s.tools() if s.carried(n)}
                found = await a.call("search_tools", {"query": query, "limit": 3})
                assert tool in hits(found), (query, hits(found))
                assert not seen & set(hits(found))  # what the model still sees is not sent again
                searched += 1
            result = await proxied(a, tool, arguments)
            assert not result.is_error, text(result)
            assert [t.model_dump_json() for t in await a.tools()] == first
        assert [name for name, _ in desk.calls] == [tool for _, tool, _ in calls]
        assert searched >= 4
        assert all(s.state(tool) is ToolState.RESIDENT for _, tool, _ in calls)  # no budget demotes them
        assert list_changes(gw) == 0
        assert not [n for n in a.notifications if isinstance(n, types.ToolListChangedNotification)]


async def test_a_search_hit_carries_its_schema_as_the_list_would_show_it(era: str) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        found = await a.call("search_tools", {"query": "timeline note", "limit": 2})
        names = hits(found)
        assert "add_timeline_note" in names
        delivery = s.delivery((found.meta or {})[RESULT_META_KEY])
        assert list(delivery.tools) == names
        for tool in (found.structured_content or {})["tools"]:
            assert tool["definition"] == s.tool(tool["name"]).shown  # minified, as listed
            assert json.dumps(tool["definition"], ensure_ascii=False, separators=(",", ":")) in text(found)
            assert s.state(tool["name"]) is ToolState.RESIDENT
        assert CALL_HINT in text(found)
        result = await proxied(a, "add_timeline_note", NOTE)
        assert not result.is_error and RESULT_META_KEY not in (result.meta or {})  # not implicit


async def test_a_re_expansion_returns_full_schemas_says_how_to_call_them_and_names_its_result(
    era: str,
) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        result = await a.call("reexpand_tools", {"names": ["close_incident"]})
        assert (result.structured_content or {})["tools"] == [s.tool("close_incident").definition]
        assert CALL_HINT in text(result)
        assert s.delivery((result.meta or {})[RESULT_META_KEY]).tools == ("close_incident",)
        assert "close_incident" not in await a.names()


async def test_a_dropped_result_tombstones_a_tool_with_visible_arguments_and_evicts_the_others(
    era: str,
) -> None:
    desk = IncidentDesk()
    async with running(REFERENCE, desk=desk) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        found = await a.call("search_tools", {"query": "timeline note", "limit": 2})
        assert hits(found) == ["add_timeline_note", "get_timeline"]
        assert not (await proxied(a, "add_timeline_note", NOTE)).is_error
        rid = (found.meta or {})[RESULT_META_KEY]
        listed = await a.names()
        # The host compacted the search result away; it says so on its next call.
        assert not (await call_with(a, "list_incidents", {}, **{DROPPED: [rid, 7, "r99"]})).is_error
        assert s.state("add_timeline_note") is ToolState.TOMBSTONED
        assert s.state("get_timeline") is ToolState.EVICTED
        assert await a.names() == listed  # tombstones are not in the list
        refused = await proxied(a, "add_timeline_note", NOTE)
        assert reason(refused) == "tool_not_resident"
        assert "reexpand_tools" in text(refused) and CALL_HINT in text(refused)
        assert len(desk.calls) == 2
        again = await a.call("reexpand_tools", {"names": ["add_timeline_note"]})
        assert not again.is_error
        assert not (await proxied(a, "add_timeline_note", NOTE)).is_error


async def test_a_call_rebuilt_on_the_request_that_reports_its_schema_dropped_is_refused(era: str) -> None:
    # The host dropped the search result and, on the same request, the model calls the tool
    # again from the arguments it still sees: the drop is applied before the call meets it.
    desk = IncidentDesk()
    async with running(REFERENCE, desk=desk) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        found = await a.call("search_tools", {"query": "timeline note", "limit": 1})
        assert hits(found) == ["add_timeline_note"] and found.structured_content is not None
        assert found.structured_content["hint"] == CALL_HINT
        assert not (await proxied(a, "add_timeline_note", NOTE)).is_error
        rid = (found.meta or {})[RESULT_META_KEY]
        ghost = await proxied(a, "add_timeline_note", NOTE, **{DROPPED: [rid]})
        assert reason(ghost) == "tool_not_resident"
        assert text(ghost).startswith("add_timeline_note: mutation tool schema withheld")
        assert len(desk.calls) == 1  # never forwarded
        assert s.state("add_timeline_note") is ToolState.TOMBSTONED
        refusals = [e for e in s.events() if e.kind.value == "refused"]
        assert [e.subject for e in refusals] == ["add_timeline_note"]


async def test_arguments_dropped_with_the_result_let_the_tool_leave_without_a_tombstone(era: str) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        found = await a.call("search_tools", {"query": "timeline note", "limit": 1})
        called = await proxied(a, "add_timeline_note", NOTE)
        report = {
            EVICTED: [(called.meta or {})["residency/call"]],
            DROPPED: [(found.meta or {})[RESULT_META_KEY]],
        }
        assert not (await call_with(a, "list_incidents", {}, **report)).is_error
        assert s.state("add_timeline_note") is ToolState.EVICTED
        assert s.tombstones() == []


async def test_a_tool_two_results_carry_stays_until_both_are_dropped(era: str) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        first = await a.call("search_tools", {"query": "timeline note", "limit": 1})
        second = await a.call("reexpand_tools", {"names": ["add_timeline_note"]})
        ids = [(r.meta or {})[RESULT_META_KEY] for r in (first, second)]
        await call_with(a, "list_incidents", {}, **{DROPPED: ids[:1]})
        assert s.state("add_timeline_note") is ToolState.RESIDENT
        await call_with(a, "list_incidents", {}, **{DROPPED: ids})
        assert s.state("add_timeline_note") is ToolState.EVICTED
        await call_with(a, "list_incidents", {}, **{DROPPED: "r1"})  # not a list: ignored whole


async def test_an_implicit_re_expansion_by_reference_carries_the_schema_in_its_result(era: str) -> None:
    desk = IncidentDesk()
    async with running(REFERENCE, desk=desk) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        assert s.state("get_incident") is ToolState.EVICTED
        result = await proxied(a, "get_incident", {"incident_id": "INC-2"})
        assert not result.is_error
        schema = json.dumps(s.tool("get_incident").shown, ensure_ascii=False, separators=(",", ":"))
        assert any(isinstance(b, types.TextContent) and schema in b.text for b in result.content)
        rid = (result.meta or {})[RESULT_META_KEY]
        assert s.delivery(rid).tools == ("get_incident",) and s.state("get_incident") is ToolState.RESIDENT
        await call_with(a, "list_incidents", {}, **{DROPPED: [rid]})
        assert s.state("get_incident") is ToolState.TOMBSTONED  # its arguments are still visible


async def test_an_invalid_call_of_a_tool_not_in_the_list_gets_its_full_schema(era: str) -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        await a.call("search_tools", {"query": "close incident", "limit": 1})
        assert s.state("close_incident") is ToolState.RESIDENT
        refused = await proxied(a, "close_incident", {"incident_id": "INC-1"})
        assert reason(refused) == "arguments_invalid"
        schema = json.dumps(s.tool("close_incident").input_schema, separators=(",", ":"), ensure_ascii=False)
        assert schema in text(refused) and CALL_HINT in text(refused)


def changing_upstream(tools: list[dict[str, Any]]) -> Server[Any]:
    """An in-process upstream that lists whatever ``tools`` holds when it is asked."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done")])

    return Server("changing", on_list_tools=list_tools, on_call_tool=call_tool)


def _defined(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


async def test_the_list_changes_only_when_the_catalog_changes_under_a_pin(era: str) -> None:
    tools = [_defined("pinned", "Always listed."), _defined("other", "Found by search.")]
    settings = {"delivery": "reference", "pinned": ["pinned"]}
    async with running(settings, upstreams={"up": changing_upstream(tools)}) as gw, agent(gw, era) as a:
        await a.call("search_tools", {"query": "found search"})
        assert not (await proxied(a, "other", {})).is_error
        tools[1] = _defined("other", "Changed upstream.")
        tools.append(_defined("newcomer", "Joined later."))
        await gw.reload("up")
        assert list_changes(gw) == 0  # neither is in the list
        s = gw.session(a.key)
        assert s.state("other") is ToolState.TOMBSTONED  # its arguments were built on the old one
        assert s.state("newcomer") is ToolState.RESIDENT  # registered, withheld by the next plan
        await a.call("reexpand_tools", {"names": ["pinned"]})  # a turn: its plan withholds the newcomer
        assert s.state("newcomer") is ToolState.EVICTED
        tools[0] = _defined("pinned", "Changed under the pin.")
        await gw.reload("up")
        assert list_changes(gw) == 1
        assert (await a.tools())[0].description == "Changed under the pin."


async def test_the_instructions_say_how_to_call_a_tool_missing_from_the_list() -> None:
    async with running(REFERENCE, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        assert CALL_HINT in (a.client.instructions or "")
    # The default delivery is by reference: its instructions say it too.
    async with running(desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        assert CALL_HINT in (a.client.instructions or "")
    # By list every tool a session may call is in its list: nothing to say.
    async with running({"delivery": "list"}, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        assert CALL_HINT not in (a.client.instructions or "")
    del gw


def test_an_unknown_delivery_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as raised:
        config({"delivery": "by carrier pigeon"})
    assert raised.value.where == "residency.delivery"
    assert config({"delivery": "auto"}).residency.delivery == "auto"
    assert config({"delivery": "list"}).residency.delivery == "list"
    assert config().residency.delivery == "reference"


# -- auto -----------------------------------------------------------------------------------------

KEY = "agent-1"


@asynccontextmanager
async def auto_gateway(desk: IncidentDesk, **residency: Any) -> AsyncIterator[Gateway]:
    """A gateway whose default session is ``KEY``: an in-process listen stream (which names no
    session) reaches the agent's session."""
    settings = {"delivery": "auto", "budget": {"schema_tokens": 350}, "minify": "compact", **residency}
    async with Gateway(config(settings), upstreams={"desk": desk.server}, default_session=KEY) as gw:
        yield gw


async def test_auto_lists_call_tool_from_the_first_list(era: str) -> None:
    async with auto_gateway(IncidentDesk()) as gw, agent(gw, era, KEY) as a:
        assert CALL_TOOL in await a.names()


async def test_auto_delivers_by_reference_to_a_modern_client_without_a_listen_stream() -> None:
    desk = IncidentDesk()
    async with auto_gateway(desk) as gw, agent(gw, "modern", KEY) as a:
        first = await a.names()
        found = await a.call("search_tools", {"query": "timeline note", "limit": 1})
        assert gw._table.peek(KEY).delivery.by_reference  # type: ignore[union-attr]
        assert (
            RESULT_META_KEY in (found.meta or {})
            and "definition" in (found.structured_content or {})["tools"][0]
        )
        assert not (await proxied(a, "add_timeline_note", NOTE)).is_error
        assert not (await a.call("reexpand_tools", {"names": ["page_oncall"]})).is_error
        assert await a.names() == first  # its first list stays true
        assert list_changes(gw) == 0


async def test_auto_delivers_by_list_to_a_modern_client_that_listens() -> None:
    async with auto_gateway(IncidentDesk()) as gw, agent(gw, "modern", KEY) as a:
        assert "add_timeline_note" not in await a.names()
        async with a.client.listen(tools_list_changed=True) as events:
            assert not (await a.call("reexpand_tools", {"names": ["add_timeline_note"]})).is_error
            with anyio.fail_after(scaled(10)):
                assert isinstance(await events.__anext__(), ToolsListChanged)
            assert "add_timeline_note" in await a.names()
            found = await a.call("search_tools", {"query": "page on call", "limit": 1})
            assert "definition" not in (found.structured_content or {})["tools"][0]
        assert not gw._table.peek(KEY).delivery.by_reference  # type: ignore[union-attr]


async def test_auto_keeps_a_handshake_client_that_lists_again_on_the_list() -> None:
    async with auto_gateway(IncidentDesk()) as gw, agent(gw, "legacy", KEY) as a:
        for tool in ("add_timeline_note", "page_oncall", "close_incident"):
            assert not (await a.call("reexpand_tools", {"names": [tool]})).is_error
            assert a.list_changed.is_set()
            a.list_changed = anyio.Event()
            assert tool in await a.names()  # it lists again, as told
        assert not gw._table.peek(KEY).delivery.by_reference  # type: ignore[union-attr]


async def test_auto_turns_to_reference_for_a_handshake_client_that_does_not_list_again() -> None:
    desk = IncidentDesk()
    async with auto_gateway(desk, budget={"schema_tokens": 6000}) as gw, agent(gw, "legacy", KEY) as a:
        s = gw.session(KEY)
        for tool in ("add_timeline_note", "page_oncall"):
            s.evict(tool)
        served = await a.names()  # the whole desk but those two
        assert "add_timeline_note" not in served and "get_incident" in served
        assert not (await a.call("reexpand_tools", {"names": ["add_timeline_note"]})).is_error
        assert a.list_changed.is_set()  # it was told, and calls without listing again:
        assert not (await proxied(a, "add_timeline_note", NOTE)).is_error
        gs = gw._table.peek(KEY)
        assert gs is not None and gs.delivery.by_reference and gs.delivery.fixed is not None
        assert s.state("add_timeline_note") is ToolState.RESIDENT  # its re-expansion result carries it
        assert await a.names() == served  # the list it was served, frozen
        changes = list_changes(gw)
        found = await a.call("search_tools", {"query": "page on call", "limit": 1})
        assert hits(found) == ["page_oncall"] and "definition" in (found.structured_content or {})["tools"][0]
        assert not (await proxied(a, "page_oncall", {"team": "payments", "message": "p99 up"})).is_error
        assert list_changes(gw) == changes
        # The frozen list is no result of the host's: a report naming it changes nothing.
        await call_with(a, "get_incident", {"incident_id": "INC-1"}, **{DROPPED: [gs.delivery.fixed]})
        assert s.state("get_incident") is ToolState.RESIDENT
        assert await a.names() == served


async def test_what_results_carry_survives_a_gateway_restart(era: str, tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "gateway.db"))
    try:
        async with running(REFERENCE, desk=IncidentDesk(), store=store) as gw, agent(gw, era, "kept") as a:
            found = await a.call("search_tools", {"query": "timeline note", "limit": 1})
            assert not (await proxied(a, "add_timeline_note", NOTE)).is_error
            rid = (found.meta or {})[RESULT_META_KEY]
        async with running(REFERENCE, desk=IncidentDesk(), store=store) as gw, agent(gw, era, "kept") as a:
            s = gw.session("kept")
            assert s.carried("add_timeline_note") and s.state("add_timeline_note") is ToolState.RESIDENT
            assert await a.names() == [*PINNED, *META]
            await call_with(a, "list_incidents", {}, **{DROPPED: [rid]})
            assert s.state("add_timeline_note") is ToolState.TOMBSTONED
    finally:
        store.close()
