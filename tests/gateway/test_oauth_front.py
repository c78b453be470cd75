"""The resource server's HTTP answers: 401/403 challenges, the metadata document, 503 while the
issuer is down, and the principal handed to what is behind it.

The middleware runs in front of a small ASGI app that reports what reached it; the whole
gateway behind it is tested in ``test_oauth_sessions`` and against a real provider in
``test_oauth_provider``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import Receive, Scope, Send

from residency._gateway._connection import IDENTITY_STATE
from residency._gateway._oauth import TokenValidator
from residency._gateway._oauth_http import PRINCIPAL_STATE, OAuthBearer
from tests.gateway.oauth_keys import ISSUER, RESOURCE, Clock, FakeIssuer, mint, rsa_key, settings

pytestmark = pytest.mark.anyio

KEY = rsa_key("front-key")
METADATA_URL = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


class Behind:
    """The app behind the middleware: records what reached it."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.get("state", {})
        user = scope.get("user")
        self.seen.append(
            {
                "identity": state.get(IDENTITY_STATE),
                "principal": state.get(PRINCIPAL_STATE),
                "user": user.access_token.subject if isinstance(user, AuthenticatedUser) else None,
            }
        )
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def front(issuer: FakeIssuer | None = None, **overrides: Any) -> tuple[httpx2.AsyncClient, Behind]:
    if issuer is None:
        issuer = FakeIssuer()
        issuer.publish(KEY)
    config = settings(**overrides)
    behind = Behind()
    app = OAuthBearer(behind, config, validator=TokenValidator(config, fetch=issuer, clock=Clock()))
    client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gw")
    return client, behind


def challenge(response: httpx2.Response) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer k="v", ...`` header."""
    value = response.headers["www-authenticate"]
    scheme, _, rest = value.partition(" ")
    assert scheme == "Bearer"
    params = {}
    for part in rest.split('", '):
        name, _, quoted = part.partition("=")
        params[name.strip()] = quoted.strip('"')
    return params


async def test_a_request_without_a_token_is_told_where_the_metadata_is_and_nothing_else() -> None:
    client, behind = front()
    async with client:
        response = await client.post("/mcp", content=b"{}")
        assert response.status_code == 401
        assert challenge(response) == {"resource_metadata": METADATA_URL}
        other_scheme = await client.post("/mcp", headers={"authorization": "Basic YTpi"})
        assert other_scheme.status_code == 401 and "error" not in challenge(other_scheme)
    assert behind.seen == []


async def test_an_invalid_token_is_invalid_token_with_the_metadata() -> None:
    client, behind = front()
    async with client:
        response = await client.post("/mcp", headers={"authorization": f"Bearer {mint(KEY, aud='x:y')}"})
    assert response.status_code == 401
    params = challenge(response)
    assert params["error"] == "invalid_token" and params["resource_metadata"] == METADATA_URL
    assert response.json()["error"] == "invalid_token"
    assert behind.seen == []


async def test_a_token_without_a_required_scope_is_403_insufficient_scope_naming_the_scopes() -> None:
    client, behind = front(scopes=["mcp:tools", "mcp:admin"])
    async with client:
        response = await client.get("/mcp", headers={"authorization": f"Bearer {mint(KEY)}"})
    assert response.status_code == 403
    params = challenge(response)
    assert params["error"] == "insufficient_scope" and params["scope"] == "mcp:tools mcp:admin"
    assert behind.seen == []


async def test_a_valid_token_reaches_the_app_with_its_principal() -> None:
    client, behind = front()
    async with client:
        response = await client.post("/mcp", headers={"authorization": f"bearer {mint(KEY, sub='dana')}"})
    assert response.status_code == 200
    [seen] = behind.seen
    assert seen["user"] == "dana" and seen["principal"].subject == "dana"
    assert seen["identity"] == seen["principal"].identity


async def test_the_metadata_document_is_served_without_a_token_at_both_paths() -> None:
    client, behind = front(scopes=["mcp:tools"], resource_name="Team tools")
    async with client:
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            response = await client.get(path)
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            assert json.loads(response.content) == {
                "resource": RESOURCE,
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp:tools"],
                "bearer_methods_supported": ["header"],
                "resource_name": "Team tools",
            }
        assert (await client.options("/.well-known/oauth-protected-resource/mcp")).status_code == 204
        assert (await client.post("/.well-known/oauth-protected-resource")).status_code == 405
    assert behind.seen == []


async def test_a_resource_served_under_another_path_has_its_metadata_there_too() -> None:
    client, _ = front(resource="https://tools.example.com/team/mcp")
    async with client:
        assert (await client.get("/.well-known/oauth-protected-resource/team/mcp")).status_code == 200
        response = await client.get("/mcp")
    expected = "https://tools.example.com/.well-known/oauth-protected-resource/team/mcp"
    assert challenge(response)["resource_metadata"] == expected


async def test_an_unreachable_issuer_is_503_with_retry_after_not_401() -> None:
    issuer = FakeIssuer(down=True)
    client, behind = front(issuer)
    async with client:
        response = await client.post("/mcp", headers={"authorization": f"Bearer {mint(KEY)}"})
    assert response.status_code == 503 and response.headers["retry-after"]
    assert "www-authenticate" not in response.headers
    assert behind.seen == []
