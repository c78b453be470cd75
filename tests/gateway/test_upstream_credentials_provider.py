"""Upstream credentials against a real OpenID provider and a real upstream that checks tokens.

The provider is ``tests/peers/oidc_issuer.mjs`` (``oidc-provider``: client credentials natively,
token exchange as a registered grant type; client ``shortlived``'s tokens live 3 s). The
upstream is an mcp 2.3.0 server over streamable HTTP on a loopback port behind the gateway's own
resource-server check (``OAuthBearer``, the issuer's keys, ``aud`` = the upstream's URL): a
request without a valid token for it is answered 401. Its tool ``whoami`` says who the token
speaks for; every request's token and status is recorded, so a test sees which token reached it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.server.lowlevel import Server
from starlette.types import ASGIApp, Receive, Scope, Send

from residency import MemoryStore
from residency._gateway import Gateway
from residency._gateway._http import bind, serve_http
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._oauth_http import PRINCIPAL_STATE, OAuthBearer
from tests._timing import STEP, scaled
from tests.gateway.conftest import config, served_over_http, text
from tests.gateway.test_oauth_provider import Issuer, control, issuer, mcp_client, token

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["issuer"]  # the provider fixture, shared with test_oauth_provider

WHOAMI = types.Tool(
    name="whoami", description="Who the request's token speaks for.", input_schema={"type": "object"}
)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def claims(value: str) -> dict[str, Any]:
    body = value.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return decoded


@dataclass
class Guarded:
    """The token-checking upstream: its URL and what reached it."""

    url: str
    seen: list[tuple[str | None, int]] = field(default_factory=list)
    """(bearer token or None, HTTP status) of every request."""
    refuse: set[str] = field(default_factory=set)
    """Tokens answered 401 though valid (as if revoked)."""
    handshake_only: bool = False
    """Answer ``server/discover`` 404, as a server of the handshake era only does."""

    def tokens(self, status: int = 200) -> list[str]:
        return [t for t, s in self.seen if t is not None and s == status]

    def digests(self, status: int = 200) -> list[str]:
        return [digest(t) for t in self.tokens(status)]


class _Recorder:
    def __init__(self, app: ASGIApp, guarded: Guarded) -> None:
        self._app = app
        self._guarded = guarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self._guarded.handshake_only and headers.get(b"mcp-method") == b"server/discover":
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        auth = headers.get(b"authorization", b"").decode()
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        if bearer is not None and bearer in self._guarded.refuse:
            self._guarded.seen.append((bearer, 401))
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                self._guarded.seen.append((bearer, message["status"]))
            await send(message)

        await self._app(scope, receive, sending)


@asynccontextmanager
async def guarded_upstream(issuer: Issuer, audience: str | None = None) -> AsyncIterator[Guarded]:
    """The token-checking upstream (``audience``: the ``aud`` it accepts; None: its own URL)."""
    import uvicorn

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[WHOAMI])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        scope = ctx.request.scope
        principal = scope["state"][PRINCIPAL_STATE]
        value = scope["user"].access_token.token
        # The token itself would come back as *** (the gateway scrubs tokens it holds): its digest.
        said = {"sub": principal.subject, "claims": claims(value), "token": digest(value)}
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(said))])

    server = Server("guarded", on_list_tools=list_tools, on_call_tool=call_tool)
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    guarded = Guarded(url)
    settings = OAuthSettings.model_validate({"issuer": issuer.url, "resource": audience or url})
    app = _Recorder(
        OAuthBearer(server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1"), settings),
        guarded,
    )
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: web.serve(sockets=[sock]))
            try:
                yield guarded
            finally:
                web.should_exit = True
    finally:
        sock.close()


def credentials(issuer: Issuer, client: str, mode: str = "client_credentials", **more: Any) -> dict[str, Any]:
    return {
        "mode": mode,
        "issuer": issuer.url,
        "client_id": client,
        "client_secret": issuer.credentials(client)[1],
        "scopes": ["mcp:tools"],
        **more,
    }


@asynccontextmanager
async def oauth_front(gateway: Gateway, issuer: Issuer, port: int = 0) -> AsyncIterator[str]:
    """``gateway`` (entered) served over HTTP as a resource server of ``issuer``; its MCP URL."""
    sock = bind("127.0.0.1", port)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    auth = OAuthSettings.model_validate({"issuer": issuer.url, "resource": url})
    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(gateway, sock, auth=auth, started=lambda _: ready.set()))
        with anyio.fail_after(STEP):
            await ready.wait()
        yield url
        tg.cancel_scope.cancel()


SETTINGS = {"delivery": "list", "ready_wait": 60, "startup_timeout": 60}


async def issued(issuer: Issuer, grant: str) -> int:
    return int((await control(issuer, "GET", "/stats"))["tokens"].get(grant, 0))


async def whoami(client: Client, tool: str = "whoami") -> dict[str, Any]:
    result = await client.call_tool(tool, {})
    assert not result.is_error, text(result)
    answer: dict[str, Any] = json.loads(text(result))
    return answer


async def test_a_client_credentials_token_is_renewed_once_it_expires(issuer: Issuer) -> None:
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            entry = {"url": up.url, "credentials": credentials(issuer, "shortlived", refresh_margin=1)}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway, Client(gateway.server) as client:
                first = await whoami(client)
                assert first["sub"] == "shortlived" and first["claims"]["aud"] == up.url
                assert first["claims"]["exp"] - first["claims"]["iat"] == 3  # the issuer's short TTL
                # Past its lifetime (a real wait: the provider's tokens live that long).
                await anyio.sleep(max(0.0, first["claims"]["exp"] - time.time() + 0.5))
                before = await issued(issuer, "client_credentials")
                answers: list[dict[str, Any]] = []

                async def one() -> None:
                    answers.append(await whoami(client))

                async with anyio.create_task_group() as tg:
                    for _ in range(6):
                        tg.start_soon(one)
                fetched = await issued(issuer, "client_credentials") - before
            assert all(a["token"] != first["token"] and a["sub"] == "shortlived" for a in answers)
            # Six concurrent calls share a fetch (two at most: a slow machine may see the new
            # token near its own renewal point before the last call leaves).
            assert 1 <= fetched <= 2
            assert all(status != 401 for _, status in up.seen)  # renewed before, never refused


async def test_a_token_is_reused_and_one_the_upstream_refuses_is_replaced_once(issuer: Issuer) -> None:
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            entry = {"url": up.url, "credentials": credentials(issuer, "alice")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            before = await issued(issuer, "client_credentials")
            async with gateway, Client(gateway.server) as client:
                first, second = await whoami(client), await whoami(client)
                assert first["token"] == second["token"] and first["sub"] == "alice"
                assert await issued(issuer, "client_credentials") == before + 1  # the start's, reused
                old = next(t for t in up.tokens() if digest(t) == first["token"])
                up.refuse.add(old)
                new = await whoami(client)
                assert new["token"] != digest(old) and new["sub"] == "alice"
                assert (old, 401) in up.seen and up.digests()[-1] == new["token"]


async def test_token_exchange_gives_each_caller_a_token_of_their_own_for_the_upstream(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            entry = {"url": up.url, "credentials": credentials(issuer, "gateway", "token_exchange")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway, oauth_front(gateway, issuer) as served:
                alice = await token(issuer.url, issuer, "alice", served)
                bob = await token(issuer.url, issuer, "bob", served)
                exchanges = await issued(issuer, "urn:ietf:params:oauth:grant-type:token-exchange")
                seen: dict[str, list[dict[str, Any]]] = {}
                for who, value in (("alice", alice), ("bob", bob), ("alice", alice)):
                    async with mcp_client(served, {"authorization": f"Bearer {value}"}) as client:
                        seen.setdefault(who, []).append(await whoami(client))
                after = await issued(issuer, "urn:ietf:params:oauth:grant-type:token-exchange")
                metrics = await _metrics(served, alice)
                # No caller token (an in-process client: as over stdio): a clear error, and
                # the gateway goes on serving.
                async with Client(gateway.server) as anonymous:
                    refused = await anonymous.call_tool("whoami", {})
                async with mcp_client(served, {"authorization": f"Bearer {bob}"}) as client:
                    assert (await whoami(client))["sub"] == "bob"
            assert refused.is_error and "takes each caller's own OAuth access token" in text(refused)
            first, again = seen["alice"]
            for who, answer in (("alice", first), ("bob", seen["bob"][0])):
                got = answer["claims"]
                assert answer["sub"] == who and got["sub"] == who
                assert got["aud"] == up.url and got["act"] == {"sub": "gateway"}
            assert first["token"] == again["token"]  # cached for that caller token
            assert first["token"] not in (digest(alice), digest(bob), seen["bob"][0]["token"])
            assert after == exchanges + 2  # one exchange per caller, none for alice's second call
            # The gateway's own requests (the start, the listing) carried its own token.
            own = [t for t in up.tokens() if claims(t)["sub"] == "gateway"]
            assert own and alice not in up.tokens() and bob not in up.tokens()
            # No token and no client secret in any log line or in /metrics.
            secret = issuer.credentials("gateway")[1]
            exchanged = [t for t in up.tokens() if digest(t) in (first["token"], seen["bob"][0]["token"])]
            assert len(exchanged) >= 2
            for value in (secret, alice, bob, *exchanged, *own):
                assert value not in caplog.text and value not in metrics


async def _metrics(url: str, bearer: str) -> str:
    async with httpx2.AsyncClient(timeout=STEP) as http:
        response = await http.get(
            url.removesuffix("/mcp") + "/metrics", headers={"authorization": f"Bearer {bearer}"}
        )
    return response.text


async def test_the_callers_token_reaches_an_upstream_only_when_passthrough_is_configured(
    issuer: Issuer,
) -> None:
    with anyio.fail_after(scaled(120)):
        front = bind("127.0.0.1", 0)
        port = front.getsockname()[1]
        front.close()
        url = f"http://127.0.0.1:{port}/mcp"
        # The passthrough upstream accepts tokens issued for the gateway (which is why it is
        # discouraged); its listing carries a static token of the gateway's client.
        listing = await token(issuer.url, issuer, "gateway", url)
        async with guarded_upstream(issuer, audience=url) as through, guarded_upstream(issuer) as own:
            servers = {
                "through": {
                    "url": through.url,
                    "headers": {"Authorization": f"Bearer {listing}"},
                    "credentials": {"mode": "passthrough"},
                },
                "own": {"url": own.url, "credentials": credentials(issuer, "gateway")},
            }
            settings = {**SETTINGS, "budget": {"schema_tokens": 100000}}
            gateway = Gateway(config(settings, servers), store=MemoryStore())
            async with gateway, oauth_front(gateway, issuer, port) as served:
                alice = await token(issuer.url, issuer, "alice", served)
                async with mcp_client(served, {"authorization": f"Bearer {alice}"}) as client:
                    names = sorted(t.name for t in (await client.list_tools()).tools)
                    passed = await whoami(client, next(n for n in names if n.startswith("through")))
                    kept = await whoami(client, next(n for n in names if n.startswith("own")))
            assert passed["token"] == digest(alice) and passed["sub"] == "alice"
            assert kept["sub"] == "gateway" and kept["token"] != digest(alice)
            assert alice not in own.tokens()
            assert through.tokens()[0] == listing  # its own requests: the static header


async def test_an_upstream_of_the_handshake_era_only_is_refused_per_caller_credentials(
    issuer: Issuer,
) -> None:
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            up.handshake_only = True
            entry = {"url": up.url, "credentials": credentials(issuer, "gateway", "token_exchange")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway:
                upstream = gateway.upstreams["up"]
                assert upstream.status == "failed"
                assert "speaks only the handshake era" in upstream.last_error
            # The same upstream with the gateway's own token is spoken to in the handshake era.
            entry = {"url": up.url, "credentials": credentials(issuer, "gateway")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway, Client(gateway.server) as client:
                assert gateway.upstreams["up"].protocol_version != "2026-07-28"
                assert (await whoami(client))["sub"] == "gateway"


async def test_a_token_endpoint_refusal_is_a_clear_error_without_the_secret(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "not-the-secret-of-alice-0123456789"
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            entry = {"url": up.url, "credentials": {**credentials(issuer, "alice"), "client_secret": wrong}}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway:
                error = gateway.upstreams["up"].last_error
            assert (
                "the token endpoint refused the client-credentials grant (HTTP 401, invalid_client" in error
            )
            # alice may not exchange tokens: each call of a signed-in caller says so.
            entry = {"url": up.url, "credentials": credentials(issuer, "alice", "token_exchange")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with gateway, oauth_front(gateway, issuer) as served:
                bob = await token(issuer.url, issuer, "bob", served)
                async with mcp_client(served, {"authorization": f"Bearer {bob}"}) as client:
                    refused = await client.call_tool("whoami", {})
            assert refused.is_error
            assert "the token endpoint refused the token exchange (HTTP 400" in text(refused)
            assert bob not in up.tokens()
    for value in (wrong, issuer.credentials("alice")[1], bob):
        assert value not in caplog.text and value not in error and value not in text(refused)


async def test_a_caller_of_the_shared_token_front_gets_a_clear_error_not_the_gateways_token(
    issuer: Issuer,
) -> None:
    shared = "a-shared-front-token-0123456789abcdef"
    with anyio.fail_after(scaled(120)):
        async with guarded_upstream(issuer) as up:
            entry = {"url": up.url, "credentials": credentials(issuer, "gateway", "token_exchange")}
            gateway = Gateway(config(SETTINGS, {"up": entry}), store=MemoryStore())
            async with (
                gateway,
                served_over_http(gateway, token=shared) as served,
                mcp_client(served, {"authorization": f"Bearer {shared}"}) as client,
            ):
                refused = await client.call_tool("whoami", {})
                assert refused.is_error and "takes each caller's own OAuth access token" in text(refused)
                # Only the gateway's own requests reached the upstream, with its own token.
                assert all("act" not in claims(t) and claims(t)["sub"] == "gateway" for t in up.tokens())
                assert shared not in [t for t, _ in up.seen]
                assert (await client.list_tools()).tools  # and the gateway goes on serving
