"""``residency.auth`` in a config file and on ``residency serve``: parsed, checked, never mixed
with a static token, its secret redacted; and the served gateway binding sessions to identities.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from residency import MemoryStore, ToolState
from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk, parse_config
from residency._gateway._http import bind, http_app, serve_http
from residency._gateway._oauth import Principal
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._run import ServeOptions
from tests._timing import STEP
from tests.gateway.conftest import config
from tests.gateway.oauth_keys import ISSUER, mint, rsa_key

AUTH = {
    "issuer": "https://id.example.com",
    "resource": "https://mcp.example.com/mcp",
    "scopes": ["mcp:tools"],
}
TOKEN = "a-static-token-of-some-length"


def parsed(residency: dict[str, Any]) -> Any:
    return parse_config(json.dumps({"mcpServers": {}, "residency": residency}), source="team.json")


def test_the_auth_section_is_read_with_audience_as_the_resource() -> None:
    read = parsed({"auth": {"issuer": AUTH["issuer"], "audience": AUTH["resource"]}}).residency.auth
    assert read is not None and read.resource == AUTH["resource"] and read.jwks_uri is None
    assert read.algorithms == ("RS256", "PS256", "ES256", "EdDSA") and read.scopes == ()


@pytest.mark.parametrize(
    ("auth", "where"),
    [
        ({**AUTH, "algorithms": ["HS256"]}, "residency.auth.algorithms"),
        ({**AUTH, "algorithms": ["none"]}, "residency.auth.algorithms"),
        ({**AUTH, "issuer": "http://id.example.com"}, "residency.auth.issuer"),
        ({"issuer": AUTH["issuer"]}, "residency.auth"),
        ({**AUTH, "leeway": 3600}, "residency.auth.leeway"),
        ({**AUTH, "introspection": {"endpoint": "https://id.example.com/i"}}, "residency.auth.introspection"),
    ],
)
def test_a_bad_auth_section_is_a_config_error_naming_its_key(auth: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parsed({"auth": auth})
    assert any(problem.key.startswith(where) for problem in caught.value.problems)


def test_a_token_and_auth_in_one_file_are_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parsed({"token": TOKEN, "auth": AUTH})
    assert [problem.key for problem in caught.value.problems] == ["residency"]


def test_the_introspection_secret_is_redacted() -> None:
    secret = "introspection-secret-value"
    introspection = {"endpoint": "https://id.example.com/i", "client_id": "gw", "client_secret": secret}
    loaded = parsed({"auth": {**AUTH, "introspection": introspection}})
    assert loaded.secrets().redact(f"failed with {secret}") == "failed with ***"
    assert secret not in repr(loaded)


def _args(*argv: str) -> Any:
    from residency._cli import build_parser

    return build_parser().parse_args(["serve", *argv])


def test_serve_refuses_a_static_token_beside_auth_and_binds_wide_with_auth(tmp_path: Path) -> None:
    file = tmp_path / "team.json"
    file.write_text(json.dumps({"mcpServers": {}, "residency": {"auth": AUTH}}))
    http = ("--config", str(file), "--transport", "http")
    for argv, environ in (((*http, "--token", TOKEN), {}), (http, {"RESIDENCY_TOKEN": TOKEN})):
        with pytest.raises(ConfigError):
            ServeOptions.from_args(_args(*argv), environ)
    options = ServeOptions.from_args(_args(*http, "--host", "0.0.0.0"), {})
    assert options.auth is not None and options.token is None
    assert ServeOptions.from_args(_args("--config", str(file)), {}).auth is None  # stdio: none


@pytest.mark.anyio
async def test_http_app_refuses_a_token_and_auth_together() -> None:
    gateway = Gateway(config(), upstreams={"desk": IncidentDesk().server})
    with pytest.raises(ConfigError):
        http_app(gateway, token=TOKEN, auth=OAuthSettings.model_validate(AUTH))


# -- the served gateway ------------------------------------------------------------------------------

KEY = rsa_key("sessions-key")


@asynccontextmanager
async def key_server() -> AsyncIterator[str]:
    """The made-up issuer's key set at a loopback URL (uvicorn in this process); yields the URL."""
    import uvicorn

    document = json.dumps({"keys": [KEY.public_jwk()]}).encode()

    async def keys(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": document})

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(keys, lifespan="off", log_level="warning", log_config=None))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(STEP):
            while not server.started:
                await anyio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/jwks"
        server.should_exit = True


@asynccontextmanager
async def served(store: MemoryStore) -> AsyncIterator[tuple[Gateway, str]]:
    """The demo desk over HTTP in this process, taking tokens of ``oauth_keys``' issuer."""
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    gateway = Gateway(
        config({"budget": {"schema_tokens": 350}, "delivery": "list"}),
        upstreams={"desk": IncidentDesk().server},
        store=store,
    )
    ready = anyio.Event()
    async with key_server() as jwks_uri, gateway, anyio.create_task_group() as tg:
        auth = OAuthSettings.model_validate({"issuer": ISSUER, "resource": url, "jwks_uri": jwks_uri})
        tg.start_soon(lambda: serve_http(gateway, sock, auth=auth, started=lambda _: ready.set()))
        with anyio.fail_after(STEP):
            await ready.wait()
        yield gateway, url
        tg.cancel_scope.cancel()


@asynccontextmanager
async def client(url: str, bearer: str, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}", "Residency-Session": "shared"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as connected,
    ):
        yield connected


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_one_session_key_under_two_subjects_names_two_sessions(mode: str) -> None:
    with anyio.fail_after(STEP * 2):
        async with served(MemoryStore()) as (gateway, url):
            alice, bob = (mint(KEY, sub=who, aud=url) for who in ("alice", "bob"))
            async with client(url, alice, mode) as as_alice:
                assert not (await as_alice.call_tool("reexpand_tools", {"names": ["list_services"]})).is_error
            async with client(url, bob, mode) as as_bob:
                assert "list_services" not in [t.name for t in (await as_bob.list_tools()).tools]
            async with client(url, mint(KEY, sub="alice", aud=url, jti="another"), mode) as again:
                assert "list_services" in [t.name for t in (await again.list_tools()).tools]
            keys = {
                who: Principal(ISSUER, who, "desk-client", frozenset()).identity for who in ("alice", "bob")
            }
            assert gateway.session(f"{keys['alice']}/shared").state("list_services") is ToolState.RESIDENT
            assert gateway.session(f"{keys['bob']}/shared").state("list_services") is not ToolState.RESIDENT
