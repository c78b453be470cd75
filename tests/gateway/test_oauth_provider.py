"""The gateway as an OAuth 2.1 resource server of a real OpenID provider.

The provider is ``oidc-provider`` (certified OpenID Connect, from ``tests/peers``), run by
``tests/peers/oidc_issuer.mjs``: one process for this module, with two issuers sharing one key
set, client-credentials clients and a control port that rotates keys and sets the providers'
clock off (``oidc_issuer.mjs`` says how). Each test serves the demo desk over HTTP in this
process, with ``residency.auth`` naming that provider, and reaches it with real MCP clients: the
SDK's own client-credentials flow (401, protected-resource metadata, the provider's metadata,
a token for the resource) and clients sending tokens the test got from the provider.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import selectors
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from mcp import Client
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from residency import MemoryStore, ToolState
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._http import bind, serve_http
from residency._gateway._oauth import Principal
from residency._gateway._oauth_config import OAuthSettings
from residency._store._protocol import Store
from tests._timing import CLEANUP, START, STEP
from tests.conftest import ROOT
from tests.gateway.conftest import config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PEERS = ROOT / "tests" / "peers"
SCRIPT = PEERS / "oidc_issuer.mjs"
PACKAGE = PEERS / "node_modules" / "oidc-provider" / "package.json"


@dataclass(frozen=True)
class Issuer:
    """The running provider: its two issuers, its control port, the clients' secret suffix."""

    url: str
    other: str
    control: str
    secret: str

    def credentials(self, client: str) -> tuple[str, str]:
        return client, f"{client}-{self.secret}"


def _missing(what: str) -> NoReturn:
    reason = f"{what} is not installed (run `npm install` in tests/peers; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so a missing peer is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    node = shutil.which("node")
    if node is None:
        _missing("node")
    if not PACKAGE.exists():
        _missing("oidc-provider")
    log = tmp_path_factory.mktemp("oidc") / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [node, str(SCRIPT)], cwd=PEERS, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
    assert process.stdout is not None and process.stdin is not None
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=START):
                pytest.fail(f"the OpenID provider did not start within {START:g} s: {log.read_text()}")
        line = process.stdout.readline()
        if not line:
            pytest.fail(f"the OpenID provider exited: {log.read_text()}")
        ready = json.loads(line)
        yield Issuer(ready["issuer"], ready["other"], ready["control"], ready["secret"])
    finally:
        process.stdin.close()
        process.stdout.close()
        try:
            process.wait(timeout=CLEANUP)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- talking to the provider --------------------------------------------------------------------


async def token(issuer_url: str, issuer: Issuer, client: str, resource: str, scope: str = "mcp:tools") -> str:
    """An access token from ``issuer_url`` for ``client`` (client credentials) and ``resource``."""
    async with httpx2.AsyncClient(timeout=STEP) as http:
        response = await http.post(
            f"{issuer_url}/token",
            auth=issuer.credentials(client),
            data={"grant_type": "client_credentials", "resource": resource, "scope": scope},
        )
    assert response.status_code == 200, response.text
    value = response.json()["access_token"]
    assert isinstance(value, str)
    return value


async def control(issuer: Issuer, method: str, path: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=STEP) as http:
        response = await http.request(method, f"{issuer.control}{path}")
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


async def jwks_served(issuer: Issuer) -> int:
    return int((await control(issuer, "GET", "/stats"))["jwks"])


@asynccontextmanager
async def clock_off(issuer: Issuer, seconds: int) -> AsyncIterator[None]:
    await control(issuer, "POST", f"/clock?offset={seconds}")
    try:
        yield
    finally:
        await control(issuer, "POST", "/clock?offset=0")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segments(value: str) -> list[dict[str, Any]]:
    head, body, _ = value.split(".")
    return [json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in (head, body)]


# -- the gateway ----------------------------------------------------------------------------------


@dataclass
class Served:
    gateway: Gateway
    url: str
    """The MCP endpoint, which is also the resource."""

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")


