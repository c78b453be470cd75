"""Per-identity tool access: a tool the policy denies a caller is absent from every path.

The gateway is real and served over HTTP in this process behind its OAuth front; the tokens
are real RS256 JWTs of a made-up issuer whose key set is served on loopback
(``benchmarks/policy_world.py``), so each request's principal reaches the gateway exactly as
it does in production. What each user may not see is written out by hand there (``DENIED``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from benchmarks.policy_world import DENIED, EVERY_TOOL, USERS, client, serve, settings
from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk, load_config, parse_config
from residency._gateway._oauth import groups_of
from residency._gateway._policy import ANYONE, Caller, Policy
from residency._gateway._policy_config import PolicySettings
from tests._timing import STEP
from tests.gateway.conftest import served_over_http

pytestmark = pytest.mark.anyio

RESOURCES = (
    "residency://tools",
    "residency://tombstones",
    "residency://events",
    "residency://chains",
    "residency://spans",
    "residency://upstreams",
)


def policy(*rules: Mapping[str, Any]) -> Policy:
    return Policy(PolicySettings.model_validate({"rules": list(rules)}))


def allowed(p: Policy, caller: Caller, *tools: tuple[str, str]) -> list[bool]:
    access = p.access(caller)
    return [access.allows(server, tool) for server, tool in tools]


# -- the rule order ------------------------------------------------------------------------------


def test_without_a_policy_everyone_sees_everything_and_keys_do_not_change() -> None:
    access = Policy(None).access(ANYONE)
    assert access.everything and access.fingerprint == ""
    assert access.allows("github", "delete_repo")


def test_deny_wins_over_every_allow_of_every_rule_that_applies() -> None:
    p = policy({"allow": ["*"]}, {"groups": ["ops"], "allow": ["github/delete_repo"], "deny": ["*/delete_*"]})
    ops = Caller("alice", frozenset({"ops"}))
    assert allowed(p, ops, ("github", "delete_repo"), ("github", "create_repo")) == [False, True]
    # The deny rule is for ops only: another caller keeps the default rule's allow.
    assert allowed(p, Caller("bob"), ("github", "delete_repo")) == [True]


def test_a_rule_naming_no_one_applies_to_callers_without_an_identity_and_nothing_else_does() -> None:
    p = policy({"allow": ["desk/*"]}, {"subjects": ["alice"], "allow": ["vault/*"]})
    assert allowed(p, ANYONE, ("desk", "get_incident"), ("vault", "read_secret")) == [True, False]
    assert allowed(p, Caller("alice"), ("vault", "read_secret")) == [True]


def test_a_caller_no_rule_allows_a_tool_to_sees_none() -> None:
    p = policy({"groups": ["ops"], "allow": ["*"]})
    access = p.access(Caller("mallory", frozenset({"guests"})))
    assert not access.everything and access.fingerprint.startswith("#")
    assert allowed(p, Caller("mallory"), ("desk", "get_incident")) == [False]


def test_the_lists_of_a_rule_must_all_hold_one_of_the_callers() -> None:
    p = policy({"groups": ["ops"], "scopes": ["tools:write"], "allow": ["*/write_*"]})
    both = Caller("a", frozenset({"ops"}), frozenset({"tools:write"}))
    group_only = Caller("b", frozenset({"ops"}), frozenset({"tools:read"}))
    assert allowed(p, both, ("db", "write_row")) == [True]
    assert allowed(p, group_only, ("db", "write_row")) == [False]


def test_patterns_glob_server_and_tool_apart_and_case_sensitively() -> None:
    p = policy({"allow": ["git*/get_?", "*/list_*"]})
    cases = [("github", "get_a"), ("gitlab", "get_ab"), ("desk", "list_x"), ("GitHub", "get_a")]
    assert allowed(p, ANYONE, *cases) == [True, False, True, False]


def test_same_patterns_share_one_access_and_fingerprint() -> None:
    p = policy({"groups": ["a"], "allow": ["x/*"]}, {"groups": ["b"], "allow": ["x/*"]})
    first = p.access(Caller("u", frozenset({"a"})))
    assert first is p.access(Caller("v", frozenset({"b"})))


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"allow": ["github"]}, "server/tool"),
        ({"allow": ["/x"]}, "server/tool"),
        ({"deny": ["a/ b"]}, "space"),
        ({"groups": [""], "allow": ["*"]}, "1 to"),
        ({"allow": ["*"], "who": ["x"]}, "who"),
    ],
)
def test_a_bad_rule_is_a_config_error_naming_it(rule: dict[str, Any], problem: str) -> None:
    text = json.dumps({"mcpServers": {}, "residency": {"policy": {"rules": [rule]}}})
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert problem in str(caught.value)
    assert "policy" in str(caught.value)


def test_groups_are_read_from_the_configured_claim_nested_or_not() -> None:
    claims = {"groups": ["a", 3, ""], "realm_access": {"roles": ["ops"]}, "roles": "x y"}
    assert groups_of(claims, "groups") == {"a"}
    assert groups_of(claims, "realm_access.roles") == {"ops"}
    assert groups_of(claims, "roles") == {"x", "y"}
    assert groups_of(claims, "missing") == frozenset()


# -- every path, over HTTP with real tokens ---------------------------------------------------------


async def outcome(c: Client, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a ``tools/call`` gets, as data: a result, or a JSON-RPC error's code and message."""
    try:
        result = await c.call_tool(name, arguments or {})
    except MCPError as exc:
        return {"error": type(exc).__name__, "code": exc.error.code, "message": exc.error.message}
    data: dict[str, Any] = json.loads(result.model_dump_json(by_alias=True, exclude_none=True))
    return data


