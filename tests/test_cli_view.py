"""``residency view`` shows what the model sees, read from a store a real gateway wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from residency import SQLiteStore, ToolState
from residency._cli import main
from residency._gateway import IncidentDesk
from residency._gateway._demo import SCENARIO_READS
from residency._gateway._meta_tools import listed_meta_tools
from residency._gateway._run import DEMO_WORKING_SET
from residency._tokens import count_tokens
from tests._timing import START
from tests.gateway.conftest import agent, running

# Seed 000 is a scenario of delivery by list: the budget demotes update_incident from the list.
POLICY = {"delivery": "list", "budget": {"schema_tokens": 700}, "minify": "compact"}
UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}


async def _serve_a_session(path: Path) -> dict[str, Any]:
    """Run the seed-000 scenario through a gateway journaling to ``path``; return what the agent last saw."""
    store = SQLiteStore(path)
    try:
        with anyio.fail_after(START):
            async with running(POLICY, desk=IncidentDesk(), store=store) as gw, agent(gw, "legacy") as a:
                session = gw.session(a.key)
                assert not (await a.use("update_incident", UPDATE)).is_error
                for name, arguments in SCENARIO_READS:
                    assert not (await a.use(name, arguments)).is_error
                    if session.state("update_incident") is not ToolState.RESIDENT:
                        break
                assert session.state("update_incident") is ToolState.TOMBSTONED
                tools = await a.tools()
                return {
                    "key": a.key,
                    "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools],
                    "tombstones": session.tombstones(),
                }
    finally:
        store.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("view") / "gateway.db"
    seen = anyio.run(_serve_a_session, path)
    config = path.parent / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {}, "residency": POLICY}))
    return path, seen


def _view(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["view", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_view_lists_what_the_agent_was_served_with_its_tokens(
    served: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, seen = served
    code, out, _ = _view(
        capsys,
        "--store",
        f"sqlite:///{path}",
        "--session",
        seen["key"],
        "--config",
        str(path.parent / "gateway.json"),
        "--json",
    )
    assert code == 0
    shown = json.loads(out)
    assert shown["session"] == f"gateway/{seen['key']}" and shown["requested"] == seen["key"]
    listed = [(t["name"], t["tokens"]) for t in (*shown["tools"], *shown["meta_tools"])]
    # The same tools, in the same order, each costing what its definition on the wire costs.
    assert listed == [(t["name"], count_tokens(t)) for t in seen["tools"]]
    assert [m["name"] for m in shown["meta_tools"]] == list(listed_meta_tools(chains=False, offload=False))
    assert shown["total_tokens"] == sum(count_tokens(t) for t in seen["tools"])
    assert shown["tombstones"] == seen["tombstones"]
    assert any(line.startswith("update_incident:") for line in shown["tombstones"])
    assert "update_incident" not in [t["name"] for t in shown["tools"]]
    assert shown["minify"] == "compact"


def test_view_accepts_the_store_id_and_prints_a_table(
    served: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, seen = served
    code, out, _ = _view(
        capsys,
        "--store",
        str(path),
        "--session",
        f"gateway/{seen['key']}",
        "--config",
        str(path.parent / "gateway.json"),
        "--minify",
        "compact",
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"session gateway/{seen['key']}: turn ")
    total = next(line for line in lines if line.strip().startswith("total"))
    assert int(total.split()[1]) == sum(count_tokens(t) for t in seen["tools"])
    assert f"  {seen['tombstones'][0]}" in lines
    assert any(line.split()[:1] == ["reexpand_tools"] and line.endswith("(meta-tool)") for line in lines)


def test_the_default_policy_is_the_demos(
    served: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, seen = served
    code, out, _ = _view(capsys, "--store", str(path), "--session", seen["key"], "--json")
    assert code == 0
    shown = json.loads(out)
    # ``residency serve`` with no --config: compact, by reference, the desk's read-only working
    # set pinned (so only those of the session's resident tools are listed).
    assert (shown["minify"], shown["delivery"]) == ("compact", "reference")
    names = {t["name"] for t in shown["tools"]}
    assert names and names <= set(DEMO_WORKING_SET), names
    meta = list(listed_meta_tools(chains=False, offload=False, call_tool=True))
    assert [m["name"] for m in shown["meta_tools"]] == meta


def test_an_unknown_session_is_exit_2_naming_the_known_ones(
    served: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, seen = served
    code, out, err = _view(capsys, "--store", str(path), "--session", "nobody")
    assert code == 2 and out == ""
    assert "'nobody'" in err and "'gateway/nobody'" in err
    assert f"gateway/{seen['key']}" in err


def test_a_missing_store_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _view(capsys, "--store", str(tmp_path / "absent.db"), "--session", "x")
    assert code == 2 and "absent.db" in err


def test_viewing_changes_nothing(
    served: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, seen = served

    def journal() -> list[tuple[str, object]]:
        store = SQLiteStore(path)
        try:
            return [(e.op, dict(e.data)) for e in store.load(f"gateway/{seen['key']}")]
        finally:
            store.close()

    before = journal()
    assert _view(capsys, "--store", str(path), "--session", seen["key"])[0] == 0
    assert journal() == before


def test_a_session_delivered_by_reference_is_viewed_as_its_fixed_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default delivery: the list is the pinned tool and the meta-tools with call_tool,
    # whatever the model found and called through call_tool meanwhile.
    policy = {"pinned": ["get_incident"], "minify": "compact"}
    path = tmp_path / "gateway.db"

    async def serve() -> tuple[str, list[dict[str, Any]]]:
        store = SQLiteStore(path)
        try:
            with anyio.fail_after(START):
                async with running(policy, desk=IncidentDesk(), store=store) as gw, agent(gw, "legacy") as a:
                    found = await a.call("search_tools", {"query": "add a note to an incident timeline"})
                    assert not found.is_error
                    note = {"name": "add_timeline_note", "arguments": {"incident_id": "INC-7", "note": "x"}}
                    assert not (await a.call("call_tool", note)).is_error
                    tools = await a.tools()
                    return a.key, [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        finally:
            store.close()

    key, seen = anyio.run(serve)
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {}, "residency": policy}))
    code, out, _ = _view(capsys, "--store", str(path), "--session", key, "--config", str(config), "--json")
    assert code == 0
    shown = json.loads(out)
    listed = [(t["name"], t["tokens"]) for t in (*shown["tools"], *shown["meta_tools"])]
    assert listed == [(t["name"], count_tokens(t)) for t in seen]
    assert [t["name"] for t in shown["tools"]] == ["get_incident"]
    assert "call_tool" in [m["name"] for m in shown["meta_tools"]]
    assert shown["delivery"] == "reference"
    # Read with the delivery by list instead, the same session shows its resident tools.
    listed_config = tmp_path / "list.json"
    listed_config.write_text(json.dumps({"mcpServers": {}, "residency": {**policy, "delivery": "list"}}))
    code, out, _ = _view(
        capsys, "--store", str(path), "--session", key, "--config", str(listed_config), "--json"
    )
    assert code == 0 and "add_timeline_note" in [t["name"] for t in json.loads(out)["tools"]]