@asynccontextmanager
async def oauth_gateway(
    issuer: Issuer, store: Store | None = None, default_session: str | None = None, **auth: Any
) -> AsyncIterator[Served]:
    """The demo desk (delivery by list) served over HTTP with ``residency.auth`` naming ``issuer``."""
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    settings = OAuthSettings.model_validate({"issuer": issuer.url, "resource": url, **auth})
    gateway = Gateway(
        config({"budget": {"schema_tokens": 350}, "delivery": "list"}),
        upstreams={"desk": IncidentDesk().server},
        store=store or MemoryStore(),
        default_session=default_session,
    )
    ready = anyio.Event()
    async with gateway, anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(gateway, sock, auth=settings, started=lambda _: ready.set()))
        with anyio.fail_after(STEP):
            await ready.wait()
        yield Served(gateway, url)
        tg.cancel_scope.cancel()


@asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str], mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def listed(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


def challenge(response: httpx2.Response) -> dict[str, str]:
    scheme, _, rest = response.headers["www-authenticate"].partition(" ")
    assert scheme == "Bearer"
    params = {}
    for part in rest.split('", '):
        name, _, quoted = part.partition("=")
        params[name.strip()] = quoted.strip('"')
    return params


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


async def answer_to(served: Served, bearer: str) -> httpx2.Response:
    """The gateway's answer to an MCP ``initialize`` carrying ``bearer``."""
    async with httpx2.AsyncClient(timeout=STEP) as http:
        return await http.post(
            served.url, json=INITIALIZE, headers={"authorization": f"Bearer {bearer}", "accept": ACCEPT}
        )


def metadata_url(served: Served) -> str:
    return f"{served.base}/.well-known/oauth-protected-resource/mcp"


async def assert_refused(served: Served, bearer: str) -> None:
    response = await answer_to(served, bearer)
    assert response.status_code == 401
    params = challenge(response)
    assert params["error"] == "invalid_token"
    assert params["resource_metadata"] == metadata_url(served)


# -- tests -----------------------------------------------------------------------------------------


class MemoryTokens(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_credentials_client_finds_the_provider_and_lists_tools(
    issuer: Issuer, mode: str
) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, scopes=["mcp:tools"]) as served:
            client_id, secret = issuer.credentials("alice")
            storage = MemoryTokens()
            auth = ClientCredentialsOAuthProvider(
                served.url, storage, client_id, secret, scope="mcp:tools", issuer=issuer.url
            )
            async with (
                httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(STEP, read=None)) as http,
                Client(streamable_http_client(served.url, http_client=http), mode=mode) as client,
            ):
                names = await listed(client)
            assert "search_tools" in names and "reexpand_tools" in names
            assert storage.tokens is not None  # the SDK got it from the provider through discovery
            header, claims = _segments(storage.tokens.access_token)
            assert header["typ"] == "at+jwt" and claims["aud"] == served.url and claims["iss"] == issuer.url


