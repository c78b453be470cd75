"""Seed 000 end to end: a frequency-pruned mutation tool is tombstoned, never a ghost."""

from __future__ import annotations

from typing import Any

import pytest

from residency import ArgumentsInvalid, Budget, EventKind, Session, ToolNotResident, ToolState
from tests.incident_tools import incident_tools

ARGS = Budget(schema_tokens=0, argument_tokens=100_000).argument_tokens


def use(s: Session, name: str, arguments: dict[str, Any]) -> str:
    """What an agent loop does: re-expand if withheld, authorize, then record the call."""
    if s.state(name) is not ToolState.RESIDENT:
        s.reexpand(name)
    s.authorize_call(name, arguments)
    return s.record_call(name, arguments).id


def test_a_demoted_mutation_tool_is_tombstoned_and_its_rebuilt_call_refused() -> None:
    s = Session()
    s.register_tools(incident_tools())
    recent = ["get_timeline", "get_service_health", "list_deploys", "query_metrics", "search_runbooks"]
    # Room for update_incident beside the tools used at turns 3-4, not beside all five used at 3-5;
    # no margin over the budget (high_water=1.0): the cut comes as soon as the tools pass it.
    tight = sum(s.tool(n).tokens for n in recent) + s.tool("update_incident").tokens - 1
    budget = Budget(schema_tokens=tight, argument_tokens=ARGS, high_water=1.0)
    inc = {"incident_id": "INC-7"}

    s.plan_turn(budget)  # turn 1
    use(s, "get_incident", inc)
    s.plan_turn(budget)  # turn 2
    update = {**inc, "severity": "SEV-2", "assignee_id": "u-42", "notify": True}
    call_id = use(s, "update_incident", update)
    s.plan_turn(budget)  # turn 3
    use(s, "get_timeline", inc)
    use(s, "get_service_health", {"service": "api"})
    s.plan_turn(budget)  # turn 4
    use(s, "list_deploys", {"service": "api"})
    s.plan_turn(budget)  # turn 5
    assert s.state("update_incident") is ToolState.RESIDENT
    use(s, "query_metrics", {"metric": "p99"})
    use(s, "search_runbooks", {"query": "rollback"})

    plan = s.plan_turn(budget)  # turn 6: demoted, with its turn-2 arguments still visible
    assert plan.turn == 6
    assert s.state("update_incident") is ToolState.TOMBSTONED
    assert "update_incident" not in plan.tool_names
    assert any(line.startswith("update_incident:") for line in plan.tombstones)
    assert [e.kind for e in plan.events if e.subject == "update_incident"] == [EventKind.TOMBSTONED]

    # Turn 9: "bump to SEV-1 and re-notify", rebuilt from the visible turn-2 arguments, no notify.
    rebuilt = {**inc, "severity": "SEV-1", "assignee_id": "u-42"}
    with pytest.raises(ToolNotResident) as refused:
        s.authorize_call("update_incident", rebuilt)
    assert "reexpand_tools" in str(refused.value)
    assert refused.value.tool == "update_incident"

    schema = s.reexpand("update_incident")
    assert schema["inputSchema"]["required"] == ["incident_id", "severity", "notify"]
    assert s.events(EventKind.REEXPANDED)[-1].subject == "update_incident"
    with pytest.raises(ArgumentsInvalid) as invalid:
        s.authorize_call("update_incident", rebuilt)
    assert invalid.value.path == "$.notify"
    s.authorize_call("update_incident", {**rebuilt, "notify": True})

    # Once the host drops its arguments, the tool prunes silently: evicted, no tombstone.
    s.evict_arguments(call_id)
    s.plan_turn(Budget(schema_tokens=0, argument_tokens=ARGS))
    assert s.state("update_incident") is ToolState.EVICTED
    assert not any(line.startswith("update_incident:") for line in s.tombstones())


def test_a_definition_change_with_resident_arguments_tombstones_until_reexpanded() -> None:
    s = Session()
    s.register_tools(incident_tools())
    s.record_call(
        "update_incident",
        {"incident_id": "INC-7", "severity": "SEV-2", "assignee_id": "u-42", "notify": True},
    )
    changed = s.register_tools(incident_tools(assignee_as_object=True))
    assert changed == ["update_incident"]
    assert s.state("update_incident") is ToolState.TOMBSTONED
    stale = {"incident_id": "INC-7", "severity": "SEV-1", "assignee_id": "u-42", "notify": True}
    with pytest.raises(ToolNotResident):
        s.authorize_call("update_incident", stale)
    schema = s.reexpand("update_incident")
    assert schema["inputSchema"]["properties"]["assignee"]["type"] == "object"
    with pytest.raises(ArgumentsInvalid):
        s.authorize_call("update_incident", stale)


def test_a_definition_change_without_resident_arguments_keeps_the_tool_resident() -> None:
    s = Session()
    s.register_tools(incident_tools())
    s.register_tools(incident_tools(assignee_as_object=True))
    assert s.state("update_incident") is ToolState.RESIDENT
    assert s.tool("update_incident").definition["inputSchema"]["properties"]["assignee"]["type"] == "object"
