"""``residency bench cost``: the user's own tools priced per turn, with residency beside them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from residency._bench._pricing import PROFILES
from residency._bench._trace import parse_trace
from residency._bench.cost import DEMO, Settings, catalog_cost, read_tools_file
from residency._cli import main
from residency._cli._bench import BENCHES
from residency._core._planner import Budget
from residency._errors import InvalidInput
from residency._gateway import desk_tools

DESK = {DEMO: desk_tools()}


def _settings(
    schema_tokens: int = 6000, *, delivery: str = "reference", pinned: tuple[str, ...] = ()
) -> Settings:
    return Settings(Budget(schema_tokens, 20_000), pinned, {}, "compact", delivery)


def _trace(servers: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": "three-calls",
        "servers": servers or [DEMO],
        "budget": {"schema_tokens": 1, "argument_tokens": 1},
        "turns": [
            {
                "say": "Anything open?",
                "calls": [{"tool": "list_incidents", "arguments": {"status": "open"}, "result_tokens": 300}],
            },
            {
                "calls": [
                    {"tool": "get_service_health", "arguments": {"service": "api"}, "result_tokens": 150}
                ]
            },
        ],
    }


def test_the_cost_bench_is_what_residency_bench_lists() -> None:
    assert BENCHES["cost"].module == "residency._bench.cost"


def test_on_the_demo_desk_the_baseline_shows_every_tool_and_reference_only_the_pins() -> None:
    data = catalog_cost(DESK, _settings(pinned=("get_incident",)), turns=3)
    s = data["strategies"]
    assert data["tools"] == len(DESK[DEMO]) == s["all-full"]["listed_per_turn"][0]
    assert s["all-full"]["listed_per_turn"] == [data["tools"]] * 3
    assert s["reference"]["listed_per_turn"] == [1, 1, 1]
    assert s["all-full"]["cost_vs_all_full"] == dict.fromkeys(PROFILES, 1.0)
    assert set(s["reference"]["effective_cost"]) == set(PROFILES)
    assert s["reference"]["cost_vs_all_full"]["anthropic-5m"] < 1
    levels = data["minified_tokens_per_turn"]
    assert levels["minimal"]["tokens"] < levels["full-text"]["tokens"] <= data["full_tokens_per_turn"]


def test_a_smaller_schema_budget_lists_fewer_tools_by_list() -> None:
    roomy = catalog_cost(DESK, _settings(6000, delivery="list"), turns=2)["strategies"]["list"]
    tight = catalog_cost(DESK, _settings(300, delivery="list"), turns=2)["strategies"]["list"]
    assert tight["listed_per_turn"][0] < roomy["listed_per_turn"][0] == len(DESK[DEMO])
    assert sum(tight["tool_tokens_per_turn"]) < sum(roomy["tool_tokens_per_turn"])


def test_a_trace_is_replayed_with_its_calls_and_no_call_fails() -> None:
    data = catalog_cost(DESK, _settings(300, delivery="list"), trace=parse_trace(_trace()))
    assert data["session"] == {
        "trace": "three-calls",
        "description": "",
        "turns": 2,
        "calls": 2,
    }
    s = data["strategies"]
    assert all(figures["failed_calls"] == 0 for figures in s.values())
    # Nothing is listed up front by reference: the model finds both tools by searching.
    assert s["reference"]["searches"] >= 2
    assert data["settings"]["schema_tokens"] == 300  # residency's budget, not the trace's


def test_a_trace_naming_a_server_the_tools_do_not_have_is_refused_with_its_place() -> None:
    with pytest.raises(InvalidInput) as caught:
        catalog_cost(DESK, _settings(), trace=parse_trace(_trace(["github"])))
    assert caught.value.where == "$.servers[0]"


@pytest.mark.parametrize(
    ("shape", "server"),
    [
        (lambda tools: {"tools": tools}, "mine"),
        (lambda tools: tools, "mine"),
        (lambda tools: {"server": "desk", "tools": tools}, "desk"),
        (lambda tools: {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}, "mine"),
    ],
    ids=["result", "list", "server-file", "json-rpc"],
)
def test_a_tools_file_is_read_in_each_shape(tmp_path: Path, shape: Any, server: str) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(shape(DESK[DEMO])))
    assert read_tools_file(path) == {server: DESK[DEMO]}


@pytest.mark.parametrize(
    "text",
    [
        '{"tools": []}',
        '{"tools": [{"description": "no name"}]}',
        "not json",
        '{"tools": [{"name": "a", "inputSchema": []}]}',
    ],
)
def test_a_bad_tools_file_exits_2_and_writes_nothing(tmp_path: Path, text: str) -> None:
    path, out = tmp_path / "tools.json", tmp_path / "out.json"
    path.write_text(text)
    with pytest.raises(SystemExit) as exited:
        main(["bench", "cost", "--tools", str(path), "--json", str(out)])
    assert exited.value.code == 2
    assert not out.exists()


def test_the_cli_prints_its_tables_and_writes_every_figure_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools, out = tmp_path / "tools.json", tmp_path / "out.json"
    tools.write_text(json.dumps({"tools": DESK[DEMO]}))
    argv = ["bench", "cost", "--tools", str(tools), "--schema-budget", "300", "--delivery", "list"]
    assert main([*argv, "--turns", "2", "--profile", "openai", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "residency by list *" in printed and "openai *" in printed
    [report] = json.loads(out.read_text())
    assert report["name"] == "cost"
    assert report["data"]["settings"]["delivery"] == "list"
    assert report["data"]["servers"] == {"tools": len(DESK[DEMO])}
    names = {f["name"] for f in report["figures"]}
    assert "reference cost / all-full, openai" in names and "list cost / all-full, openai" in names


def test_residency_bench_alone_runs_the_cost_bench_on_the_demo_desk(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert main(["bench", "--json", str(out)]) == 0
    [report] = json.loads(out.read_text())
    assert report["name"] == "cost"
    assert report["data"]["servers"] == {DEMO: len(DESK[DEMO])}


@pytest.mark.slow
def test_a_configs_upstreams_are_started_and_its_settings_used(tmp_path: Path) -> None:
    config, out = tmp_path / "residency.json", tmp_path / "out.json"
    desk = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]}
    settings = {"budget": {"schema_tokens": 500}, "delivery": "list", "minify": "minimal"}
    config.write_text(json.dumps({"mcpServers": {"desk": desk}, "residency": settings}))
    assert main(["bench", "cost", "--config", str(config), "--turns", "2", "--json", str(out)]) == 0
    [report] = json.loads(out.read_text())
    data = report["data"]
    assert data["servers"] == {"desk": len(DESK[DEMO])}
    assert data["settings"] | {"pinned": []} == {
        "schema_tokens": 500,
        "argument_tokens": 20_000,
        "pinned": [],
        "minify": "minimal",
        "delivery": "list",
    }


@pytest.mark.slow
def test_a_config_whose_upstream_cannot_start_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "residency.json"
    broken = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    config.write_text(json.dumps({"mcpServers": {"broken": broken}, "residency": {"startup_timeout": 5}}))
    with pytest.raises(SystemExit) as exited:
        main(["bench", "cost", "--config", str(config)])
    assert exited.value.code == 2
