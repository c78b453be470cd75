"""HTTP exposure: no unauthenticated gateway beyond loopback, no weak tokens, keys bound to tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from residency import ToolState
from residency._cli import build_parser
from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._connection import token_identity
from residency._gateway._http import MIN_TOKEN_CHARS, bind, http_app, serve_http
from residency._gateway._run import ServeOptions, startup_summary
from residency._store._memory import MemoryStore
from residency._store._protocol import Store
from tests._timing import START, STEP, TEST
from tests.gateway.conftest import config, served_over_http

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-token-of-24-characters"
OTHER = "another-token-of-24-chrs"


def _options(*argv: str, environ: dict[str, str] | None = None) -> ServeOptions:
    return ServeOptions.from_args(build_parser().parse_args(["serve", *argv]), environ or {})


# -- refusing to start ----------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "gateway.example"])
def test_http_beyond_loopback_without_a_token_is_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="--insecure"):
        _options("--transport", "http", "--host", host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    assert _options("--transport", "http", "--host", host).token is None


def test_a_token_or_insecure_allows_any_host() -> None:
    assert _options("--transport", "http", "--host", "0.0.0.0", "--token", TOKEN).token == TOKEN
    from_env = _options("--transport", "http", "--host", "0.0.0.0", environ={"RESIDENCY_TOKEN": TOKEN})
    assert from_env.token == TOKEN
    insecure = _options("--transport", "http", "--host", "0.0.0.0", "--insecure")
    assert insecure.insecure and insecure.token is None
    summary = startup_summary(Gateway(config()), insecure, url="http://0.0.0.0:1/mcp")
    assert "residency: WARNING: no bearer token on 0.0.0.0 (--insecure)" in summary


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (("--token", ""), {}),
        (("--token", "short-token"), {}),
        (("--token", "x" * (MIN_TOKEN_CHARS - 1)), {}),
        (("--token", "sixteen chars ok"), {}),  # a space: not a header-safe token
        ((), {"RESIDENCY_TOKEN": ""}),
        ((), {"RESIDENCY_TOKEN": "tiny"}),
        (("--token", ""), {"RESIDENCY_TOKEN": TOKEN}),  # the flag wins, even empty
    ],
    ids=["empty-flag", "short-flag", "15-chars", "space", "empty-env", "short-env", "empty-flag-over-env"],
)
def test_an_empty_or_weak_token_is_refused_not_read_as_no_token(
    argv: tuple[str, ...], environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError, match="bearer token"):
        _options("--transport", "http", *argv, environ=environ)


def test_a_weak_token_in_the_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gateway.json"
    path.write_text('{"mcpServers": {}, "residency": {"token": "too-short"}}')
    with pytest.raises(ConfigError, match=r"residency\.token"):
        _options("--transport", "http", "--config", str(path))
    assert _options("--config", str(path)).token is None  # stdio: the token means nothing there


def test_a_token_of_16_characters_is_accepted() -> None:
    token = "x" * MIN_TOKEN_CHARS
    assert _options("--transport", "http", "--token", token).token == token


@pytest.mark.slow
def test_serve_exits_2_before_binding_beyond_loopback_without_a_token() -> None:
    # 192.0.2.1 (TEST-NET-1) is never this machine's: binding it would fail with status 1.
    env = {k: v for k, v in os.environ.items() if k != "RESIDENCY_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-m", "residency", "serve", "--transport", "http", "--host", "192.0.2.1"],
        capture_output=True,
        text=True,
        timeout=TEST,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "without a bearer token" in done.stderr and "--insecure" in done.stderr


@pytest.mark.anyio
async def test_the_library_refuses_an_empty_token_and_an_unauthenticated_public_host() -> None:
    gateway = Gateway(config())
    with pytest.raises(ConfigError):
        http_app(gateway, token="")
    sock = bind("127.0.0.1", 0)
    try:
        with anyio.fail_after(STEP), pytest.raises(ConfigError):
            await serve_http(gateway, sock, host="0.0.0.0")
    finally:
        sock.close()


# -- session keys bound to the token ---------------------------------------------------------------


@asynccontextmanager
async def _http_gateway(token: str, store: Store, **kwargs: Any) -> AsyncIterator[tuple[Gateway, str]]:
    gateway = Gateway(
        # by list: a session's reach is probed through what its list shows
        config({"budget": {"schema_tokens": 350}, "delivery": "list"}),
        upstreams={"desk": IncidentDesk().server},
        store=store,
        **kwargs,
    )
    async with gateway, served_over_http(gateway, token=token) as url:
        yield gateway, url


@asynccontextmanager
async def _client(url: str, mode: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def _listed(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_session_key_named_under_one_token_is_not_reachable_under_another(mode: str) -> None:
    store = MemoryStore()  # two gateways, two tokens, one store: as two tenants might share one
    with anyio.fail_after(START):
        async with (
            _http_gateway(TOKEN, store) as (first, first_url),
            _http_gateway(OTHER, store) as (_, other_url),
        ):
            alice = {"Authorization": f"Bearer {TOKEN}", "Residency-Session": "alice"}
            async with _client(first_url, mode, alice) as client:
                assert not (await client.call_tool("reexpand_tools", {"names": ["list_services"]})).is_error
                assert "list_services" in await _listed(client)
            mallory = {"Authorization": f"Bearer {OTHER}", "Residency-Session": "alice"}
            async with _client(other_url, mode, mallory) as client:
                assert "list_services" not in await _listed(client)
            bound = first.session(f"{token_identity(TOKEN)}/alice")
            assert bound.state("list_services") is ToolState.RESIDENT


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_default_session_is_not_bound_to_the_token() -> None:
    with anyio.fail_after(START):
        async with (
            _http_gateway(TOKEN, MemoryStore(), default_session="shared") as (gw, url),
            _client(url, "legacy", {"Authorization": f"Bearer {TOKEN}"}) as client,
        ):
            await client.call_tool("reexpand_tools", {"names": ["list_services"]})
            assert [gs.key for gs in gw._table] == ["shared"]
