"""Aggregation: unique names kept, collisions namespaced the same way whatever the order, and no
upstream's name given a place in another server's namespace."""

from __future__ import annotations

import json
from random import Random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from residency import ConfigError, ToolState
from residency._gateway import IncidentDesk
from residency._gateway._aggregate import (
    MAX_PREFIX,
    build_catalog,
    check_server_names,
    gateway_names,
    name_owner,
    server_prefix,
    valid_tool_name,
)
from residency._gateway._meta_tools import META_TOOLS
from residency._gateway._search import search
from tests.gateway.conftest import agent, reason, running, text


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}}


def test_unique_names_are_kept_and_collisions_get_the_server_prefix() -> None:
    catalog = build_catalog(
        {
            "github": [_tool("create_issue"), _tool("search_tools")],
            "gitlab": [_tool("create_issue"), _tool("merge")],
        },
        reserved=META_TOOLS,
    )
    assert catalog.names() == [
        "github__create_issue",
        "github__search_tools",
        "gitlab__create_issue",
        "merge",
    ]
    entry = catalog.get("gitlab__create_issue")
    assert entry is not None and (entry.server, entry.upstream_name) == ("gitlab", "create_issue")
    assert entry.definition["name"] == "gitlab__create_issue"


def test_a_server_that_offers_a_name_in_its_own_namespace_keeps_it_and_its_collision_gets_a_suffix() -> None:
    catalog = build_catalog({"a": [_tool("x")], "b": [_tool("x"), _tool("b__x")]})
    assert sorted(catalog.names()) == ["a__x", "b__x", "b__x__2"]
    kept, suffixed = catalog.get("b__x"), catalog.get("b__x__2")
    assert kept is not None and (kept.server, kept.upstream_name, kept.renamed) == ("b", "b__x", "")
    assert suffixed is not None and (suffixed.server, suffixed.upstream_name) == ("b", "x")


def test_a_name_in_another_servers_namespace_moves_into_the_offering_servers_own() -> None:
    catalog = build_catalog({"a": [_tool("x"), _tool("b__x")], "b": [_tool("x")]})
    assert sorted(catalog.names()) == ["a__b__x", "a__x", "b__x"]
    real, moved = catalog.get("b__x"), catalog.get("a__b__x")
    assert real is not None and (real.server, real.upstream_name) == ("b", "x")
    assert moved is not None and (moved.server, moved.upstream_name) == ("a", "b__x")
    assert "namespace of server 'b'" in moved.renamed
    assert [e.name for e in catalog.renamed()] == ["a__b__x"]


def test_server_names_are_reduced_to_safe_characters() -> None:
    names = gateway_names([("my server.v2", "t"), ("other", "t")])
    assert names[("my server.v2", "t")] == "my_server_v2__t"


@given(st.permutations([("s1", "a"), ("s2", "a"), ("s1", "b"), ("s3", "search_tools"), ("s2", "s1__a")]))
def test_naming_does_not_depend_on_the_order_upstreams_answer_in(pairs: list[tuple[str, str]]) -> None:
    reference = gateway_names(sorted(pairs), META_TOOLS)
    assert gateway_names(pairs, META_TOOLS) == reference
    assert len(set(reference.values())) == len(pairs)


# -- names no upstream can forge -----------------------------------------------------------------

SERVERS = ("good", "evil", "my server.v2", "x-1", "Mixed.Case", "日本")
"""Configured servers whose prefixes differ (``server_prefix``)."""
PREFIXES = [server_prefix(s) for s in SERVERS]
NAME_PARTS = st.one_of(
    st.text(alphabet="abAB_.-", min_size=1, max_size=6),
    st.sampled_from([*PREFIXES, "GOOD", "residency", "search_tools", "", "_", "__"]),
    st.text(alphabet="a_\n\x1b\u202e\u200b\ufeff é", min_size=1, max_size=4),
    st.just("y" * 200),
)
TOOL_NAMES = st.lists(NAME_PARTS, min_size=1, max_size=4).map("__".join)


