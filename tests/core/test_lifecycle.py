"""The transition tables, exhaustively: every (state, trigger, guards) against the table."""

from __future__ import annotations

import enum
import itertools
from typing import Any

import pytest

from residency import SPAN_LIFECYCLE, TOOL_LIFECYCLE, GhostToolError, IllegalTransition, Lifecycle, ToolState

LIFECYCLES = [TOOL_LIFECYCLE, SPAN_LIFECYCLE]


def _guard_names(lifecycle: Lifecycle[Any]) -> list[str]:
    return sorted({g for t in lifecycle.table for g in (t.when, t.unless) if g})


def _all_facts(lifecycle: Lifecycle[Any]) -> list[dict[str, bool]]:
    names = _guard_names(lifecycle)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product([False, True], repeat=len(names))
    ]


@pytest.mark.parametrize("lifecycle", LIFECYCLES, ids=lambda lc: lc.kind)
def test_every_state_trigger_pair_reaches_the_table_target_or_raises_unchanged(
    lifecycle: Lifecycle[enum.Enum],
) -> None:
    for state, trigger, facts in itertools.product(
        lifecycle.states, lifecycle.triggers, _all_facts(lifecycle)
    ):
        expected = _table_target(lifecycle, state, trigger, facts)
        assert lifecycle.target(state, trigger, facts) == expected
        if expected is None:
            with pytest.raises(IllegalTransition) as info:
                lifecycle.fire(state, trigger, record="r", facts=facts)
            assert info.value.state == state.value and info.value.trigger == trigger
            assert info.value.record == "r"
            # Unchanged: the shared machine is left as if the refused trigger had never been
            # fired, so every trigger the table allows from this state still reaches its target.
            for other in lifecycle.triggers:
                dest = _table_target(lifecycle, state, other, facts)
                if dest is not None:
                    assert lifecycle.fire(state, other, record="r", facts=facts) is dest
        else:
            assert lifecycle.fire(state, trigger, record="r", facts=facts) is expected


def _table_target(
    lifecycle: Lifecycle[Any], state: enum.Enum, trigger: str, facts: dict[str, bool]
) -> enum.Enum | None:
    rows = [r for r in lifecycle.table if r.source is state and r.trigger == trigger and r.allows(facts)]
    return rows[0].dest if rows else None


def test_rows_into_a_state_that_shows_neither_schema_nor_tombstone_require_no_resident_arguments() -> None:
    for row in TOOL_LIFECYCLE.table:
        if TOOL_LIFECYCLE.is_ghost_target(row.dest):
            assert row.unless == "arguments_resident", row


def test_no_trigger_reaches_the_ghost_state_with_arguments_resident() -> None:
    for state, trigger in itertools.product(ToolState, TOOL_LIFECYCLE.triggers):
        dest = TOOL_LIFECYCLE.target(state, trigger, {"arguments_resident": True})
        assert dest is None or not TOOL_LIFECYCLE.is_ghost_target(dest)


def test_evicting_a_tool_with_resident_arguments_raises_ghost_tool_error() -> None:
    for state in (ToolState.RESIDENT, ToolState.TOMBSTONED):
        with pytest.raises(GhostToolError):
            TOOL_LIFECYCLE.fire(state, "evict", record="t", facts={"arguments_resident": True})


def test_pruning_goes_to_tombstoned_with_arguments_and_evicted_without() -> None:
    fire = TOOL_LIFECYCLE.fire
    assert (
        fire(ToolState.RESIDENT, "prune", record="t", facts={"arguments_resident": True})
        is ToolState.TOMBSTONED
    )
    assert (
        fire(ToolState.RESIDENT, "prune", record="t", facts={"arguments_resident": False})
        is ToolState.EVICTED
    )


def test_an_unknown_trigger_is_an_illegal_transition() -> None:
    with pytest.raises(IllegalTransition):
        TOOL_LIFECYCLE.fire(ToolState.RESIDENT, "explode", record="t", facts={})


def test_archived_tools_come_back_only_through_readmit() -> None:
    for trigger in TOOL_LIFECYCLE.triggers:
        dest = TOOL_LIFECYCLE.target(ToolState.ARCHIVED, trigger, {"arguments_resident": False})
        assert (dest is not None) == (trigger == "readmit")


@pytest.mark.parametrize("lifecycle", LIFECYCLES, ids=lambda lc: lc.kind)
def test_the_mermaid_diagram_has_one_edge_per_table_row(lifecycle: Lifecycle[Any]) -> None:
    lines = lifecycle.mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    edges = [line for line in lines if "-->" in line and "[*]" not in line]
    assert len(edges) == len(lifecycle.table)
    for row, edge in zip(lifecycle.table, edges, strict=True):
        assert edge.strip().startswith(f"{row.source.value} --> {row.dest.value}: {row.trigger}")


def test_the_shared_machine_does_not_grow_with_records() -> None:
    before = len(TOOL_LIFECYCLE._machine.models)
    for i in range(100):
        TOOL_LIFECYCLE.fire(ToolState.RESIDENT, "prune", record=f"t{i}", facts={})
    assert len(TOOL_LIFECYCLE._machine.models) == before == 1