def same_shape(a: Mapping[str, Any], b: Mapping[str, Any], a_name: str, b_name: str) -> bool:
    return json.dumps(a).replace(a_name, "<tool>") == json.dumps(b).replace(b_name, "<tool>")


def leaked(body: str, user: str) -> set[str]:
    return {name for name in DENIED[user] if name in body}


async def listed(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_user_lists_exactly_the_tools_the_policy_gives_them(mode: str) -> None:
    async with serve() as world:
        for user in USERS:
            async with client(world.urls[0], world.issuer.token(user), mode=mode) as c:
                names = await listed(c)
                assert names & EVERY_TOOL == EVERY_TOOL - DENIED[user], user


async def test_a_denied_tool_called_directly_or_through_call_tool_is_an_unknown_tool() -> None:
    async with (
        serve(residency=settings(delivery="reference")) as world,
        client(world.urls[0], world.issuer.token("bob")) as c,
    ):
        for denied in ("delete_secret", "page_oncall"):
            direct, unknown = await outcome(c, denied), await outcome(c, "no_such_tool")
            assert same_shape(direct, unknown, denied, "no_such_tool"), (direct, unknown)
            via = await outcome(c, "call_tool", {"name": denied, "arguments": {}})
            via_unknown = await outcome(c, "call_tool", {"name": "no_such_tool", "arguments": {}})
            assert same_shape(via, via_unknown, denied, "no_such_tool"), (via, via_unknown)
        assert world.vault_calls == []
    # And an allowed one is forwarded: the refusal above is the policy's, not a broken path.
    async with serve() as world, client(world.urls[0], world.issuer.token("alice")) as c:
        result = await c.call_tool("rotate_key", {"path": "a"})
        assert not result.is_error and world.vault_calls == ["rotate_key"]


async def test_reexpand_tools_of_a_denied_tool_reads_as_of_an_unknown_one() -> None:
    async with serve() as world, client(world.urls[0], world.issuer.token("bob")) as c:
        denied = await outcome(c, "reexpand_tools", {"names": ["read_secret"]})
        unknown = await outcome(c, "reexpand_tools", {"names": ["no_such_tool"]})
        assert same_shape(denied, unknown, "read_secret", "no_such_tool")


async def test_search_never_finds_a_denied_tool_but_finds_an_allowed_one() -> None:
    # A small budget: most tools are withheld, so search has something to find.
    small = settings(budget={"schema_tokens": 300})
    async with serve(residency=small) as world:
        async with client(world.urls[0], world.issuer.token("bob")) as c:
            for query in (
                "delete a secret from the vault",
                "rotate the key",
                "page the on-call",
                "close incident",
            ):
                body = json.dumps(await outcome(c, "search_tools", {"query": query, "limit": 50}))
                assert not leaked(body, "bob"), (query, body)
        async with client(world.urls[0], world.issuer.token("alice")) as c:
            body = json.dumps(
                await outcome(c, "search_tools", {"query": "rotate the vault key", "limit": 50})
            )
            assert "rotate_key" in body and "delete_secret" not in body


async def test_no_resource_names_a_denied_tool_and_upstreams_shows_only_what_is_usable() -> None:
    async with (
        serve(residency=settings(budget={"schema_tokens": 300})) as world,
        client(world.urls[0], world.issuer.token("bob")) as c,
    ):
        await c.call_tool("get_incident", {"id": "INC-7"})
        await c.call_tool("search_tools", {"query": "secret"})
        for uri in RESOURCES:
            body = json.dumps((await c.read_resource(uri)).model_dump(mode="json"))
            assert not leaked(body, "bob"), (uri, body)
        upstreams = json.loads((await c.read_resource("residency://upstreams")).contents[0].text)  # type: ignore[union-attr]
        assert [(u["name"], u["tools"]) for u in upstreams] == [("desk", 12)]


async def test_another_users_session_key_reaches_nothing_of_theirs() -> None:
    async with serve() as world:
        url = world.urls[0]
        async with client(url, world.issuer.token("alice"), session="shared-key") as a:
            await a.call_tool("rotate_key", {"path": "alice-only-marker"})
            events = (await a.read_resource("residency://events")).contents[0]
            assert "rotate_key" in events.text  # type: ignore[union-attr]
        # The same key, by header and by _meta, with bob's token: bob's own session.
        async with client(url, world.issuer.token("bob"), session="shared-key") as b:
            for uri in RESOURCES:
                body = json.dumps((await b.read_resource(uri)).model_dump(mode="json"))
                assert "alice-only-marker" not in body and not leaked(body, "bob"), uri
            meta = {"residency/session": "shared-key"}
            result = await b.read_resource("residency://events", meta=meta)  # type: ignore[arg-type]
            assert "rotate_key" not in json.dumps(result.model_dump(mode="json"))
        assert world.vault_calls == ["rotate_key"]


async def test_a_static_token_caller_gets_the_default_rule() -> None:
    token = "static-team-token-0123456789"
    gateway = Gateway(
        parse_config(json.dumps({"mcpServers": {}, "residency": settings()})),
        upstreams={"desk": IncidentDesk().server},
    )
    async with gateway, served_over_http(gateway, token=token) as url:
        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
            Client(streamable_http_client(url, http_client=http)) as c,
        ):
            names = await listed(c)
    assert names & EVERY_TOOL == EVERY_TOOL - frozenset(
        {"read_secret", "list_secrets", "delete_secret", "rotate_key"}
    )


