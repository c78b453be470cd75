"""The session benchmark: shipped traces, the simulated model's ghost calls, JSON, CLI."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from benchmarks.bench.session import GENERATED_END, GENERATED_START, TRACES, main, readme_table, run_trace
from benchmarks.run import main as run_main
from residency._bench._pricing import PROFILES
from residency._bench._simulate import (
    DeferStrategy,
    Seed003Strategy,
    Strategy,
    conform,
    rebuild_from_stale,
    replay,
)
from residency._bench._strategies import (
    STRATEGIES,
    AdapterStrategy,
    GreedyStrategy,
    ReferenceStrategy,
    ResidencyStrategy,
    make_strategy,
)
from residency._bench._trace import (
    INCIDENT_DESK_FILE,
    Toolset,
    Trace,
    bind,
    load_corpus,
    load_trace,
    parse_trace,
)
from residency._core._lifecycle import ToolState
from residency._errors import InvalidInput
from residency._tokens import count_tokens

from .conftest import CORPUS

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"dev corpus not found at {CORPUS}")

STRATEGY_KEYS = {
    "total_tokens",
    "per_turn_tokens",
    "ghost_calls_forwarded",
    "invalid_calls_forwarded",
    "refused_calls",
    "reexpansions",
    "failed_calls",
}
REPO = "/home/user/shop"


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[dict[str, Any]]]:
    return load_corpus(CORPUS)


def _minify() -> Any:
    from benchmarks.bench.session import _minify

    return _minify()


def _prune() -> Any:
    from benchmarks.bench.session import _seed003

    return _seed003()


def _call(tool: str, intent: list[str] | None = None, **arguments: Any) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments, **({"intent": intent} if intent else {})}


def _sized(call: dict[str, Any], tokens: int) -> dict[str, Any]:
    return {**call, "result_tokens": tokens}


def _tiny(**extra: Any) -> dict[str, Any]:
    """git_log is used in phase 'look' with a filter, then needed again in phase 'change'."""
    trace = {
        "name": "tiny",
        "servers": ["git", "incident-desk"],
        "budget": {"schema_tokens": 200, "argument_tokens": 2000},
        "phases": {"look": ["git_log", "git_status"], "change": ["git_add", "git_commit"]},
        "turns": [
            {
                "phase": "look",
                "say": "What changed lately?",
                "calls": [
                    _sized(_call("git_log", repo_path=REPO, max_count=5, start_timestamp="2 weeks ago"), 250)
                ],
            },
            {"calls": [_sized(_call("git_status", repo_path=REPO), 60)]},
            {"phase": "change", "calls": [_sized(_call("git_add", repo_path=REPO, files=["a.py"]), 20)]},
            {"calls": [_sized(_call("git_commit", repo_path=REPO, message="Fix a"), 35)]},
            {"calls": [_sized(_call("git_log", repo_path=REPO, max_count=20), 900)]},
        ],
    }
    trace.update(extra)
    return trace


def _bound(raw: dict[str, Any], corpus: dict[str, list[dict[str, Any]]]) -> tuple[Trace, Toolset]:
    trace = parse_trace(raw)
    return trace, bind(trace, corpus)


# -- the shipped traces ---------------------------------------------------------------------------


def _shipped() -> list[Path]:
    return sorted(TRACES.glob("*.json"))


def test_at_least_three_traces_of_thirty_turns_are_shipped() -> None:
    traces = [load_trace(p) for p in _shipped()]
    assert len(traces) >= 3
    assert all(len(t.turns) >= 30 for t in traces)


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.stem)
def test_every_shipped_call_is_valid_against_the_real_schema(
    path: Path, corpus: dict[str, list[dict[str, Any]]]
) -> None:
    trace = load_trace(path)
    toolset = bind(trace, corpus)
    current = dict(toolset.initial)
    for turn in trace.turns:
        for name in turn.upgrade:
            current[name] = toolset.upgraded[name]
        for call in turn.calls:
            jsonschema.validate(call.arguments, current[call.tool]["inputSchema"])
    # The tool names resolve to real corpus definitions (namespaced only where they collide).
    for name, definition in toolset.upgraded.items():
        server = toolset.server_of[name]
        original = next(t for t in corpus[server] if name in (t["name"], f"{server}.{t['name']}"))
        assert definition["inputSchema"] == original["inputSchema"]


def test_names_are_namespaced_only_where_they_collide(corpus: dict[str, list[dict[str, Any]]]) -> None:
    raw = _tiny(servers=["git", "sentry", "github-mcp-server"])
    _, toolset = _bound(raw, corpus)
    assert "sentry.search_issues" in toolset.initial
    assert "github-mcp-server.search_issues" in toolset.initial
    assert "search_issues" not in toolset.initial
    assert "git_log" in toolset.initial
    assert toolset.initial["sentry.search_issues"]["name"] == "sentry.search_issues"


def test_a_call_the_real_schema_rejects_is_refused_naming_the_turn_and_call(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    raw = _tiny()
    raw["turns"][3]["calls"][0]["arguments"] = {"repo_path": REPO}  # git_commit needs a message
    with pytest.raises(InvalidInput) as caught:
        _bound(raw, corpus)
    assert caught.value.where == "$.turns[3].calls[0].arguments"


def test_a_trace_naming_an_unknown_phase_is_refused() -> None:
    raw = _tiny()
    raw["turns"][1]["phase"] = "deploy"
    with pytest.raises(InvalidInput) as caught:
        parse_trace(raw)
    assert caught.value.where == "$.turns[1].phase"


# -- the simulated model --------------------------------------------------------------------------


def test_a_rebuilt_call_keeps_stale_values_and_drops_fields_it_cannot_know() -> None:
    prior = {"incident_id": "INC-3", "status": "open", "assignee_id": "u-42", "notify": True}
    wanted = {"incident_id": "INC-3", "severity": "SEV-1", "assignee": {"id": "u-42"}, "notify": True}
    assert rebuild_from_stale(prior, wanted) == {
        "incident_id": "INC-3",
        "status": "open",
        "assignee_id": "u-42",
        "notify": True,
    }
    assert rebuild_from_stale(prior, wanted, ["severity"])["severity"] == "SEV-1"


def test_the_model_sends_an_object_as_text_where_the_shown_schema_says_string() -> None:
    shown = {"type": "object", "properties": {"assignee": {"type": "string"}, "n": {"type": "integer"}}}
    assert conform({"assignee": {"id": "u-1"}, "n": 3}, shown) == {"assignee": '{"id":"u-1"}', "n": 3}


def test_without_tombstones_the_model_forwards_a_ghost_call_with_stale_arguments(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = Seed003Strategy(toolset, _prune(), trace.phases)
    tally = replay(trace, toolset, strategy)
    assert tally.ghost_calls_forwarded == 1
    assert tally.stale_calls_forwarded == 1
    tool, sent = strategy.transcript[-1]
    assert tool == "git_log"
    assert sent == {"repo_path": REPO, "max_count": 20, "start_timestamp": "2 weeks ago"}


def test_a_ghost_call_across_a_schema_migration_is_forwarded_invalid(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    desk = json.loads(INCIDENT_DESK_FILE.read_text())
    raw = {
        "name": "migration",
        "servers": ["incident-desk"],
        "budget": {"schema_tokens": 300, "argument_tokens": 2000},
        "phases": {"triage": ["update_incident"], "fix": ["get_service_health"]},
        "overrides": {"update_incident": desk["v1"]["update_incident"]},
        "turns": [
            {
                "phase": "triage",
                "calls": [_call("update_incident", incident_id="INC-3", assignee_id="u-42", notify=True)],
            },
            {
                "phase": "fix",
                "upgrade": ["update_incident"],
                "calls": [_call("get_service_health", service="db")],
            },
            {
                "calls": [
                    _call(
                        "update_incident",
                        ["severity"],
                        incident_id="INC-3",
                        severity="SEV-1",
                        assignee={"id": "u-42"},
                        notify=True,
                    )
                ]
            },
        ],
    }
    trace, toolset = _bound(raw, corpus)
    seed = replay(trace, toolset, Seed003Strategy(toolset, _prune(), trace.phases))
    assert (seed.ghost_calls_forwarded, seed.invalid_calls_forwarded, seed.failed_calls) == (1, 1, 1)
    for model in ("heeding", "careless"):
        residency = replay(trace, toolset, ResidencyStrategy(toolset, _minify(), trace), model=model)
        assert (
            residency.ghost_calls_forwarded,
            residency.invalid_calls_forwarded,
            residency.failed_calls,
        ) == (0, 0, 0)
        assert residency.reexpansions >= 1
    full = replay(trace, toolset, Strategy(toolset))
    assert (full.ghost_calls_forwarded, full.invalid_calls_forwarded, full.failed_calls) == (0, 0, 0)


@pytest.mark.parametrize("model", ["heeding", "careless"])
def test_residency_forwards_no_ghost_or_invalid_call_and_completes_every_call(
    model: Any, corpus: dict[str, list[dict[str, Any]]]
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = ResidencyStrategy(toolset, _minify(), trace)
    tally = replay(trace, toolset, strategy, model=model)
    assert tally.ghost_calls_forwarded == 0
    assert tally.invalid_calls_forwarded == 0
    assert tally.failed_calls == 0
    assert tally.completed_calls == tally.calls == 5
    # The tiny budget withholds git_log while its arguments are resident: a tombstone, then a
    # re-expansion (a careless model is refused first).
    assert tally.reexpansions >= 1
    if model == "careless":
        assert tally.refused_calls >= 1


def test_residency_counts_search_and_reexpansion_results_as_tokens(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    raw = _tiny()
    raw["turns"].append(
        {"evict_calls_before_turn": 10, "calls": [_call("git_show", repo_path=REPO, revision="HEAD")]}
    )
    trace, toolset = _bound(raw, corpus)
    strategy = ResidencyStrategy(toolset, _minify(), trace)
    tally = replay(trace, toolset, strategy)
    assert tally.searches >= 1
    assert tally.failed_calls == 0
    # The last turn's search result and re-expanded schema are part of that turn's tokens.
    assert tally.per_turn_result_tokens[-1] > 0
    assert tally.per_turn_tokens[-1] == strategy.turn_tokens() + tally.per_turn_result_tokens[-1]


def test_a_strategy_without_search_fails_a_call_it_cannot_see(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    raw = _tiny()
    raw["turns"].append({"calls": [_call("git_show", repo_path=REPO, revision="HEAD")]})
    trace, toolset = _bound(raw, corpus)
    tally = replay(
        trace, toolset, make_strategy("seed-003", toolset, trace, minify=_minify(), prune=_prune())
    )
    assert tally.failed_calls == 1
    assert tally.completed_calls == tally.calls - 1


# -- report, JSON and CLI -------------------------------------------------------------------------


def test_run_trace_reports_every_strategy_with_the_required_figures(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    result = run_trace(trace, toolset, sweep=(200, 4000))
    assert tuple(result["strategies"]) == STRATEGIES
    assert set(STRATEGIES) == {
        "all-full",
        "seed-003",
        "minify",
        "defer",
        "residency",
        "residency-greedy",
        "residency-adapter",
        "residency-reference",
    }
    for figures in result["strategies"].values():
        assert set(figures) >= STRATEGY_KEYS
        assert len(figures["per_turn_tokens"]) == len(trace.turns)
        assert figures["total_tokens"] == sum(figures["per_turn_tokens"])
    assert result["tokenizer"]
    assert result["planning"]["planning_cost_ratio"] > 0
    assert [s["schema_tokens"] for s in result["budget_sweep"]] == [200, 4000]
    assert all("cost_vs_all_full" in s and "list_changes" in s for s in result["budget_sweep"])


def test_run_trace_reports_the_bill_per_result_regime_with_a_verdict_per_target(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    result = run_trace(trace, toolset, profile="anthropic-1h", result_scales=(1.0, 4.0))
    assert result["cost"]["profile"] == "anthropic-1h"
    assert set(result["cost"]["regimes"]) == {"x1", "x4"}
    for reg in result["cost"]["regimes"].values():
        bills = reg["strategies"]
        assert set(bills) == set(result["strategies"])
        assert all(set(b["effective_cost"]) == set(PROFILES) for b in bills.values())
        assert bills["all-full"]["cost_vs_all_full"] == dict.fromkeys(PROFILES, 1.0)
        for b in bills.values():
            assert b["raw_input_tokens"] >= b["peak_context_tokens"] > 0
            assert b["effective_cost"]["none"] == b["raw_input_tokens"]
            assert len(b["per_turn_cost"]) == len(trace.turns)
        assert bills["defer"]["list_changes"] == 0
    x1, x4 = (result["cost"]["regimes"][k]["strategies"]["all-full"] for k in ("x1", "x4"))
    assert x4["raw_input_tokens"] > x1["raw_input_tokens"]
    assert result["phases_entered"] == 2
    for targets in result["targets"].values():
        assert set(targets) >= {
            "cost_vs_all_full",
            "list_changes",
            "ghost_invalid_failed",
            "raw_tool_token_cut",
            "adapter_cost_vs_defer",
            "reference_cost_vs_defer",
            "reference_list_changes",
            "reference_ghost_invalid_failed",
        }
        assert targets["ghost_invalid_failed"]["target"] == "0, heeding and careless"
        assert targets["list_changes"]["target"] == "<= 5"
        assert all(isinstance(t["ok"], bool) for k, t in targets.items() if k != "openai_cost_vs_all_full")
        assert targets["openai_cost_vs_all_full"]["ok"] is None


def test_results_enter_the_transcript_at_the_result_scale(corpus: dict[str, list[dict[str, Any]]]) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    last = {}
    for scale in (1.0, 4.0):
        strategy = Strategy(toolset)
        replay(trace, toolset, strategy, result_scale=scale)
        last[scale] = strategy.prompt.requests[-1]
    sized = sum(c.result_tokens or 0 for t in trace.turns for c in t.calls)
    assert sized == 250 + 60 + 20 + 35 + 900
    # The last request holds every result (no compaction in this trace), four times larger.
    assert last[4.0].total_tokens - last[1.0].total_tokens == 3 * sized


def test_every_call_makes_a_request_and_every_turn_closes_with_one(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = Strategy(toolset)
    replay(trace, toolset, strategy)
    assert len(strategy.prompt.requests) == trace.calls + len(trace.turns)
    # all-full never changes its list: every request after the first reads the last prompt.
    first, *rest = strategy.prompt.requests
    assert first.cached_tokens == 0
    assert all(r.cached_tokens > 0 and not r.list_changed for r in rest)


def test_seed003_changes_its_list_when_the_phase_changes(corpus: dict[str, list[dict[str, Any]]]) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = Seed003Strategy(toolset, _prune(), trace.phases)
    replay(trace, toolset, strategy)
    changed = [r for r in strategy.prompt.requests if r.list_changed]
    assert len(changed) == 1
    assert changed[0].turn == 2 and changed[0].cached_tokens == 0


def test_defer_keeps_one_tool_list_and_loads_schemas_through_search(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(pinned=["git_status"]), corpus)
    strategy = DeferStrategy(toolset, trace)
    tally = replay(trace, toolset, strategy)
    assert set(strategy.shown(None)) == {"git_status", "search_tools"}
    assert not any(r.list_changed for r in strategy.prompt.requests)
    assert tally.failed_calls == tally.ghost_calls_forwarded == tally.invalid_calls_forwarded == 0
    # git_log, git_add and git_commit came through searches; the pinned git_status did not.
    assert {"git_log", "git_add", "git_commit"} <= set(strategy._loaded)
    assert "git_status" not in strategy._loaded and tally.searches >= 2
    assert tally.per_turn_result_tokens[0] > 0 and tally.per_turn_result_tokens[1] == 0
    # A search costs one more request, whose result (the schemas) is then read from the cache.
    assert len(strategy.prompt.requests) == trace.calls + len(trace.turns) + tally.searches


def test_residency_applies_the_planners_argument_evictions_to_its_transcript(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    raw = _tiny(budget={"schema_tokens": 2000, "argument_tokens": 30})
    trace, toolset = _bound(raw, corpus)
    strategy = ResidencyStrategy(toolset, _minify(), trace)
    tally = replay(trace, toolset, strategy)
    assert tally.argument_evictions >= 1
    held = [str(ref) for ref, _, _ in strategy.prompt.calls()]
    assert held == [c.id for c in strategy.session.resident_calls()]
    assert len(held) < tally.completed_calls


def test_every_shipped_call_has_a_result_size() -> None:
    for path in _shipped():
        trace = load_trace(path)
        assert trace.unsized_calls == 0, path.name
        assert all((c.result_tokens or 0) > 0 for t in trace.turns for c in t.calls), path.name


def test_a_result_given_as_text_is_counted_and_a_bad_size_is_refused() -> None:
    raw = _tiny()
    raw["turns"][1]["calls"][0] = {**_call("git_status", repo_path=REPO), "result": "On branch main"}
    trace = parse_trace(raw)
    assert trace.turns[1].calls[0].result_tokens == count_tokens("On branch main") > 0
    raw["turns"][1]["calls"][0]["result_tokens"] = 3
    with pytest.raises(InvalidInput) as caught:
        parse_trace(raw)
    assert caught.value.where == "$.turns[1].calls[0]"
    raw["turns"][1]["calls"][0] = _sized(_call("git_status", repo_path=REPO), -1)
    with pytest.raises(InvalidInput) as caught:
        parse_trace(raw)
    assert caught.value.where == "$.turns[1].calls[0].result_tokens"


@pytest.mark.slow
def test_the_cli_writes_json_a_plot_and_the_readme_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_file = tmp_path / "tiny.json"
    trace_file.write_text(json.dumps(_tiny()))
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    code = run_main(
        [
            "session",
            "--corpus",
            str(CORPUS),
            "--trace",
            str(trace_file),
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert code in (0, 1)  # 1: a target missed on a trace this small; the figures are still written
    printed = capsys.readouterr().out
    assert "residency" in printed and "all-full" in printed
    [report] = json.loads(out.read_text())
    data = report["data"]
    assert data["tokenizer"]
    assert set(data["traces"]["tiny"]["strategies"]["residency"]) >= STRATEGY_KEYS
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--readme-table", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| tiny | residency |" in table and "| tiny | seed-003 |" in table
    assert "| tiny | x1 | defer |" in table and "| tiny | x4 | residency |" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"# Results\n{GENERATED_START} ... -->\nold table\n{GENERATED_END}\nkept\n")
    assert main(["--readme-table", str(out), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text and table in text and text.endswith(f"{GENERATED_END}\nkept\n")


def test_the_cli_refuses_a_bad_trace_with_exit_code_2(tmp_path: Path) -> None:
    raw = copy.deepcopy(_tiny())
    raw["turns"][0]["calls"][0]["tool"] = "git_teleport"
    trace_file = tmp_path / "bad.json"
    trace_file.write_text(json.dumps(raw))
    with pytest.raises(SystemExit) as caught:
        run_main(["session", "--corpus", str(CORPUS), "--trace", str(trace_file)])
    assert caught.value.code == 2


def test_readme_table_refuses_json_that_is_not_a_session_result() -> None:
    with pytest.raises(InvalidInput):
        readme_table([{"name": "lifecycle", "data": {}}])


def test_the_cli_checks_the_cost_targets_on_the_profile_given_at_the_scales_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_file = tmp_path / "tiny.json"
    trace_file.write_text(json.dumps(_tiny()))
    out = tmp_path / "out.json"
    args = ["session", "--corpus", str(CORPUS), "--trace", str(trace_file), "--quiet"]
    code = run_main([*args, "--profile", "openai", "--result-scale", "2,0.5", "--json", str(out)])
    assert code in (0, 1)
    [report] = json.loads(out.read_text())
    tiny = report["data"]["traces"]["tiny"]
    assert tiny["cost"]["profile"] == "openai"
    assert set(tiny["cost"]["regimes"]) == {"x2", "x0.5"}
    names = [f["name"] for f in report["figures"]]
    assert "tiny x2: residency cost / all-full, openai" in names
    assert "tiny x0.5: residency tool-list changes" in names
    assert set(report["data"]["profiles"]) == set(PROFILES)
    capsys.readouterr()
    for bad in (["--result-scale", "0"], ["--result-scale", "x"], ["--profile", "gemini"]):
        with pytest.raises(SystemExit) as caught:
            run_main([*args, *bad])
        assert caught.value.code == 2


# -- the stable planner, the greedy one and the adapter path -------------------------------------


def test_stable_residency_keeps_its_meta_tools_constant_and_sends_tombstones_in_the_transcript(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    notices: list[int] = []

    class Counting(ResidencyStrategy):
        def _notice(self, lines: Iterable[str]) -> None:
            lines = list(lines)
            notices.append(len(lines))
            super()._notice(lines)

    strategy = Counting(toolset, _minify(), trace)
    tally = replay(trace, toolset, strategy)
    assert max(tally.tombstones_per_turn) >= 1  # the tiny budget tombstones git_log
    assert sum(notices) >= 1
    # The list changes only when the planner adds or cuts: never for a tombstone line alone.
    changes = [r.turn for r in strategy.prompt.requests if r.list_changed]
    assert len(changes) <= trace.phases_entered + 3


def test_greedy_residency_lists_the_tombstones_in_reexpand_tools_description(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = GreedyStrategy(toolset, _minify(), trace)
    assert strategy._budget.planner == "greedy" and strategy._budget.idle_turns == 8
    described: list[str] = []
    original = strategy._meta_tools

    def meta(plan: Any) -> Any:
        definitions = original(plan)
        described.extend(d["description"] for d in definitions if d["name"] == "reexpand_tools")
        return definitions

    strategy._meta_tools = meta  # type: ignore[method-assign]
    replay(trace, toolset, strategy)
    assert any("git_log: " in d for d in described) and len(set(described)) > 1


def test_on_a_shipped_trace_stable_residency_changes_its_list_far_less_than_greedy(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace = load_trace(TRACES / "coding.json")
    toolset = bind(trace, corpus)
    changes = {}
    for name in ("residency", "residency-greedy", "residency-adapter"):
        strategy = make_strategy(name, toolset, trace, minify=_minify(), prune=_prune())
        tally = replay(trace, toolset, strategy)
        assert (tally.ghost_calls_forwarded, tally.invalid_calls_forwarded) == (0, 0), name
        changes[name] = sum(r.list_changed for r in strategy.prompt.requests)
    assert changes["residency"] <= trace.phases_entered + 3 < changes["residency-greedy"]
    assert changes["residency-adapter"] == 0


@pytest.mark.parametrize("model", ["heeding", "careless"])
def test_the_adapter_path_keeps_one_block_and_withholds_a_tool_whose_schema_left_the_transcript(
    model: Any, corpus: dict[str, list[dict[str, Any]]]
) -> None:
    raw = _tiny()
    # The host compacts the transcript past git_log's loaded definition, keeping its call.
    raw["turns"][4]["evict_calls_before_turn"] = 0
    raw["turns"].insert(4, {"calls": [_sized(_call("git_status", repo_path=REPO), 60)]})
    raw["turns"][4]["evict_calls_before_turn"] = 0
    trace, toolset = _bound(raw, corpus)
    strategy = AdapterStrategy(toolset, _minify(), trace)
    # Nothing is loaded at first: every deferred tool is withheld in the session.
    assert strategy.session.tools(ToolState.RESIDENT) == []
    tally = replay(trace, toolset, strategy, model=model)
    assert not any(r.list_changed for r in strategy.prompt.requests)
    assert (tally.ghost_calls_forwarded, tally.invalid_calls_forwarded, tally.failed_calls) == (0, 0, 0)
    assert tally.searches >= 1
    # The block holds the search and re-expand tools only (nothing is pinned).
    assert strategy.turn_tokens() == strategy._meta_tokens > 0


def test_the_adapter_path_prunes_a_tool_when_its_last_reference_is_compacted_away(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = AdapterStrategy(toolset, _minify(), trace)
    replay(trace, toolset, strategy)
    assert strategy.session.state("git_log") is ToolState.RESIDENT
    assert strategy.visible("git_log") is not None
    # Compact the oldest items until every search result that loaded git_log has left (how many
    # searches return it depends on the ranker: BM25 alone, or fused with the model); its last
    # call stays.
    loads = [handle for handle, _ in strategy._loaded["git_log"]]
    assert loads
    while any(strategy.prompt.holds(handle) for handle in loads):
        assert strategy.visible("git_log") is not None
        strategy.evict_oldest(1)
    assert strategy.visible("git_log") is None
    assert strategy.session.state("git_log") is ToolState.TOMBSTONED
    assert any(line.startswith("git_log:") for line in strategy._pending)  # for the next notice


# -- delivery by reference ------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["heeding", "careless"])
def test_by_reference_the_list_never_changes_and_every_unlisted_call_goes_through_call_tool(
    model: Any, corpus: dict[str, list[dict[str, Any]]]
) -> None:
    trace, toolset = _bound(_tiny(pinned=["git_status"]), corpus)
    strategy = ReferenceStrategy(toolset, _minify(), trace)
    tally = replay(trace, toolset, strategy, model=model)
    assert not any(r.list_changed for r in strategy.prompt.requests)
    assert (tally.ghost_calls_forwarded, tally.invalid_calls_forwarded, tally.failed_calls) == (0, 0, 0)
    assert tally.completed_calls == tally.calls == 5
    # The block: the pinned tool and the meta-tools with call_tool, nothing the model searched.
    assert set(strategy._shown) == {"git_status"}
    assert strategy.turn_tokens() > strategy._meta_tokens > 0
    # One search brings a schema (no re-expansion needed); the journal says how calls came.
    assert tally.searches >= 1 and tally.reexpansions == 0
    vias = {c.tool: c.via for c in strategy.session.resident_calls()}
    assert vias["git_status"] == "" and vias["git_log"] == vias["git_commit"] == "call_tool"


def test_by_reference_a_dropped_result_withholds_its_tool_and_the_model_gets_it_back(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    raw = _tiny()
    # Before git_log is needed again, the host compacts every exchange but the last call.
    raw["turns"][4]["evict_calls_before_turn"] = 3
    trace, toolset = _bound(raw, corpus)
    strategy = ReferenceStrategy(toolset, _minify(), trace)
    replay(trace, toolset, strategy, model="careless")
    # git_log's first call and the search result that delivered it (r1) left the transcript:
    # the host reported it dropped. With no schema and no earlier arguments in view, the
    # model searched again, and a new delivery brought git_log back.
    assert strategy.tally.failed_calls == strategy.tally.ghost_calls_forwarded == 0
    assert "git_log" in strategy.session.delivery("r1").tools
    live = {d.id for d in strategy.session.deliveries()}
    assert "r1" not in live and live == set(strategy._delivered)
    assert strategy.session.state("git_log") is ToolState.RESIDENT
    assert strategy.session.carried("git_log")
    assert any("git_log" in strategy.session.delivery(d).tools for d in live)


def test_by_reference_a_tombstoned_tool_is_refused_through_call_tool_until_re_expanded(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    trace, toolset = _bound(_tiny(), corpus)
    strategy = ReferenceStrategy(toolset, _minify(), trace)
    replay(trace, toolset, strategy)
    # The host drops every delivery; git_log's arguments are still in view: tombstoned.
    strategy.session.drop_deliveries(*strategy._delivered)
    strategy._plan(None)
    assert strategy.session.state("git_log") is ToolState.TOMBSTONED
    assert strategy.visible("git_log") is None
    assert not strategy.submit("git_log", {"repo_path": REPO, "max_count": 3})
    assert strategy.tally.refused_calls == 1
    schema = strategy.reexpand("git_log")
    assert schema is not None and "repo_path" in schema["properties"]
    assert strategy.submit("git_log", {"repo_path": REPO, "max_count": 3})


def test_on_every_shipped_trace_delivery_by_reference_keeps_one_list_and_makes_no_bad_call(
    corpus: dict[str, list[dict[str, Any]]],
) -> None:
    for path in _shipped():
        trace = load_trace(path)
        toolset = bind(trace, corpus)
        for model in ("heeding", "careless"):
            strategy = make_strategy("residency-reference", toolset, trace, minify=_minify(), prune=_prune())
            tally = replay(trace, toolset, strategy, model=model)
            bad = (tally.ghost_calls_forwarded, tally.invalid_calls_forwarded, tally.failed_calls)
            assert bad == (0, 0, 0), (path.stem, model)
            pinned_upgrades = sum(n in trace.pinned for t in trace.turns for n in t.upgrade)
            assert sum(r.list_changed for r in strategy.prompt.requests) <= 1 + pinned_upgrades