async def test_the_metadata_document_names_the_provider(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with (
            oauth_gateway(issuer, scopes=["mcp:tools"]) as served,
            httpx2.AsyncClient(timeout=STEP) as http,
        ):
            for path in (
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp",
            ):
                response = await http.get(served.base + path)
                assert response.status_code == 200
                document = response.json()
                assert document["resource"] == served.url
                assert document["authorization_servers"] == [issuer.url]
                assert document["scopes_supported"] == ["mcp:tools"]
            provider = (await http.get(f"{issuer.url}/.well-known/openid-configuration")).json()
            assert provider["issuer"] == issuer.url
            unauthenticated = await http.post(served.url, json=INITIALIZE, headers={"accept": ACCEPT})
            assert unauthenticated.status_code == 401
            assert challenge(unauthenticated) == {
                "resource_metadata": metadata_url(served),
                "scope": "mcp:tools",
            }


async def test_expired_not_yet_valid_foreign_audience_and_issuer_tokens_are_refused(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, leeway=30) as served:
            good = await token(issuer.url, issuer, "alice", served.url)
            assert (await answer_to(served, good)).status_code == 200
            async with clock_off(issuer, -3600):  # issued an hour ago, for ten minutes
                expired = await token(issuer.url, issuer, "alice", served.url)
            async with clock_off(issuer, 3600):  # issued an hour from now
                early = await token(issuer.url, issuer, "alice", served.url)
            elsewhere = await token(issuer.url, issuer, "alice", "https://other.example.com/mcp")
            # The other issuer signs with the same keys: only its iss differs.
            foreign = await token(issuer.other, issuer, "alice", served.url)
            assert _segments(foreign)[0]["kid"] == _segments(good)[0]["kid"]
            for bad in (expired, early, elsewhere, foreign):
                await assert_refused(served, bad)
            assert (await answer_to(served, good)).status_code == 200


async def test_a_missing_scope_is_403_insufficient_scope(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, scopes=["mcp:admin"]) as served:
            narrow = await token(issuer.url, issuer, "alice", served.url, scope="mcp:tools")
            response = await answer_to(served, narrow)
            assert response.status_code == 403
            assert challenge(response)["error"] == "insufficient_scope"
            wide = await token(issuer.url, issuer, "alice", served.url, scope="mcp:tools mcp:admin")
            assert (await answer_to(served, wide)).status_code == 200


async def test_alg_none_and_hs256_with_the_public_key_are_refused(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer) as served:
            genuine = await token(issuer.url, issuer, "alice", served.url)
            header, claims = _segments(genuine)
            body = _b64(json.dumps(claims).encode())
            none_head = _b64(json.dumps({"alg": "none", "typ": "at+jwt", "kid": header["kid"]}).encode())
            async with httpx2.AsyncClient(timeout=STEP) as http:
                keys = (await http.get(f"{issuer.url}/jwks")).json()["keys"]
            public = RSAAlgorithm.from_jwk(next(k for k in keys if k["kid"] == header["kid"]))
            assert isinstance(public, rsa.RSAPublicKey)
            pem = public.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            hs_head = _b64(json.dumps({"alg": "HS256", "typ": "at+jwt", "kid": header["kid"]}).encode())
            signature = hmac.new(pem, f"{hs_head}.{body}".encode(), hashlib.sha256).digest()
            for forged in (f"{none_head}.{body}.", f"{hs_head}.{body}.{_b64(signature)}"):
                await assert_refused(served, forged)
            assert (await answer_to(served, genuine)).status_code == 200


async def test_a_rotated_key_is_picked_up_without_a_restart(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, jwks_cooldown=0) as served:
            before = await token(issuer.url, issuer, "alice", served.url)
            assert (await answer_to(served, before)).status_code == 200
            rotated = (await control(issuer, "POST", "/rotate"))["kid"]
            after = await token(issuer.url, issuer, "alice", served.url)
            assert _segments(after)[0]["kid"] == rotated != _segments(before)[0]["kid"]
            fetched = await jwks_served(issuer)
            assert (await answer_to(served, after)).status_code == 200
            assert await jwks_served(issuer) == fetched + 1  # the unknown kid made it fetch once
            assert (await answer_to(served, before)).status_code == 200  # the old key is still published


async def test_a_flood_of_unknown_kids_within_the_cooldown_fetches_no_keys(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, jwks_cooldown=3600) as served:
            before = await token(issuer.url, issuer, "bob", served.url)
            assert (await answer_to(served, before)).status_code == 200
            await control(issuer, "POST", "/rotate")
            after = await token(issuer.url, issuer, "bob", served.url)
            fetched = await jwks_served(issuer)
            for _ in range(25):
                await assert_refused(served, after)
            assert await jwks_served(issuer) == fetched
            assert (await answer_to(served, before)).status_code == 200


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_two_identities_naming_one_session_key_get_two_sessions(issuer: Issuer, mode: str) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer) as served:
            alice = await token(issuer.url, issuer, "alice", served.url)
            bob = await token(issuer.url, issuer, "bob", served.url)
            as_alice = {"Authorization": f"Bearer {alice}", "Residency-Session": "shared"}
            async with mcp_client(served.url, as_alice, mode) as client:
                assert not (await client.call_tool("reexpand_tools", {"names": ["list_services"]})).is_error
                assert "list_services" in await listed(client)
            as_bob = {"Authorization": f"Bearer {bob}", "Residency-Session": "shared"}
            async with mcp_client(served.url, as_bob, mode) as client:
                assert "list_services" not in await listed(client)
            # Alice again, with a new token: her session, as she left it.
            again = await token(issuer.url, issuer, "alice", served.url)
            async with mcp_client(
                served.url, {**as_alice, "Authorization": f"Bearer {again}"}, mode
            ) as client:
                assert "list_services" in await listed(client)
            identities = {
                who: Principal(issuer.url, who, who, frozenset()).identity for who in ("alice", "bob")
            }
            assert (
                served.gateway.session(f"{identities['alice']}/shared").state("list_services")
                is ToolState.RESIDENT
            )
            assert (
                served.gateway.session(f"{identities['bob']}/shared").state("list_services")
                is not ToolState.RESIDENT
            )