# -- reloading -------------------------------------------------------------------------------------------


def write_config(path: Path, rules: list[dict[str, Any]]) -> None:
    section = {**settings(), "policy": {"rules": rules}}
    path.write_text(json.dumps({"mcpServers": {}, "residency": section}), encoding="utf-8")


async def test_a_reloaded_policy_applies_at_once_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "residency.json"
    write_config(path, [{"allow": ["desk/*"]}])
    gateway = Gateway(load_config(path), upstreams={"desk": IncidentDesk().server})
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with gateway, Client(gateway.server, mode="legacy", message_handler=on_message) as c:
        assert "page_oncall" in await listed(c)
        write_config(path, [{"allow": ["desk/*"], "deny": ["desk/page_oncall"]}])
        assert await gateway.reload_policy() == 1
        with anyio.fail_after(STEP):
            await changed.wait()
        assert "page_oncall" not in await listed(c)
        call = await outcome(c, "page_oncall", {})
        unknown = await outcome(c, "no_such_tool", {})
        assert same_shape(call, unknown, "page_oncall", "no_such_tool")
        # A bad policy: refused, with the reason, and the one in force keeps serving.
        path.write_text(
            json.dumps({"mcpServers": {}, "residency": {"policy": {"rules": [{"allow": ["oops"]}]}}})
        )
        with pytest.raises(ConfigError, match="server/tool"):
            await gateway.reload_policy()
        names = await listed(c)
        assert "page_oncall" not in names and "get_incident" in names


# -- the team example ------------------------------------------------------------------------------------


def test_the_team_example_loads_and_gives_each_group_its_tools() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "team" / "residency.json"
    loaded = parse_config(path.read_text(encoding="utf-8"), source=str(path), environ={"GITHUB_TOKEN": "t"})
    assert loaded.residency.auth is not None and loaded.residency.auth.groups_claim == "groups"
    team = Policy(loaded.residency.policy)
    sre = team.access(Caller("sam", frozenset({"sre"})))
    support = team.access(Caller("sue", frozenset({"support"})))
    guest = team.access(Caller("gus"))
    tools = [
        ("desk", "close_incident"),
        ("desk", "get_incident"),
        ("github", "create_issue"),
        ("github", "delete_repo"),
        ("desk", "create_incident"),
        ("github", "search_issues"),
    ]
    assert [sre.allows(*t) for t in tools] == [True, True, True, False, True, True]
    assert [support.allows(*t) for t in tools] == [False, True, False, False, True, True]
    assert [guest.allows(*t) for t in tools] == [False, True, False, False, False, False]
    assert team.access(ANYONE) is guest  # no identity: the default rules, as for a caller in no group


async def test_a_denied_call_is_audited_denied_while_its_caller_sees_an_unknown_tool(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    section = {**settings(), "policy": {"rules": [{"allow": ["desk/*"], "deny": ["desk/page_oncall"]}]}}
    section["audit"] = {"path": str(log)}
    gateway = Gateway(
        parse_config(json.dumps({"mcpServers": {}, "residency": section})),
        upstreams={"desk": IncidentDesk().server},
    )
    async with gateway, Client(gateway.server, mode="legacy") as c:
        denied, unknown = await outcome(c, "page_oncall"), await outcome(c, "no_such_tool")
        assert same_shape(denied, unknown, "page_oncall", "no_such_tool")
        via = await outcome(c, "call_tool", {"name": "page_oncall", "arguments": {}})
        assert "page_oncall" in json.dumps(via)  # the caller's own words, answered as unknown
        await outcome(c, "reexpand_tools", {"names": ["page_oncall"]})
        await outcome(c, "reexpand_tools", {"names": ["no_such_tool"]})
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [(line["tool"], line["decision"], line["code"]) for line in lines if line["tool"]]
    assert calls == [
        ("page_oncall", "denied", "tool_denied"),
        ("no_such_tool", "refused", calls[1][2]),
        ("page_oncall", "denied", "tool_denied"),
        ("reexpand_tools", "denied", "tool_denied"),
        ("reexpand_tools", "reexpanded", calls[4][2]),
    ]
    assert calls[1][2] != "tool_denied"
