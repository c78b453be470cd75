"""The HTTP front as an OAuth 2.1 resource server: the bearer check and the metadata document.

``OAuthBearer`` takes the static token's place in the middleware chain (after the request caps
and the ``Host`` check, before any byte of the body is read) and answers:

- ``GET /.well-known/oauth-protected-resource`` and the same path followed by the MCP path
  (RFC 9728 section 3.1), with no token needed: the resource, its authorization server and
  the scopes it asks for, so a client knows where to get a token;
- a request without a bearer token: 401 with ``WWW-Authenticate: Bearer
  resource_metadata="..."`` and no error code (RFC 6750 section 3.1);
- an invalid token: 401 with ``error="invalid_token"``; a valid one without a required scope:
  403 with ``error="insufficient_scope"`` and the scopes asked for;
- a token that cannot be checked now (the issuer's keys or introspection are unreachable):
  503 with ``Retry-After``, so the client keeps its token.

A request that passes carries its principal: its identity in the ASGI scope's state
(``IDENTITY_STATE``, which ``_connection`` binds session keys to; ``PRINCIPAL_STATE`` for the
whole principal), and ``scope["user"]`` as the SDK's ``AuthenticatedUser``, so the SDK's own
session manager refuses an ``Mcp-Session-Id`` that another identity opened.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.types import ASGIApp, Receive, Scope, Send

from residency._gateway._connection import IDENTITY_STATE, PRINCIPAL_STATE
from residency._gateway._jwks import RETRY_SECONDS, IssuerUnavailable
from residency._gateway._oauth import Principal, TokenRefused, TokenValidator
from residency._gateway._oauth_config import OAuthSettings

__all__ = ["METADATA_PATH", "PRINCIPAL_STATE", "OAuthBearer", "metadata_document", "metadata_url"]

logger = logging.getLogger("residency.gateway.auth")

METADATA_PATH = "/.well-known/oauth-protected-resource"


RETRY_AFTER = str(int(RETRY_SECONDS)).encode()


def metadata_url(settings: OAuthSettings) -> str:
    """The URL of the protected-resource metadata of ``settings.resource`` (RFC 9728 section 3.1)."""
    return str(build_resource_metadata_url(AnyHttpUrl(settings.resource)))


def metadata_document(settings: OAuthSettings) -> bytes:
    """The protected-resource metadata (RFC 9728 section 2), as JSON."""
    metadata = ProtectedResourceMetadata(
        resource=AnyHttpUrl(settings.resource),
        authorization_servers=[AnyHttpUrl(settings.issuer)],
        scopes_supported=list(settings.scopes) or None,
        resource_name=settings.resource_name,
    )
    document = metadata.model_dump(mode="json", exclude_none=True)
    # The model normalizes URLs (a trailing slash on a bare host); clients compare these
    # strings with the token's audience and issuer, so they are given exactly as configured.
    document["resource"] = settings.resource
    document["authorization_servers"] = [settings.issuer]
    return json.dumps(document, separators=(",", ":")).encode()


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class OAuthBearer:
    """ASGI middleware: the resource server's bearer check (see the module docstring).

    Args:
        app: the app behind it.
        settings: the ``residency.auth`` section.
        validator: checks tokens (None: one built from ``settings``).
        mcp_path: the MCP endpoint's path, which the path-suffixed metadata URL names.
    """

    def __init__(
        self,
        app: ASGIApp,
        settings: OAuthSettings,
        *,
        validator: TokenValidator | None = None,
        mcp_path: str = "/mcp",
    ) -> None:
        self._app = app
        self.validator = validator if validator is not None else TokenValidator(settings)
        resource_path = urlsplit(settings.resource).path.rstrip("/")
        self._metadata_paths = {METADATA_PATH, METADATA_PATH + mcp_path, METADATA_PATH + resource_path}
        self._metadata = metadata_document(settings)
        challenge = f'Bearer resource_metadata="{_quoted(metadata_url(settings))}"'
        if settings.scopes:
            challenge += f', scope="{" ".join(settings.scopes)}"'
        self._challenge = challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"] in self._metadata_paths:
            await self._serve_metadata(scope, send)
            return
        token = _bearer(scope)
        if token is None:
            await self._refuse(send, 401, self._challenge, {"error": "a bearer token is required"})
            return
        try:
            principal = await self.validator.validate(token)
        except TokenRefused as refused:
            logger.debug("refused a bearer token: %s", refused.description)
            described = f'error="{refused.error}", error_description="{refused.description}"'
            challenge = f"{self._challenge}, {described}"
            body = {"error": refused.error, "error_description": refused.description}
            await self._refuse(send, refused.status, challenge, body)
            return
        except IssuerUnavailable as exc:
            logger.debug("cannot check a bearer token now: %s", exc)  # _jwks logs each failure
            await self._refuse(
                send, 503, None, {"error": "the authorization server cannot be reached; retry later"}
            )
            return
        _mark(scope, principal, token)
        await self._app(scope, receive, send)

    async def _serve_metadata(self, scope: Scope, send: Send) -> None:
        method = scope["method"]
        headers = [
            (b"access-control-allow-origin", b"*"),
            (b"access-control-allow-methods", b"GET, OPTIONS"),
        ]
        if method == "OPTIONS":
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        if method not in ("GET", "HEAD"):
            await self._refuse(send, 405, None, {"error": "use GET"}, extra=[(b"allow", b"GET, OPTIONS")])
            return
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self._metadata)).encode()),
            (b"cache-control", b"public, max-age=3600"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self._metadata if method == "GET" else b""})

    @staticmethod
    async def _refuse(
        send: Send,
        status: int,
        challenge: str | None,
        body: dict[str, str],
        *,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        payload = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),  # the body, if any, is never read
            (b"cache-control", b"no-store"),
        ]
        if challenge is not None:
            headers.append((b"www-authenticate", challenge.encode()))
        if status == 503:
            headers.append((b"retry-after", RETRY_AFTER))
        headers += extra or []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _bearer(scope: Scope) -> str | None:
    """The bearer token of a request's ``Authorization`` header (None: none, or another scheme)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def _mark(scope: Scope, principal: Principal, token: str) -> None:
    """Put ``principal`` on the request (see the module docstring)."""
    state = scope.setdefault("state", {})
    state[IDENTITY_STATE] = principal.identity
    state[PRINCIPAL_STATE] = principal
    # Built unvalidated: every value is the validator's own, and this runs on every request.
    access = AccessToken.model_construct(
        token=token,
        client_id=principal.client_id or principal.subject,
        scopes=sorted(principal.scopes),
        expires_at=principal.expires_at,
        subject=principal.subject,
        claims={"iss": principal.issuer},
    )
    scope["user"] = AuthenticatedUser(access)
    scope["auth"] = AuthCredentials(sorted(principal.scopes))