@st.composite
def offers(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Tools offered by some of ``SERVERS`` (the others are configured but down)."""
    up = draw(st.lists(st.sampled_from(SERVERS), min_size=1, max_size=4, unique=True))
    return draw(st.lists(st.tuples(st.sampled_from(up), TOOL_NAMES), max_size=12, unique=True))


@given(offers(), st.randoms(use_true_random=False))
def test_no_upstream_name_lands_in_another_servers_namespace_and_naming_is_order_free(
    pairs: list[tuple[str, str]], rng: Random
) -> None:
    names = gateway_names(pairs, META_TOOLS, SERVERS)
    assert len(set(names.values())) == len(pairs)
    for (server, _), name in names.items():
        assert valid_tool_name(name), name
        assert name not in META_TOOLS
        assert name_owner(name, SERVERS) in (None, server)  # never another's, never the gateway's
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    assert gateway_names(shuffled, META_TOOLS, SERVERS) == names


@given(offers(), st.lists(TOOL_NAMES, max_size=6))
def test_names_offered_in_a_servers_namespace_change_none_of_its_own(
    pairs: list[tuple[str, str]], forged: list[str]
) -> None:
    own = [p for p in pairs if p[0] != "evil"]
    attack = [("evil", f"good__{t}") for t in dict.fromkeys(forged)]
    before = gateway_names(own, META_TOOLS, SERVERS)
    after = gateway_names([*own, *attack], META_TOOLS, SERVERS)
    assert {p: after[p] for p in own} == before
    assert all(name_owner(after[p], SERVERS) in (None, "evil") for p in attack)


def test_the_real_servers_tool_keeps_its_name_whichever_server_answered_first() -> None:
    hostile = [("evil", "echo"), ("evil", "good__echo")]
    for pairs in ([("good", "echo"), *hostile], [*hostile, ("good", "echo")]):
        names = gateway_names(pairs, META_TOOLS)
        assert names[("good", "echo")] == "good__echo"
        assert names[("evil", "good__echo")] == "evil__good__echo"
    # good configured but down: its namespace is still its own.
    alone = gateway_names(hostile, META_TOOLS, servers=("good", "evil"))
    assert alone == {("evil", "echo"): "echo", ("evil", "good__echo"): "evil__good__echo"}


def test_the_gateways_namespace_is_kept_from_upstreams_unless_a_server_is_named_so() -> None:
    assert gateway_names([("evil", "residency__x")]) == {("evil", "residency__x"): "evil__residency__x"}
    chained = gateway_names([("evil", "residency__x"), ("residency", "x")])
    assert chained[("evil", "residency__x")] == "evil__residency__x"
    assert name_owner("residency__x", ["good"]) == "residency__"
    assert name_owner("residency__x", ["residency"]) == "residency"


def test_an_invalid_upstream_name_is_mapped_to_a_valid_unique_one_that_remembers_its_own() -> None:
    offered = ["get item", "get/item", "a\nb", "\u202e", "zero\u200bwidth", "x" * 10_240, "é"]
    catalog = build_catalog({"up": [_tool(n) for n in offered]})
    assert len(catalog) == len(offered)
    assert all(valid_tool_name(name) for name in catalog.names())
    assert {e.upstream_name for e in catalog.entries()} == set(offered)
    assert all(e.renamed for e in catalog.entries())
    backwards = build_catalog({"up": [_tool(n) for n in reversed(offered)]})
    assert sorted(backwards.names()) == sorted(catalog.names())


def test_a_namespaced_name_stays_within_128_characters() -> None:
    long = "t" * 128
    pairs = [("a" * 60, long), ("b", long), ("b", f"b__{long[:125]}")]
    names = gateway_names(pairs)
    assert all(valid_tool_name(n) for n in names.values())
    assert len(set(names.values())) == 3
    assert all(names[p].startswith(f"{server_prefix(p[0])}__") for p in pairs)


@pytest.mark.parametrize(
    ("one", "other"), [("a.b", "a_b"), ("a b", "a__b"), ("GitHub", "github"), ("_x_", "x")]
)
def test_two_servers_with_one_prefix_are_a_config_error_naming_both(one: str, other: str) -> None:
    with pytest.raises(ConfigError) as raised:
        check_server_names([one, other])
    assert repr(one) in str(raised.value) and repr(other) in str(raised.value)
    with pytest.raises(ConfigError):
        gateway_names([(one, "t"), (other, "t")])


def test_a_prefix_never_holds_a_double_underscore_and_is_never_empty() -> None:
    for server in ("a__b", "__a__", "...", "日本", "s" * 100, "my server.v2"):
        prefix = server_prefix(server)
        assert prefix and "__" not in prefix and not prefix.startswith("_") and not prefix.endswith("_")
        assert len(prefix) <= MAX_PREFIX


def test_search_ranks_by_name_arguments_and_description() -> None:
    tools = [
        {
            "name": "get_runbook",
            "description": "Read steps.",
            "inputSchema": {"properties": {"runbook_id": {}}},
        },
        {"name": "listDeploys", "description": "Recent deploys of a service.", "inputSchema": {}},
        {"name": "noise", "description": "Nothing relevant.", "inputSchema": {}},
    ]
    assert [h.name for h in search("list deploys", tools)] == ["listDeploys"]
    assert [h.name for h in search("runbook", tools)] == ["get_runbook"]
    assert search("zebra", tools) == []


@pytest.mark.anyio
async def test_two_desks_behind_one_gateway_are_namespaced_and_stay_so_after_a_reload(era: str) -> None:
    first, second = IncidentDesk(), IncidentDesk()
    async with running(upstreams={"east": first.server, "west": second.server}) as gw, agent(gw, era) as a:
        names = list(gw.catalog.names())
        assert "east__get_incident" in names and "west__get_incident" in names and "get_incident" not in names
        result = await a.use("west__get_incident", {"incident_id": "INC-2"})
        assert json.loads(text(result))["incident_id"] == "INC-2"
        assert second.calls == [("get_incident", {"incident_id": "INC-2"})] and first.calls == []
        await gw.reload()
        assert gw.catalog.names() == names
        assert gw.session(a.key).state("west__get_incident") is ToolState.RESIDENT


@pytest.mark.anyio
async def test_an_unchanged_reload_tombstones_nothing_and_a_changed_definition_is_pinned_anew(
    era: str,
) -> None:
    desk = IncidentDesk(schema="v1")
    async with running(desk=desk) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        await a.use("get_incident", {"incident_id": "INC-1"})
        await gw.reload()
        assert session.tombstones() == []
        old_hash = session.tool("update_incident").hash
        await desk.migrate()
        await gw.reload("desk")
        assert session.tool("update_incident").hash != old_hash
        # No arguments of it were visible: the new definition simply replaces the old one.
        assert session.state("update_incident") in (ToolState.RESIDENT, ToolState.EVICTED)
        assert reason(await a.call("get_incident", {"incident_id": "INC-1"})) is None
