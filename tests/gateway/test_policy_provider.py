"""The tool policy with a real OpenID provider: two users of different groups on one gateway,
and on two replicas sharing one PostgreSQL store; and the attack run, smaller.

The provider is ``test_oauth_provider``'s (``oidc-provider``, ``tests/peers/oidc_issuer.mjs``),
whose access tokens carry ``groups``: alice is in ``ops``, bob in ``support``. The gateways serve
``benchmarks/policy_world.py``'s desk and vault under its ``POLICY``; what each user may not see
is written out there by hand (``DENIED``).
"""

from __future__ import annotations

import json
from typing import Any, cast

import mcp_types as types
import pytest
from mcp import Client, MCPError

from benchmarks.policy_attack import measure
from benchmarks.policy_world import DENIED, EVERY_TOOL, RESOURCE, client, serve
from tests.gateway.test_oauth_provider import Issuer, _segments, issuer, token

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

__all__ = ["issuer"]  # the provider fixture, shared with test_oauth_provider

RESOURCES = ("residency://events", "residency://tools", "residency://spans", "residency://tombstones")


def auth(provider: Issuer) -> dict[str, Any]:
    return {"issuer": provider.url, "resource": RESOURCE, "scopes": ["mcp:tools"]}


def meta(key: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {"residency/session": key})


async def names(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools} & EVERY_TOOL


async def outcome(c: Client, name: str) -> str:
    try:
        return (await c.call_tool(name, {"path": "x"})).model_dump_json()
    except MCPError as exc:
        return f"MCPError {exc.error.code}: {exc.error.message}"


async def read(c: Client, uri: str, key: str | None = None) -> str:
    try:
        result = await c.read_resource(uri, meta=meta(key) if key else None, cache_mode="refresh")
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    return json.dumps(result.model_dump(mode="json"))


async def test_the_providers_tokens_carry_each_users_groups_and_the_policy_follows_them(
    issuer: Issuer,
) -> None:
    alice = await token(issuer.url, issuer, "alice", RESOURCE)
    bob = await token(issuer.url, issuer, "bob", RESOURCE)
    assert _segments(alice)[1]["groups"] == ["ops"] and _segments(bob)[1]["groups"] == ["support"]
    async with serve(auth=auth(issuer)) as world:
        url = world.urls[0]
        for user, value in (("alice", alice), ("bob", bob)):
            for mode in ("legacy", "auto"):
                async with client(url, value, mode=mode) as c:
                    assert await names(c) == EVERY_TOOL - DENIED[user], (user, mode)
        async with client(url, bob) as c:
            refused, unknown = await outcome(c, "rotate_key"), await outcome(c, "no_such_tool")
            assert refused.replace("rotate_key", "T") == unknown.replace("no_such_tool", "T")
            assert refused.startswith("MCPError")  # an unknown tool's error: the same for a denied one
        async with client(url, alice) as c:
            assert not (await c.call_tool("rotate_key", {"path": "x"})).is_error
        assert world.vault_calls == ["rotate_key"]


async def test_two_replicas_on_one_store_keep_each_users_tools_and_sessions_apart(
    issuer: Issuer, store_url: str
) -> None:
    alice = await token(issuer.url, issuer, "alice", RESOURCE)
    bob = await token(issuer.url, issuer, "bob", RESOURCE)
    async with serve(auth=auth(issuer), replicas=2, store=store_url) as world:
        first, second = world.urls
        marker = "alice-on-replica-one"
        async with client(first, alice, session="work") as a:
            result = await a.call_tool("read_secret", {"path": marker})
            span = (result.meta or {})["residency/span"]["id"]
            before = [await read(a, uri) for uri in RESOURCES]
        # alice's session is in the shared store: the other replica serves it to her.
        async with client(second, alice, session="work") as a:
            assert marker in await read(a, f"residency://spans/{span}")
            assert await names(a) == EVERY_TOOL - DENIED["alice"]
        # bob replays her key on both replicas, by header and by _meta: his own session each time.
        for url in (first, second):
            async with client(url, bob, session="work") as b:
                assert await names(b) == EVERY_TOOL - DENIED["bob"]
                for uri in (*RESOURCES, f"residency://spans/{span}"):
                    for key in (None, "work"):
                        body = await read(b, uri, key)
                        assert marker not in body and "read_secret" not in body, (url, uri, body)
                        assert not {n for n in DENIED["bob"] if n in body}, (url, uri, body)
                await b.call_tool("get_incident", {"id": "INC-7"}, meta=meta("work"))
        # Nothing bob did reached alice's session.
        async with client(first, alice, session="work") as a:
            assert [await read(a, uri) for uri in RESOURCES] == before
            assert marker in await read(a, f"residency://spans/{span}")


async def test_the_attack_run_finds_nothing_to_read_write_or_learn() -> None:
    figures = await measure(60)
    assert figures.tries == 60 and figures.requests > 300
    assert figures.met, figures.findings


async def test_the_attack_run_on_two_replicas_finds_nothing(store_url: str) -> None:
    figures = await measure(30, replicas=2, store=store_url)
    assert figures.tries == 30
    assert figures.met, figures.findings
