"""Tool data shared across the sessions of a process: one spec per distinct definition.

Sessions that register the same definition hold the same frozen ``ToolSpec`` (and, once called,
the same compiled validator), whether they got it by registering, replaying or restoring a
checkpoint; a definition that differs in any way, even only in a value's type, is a new one.
"""

from __future__ import annotations

import argparse
import copy
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench import catalog as bench_catalog
from residency import Budget, MemoryStore, SchemaError, Session, SQLiteStore, ToolState, definition_hash
from residency._core._minify import minify_tool
from residency._runtime._tool_cache import shared_validator
from residency._store._checkpoint import decode_checkpoint, encode_checkpoint


def _tool(name: str, default: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Reads {name}.",
        "inputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer", "default": default}},
            "required": ["n"],
        },
        "annotations": {"readOnlyHint": True},
        **extra,
    }


def test_sessions_registering_the_same_definitions_share_one_spec() -> None:
    tools = [_tool("a"), _tool("b")]
    first, second = Session(), Session()
    first.register_tools(tools)
    second.register_tools(copy.deepcopy(tools))
    for name in ("a", "b"):
        assert second.tool(name) is first.tool(name)
        assert second.tool(name).hash == definition_hash(_tool(name))


def test_the_shared_spec_is_a_private_copy_of_what_was_registered() -> None:
    raw = _tool("mutable")
    first = Session()
    first.register_tools([raw])
    raw["description"] = "changed after registration"
    raw["inputSchema"]["properties"]["n"]["type"] = "string"
    second = Session()
    second.register_tools([raw])
    assert first.tool("mutable").description == "Reads mutable."
    assert second.tool("mutable").description == "changed after registration"
    assert second.tool("mutable").hash != first.tool("mutable").hash


@pytest.mark.parametrize(("before", "after"), [(1, True), (1, 1.0), (0, False), ("1", 1)])
def test_a_definition_that_differs_only_in_a_values_type_is_a_new_definition(before: Any, after: Any) -> None:
    earlier, later = Session(), Session()
    earlier.register_tools([_tool("t", before)])
    later.register_tools([_tool("t", after)])
    assert later.tool("t") is not earlier.tool("t")
    assert later.tool("t").definition["inputSchema"]["properties"]["n"]["default"] == after
    assert type(later.tool("t").definition["inputSchema"]["properties"]["n"]["default"]) is type(after)
    # And within one session it is a changed definition (an upstream rug pull is still seen).
    assert earlier.register_tools([_tool("t", after)]) == ["t"]
    assert earlier.tool("t").hash == later.tool("t").hash


def test_a_refused_definition_is_refused_again_in_every_session() -> None:
    bad = {"name": "bad", "inputSchema": {"type": "object", "properties": {"x": {"type": 7}}}}
    for _ in range(2):
        session = Session()
        with pytest.raises(SchemaError):
            session.register_tools([_tool("ok"), bad])
        assert session.tools() == []


class _Subclass(dict[str, Any]):
    pass


def test_a_dict_subclass_is_registered_like_its_plain_dict() -> None:
    plain = Session()
    plain.register_tools([_tool("m")])
    mapped = Session()
    mapped.register_tools([_Subclass(_tool("m"))])
    assert mapped.tool("m").hash == plain.tool("m").hash
    assert mapped.tool("m") is plain.tool("m")


def test_another_minifier_gets_its_own_shown_definitions() -> None:
    def keep_name(tool: dict[str, Any]) -> dict[str, Any]:
        return {"name": tool["name"]}

    default, custom = Session(), Session(minify=keep_name)
    default.register_tools([_tool("x")])
    custom.register_tools([_tool("x")])
    assert custom.tool("x").shown == {"name": "x"}
    assert default.tool("x").shown == minify_tool(_tool("x"))
    assert custom.tool("x").definition == default.tool("x").definition


def test_replayed_and_restored_sessions_share_the_live_sessions_specs(tmp_path: Path) -> None:
    tools = [_tool(f"t{i}") for i in range(5)]
    live = Session()
    live.register_tools(tools)
    with SQLiteStore(tmp_path / "s.db") as store:
        stored = Session(store, session_id="s", checkpoint_every=0)
        stored.register_tools(tools)
        replayed = Session(store, session_id="s")
        assert replayed.restored_from == 0
        stored.checkpoint()
        restored = Session(store, session_id="s")
        assert restored.restored_from > 0
        for session in (stored, replayed, restored):
            assert session.snapshot()["tools"] == live.snapshot()["tools"]
            for tool in tools:
                assert session.tool(tool["name"]) is live.tool(tool["name"])


def test_sessions_share_the_compiled_validator_of_a_definition() -> None:
    first, second = Session(), Session()
    for session in (first, second):
        session.register_tools([_tool("v")])
        session.admit_call("v", {"n": 3})
    assert shared_validator(second.tool("v")) is shared_validator(first.tool("v"))


def test_a_forged_checkpoint_definition_is_never_shared() -> None:
    store = MemoryStore()
    honest = Session(store, session_id="f", checkpoint_every=0)
    honest.register_tools([_tool("g")])
    honest.checkpoint()
    saved = store.load_checkpoint("f")
    assert saved is not None
    seq, blob = saved
    state = decode_checkpoint(blob, "f", seq)
    assert state is not None
    [(name, definition, digest, shown, tokens)] = state["tools"]
    state["tools"] = [(name, {**definition, "description": "forged"}, digest, shown, tokens)]
    store.save_checkpoint("f", 1, encode_checkpoint("f", 1, state))
    reopened = Session(store, session_id="f")
    assert reopened.restored_from == 0  # the forged checkpoint was refused, the journal replayed
    fresh = Session()
    fresh.register_tools([_tool("g")])
    assert fresh.tool("g").description == "Reads g."
    assert reopened.tool("g") is fresh.tool("g")


@pytest.mark.slow
def test_the_catalog_benchmark_reports_memory_and_register_time() -> None:
    args = argparse.Namespace(corpus=None, sessions=2, repeat=2, big=500)
    report = bench_catalog.run(args)
    names = {f.name for f in report.figures}
    assert {"memory per additional session", "register known tools in a new session"} <= names
    assert report.data["tools"] > 0


def test_a_plan_pruning_many_tools_asks_the_machine_per_state_and_facts_not_per_tool() -> None:
    # Tools with resident arguments must be tombstoned, the others evicted, however the
    # machine's answers are reused across the tools of one plan.
    session = Session()
    session.register_tools([_tool(f"p{i}") for i in range(8)])
    for i in range(0, 8, 2):
        session.admit_call(f"p{i}", {"n": i})
    plan = session.plan_turn(Budget(schema_tokens=1, argument_tokens=1 << 20, planner="greedy"))
    assert plan.tools == ()
    for i in range(8):
        expected = ToolState.TOMBSTONED if i % 2 == 0 else ToolState.EVICTED
        assert session.state(f"p{i}") is expected
    replayed = Session(session.store, session_id=session.session_id)
    assert replayed.snapshot() == session.snapshot()


def test_a_catalog_outlives_the_sessions_that_registered_it() -> None:
    gone = Session()
    gone.register_tools([_tool("kept")])
    spec = weakref.ref(gone.tool("kept"))
    del gone
    gc.collect()
    assert spec() is not None  # kept for the next session: it does not pay for the catalog again
    later = Session()
    later.register_tools([_tool("kept")])
    assert later.tool("kept") is spec()