async def test_the_default_session_is_one_per_identity(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, default_session="team") as served:
            alice = await token(issuer.url, issuer, "alice", served.url)
            bob = await token(issuer.url, issuer, "bob", served.url)
            async with mcp_client(served.url, {"Authorization": f"Bearer {alice}"}, "legacy") as client:
                await client.call_tool("reexpand_tools", {"names": ["list_services"]})
            async with mcp_client(served.url, {"Authorization": f"Bearer {bob}"}, "legacy") as client:
                assert "list_services" not in await listed(client)
            alice_key = f"{Principal(issuer.url, 'alice', 'alice', frozenset()).identity}/team"
            assert served.gateway.session(alice_key).state("list_services") is ToolState.RESIDENT


async def test_an_mcp_session_id_opened_by_one_identity_is_refused_to_another(issuer: Issuer) -> None:
    with anyio.fail_after(START):
        async with oauth_gateway(issuer) as served, AsyncExitStack() as stack:
            alice = await token(issuer.url, issuer, "alice", served.url)
            bob = await token(issuer.url, issuer, "bob", served.url)
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=STEP))
            opened = await http.post(
                served.url, json=INITIALIZE, headers={"authorization": f"Bearer {alice}", "accept": ACCEPT}
            )
            session_id = opened.headers["mcp-session-id"]
            stolen = await http.post(
                served.url,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                headers={
                    "authorization": f"Bearer {bob}",
                    "accept": ACCEPT,
                    "mcp-session-id": session_id,
                    "mcp-protocol-version": "2025-11-25",
                },
            )
            assert stolen.status_code == 404


async def test_opaque_tokens_are_introspected_at_the_provider(issuer: Issuer) -> None:
    client_id, secret = issuer.credentials("gateway")
    introspection = {
        "endpoint": f"{issuer.url}/token/introspection",
        "client_id": client_id,
        "client_secret": secret,
    }
    with anyio.fail_after(START):
        async with oauth_gateway(issuer, introspection=introspection) as served:
            opaque = await token(issuer.url, issuer, "opaque", served.url)
            assert opaque.count(".") == 0
            as_opaque = {"Authorization": f"Bearer {opaque}", "Residency-Session": "s"}
            async with mcp_client(served.url, as_opaque) as client:
                assert not (await client.call_tool("reexpand_tools", {"names": ["list_services"]})).is_error
            elsewhere = await token(issuer.url, issuer, "opaque", "https://other.example.com/mcp")
            await assert_refused(served, elsewhere)
            await assert_refused(served, "made-up-opaque-token")
            identity = Principal(issuer.url, "opaque", "opaque", frozenset()).identity
            assert served.gateway.session(f"{identity}/s").state("list_services") is ToolState.RESIDENT
        async with oauth_gateway(issuer) as served:  # no introspection: opaque tokens are refused
            await assert_refused(served, await token(issuer.url, issuer, "opaque", served.url))
