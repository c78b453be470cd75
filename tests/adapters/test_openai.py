"""``residency.adapters.openai``: Chat Completions and Responses parameters, checked by the SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from residency import Budget, InvalidInput, Session, ToolState
from residency._gateway._demo import desk_tools
from residency.adapters import openai as adapter
from tests.adapters._sdk import (
    CHAT_PARAMS,
    RESPONSES_PARAMS,
    jsonable,
    sent_chat,
    sent_responses,
    validate,
)

MODEL = "gpt-5"


def desk_session() -> Session:
    session = Session(pinned=["list_incidents"])
    session.register_tools(desk_tools())
    return session


def chat_allowed(params: Any) -> list[str]:
    return [t["function"]["name"] for t in params["tool_choice"]["allowed_tools"]["tools"]]


def chat_listed(params: Any) -> list[str]:
    return [t["function"]["name"] for t in params["tools"]]


def responses_allowed(params: Any) -> list[str]:
    return [t["name"] for t in params["tool_choice"]["tools"]]


# -- shape ---------------------------------------------------------------------------------------


def test_the_chat_request_is_valid_and_the_sdk_sends_it_unchanged() -> None:
    session = desk_session()
    plan = session.plan_turn(Budget(schema_tokens=450, argument_tokens=1000))
    params = adapter.chat_request(
        session, plan, model=MODEL, messages=[{"role": "user", "content": "Triage INC-1."}]
    )
    validate(CHAT_PARAMS, params)
    assert sent_chat(params) == jsonable(params)


def test_the_responses_request_is_valid_and_the_sdk_sends_it_unchanged() -> None:
    session = desk_session()
    plan = session.plan_turn(Budget(schema_tokens=450, argument_tokens=1000))
    params = adapter.responses_request(session, plan, model=MODEL, input="Triage INC-1.")
    assert params["input"] == [{"role": "user", "content": "Triage INC-1."}]
    validate(RESPONSES_PARAMS, params)
    assert sent_responses(params) == jsonable(params)


def test_every_registered_tool_is_a_non_strict_function_tool_in_registration_order() -> None:
    session = desk_session()
    chat = adapter.chat_tools(session)
    responses = adapter.responses_tools(session)
    assert [t["function"]["name"] for t in chat] == [adapter.REEXPAND_TOOL, *session.tools()]
    assert [t["name"] for t in responses] == [adapter.REEXPAND_TOOL, *session.tools()]
    for entry, flat in zip(chat[1:], responses[1:], strict=True):
        shown = session.tool(flat["name"]).shown
        assert entry["function"] == {
            "name": shown["name"],
            "parameters": shown["inputSchema"],
            "strict": False,
            "description": shown["description"],
        }
        assert flat == {"type": "function", **entry["function"]}


def test_allowed_tools_are_the_reexpand_tool_and_the_plans_resident_tools() -> None:
    session = desk_session()
    plan = session.plan_turn(Budget(schema_tokens=450, argument_tokens=1000))
    assert 0 < len(plan.tool_names) < len(session.tools())
    expected = [adapter.REEXPAND_TOOL, *plan.tool_names]
    assert adapter.chat_tool_choice(plan) == {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [{"type": "function", "function": {"name": n}} for n in expected],
        },
    }
    assert adapter.responses_tool_choice(plan) == {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": n} for n in expected],
    }


def test_no_tombstones_means_no_notice_and_the_messages_are_copied() -> None:
    session = desk_session()
    plan = session.plan_turn(Budget(schema_tokens=450, argument_tokens=1000))
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    params = adapter.chat_request(session, plan, model=MODEL, messages=messages)
    assert params["messages"] == messages
    params["messages"].append({"role": "user", "content": "more"})
    assert messages == [{"role": "user", "content": "hi"}]


# -- bad input -----------------------------------------------------------------------------------


def test_a_plan_of_another_session_is_refused() -> None:
    other = Session()
    other.register_tools([{"name": "elsewhere", "inputSchema": {"type": "object"}}])
    plan = other.plan_turn(Budget(schema_tokens=1000, argument_tokens=1000))
    session = desk_session()
    with pytest.raises(InvalidInput) as caught:
        adapter.chat_request(session, plan, model=MODEL, messages=[])
    assert caught.value.where == "plan"
    with pytest.raises(InvalidInput):
        adapter.responses_request(session, plan, model=MODEL, input=[])
    with pytest.raises(InvalidInput):
        adapter.chat_request(session, "plan", model=MODEL, messages=[])  # type: ignore[arg-type]


def test_names_the_api_refuses_and_a_taken_reexpand_name_are_refused() -> None:
    session = Session()
    session.register_tools([{"name": "files/read", "inputSchema": {"type": "object"}}])
    with pytest.raises(InvalidInput):
        adapter.chat_tools(session)
    session = desk_session()
    with pytest.raises(InvalidInput):
        adapter.responses_tools(session, reexpand_tool="get_incident")
    with pytest.raises(InvalidInput):
        adapter.chat_tools(session, reexpand_tool="re expand")


def test_an_unknown_notice_role_is_refused() -> None:
    session = desk_session()
    plan = session.plan_turn(Budget(schema_tokens=450, argument_tokens=1000))
    with pytest.raises(InvalidInput) as caught:
        adapter.chat_request(session, plan, model=MODEL, messages=[], notice_role="user")  # type: ignore[arg-type]
    assert caught.value.where == "notice_role"


# -- a session over many turns -------------------------------------------------------------------


def test_the_tools_array_never_changes_while_allowed_tools_follow_the_plan() -> None:
    session = desk_session()
    # The greedy planner: its resident set moves every few turns, which allowed_tools follows.
    budget = Budget.greedy(schema_tokens=450, argument_tokens=100_000, idle_turns=2)
    chat_requests: list[Any] = []
    responses_requests: list[Any] = []
    plans = []

    def turn() -> None:
        plan = session.plan_turn(budget)
        plans.append(plan)
        chat = adapter.chat_request(session, plan, model=MODEL, messages=[{"role": "user", "content": "go"}])
        responses = adapter.responses_request(session, plan, model=MODEL, input="go")
        validate(CHAT_PARAMS, chat)
        validate(RESPONSES_PARAMS, responses)
        assert sent_chat(chat) == jsonable(chat)
        assert sent_responses(responses) == jsonable(responses)
        for allowed in (chat_allowed(chat), responses_allowed(responses)):
            assert allowed == [adapter.REEXPAND_TOOL, *plan.tool_names]
            for name in allowed[1:]:
                assert session.state(name) is ToolState.RESIDENT
        chat_requests.append(chat)
        responses_requests.append(responses)

    turn()
    session.record_call("add_timeline_note", {"incident_id": "INC-1", "note": "paged"})
    for _ in range(4):
        turn()
    assert session.state("add_timeline_note") is ToolState.TOMBSTONED

    # The tombstoned tool is listed but not allowed, and its tombstone trails the messages.
    last_chat, last_responses = chat_requests[-1], responses_requests[-1]
    assert "add_timeline_note" in [t["function"]["name"] for t in last_chat["tools"]]
    assert "add_timeline_note" not in chat_allowed(last_chat)
    assert "add_timeline_note" not in responses_allowed(last_responses)
    notice = {"role": "developer", "content": session.tombstone_text("add_timeline_note")}
    assert last_chat["messages"][-1] == notice
    assert last_responses["input"][-1] == notice

    # Re-expanded, it is allowed from the next plan on, and the notice is gone.
    session.reexpand("add_timeline_note")
    turn()
    assert "add_timeline_note" in chat_allowed(chat_requests[-1])
    assert chat_requests[-1]["messages"] == [{"role": "user", "content": "go"}]

    assert len({p.tool_names for p in plans}) >= 2, (
        "the resident set must change for this test to mean anything"
    )
    assert len({json.dumps(r["tools"]) for r in chat_requests}) == 1
    assert len({json.dumps(r["tools"]) for r in responses_requests}) == 1


def test_the_notice_can_be_a_system_message_or_left_out() -> None:
    session = desk_session()
    session.record_call("get_incident", {"incident_id": "INC-1"})
    session.prune("get_incident")
    plan = session.plan_turn(Budget(schema_tokens=10_000, argument_tokens=100_000))
    assert plan.tombstones
    system = adapter.chat_request(session, plan, model=MODEL, messages=[], notice_role="system")
    assert system["messages"] == [{"role": "system", "content": "\n".join(plan.tombstones)}]
    validate(CHAT_PARAMS, system)
    responses = adapter.responses_request(session, plan, model=MODEL, input=[], notice_role="system")
    assert responses["input"] == [{"role": "system", "content": "\n".join(plan.tombstones)}]
    validate(RESPONSES_PARAMS, responses)
    silent = adapter.chat_request(session, plan, model=MODEL, messages=[], notice_role=None)
    assert silent["messages"] == []


def test_an_archived_tool_is_listed_but_never_allowed() -> None:
    session = desk_session()
    session.archive("page_oncall")
    plan = session.plan_turn(Budget(schema_tokens=100_000, argument_tokens=100_000))
    params = adapter.chat_request(session, plan, model=MODEL, messages=[])
    assert "page_oncall" in chat_listed(params)
    assert "page_oncall" not in chat_allowed(params)
    assert set(chat_allowed(params)) == {adapter.REEXPAND_TOOL, *session.tools(ToolState.RESIDENT)}
