"""A team-shared gateway under a tool policy, for the policy tests and ``policy_attack.py``.

Two upstreams: the demo desk (``desk``, 14 tools) and ``vault`` (4 tools). Three users, whose
access tokens are real RS256 JWTs that the gateway's OAuth front checks against a key set
served on loopback (``Issuer``): ``alice`` in group ``ops``, ``bob`` in group ``support``, and
``carol`` in no group. The policy (``POLICY``) and what each user may not see (``DENIED``) are
written out by hand, so a test compares the gateway with them, not with itself.

``serve`` runs one gateway, or several replicas on one store, over HTTP in this process.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import jwt
import mcp_types as types
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from residency._gateway import Gateway, IncidentDesk, parse_config
from residency._gateway._http import bind, serve_http
from residency._gateway._oauth_config import OAuthSettings

ISSUER = "https://idp.example.com"
RESOURCE = "http://127.0.0.1/mcp"  # every replica is this one resource (behind one name)
SCOPE = "mcp:tools"

VAULT_TOOLS = ("read_secret", "list_secrets", "delete_secret", "rotate_key")

POLICY: dict[str, Any] = {
    "rules": [
        # The default rule: every caller, those without an identity too.
        {"allow": ["desk/*"], "deny": ["*/delete_*"]},
        {"groups": ["ops"], "allow": ["vault/*"]},
        {"groups": ["support"], "deny": ["desk/close_incident", "desk/page_oncall"]},
        {"subjects": ["carol"], "allow": ["vault/read_secret"]},
    ]
}

USERS: dict[str, tuple[str, ...]] = {"alice": ("ops",), "bob": ("support",), "carol": ()}

DENIED: dict[str, frozenset[str]] = {
    "alice": frozenset({"delete_secret"}),
    "bob": frozenset({"close_incident", "page_oncall", *VAULT_TOOLS}),
    "carol": frozenset({"list_secrets", "delete_secret", "rotate_key"}),
}
"""The tools each user may not see: the policy above, worked out by hand."""

EVERY_TOOL = frozenset(
    {
        "list_incidents",
        "get_incident",
        "create_incident",
        "update_incident",
        "close_incident",
        "add_timeline_note",
        "get_timeline",
        "page_oncall",
        "list_services",
        "get_service_health",
        "search_runbooks",
        "get_runbook",
        "query_metrics",
        "list_deploys",
        *VAULT_TOOLS,
    }
)


def vault(calls: list[str] | None = None) -> Server[Any]:
    """The ``vault`` upstream: four tools, each answering with its own name and the ``path`` it
    was given (``calls`` collects the names it is called by, so a test sees whether a call
    reached it)."""
    listed = [
        types.Tool(
            name=name,
            description=f"Vault: {name.replace('_', ' ')}.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        )
        for name in VAULT_TOOLS
    ]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in VAULT_TOOLS:
            raise MCPError(code=types.INVALID_PARAMS, message="unknown tool")
        if calls is not None:
            calls.append(params.name)
        path = (params.arguments or {}).get("path", "")
        text = f"vault did {params.name} at {path}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("vault", on_list_tools=list_tools, on_call_tool=call_tool)


class Issuer:
    """A made-up authorization server: an RSA key, its key set served on loopback, and tokens."""

    _shared: rsa.RSAPrivateKey | None = None

    def __init__(self) -> None:
        # One key per process: making a 2048-bit key costs a second or more on a busy machine.
        if Issuer._shared is None:
            Issuer._shared = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key = Issuer._shared
        self.kid = "policy-world"
        self.jwks_uri = ""

    def jwk(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {**public, "kid": self.kid, "use": "sig", "alg": "RS256"}

    def token(self, subject: str, groups: Sequence[str] | None = None, **claims: Any) -> str:
        """An access token for ``subject`` in ``groups`` (default: the user's), good for an hour."""
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": ISSUER,
            "aud": RESOURCE,
            "sub": subject,
            "client_id": "team-agent",
            "scope": SCOPE,
            "groups": list(USERS.get(subject, ()) if groups is None else groups),
            "iat": now,
            "exp": now + 3600,
        }
        body.update(claims)
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": self.kid})

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Serve the key set on loopback (uvicorn in this process); yields its URL."""
        import uvicorn

        document = json.dumps({"keys": [self.jwk()]}).encode()

        async def keys(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": document})

        sock = bind("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(keys, lifespan="off", log_level="warning", log_config=None))
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            while not server.started:
                await anyio.sleep(0.01)
            self.jwks_uri = f"http://127.0.0.1:{sock.getsockname()[1]}/jwks"
            yield self.jwks_uri
            server.should_exit = True


def settings(policy: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``residency`` section of the world's gateways (``policy`` None: ``POLICY``)."""
    return {
        "delivery": "list",
        "budget": {"schema_tokens": 100_000},
        "policy": dict(POLICY if policy is None else policy),
        "ready_wait": 60,
        "search_wait": 0,
        # A read secret is kept as a span of its session: something another caller must not read.
        "spans": {"tags": {"read_secret": ["constraint"]}},
        **extra,
    }


@dataclass
class World:
    """The running world: its issuer, gateways and their MCP URLs, and the vault's calls."""

    issuer: Issuer
    gateways: list[Gateway]
    urls: list[str]
    vault_calls: list[str] = field(default_factory=list)


@asynccontextmanager
async def serve(
    *,
    replicas: int = 1,
    store: str | None = None,
    residency: Mapping[str, Any] | None = None,
    auth: Mapping[str, Any] | None = None,
    wait: float = 60.0,
) -> AsyncIterator[World]:
    """One gateway (or ``replicas`` gateways on ``store``, e.g. one PostgreSQL URL) serving the
    desk and the vault over HTTP, each behind the OAuth front; yields once all serve.

    ``auth``: the ``residency.auth`` section of another authorization server (a real one); None:
    the made-up ``Issuer``'s, whose key set is served for the while."""
    issuer = Issuer()
    calls: list[str] = []
    async with AsyncExitStack() as stack:
        if auth is None:
            jwks_uri = await stack.enter_async_context(issuer.serving())
            auth = {"issuer": ISSUER, "resource": RESOURCE, "jwks_uri": jwks_uri, "scopes": [SCOPE]}
        front = OAuthSettings.model_validate(auth)
        section = dict(residency if residency is not None else settings())
        if store is not None:
            section["store"] = store
        gateways: list[Gateway] = []
        urls: list[str] = []
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        for _ in range(replicas):
            text = json.dumps({"mcpServers": {}, "residency": section})
            gateway = Gateway(
                parse_config(text), upstreams={"desk": IncidentDesk().server, "vault": vault(calls)}
            )
            await stack.enter_async_context(gateway)
            sock = bind("127.0.0.1", 0)
            ready = anyio.Event()
            tg.start_soon(_serve_one, gateway, sock, front, ready)
            with anyio.fail_after(wait):
                await ready.wait()
            gateways.append(gateway)
            urls.append(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
        yield World(issuer, gateways, urls, calls)


async def _serve_one(gateway: Gateway, sock: socket.socket, front: OAuthSettings, ready: anyio.Event) -> None:
    await serve_http(gateway, sock, auth=front, started=lambda _: ready.set())


@asynccontextmanager
async def client(
    url: str, token: str, *, mode: str = "auto", session: str | None = None, timeout: float = 60.0
) -> AsyncIterator[Client]:
    """An MCP client over HTTP with ``token`` (and a ``Residency-Session`` header, if given)."""
    headers = {"authorization": f"Bearer {token}"}
    if session is not None:
        headers["residency-session"] = session
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout, read=None)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as c,
    ):
        yield c
