"""``call_tool(name, arguments)``: exactly the admission path of a direct call, and bad input refused."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import mcp_types as types
import pytest

from residency import EventKind, Session, ToolState
from residency._gateway import IncidentDesk
from residency._gateway._meta_tools import CALL_HINT, CALL_TOOL, META_TOOLS
from residency._runtime._tools import IMPLICIT_REEXPANSION
from residency._search import RANKER_ENV, clear_shared_indexes
from tests.gateway.conftest import Agent, agent, reason, running, text
from tests.gateway.test_telemetry import metrics

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _bm25_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # BM25 alone: the semantic ranker joins in whenever its vectors happen to be ready, and
    # which tools a search hits (and so delivers) must not depend on that.
    monkeypatch.setenv(RANKER_ENV, "bm25")
    clear_shared_indexes()


GET = ("get_incident", {"incident_id": "INC-2"})
NOTE = ("add_timeline_note", {"incident_id": "INC-1", "note": "rolled back the deploy"})
Prepare = Callable[[Agent, Session], Awaitable[None]]


async def _nothing(a: Agent, s: Session) -> None:
    return None


async def _reexpand(a: Agent, s: Session) -> None:
    # By list the tool joins the list; by reference the result carries its schema.
    assert not (await a.call("reexpand_tools", {"names": [GET[0], NOTE[0]]})).is_error


async def _tombstoned(a: Agent, s: Session) -> None:
    await _reexpand(a, s)
    assert not (await a.call(*NOTE)).is_error  # its arguments are in the transcript now
    s.tombstone(NOTE[0])


async def _used_note(a: Agent, s: Session) -> None:
    if s.state(NOTE[0]) is not ToolState.RESIDENT:
        assert not (await a.call("reexpand_tools", {"names": [NOTE[0]]})).is_error
    assert not (await a.call(*NOTE)).is_error  # its arguments are in the transcript now


async def _archived(a: Agent, s: Session) -> None:
    s.archive(GET[0], "abandoned chain")


async def _evicted(a: Agent, s: Session) -> None:
    if s.state(GET[0]) is ToolState.RESIDENT:
        s.evict(GET[0])


async def _chain(a: Agent, s: Session) -> None:
    s.mark_shared("get_incident", "query_metrics")
    s.archive_chain(
        ["get_incident", "query_metrics", "page_oncall"], "page_oncall: 403 team not found", {"all": []}
    )
    for name in ("get_incident", "query_metrics", "page_oncall"):
        if s.state(name) is not ToolState.RESIDENT:
            s.reexpand(name)
            s.record_delivery([name])  # by reference, a result carries it
    assert not (await a.call("get_incident", {"incident_id": "INC-1"})).is_error


@dataclass(frozen=True)
class Case:
    prepare: Prepare
    name: str
    arguments: dict[str, Any]
    reason: str | None  # the refusal expected, None for a forwarded call
    settings: dict[str, Any] | None = None


CASES = {
    "resident, valid": Case(_reexpand, *GET, None),
    "invalid arguments": Case(
        _reexpand, "get_incident", {"incident_id": "incident two"}, "arguments_invalid"
    ),
    "missing field": Case(_reexpand, "add_timeline_note", {"incident_id": "INC-1"}, "arguments_invalid"),
    "tombstoned": Case(_tombstoned, *NOTE, "tool_not_resident"),
    "archived": Case(_archived, *GET, "tool_archived"),
    "evicted, valid: implicit re-expansion": Case(_evicted, *GET, None),
    "evicted, invalid: the schema in the refusal": Case(
        _evicted, "get_incident", {"incident_id": 7}, "arguments_invalid"
    ),
    "chain guard": Case(_chain, "query_metrics", {"service": "api", "metric": "p99_ms"}, "chain_collision"),
    "result recorded as a span": Case(_reexpand, *GET, None, {"spans": {"tags": {GET[0]: ["constraint"]}}}),
    "phase after call": Case(
        _nothing,
        *GET,
        None,
        {"phases": {"triage": ["get_incident", "get_timeline"]}, "budget": {"schema_tokens": 400}},
    ),
    "tombstone notice": Case(
        _used_note,
        "list_deploys",
        {"service": "api"},
        None,
        {"budget": {"schema_tokens": 150, "planner": "greedy"}, "minify": "compact"},
    ),
}


@dataclass
class Outcome:
    result: types.CallToolResult
    desk_calls: list[tuple[str, dict[str, Any]]]
    snapshot: dict[str, Any]
    ops: list[str]
    notices: int
    forwarded: str


def _without_via(snapshot: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The snapshot without what says how each call came (its record's ``via``, and the
    ``called`` event's ``... via call_tool``), and the vias."""
    calls = snapshot["calls"]
    vias = [c.pop("via") for c in calls.values()]
    snapshot["events"] = [
        (turn, kind, subject, detail.removesuffix(" via call_tool") if kind == "called" else detail)
        for turn, kind, subject, detail in snapshot["events"]
    ]
    return snapshot, vias


