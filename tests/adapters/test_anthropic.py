"""``residency.adapters.anthropic``: Messages API parameters checked against the ``anthropic`` SDK."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from anthropic.types import Message, ToolParam
from pydantic import TypeAdapter, ValidationError

from residency import (
    Budget,
    CallRefused,
    InvalidInput,
    NotFound,
    Session,
    ToolNotResident,
    ToolState,
)
from residency._gateway._demo import desk_tools
from residency.adapters import anthropic as adapter
from tests.adapters._sdk import ANTHROPIC_PARAMS, jsonable, sent_anthropic, validate

MODEL = "claude-sonnet-5"


def desk_session(**kwargs: Any) -> Session:
    session = Session(pinned=["list_incidents"], **kwargs)
    session.register_tools(desk_tools())
    return session


def params_for(session: Session, messages: list[Any], **kwargs: Any) -> Any:
    return adapter.request(session, model=MODEL, max_tokens=512, messages=messages, **kwargs)


def listed(session: Session, **kwargs: Any) -> list[Mapping[str, Any]]:
    """``adapter.tools``, read as the JSON objects the API receives.

    The SDK types the block as a union of some twenty tool TypedDicts, most of them without
    ``name`` or ``input_schema``; the tests read it key by key, as the API does.
    """
    return [tool for tool in adapter.tools(session, **kwargs)]


def reexpansion(session: Session, tool_use_id: str, names: list[str]) -> Mapping[str, Any]:
    """``adapter.reexpansion_result``, read as JSON (its ``content`` is ``str`` or blocks to the SDK)."""
    return adapter.reexpansion_result(session, tool_use_id, names)


def tools_bytes(params: Any) -> str:
    return json.dumps(params["tools"], sort_keys=False)


# -- shape ---------------------------------------------------------------------------------------


def test_the_request_is_a_valid_message_create_params_and_the_sdk_sends_it_unchanged() -> None:
    session = desk_session()
    params = params_for(session, [{"role": "user", "content": "Triage INC-1"}], system="You run the desk.")
    validate(ANTHROPIC_PARAMS, params)
    assert sent_anthropic(params) == jsonable(params)


def test_every_registered_tool_is_listed_deferred_in_registration_order_after_search_and_reexpand() -> None:
    session = desk_session()
    block = listed(session)
    assert block[0] == {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
    assert block[1]["name"] == adapter.REEXPAND_TOOL
    assert "defer_loading" not in block[1]
    assert [t["name"] for t in block[2:]] == session.tools()
    deferred = {t["name"] for t in block[2:] if t.get("defer_loading") is True}
    assert deferred == set(session.tools()) - {"list_incidents"}  # the pinned tool is eager


def test_a_listed_tool_carries_the_shown_definition_as_name_description_and_input_schema() -> None:
    session = desk_session()
    by_name = {t["name"]: t for t in listed(session, search=None)}
    for name in session.tools():
        shown = session.tool(name).shown
        entry = by_name[name]
        assert entry["input_schema"] == shown["inputSchema"]
        assert entry["description"] == shown["description"]
        TypeAdapter(ToolParam).validate_python(entry)


def test_the_search_tool_can_be_regex_or_left_out() -> None:
    session = desk_session()
    regex = listed(session, search="regex")
    assert regex[0] == {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    assert listed(session, search=None)[0]["name"] == adapter.REEXPAND_TOOL
    for search in ("regex", None):
        validate(ANTHROPIC_PARAMS, params_for(session, [{"role": "user", "content": "x"}], search=search))


def test_eager_tools_are_listed_without_deferral() -> None:
    session = desk_session()
    block = listed(session, eager=["get_incident", "get_incident"])
    eager = {t["name"] for t in block[2:] if "defer_loading" not in t}
    assert eager == {"get_incident"}


def test_the_listed_schemas_are_copies_the_host_cannot_use_to_change_the_session() -> None:
    session = desk_session()
    first = listed(session, search=None)[1]
    assert first["name"] == "list_incidents"
    first["input_schema"]["properties"] = {}
    shown = session.tool("list_incidents").shown["inputSchema"]
    assert shown["properties"]
    assert listed(session, search=None)[1]["input_schema"] == shown


def test_the_messages_are_copied_not_changed() -> None:
    session = desk_session()
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    params = params_for(session, messages)
    params["messages"].append({"role": "assistant", "content": "x"})
    assert messages == [{"role": "user", "content": "hi"}]


# -- bad input -----------------------------------------------------------------------------------


def test_a_tool_name_the_api_refuses_is_an_invalid_input_naming_the_tool() -> None:
    session = Session()
    session.register_tools([{"name": "files.read", "inputSchema": {"type": "object"}}])
    with pytest.raises(InvalidInput) as caught:
        listed(session)
    assert caught.value.where == "tools.files.read"


def test_a_tool_named_like_the_reexpand_or_search_tool_is_refused() -> None:
    session = Session()
    session.register_tools([{"name": "tool_search_tool_bm25", "inputSchema": {"type": "object"}}])
    with pytest.raises(InvalidInput):
        listed(session)
    assert listed(session, search="regex")[2]["name"] == "tool_search_tool_bm25"
    with pytest.raises(InvalidInput):
        listed(session, search=None, reexpand_tool="tool_search_tool_bm25")


def test_a_schema_whose_root_is_not_an_object_is_refused() -> None:
    # The default minifier refuses such a schema at registration; a custom one may not.
    session = Session(minify=lambda tool: tool)
    session.register_tools([{"name": "odd", "inputSchema": {"type": "string"}}])
    with pytest.raises(InvalidInput) as caught:
        listed(session)
    assert caught.value.where == "tools.odd.inputSchema"


def test_unknown_search_and_unknown_eager_names_are_refused() -> None:
    session = desk_session()
    with pytest.raises(InvalidInput):
        adapter.tools(session, search="vector")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        listed(session, eager=["no_such_tool"])
    with pytest.raises(InvalidInput):
        listed(session, eager="get_incident")


def test_reexpand_names_reads_the_call_input_or_refuses_it() -> None:
    assert adapter.reexpand_names({"names": ["a", "b", "a"]}) == ["a", "b"]
    bad_inputs: list[object] = [None, {}, {"names": []}, {"names": "a"}, {"names": [""]}]
    for bad in [*bad_inputs, {"names": ["a"] * 21}]:
        with pytest.raises(InvalidInput) as caught:
            adapter.reexpand_names(bad)
        assert caught.value.where == "names"


# -- re-expansion --------------------------------------------------------------------------------


def test_a_reexpansion_is_answered_with_tool_references_once_the_tool_is_resident() -> None:
    session = desk_session()
    session.prune("get_incident")
    refused = reexpansion(session, "toolu_1", ["get_incident"])
    assert refused["is_error"] is True
    assert all(block["type"] == "text" for block in refused["content"])
    session.reexpand("get_incident")
    loaded = reexpansion(session, "toolu_1", ["get_incident", "get_incident"])
    assert loaded == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "tool_reference", "tool_name": "get_incident"}],
    }


def test_a_reexpansion_naming_an_unknown_or_archived_tool_loads_nothing_and_says_why() -> None:
    session = desk_session()
    session.archive("page_oncall")
    result = reexpansion(session, "toolu_1", ["get_incident", "page_oncall", "nope"])
    assert result["is_error"] is True
    (text,) = result["content"]
    assert session.tombstone_text("page_oncall") in text["text"]
    assert "nope" in text["text"]
    assert "get_incident" in text["text"]


def test_a_reexpansion_of_an_eager_tool_sends_no_reference() -> None:
    session = desk_session()
    result = reexpansion(session, "toolu_1", ["list_incidents"])
    assert [block["type"] for block in result["content"]] == ["text"]
    assert "is_error" not in result
    with pytest.raises(InvalidInput):
        reexpansion(session, "toolu_1", [])


def test_searched_tools_reads_the_server_search_result_from_sdk_objects_and_dicts() -> None:
    search_result = {
        "type": "tool_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [
                {"type": "tool_reference", "tool_name": "get_incident"},
                {"type": "tool_reference", "tool_name": "get_timeline"},
            ],
        },
    }
    content = [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "tool_search_tool_bm25",
            "input": {"query": "x"},
        },
        search_result,
        {"type": "text", "text": "found them"},
    ]
    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    assert adapter.searched_tools(message.content) == ["get_incident", "get_timeline"]
    assert adapter.searched_tools(content) == ["get_incident", "get_timeline"]
    failed = {
        "type": "tool_search_tool_result",
        "tool_use_id": "s",
        "content": {"type": "tool_search_tool_result_error", "error_code": "unavailable"},
    }
    assert adapter.searched_tools([failed]) == []


# -- a session over many turns -------------------------------------------------------------------


class Host:
    """An embedded host's loop: plan, build the request, play the model's turn, answer it."""

    def __init__(self) -> None:
        self.session = desk_session()
        # The greedy planner: its resident set moves every few turns, which is what this checks
        # the request does not follow.
        self.budget = Budget.greedy(schema_tokens=450, argument_tokens=100_000, idle_turns=2)
        self.messages: list[Any] = [{"role": "user", "content": "Triage INC-1."}]
        self.requests: list[Any] = []
        self.resident_sets: list[tuple[str, ...]] = []
        self._ids = 0

    def turn(self) -> Any:
        plan = self.session.plan_turn(self.budget)
        assert plan.evictions == ()  # the argument budget is large: the transcript only grows
        self.resident_sets.append(plan.tool_names)
        params = params_for(self.session, self.messages, system="You run the incident desk.")
        validate(ANTHROPIC_PARAMS, params)
        assert sent_anthropic(params) == jsonable(params)
        self.requests.append(params)
        return plan

    def model_says(self, *content: Any) -> None:
        """Append the model's turn and the host's answer to every tool use in it."""
        self.messages.append({"role": "assistant", "content": list(content)})
        for name in adapter.searched_tools(content):
            self.session.reexpand(name)
        results: list[Any] = []
        for block in content:
            if block["type"] != "tool_use":
                continue
            if block["name"] == adapter.REEXPAND_TOOL:
                names = adapter.reexpand_names(block["input"])
                for name in names:
                    self.session.reexpand(name)
                results.append(reexpansion(self.session, block["id"], names))
                continue
            try:
                self.session.admit_call(block["name"], block["input"])
            except CallRefused as refusal:
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": block["id"],
                        "is_error": True,
                        "content": str(refusal),
                    }
                )
                continue
            results.append({"type": "tool_result", "tool_use_id": block["id"], "content": "done"})
        self.messages.append({"role": "user", "content": results or "Go on."})

    def tool_use(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        return {"type": "tool_use", "id": f"toolu_{self._ids}", "name": name, "input": arguments}


def test_the_tools_block_and_the_conversation_prefix_never_change_while_residency_does() -> None:
    host = Host()
    host.turn()
    assert "add_timeline_note" in host.resident_sets[-1]
    note = {"incident_id": "INC-1", "note": "paged the api team"}
    host.model_says(host.tool_use("add_timeline_note", note))
    for _ in range(4):  # idle turns: the called tool leaves with its arguments resident
        host.turn()
        host.model_says({"type": "text", "text": "Watching."})
    assert host.session.state("add_timeline_note") is ToolState.TOMBSTONED

    # The model calls the tombstoned tool: refused with the tombstone naming the re-expand tool.
    host.turn()
    host.model_says(host.tool_use("add_timeline_note", note))
    refusal = host.messages[-1]["content"][0]
    assert refusal["is_error"] is True
    assert refusal["content"] == host.session.tombstone_text("add_timeline_note")
    with pytest.raises(ToolNotResident):
        host.session.authorize_call("add_timeline_note", note)

    # It re-expands: the answer is a tool_reference appended to the conversation.
    host.turn()
    host.model_says(host.tool_use(adapter.REEXPAND_TOOL, {"names": ["add_timeline_note"]}))
    assert host.messages[-1]["content"][0]["content"] == [
        {"type": "tool_reference", "tool_name": "add_timeline_note"}
    ]
    host.turn()
    host.model_says(host.tool_use("add_timeline_note", note))
    assert "is_error" not in host.messages[-1]["content"][0]

    # The server-side search loads an evicted tool: reported, it is a re-expansion.
    assert host.session.state("get_timeline") is ToolState.EVICTED
    host.turn()
    search = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "tool_search_tool_bm25",
        "input": {"query": "timeline"},
    }
    found = {
        "type": "tool_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": "get_timeline"}],
        },
    }
    host.model_says(search, found, host.tool_use("get_timeline", {"incident_id": "INC-1"}))
    assert host.session.state("get_timeline") is ToolState.RESIDENT
    assert "is_error" not in host.messages[-1]["content"][0]
    host.turn()

    assert len(set(host.resident_sets)) >= 3, "the resident set must change for this test to mean anything"
    assert len({tools_bytes(p) for p in host.requests}) == 1
    assert len({json.dumps(p["system"]) for p in host.requests}) == 1
    for earlier, later in zip(host.requests, host.requests[1:], strict=False):
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]


def test_a_tombstoned_tool_stays_deferred_and_is_not_loaded_until_reexpanded() -> None:
    session = desk_session()
    session.record_call("get_incident", {"incident_id": "INC-1"})
    assert session.prune("get_incident") is ToolState.TOMBSTONED
    entry = next(t for t in listed(session) if t["name"] == "get_incident")
    assert entry["defer_loading"] is True
    assert reexpansion(session, "toolu_1", ["get_incident"])["is_error"] is True


def test_a_changed_catalog_changes_the_tools_block() -> None:
    session = Session()
    session.register_tools(desk_tools("v1"))
    before = json.dumps(listed(session))
    assert json.dumps(listed(session)) == before
    changed = session.register_tools(desk_tools("v2"))
    assert changed
    assert json.dumps(listed(session)) != before


def test_a_request_with_a_tool_reference_in_user_content_is_not_a_valid_request() -> None:
    # Why references travel inside a tool_result: the SDK's types allow them nowhere else.
    session = desk_session()
    params = params_for(session, [{"role": "user", "content": adapter.tool_references(["get_incident"])}])
    with pytest.raises(ValidationError):
        validate(ANTHROPIC_PARAMS, params)
