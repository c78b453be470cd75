"""Per-identity rate limits: the token buckets alone (a fake clock), then the gateway refusing a
caller past its limit with ``retry_after`` while others are served, in process and over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from residency import MemoryStore
from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._connection import token_identity
from residency._gateway._errors import RATE_LIMITED
from residency._gateway._oauth import Principal
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._rate_limit import SWEEP_EVERY, RateLimiter, RateLimitSettings
from tests._timing import STEP
from tests.gateway.conftest import config, served_over_http, session_meta
from tests.gateway.oauth_keys import ISSUER, Clock, mint
from tests.gateway.test_oauth_config import KEY, key_server

TOKEN = "a-static-token-for-the-limits-0042"


# -- the buckets ---------------------------------------------------------------------------------


def test_a_burst_is_served_then_refused_with_the_wait_until_a_token_is_back() -> None:
    limiter = RateLimiter(RateLimitSettings(requests_per_minute=60, burst=3))
    assert [limiter.take("a", call=False, now=10.0) for _ in range(3)] == [None, None, None]
    over = limiter.take("a", call=False, now=10.0)
    assert over is not None and over.limit == "requests" and over.retry_after == pytest.approx(1.0)
    assert limiter.take("a", call=False, now=10.5) is not None  # half a token back: not yet
    assert limiter.take("a", call=False, now=11.0) is None
    assert limiter.take("b", call=False, now=11.0) is None  # another identity has its own bucket


def test_upstream_calls_have_a_bucket_of_their_own_and_a_refused_call_costs_nothing() -> None:
    limiter = RateLimiter(
        RateLimitSettings(requests_per_minute=600, burst=5, calls_per_minute=6, calls_burst=1)
    )
    assert limiter.take("a", call=True, now=0.0) is None
    over = limiter.take("a", call=True, now=0.0)
    assert over is not None and over.limit == "calls" and over.retry_after == pytest.approx(10.0)
    # Lists and searches go on; the refused call took no request token (4 left of 5).
    assert [limiter.take("a", call=False, now=0.0) for _ in range(4)] == [None] * 4
    assert limiter.take("a", call=False, now=0.0) is not None
    assert limiter.take("a", call=True, now=10.0) is None


def test_idle_buckets_are_dropped_and_the_table_never_passes_its_bound() -> None:
    limiter = RateLimiter(RateLimitSettings(requests_per_minute=60, burst=2, max_identities=100))
    for n in range(250):
        limiter.take(f"id-{n}", call=False, now=0.0)
    assert len(limiter) == 100
    limiter.take("busy", call=False, now=0.0)
    limiter.take("busy", call=False, now=0.0)
    limiter.sweep(now=1.0)  # every bucket but "busy" is full again
    assert len(limiter) == 1
    for n in range(SWEEP_EVERY):  # a sweep runs by itself as requests come
        limiter.take("busy", call=False, now=100.0 + n * 2.0)
    limiter.take("other", call=False, now=100.0 + SWEEP_EVERY * 2.0 + 10)
    assert len(limiter) <= 2


def test_the_settings_refuse_a_call_burst_without_a_call_rate() -> None:
    with pytest.raises(ConfigError):
        config({"rate_limit": {"requests_per_minute": 60, "calls_burst": 2}})
    with pytest.raises(ConfigError):
        config({"rate_limit": {"requests_per_minute": 0}})


# -- the gateway, in process ---------------------------------------------------------------------


@asynccontextmanager
async def limited(tmp_path: Path, clock: Clock, **limits: Any) -> AsyncIterator[tuple[Gateway, Path]]:
    path = tmp_path / "audit.jsonl"
    residency = {
        "delivery": "list",
        "pinned": ["search_runbooks"],
        "rate_limit": limits,
        "audit": {"path": str(path)},
    }
    gateway = Gateway(config(residency), upstreams={"desk": IncidentDesk().server}, clock=clock)
    async with gateway:
        yield gateway, path


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_caller_past_its_limit_gets_retry_after_then_is_served_once_the_clock_moves(
    tmp_path: Path, mode: str
) -> None:
    clock = Clock()
    async with (
        limited(tmp_path, clock, requests_per_minute=30, burst=2) as (gateway, path),
        Client(gateway.server, mode=mode) as client,
    ):
        meta = session_meta("k1")
        await client.list_tools(meta=meta)
        await client.call_tool("search_runbooks", {"query": "rollback"}, meta=meta)
        with pytest.raises(MCPError) as raised:
            await client.call_tool("search_runbooks", {"query": "rollback"}, meta=meta)
        error = raised.value.error
        assert error.code == RATE_LIMITED
        assert error.data["reason"] == "rate_limited" and error.data["retry_after"] == pytest.approx(2.0)
        clock.now += error.data["retry_after"]
        assert not (await client.call_tool("search_runbooks", {"query": "rollback"}, meta=meta)).is_error
    decisions = [(line["decision"], line["code"]) for line in audit_lines(path)]
    assert decisions == [
        ("listed", None),
        ("forwarded", None),
        ("limited", "rate_limited"),
        ("forwarded", None),
    ]
    limited_line = audit_lines(path)[2]
    assert limited_line["retry_after"] == 2.0 and limited_line["tool"] == "search_runbooks"
    assert limited_line["session"] == "k1" and limited_line["subject"] is None


@pytest.mark.anyio
async def test_a_call_limit_leaves_lists_and_searches_served(tmp_path: Path) -> None:
    clock = Clock()
    settings = {"requests_per_minute": 600, "burst": 50, "calls_per_minute": 6, "calls_burst": 1}
    async with limited(tmp_path, clock, **settings) as (gateway, _), Client(gateway.server) as client:
        meta = session_meta("k1")
        assert not (await client.call_tool("search_runbooks", {"query": "db"}, meta=meta)).is_error
        with pytest.raises(MCPError) as raised:
            await client.call_tool("search_runbooks", {"query": "db"}, meta=meta)
        assert raised.value.error.data["limit"] == "calls"
        assert raised.value.error.data["retry_after"] == pytest.approx(10.0)
        assert not (await client.call_tool("search_tools", {"query": "timeline"}, meta=meta)).is_error
        assert (await client.list_tools(meta=meta)).tools


# -- the gateway over HTTP, two identities -------------------------------------------------------


@asynccontextmanager
async def http_client(url: str, bearer: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}", "Residency-Session": "desk"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


@pytest.mark.anyio
async def test_one_oauth_subject_past_its_limit_leaves_another_served(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "audit.jsonl"
    residency = {
        "delivery": "list",
        "rate_limit": {"requests_per_minute": 6, "burst": 2},
        "audit": {"path": str(path)},
    }
    gateway = Gateway(
        config(residency), upstreams={"desk": IncidentDesk().server}, store=MemoryStore(), clock=clock
    )
    with anyio.fail_after(STEP * 4):
        async with key_server() as jwks_uri, gateway:
            sock_url = "http://127.0.0.1/mcp"
            auth = OAuthSettings.model_validate(
                {"issuer": ISSUER, "resource": sock_url, "jwks_uri": jwks_uri}
            )
            async with served_over_http(gateway, auth=auth) as url:
                alice, bob = (mint(KEY, sub=who, aud=sock_url) for who in ("alice", "bob"))
                async with http_client(url, alice) as as_alice:
                    await as_alice.list_tools()
                    await as_alice.list_tools()
                    with pytest.raises(MCPError) as raised:
                        await as_alice.list_tools()
                    assert raised.value.error.code == RATE_LIMITED
                    assert raised.value.error.data["retry_after"] == pytest.approx(10.0)
                    async with http_client(url, bob) as as_bob:
                        assert (await as_bob.list_tools()).tools  # bob is not alice
                    clock.now += 10.0
                    assert (await as_alice.list_tools()).tools
    found = audit_lines(path)
    assert [(line["decision"], line["subject"]) for line in found] == [
        ("listed", "alice"),
        ("listed", "alice"),
        ("limited", "alice"),
        ("listed", "bob"),
        ("listed", "alice"),
    ]
    identities = {
        who: Principal(ISSUER, who, "desk-client", frozenset()).identity for who in ("alice", "bob")
    }
    assert found[3]["identity"] == identities["bob"] and found[3]["session"] == f"{identities['bob']}/desk"
    text = path.read_text(encoding="utf-8")
    assert alice not in text and bob not in text and alice.split(".")[2] not in text


@pytest.mark.anyio
async def test_a_static_token_is_one_identity_and_never_reaches_the_audit_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    gateway = Gateway(config({"audit": {"path": str(path)}}), upstreams={"desk": IncidentDesk().server})
    with anyio.fail_after(STEP * 3):
        async with gateway, served_over_http(gateway, token=TOKEN) as url, http_client(url, TOKEN) as client:
            await client.list_tools()
            await client.call_tool("search_tools", {"query": "incident"})
    found = audit_lines(path)
    assert {line["subject"] for line in found} == {token_identity(TOKEN)}
    assert TOKEN not in path.read_text(encoding="utf-8")