async def _run(case: Case, delivery: str, era: str, *, proxied: bool) -> Outcome:
    desk = IncidentDesk()
    settings = {"delivery": delivery, **(case.settings or {})}
    async with running(settings, desk=desk) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        await case.prepare(a, s)
        if proxied:
            result = await a.call(CALL_TOOL, {"name": case.name, "arguments": case.arguments})
        else:
            result = await a.call(case.name, case.arguments)
        body = metrics(gw.telemetry)
        forwarded = [line for line in body.splitlines() if line.startswith("residency_calls_forwarded_total")]
        via = [line for line in body.splitlines() if line.startswith("residency_calls_via_call_tool_total")]
        assert via == [
            f"residency_calls_via_call_tool_total {1.0 if proxied and case.reason is None else 0.0}"
        ]
        return Outcome(
            result,
            list(desk.calls),
            s.snapshot(),
            [e.op for e in gw.store.load(s.session_id)],
            len(a.notifications),
            "\n".join(forwarded),
        )


@pytest.mark.parametrize("delivery", ["list", "reference"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
async def test_a_call_through_call_tool_has_the_outcome_of_the_direct_call(
    case: str, delivery: str, era: str
) -> None:
    chosen = CASES[case]
    direct = await _run(chosen, delivery, era, proxied=False)
    proxied = await _run(chosen, delivery, era, proxied=True)
    assert reason(direct.result) == reason(proxied.result) == chosen.reason
    assert direct.result.is_error is proxied.result.is_error is (chosen.reason is not None)
    assert direct.result.model_dump() == proxied.result.model_dump()  # text, structured, _meta
    assert direct.desk_calls == proxied.desk_calls
    assert direct.ops == proxied.ops
    assert direct.notices == proxied.notices
    assert direct.forwarded == proxied.forwarded
    direct_state, direct_vias = _without_via(direct.snapshot)
    proxied_state, proxied_vias = _without_via(proxied.snapshot)
    assert direct_state == proxied_state
    # The one difference: the journal says the last call came through call_tool.
    assert set(direct_vias) <= {""}
    if chosen.reason is None:
        assert proxied_vias[-1] == CALL_TOOL and set(proxied_vias[:-1]) <= {""}


async def test_the_cases_show_what_they_name(era: str) -> None:
    # The equivalence above is only worth what the cases exercise: check each does.
    offloaded = await _run(CASES["result recorded as a span"], "list", era, proxied=True)
    assert "residency/span" in (offloaded.result.meta or {})
    implicit = await _run(CASES["evicted, valid: implicit re-expansion"], "list", era, proxied=True)
    assert implicit.desk_calls == [GET]
    phased = await _run(CASES["phase after call"], "list", era, proxied=True)
    assert phased.snapshot["phase"] == "triage"
    notice = await _run(CASES["tombstone notice"], "list", era, proxied=True)
    texts = [b.text for b in notice.result.content if isinstance(b, types.TextContent)]
    assert any(t.startswith("Withheld now:") for t in texts)
    schema = await _run(CASES["evicted, invalid: the schema in the refusal"], "list", era, proxied=True)
    assert '"pattern":"^INC-[0-9]+$"' in text(schema.result)
    assert (schema.result.meta or {})["residency/error"]["path"] == "$.incident_id"


async def test_an_implicit_re_expansion_through_call_tool_is_journaled_as_one(era: str) -> None:
    desk = IncidentDesk()
    async with (
        running({"budget": {"schema_tokens": 350}, "minify": "compact"}, desk=desk) as gw,
        agent(gw, era) as a,
    ):
        s = gw.session(a.key)
        assert s.state(GET[0]) is ToolState.EVICTED
        result = await a.call(CALL_TOOL, {"name": GET[0], "arguments": GET[1]})
        assert not result.is_error
        call = s.call((result.meta or {})["residency/call"])
        assert (call.tool, call.via) == (GET[0], CALL_TOOL)
        (event,) = [e for e in s.events(EventKind.REEXPANDED) if e.subject == GET[0]]
        assert event.detail == IMPLICIT_REEXPANSION
        (entry,) = [e for e in gw.store.load(s.session_id) if e.op == "call"]
        assert entry.data["via"] == CALL_TOOL


async def test_a_tool_without_arguments_is_called_with_none(era: str) -> None:
    desk = IncidentDesk()
    async with running(desk=desk) as gw, agent(gw, era) as a:
        result = await a.call(CALL_TOOL, {"name": "list_services"})
        assert not result.is_error
        assert desk.calls == [("list_services", {})]


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "unknown tool": ({"name": "drop_database", "arguments": {}}, "$.name"),
    "missing name": ({"arguments": {"incident_id": "INC-1"}}, "$.name"),
    "name not a string": ({"name": 7, "arguments": {}}, "$.name"),
    "empty name": ({"name": "", "arguments": {}}, "$.name"),
    "arguments a list": ({"name": "get_incident", "arguments": ["INC-1"]}, "$.arguments"),
    "arguments a string": ({"name": "get_incident", "arguments": '{"incident_id": "INC-1"}'}, "$.arguments"),
    "arguments null": ({"name": "get_incident", "arguments": None}, "$.arguments"),
    "the tool's arguments beside name": ({"name": "get_incident", "incident_id": "INC-1"}, "$.incident_id"),
    **{f"meta-tool {m}": ({"name": m, "arguments": {}}, "$.name") for m in META_TOOLS},
}


@pytest.mark.parametrize("delivery", ["list", "reference", "auto"])
@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
async def test_bad_input_is_an_error_result_saying_what_to_do_and_changes_nothing(
    bad: str, delivery: str, era: str
) -> None:
    arguments, path = BAD[bad]
    desk = IncidentDesk()
    async with running({"delivery": delivery}, desk=desk) as gw, agent(gw, era) as a:
        s = gw.session(a.key)
        called = await a.call(*GET)  # a call whose arguments the host could report dropped
        journal, snapshot, revision = gw.store.load(s.session_id), s.snapshot(), s.revision
        meta = cast(
            types.RequestParamsMeta,
            {**a.meta, "residency/evicted_calls": [(called.meta or {})["residency/call"]]},
        )
        result = await a.client.call_tool(CALL_TOOL, arguments, meta=meta)
        assert result.is_error
        details = (result.meta or {})["residency/error"]
        assert (details["reason"], details["tool"], details["path"]) == ("arguments_invalid", CALL_TOOL, path)
        assert (result.structured_content or {})["error"] == details
        assert text(result)  # says what to do next
        assert gw.store.load(s.session_id) == journal
        assert (s.snapshot(), s.revision) == (snapshot, revision)
        assert s.arguments_resident(GET[0])  # the host's report rode on bad input: not applied
        assert desk.calls == [GET]


async def test_the_texts_say_what_to_do_next() -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        unknown = await a.call(CALL_TOOL, {"name": "drop_database", "arguments": {}})
        assert "search_tools" in text(unknown)
        itself = await a.call(CALL_TOOL, {"name": "search_tools", "arguments": {"query": "x"}})
        assert "call it directly" in text(itself)
        flat = await a.call(CALL_TOOL, {"name": "get_incident", "incident_id": "INC-1"})
        assert "in arguments" in text(flat)


async def test_a_direct_call_of_an_unknown_tool_is_still_a_protocol_error(era: str) -> None:
    from mcp import MCPError

    async with running({"delivery": "reference"}, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        with pytest.raises(MCPError) as raised:
            await a.call("drop_database", {})
        assert raised.value.code == types.INVALID_PARAMS


@pytest.mark.parametrize("delivery", ["reference", "auto"])
async def test_call_tool_is_listed_by_its_one_definition_in_every_session_and_every_call(
    delivery: str, era: str
) -> None:
    async with (
        running({"delivery": delivery}, desk=IncidentDesk()) as gw,
        agent(gw, era, "one") as one,
        agent(gw, era, "two") as two,
    ):
        first = {t.name: t.model_dump_json() for t in await one.tools()}
        await one.call(CALL_TOOL, {"name": GET[0], "arguments": GET[1]})
        await one.call("search_tools", {"query": "timeline"})
        await one.call("reexpand_tools", {"names": ["page_oncall"]})
        for tools in (await one.tools(), await two.tools()):
            shown = {t.name: t.model_dump_json() for t in tools}
            for name in ("search_tools", "reexpand_tools", CALL_TOOL, "archive_chain"):
                assert shown[name] == first[name]
        for name in ("search_tools", "reexpand_tools", CALL_TOOL):
            assert CALL_HINT in json.loads(first[name])["description"] or name == CALL_TOOL


async def test_a_list_delivered_session_does_not_list_call_tool_but_answers_it(era: str) -> None:
    desk = IncidentDesk()
    async with running({"delivery": "list"}, desk=desk) as gw, agent(gw, era) as a:
        assert CALL_TOOL not in await a.names()
        assert not any(CALL_HINT in (t.description or "") for t in await a.tools())
        assert not (await a.call(CALL_TOOL, {"name": GET[0], "arguments": GET[1]})).is_error
        assert desk.calls == [GET]


async def test_an_upstream_tool_named_call_tool_is_namespaced() -> None:
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="call_tool", input_schema={"type": "object"})])

    async with running(upstreams={"proxy": Server("proxy", on_list_tools=list_tools)}) as gw:
        assert "proxy__call_tool" in gw.catalog and "call_tool" not in gw.catalog
