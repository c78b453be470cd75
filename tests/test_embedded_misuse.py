"""Embedding mistakes get ``InvalidInput`` (or ``SchemaError``) naming the parameter, and change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from residency import (
    EventKind,
    InvalidInput,
    MemoryStore,
    SchemaError,
    Session,
    ToolNotResident,
)
from residency._runtime._inputs import MAX_DEFINITION_DEPTH

TOOLS = [
    {"name": "read", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "write", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
]


def _nested_schema(levels: int) -> dict[str, Any]:
    """An object schema ``levels`` properties deep (two JSON levels per property)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _nested_value(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


BAD_ARGUMENTS = [
    pytest.param("store", {"store": "x"}, id="store=str"),
    pytest.param("phases", {"phases": "x"}, id="phases=str"),
    # A string of tool names would be read letter by letter.
    pytest.param("phases['triage']", {"phases": {"triage": "read"}}, id="phases={name: str}"),
    pytest.param("pinned", {"pinned": 5}, id="pinned=int"),
    pytest.param("pinned", {"pinned": "read"}, id="pinned=str"),
    pytest.param("minify", {"minify": 5}, id="minify=int"),
    pytest.param("clock", {"clock": 5}, id="clock=int"),
    pytest.param("reexpand_tool", {"reexpand_tool": 5}, id="reexpand_tool=int"),
]


@pytest.mark.parametrize(("where", "bad"), BAD_ARGUMENTS)
def test_a_wrong_session_argument_is_invalid_input_naming_it(where: str, bad: dict[str, Any]) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidInput) as raised:
        Session(**{"store": store, "session_id": "s", **bad})
    assert raised.value.where == where
    assert store.sessions() == []


@pytest.mark.parametrize("tools", [None, 5, "read", TOOLS[0]], ids=["None", "int", "str", "one dict"])
def test_register_tools_with_no_list_is_invalid_input_and_registers_nothing(tools: Any) -> None:
    s = Session()
    with pytest.raises(InvalidInput) as raised:
        s.register_tools(tools)
    assert raised.value.where == "tools"
    assert s.tools() == []
    assert s.store.load(s.session_id) == []


def test_a_schema_nested_5000_deep_is_a_schema_error_and_registers_nothing() -> None:
    s = Session()
    s.register_tools(TOOLS)
    journal = s.store.load(s.session_id)
    deep = {"name": "deep", "inputSchema": _nested_schema(5_000)}
    with pytest.raises(SchemaError) as raised:
        s.register_tools([TOOLS[0], deep])
    assert raised.value.where == "tools[1].inputSchema"
    assert s.tools() == ["read", "write"]
    assert s.store.load(s.session_id) == journal


def test_another_part_of_a_definition_nested_5000_deep_is_invalid_input() -> None:
    s = Session()
    deep = {"name": "deep", "inputSchema": {"type": "object"}, "annotations": _nested_value(5_000)}
    with pytest.raises(InvalidInput) as raised:
        s.register_tools([deep])
    assert not isinstance(raised.value, SchemaError)
    assert s.tools() == []


def test_a_schema_just_under_the_depth_limit_registers_and_validates() -> None:
    levels = (MAX_DEFINITION_DEPTH - 2) // 2  # the tool object and inputSchema add two levels
    s = Session()
    s.register_tools([{"name": "deep", "inputSchema": _nested_schema(levels)}])
    assert s.admit_call("deep", _nested_value(levels)).id == "c1"


def test_a_refusal_is_journaled_as_an_event_and_changes_no_other_state() -> None:
    """The documented exception to "an operation that raises has changed nothing": the journal
    keeps what the agent tried (the audit trail), and nothing the agent is shown changes."""
    s = Session()
    s.register_tools(TOOLS)
    s.admit_call("write", {"n": 1})
    s.tombstone("write")
    before, revision = s.snapshot(), s.revision
    with pytest.raises(ToolNotResident):
        s.admit_call("write", {"n": 2})
    after = s.snapshot()
    assert s.revision == revision
    assert {k: v for k, v in after.items() if k != "events"} == {
        k: v for k, v in before.items() if k != "events"
    }
    assert [e[1] for e in after["events"][len(before["events"]) :]] == [EventKind.REFUSED.value]
    assert Session(s.store, session_id=s.session_id).snapshot() == after
