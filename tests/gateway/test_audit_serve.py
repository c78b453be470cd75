"""``residency serve`` over HTTP with two OAuth identities, a rate limit and an audit file: the
process is the subject (its config, its middleware, the file it writes)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from residency._gateway._errors import RATE_LIMITED
from residency._gateway._oauth import Principal
from tests._timing import SERVING, STEP, UPSTREAMS_UP
from tests.clients._serve import http_serve
from tests.gateway.oauth_keys import ISSUER, mint
from tests.gateway.test_oauth_config import KEY, key_server

RESOURCE = "https://mcp.example.com/mcp"


@asynccontextmanager
async def as_caller(url: str, bearer: str, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}", "Residency-Session": "desk"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_served_gateway_limits_one_subject_audits_both_and_writes_no_token(
    tmp_path: Path, mode: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    with anyio.fail_after(SERVING + STEP * 6):
        async with key_server() as jwks_uri:
            residency = {
                **UPSTREAMS_UP,
                "delivery": "list",
                "pinned": ["search_runbooks"],
                "auth": {"issuer": ISSUER, "resource": RESOURCE, "jwks_uri": jwks_uri},
                # One request a minute once the burst is spent: the third request waits ~60 s.
                "rate_limit": {"requests_per_minute": 1, "burst": 2},
                "audit": {"path": str(audit), "arguments": "names"},
            }
            desk = {"command": sys.executable, "args": ["-m", "residency.demo"]}
            path = tmp_path / "gateway.json"
            path.write_text(json.dumps({"mcpServers": {"desk": desk}, "residency": residency}))
            alice, bob = (mint(KEY, sub=who, aud=RESOURCE) for who in ("alice", "bob"))
            async with http_serve("--config", str(path)) as served:
                async with as_caller(served.url, alice, mode) as as_alice:
                    await as_alice.list_tools()
                    result = await as_alice.call_tool("search_runbooks", {"query": "secret-query-value"})
                    assert not result.is_error
                    with pytest.raises(MCPError) as raised:
                        await as_alice.call_tool("search_runbooks", {"query": "secret-query-value"})
                async with as_caller(served.url, bob, mode) as as_bob:
                    assert (await as_bob.list_tools()).tools
                log = served.log()
    error = raised.value.error
    assert error.code == RATE_LIMITED and error.data["reason"] == "rate_limited"
    assert 55.0 <= error.data["retry_after"] <= 60.0
    found = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines()]
    assert [(line["decision"], line["subject"], line["tool"]) for line in found] == [
        ("listed", "alice", None),
        ("forwarded", "alice", "search_runbooks"),
        ("limited", "alice", "search_runbooks"),
        ("listed", "bob", None),
    ]
    bob_identity = Principal(ISSUER, "bob", "desk-client", frozenset()).identity
    assert (
        found[3]["session"] == f"{bob_identity}/desk" and found[2]["retry_after"] == error.data["retry_after"]
    )
    assert found[1]["arguments"] == ["query"]
    text = audit.read_text(encoding="utf-8")
    for secret in (alice, bob, alice.split(".")[2], "secret-query-value"):
        assert secret not in text and secret not in log
