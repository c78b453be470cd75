"""Which downstream session a request belongs to. The one place that reaches ``ctx.session._connection``.

mcp 2.3.0 gives low-level handlers no public per-connection handle: ``ctx.session`` is rebuilt
for every request, and the connection object behind it is private. Everything the gateway
needs from it is read here, so an SDK change touches one module.

How a request finds its session, first match wins (docs: reference, sessions):

1. ``_meta["residency/session"]`` on the request, or the ``Residency-Session`` HTTP header: a
   key the client repeats (the 2026-07-28 way, and how any client resumes a session). On a
   request the HTTP transport authenticated, the key is bound to the caller's identity: the
   session is ``<identity>/<key>``, so a key names nothing across identities (another token
   or another OAuth principal cannot reach it). The identity of a static bearer token is
   ``token-<16 hex>``; of an OAuth principal, ``oauth-<32 hex>`` (its issuer, subject and
   client, ``_oauth.Principal``). Without authentication, and on stdio, keys are used as given.
2. Handshake era: the connection itself (a key given once sticks to the connection). Over
   stateful HTTP that is the ``Mcp-Session-Id``, which the SDK lets only the principal that
   opened it use (``_oauth_http`` hands it the principal).
3. The gateway's default key (``residency serve --session``; a stdio gateway serves one
   client and makes a fresh key per process unless one is named). Under OAuth it is bound to
   the caller's identity like an explicit key: many principals share the gateway, and none
   shares a session by default. (A static token is one identity: its default key stays as
   given.)
4. 2026-07-28 over HTTP: the caller's identity (an OAuth principal's, whatever token it
   holds now; else the bearer token the request carries, one identity per token).
   On a 2026-07-28 stdio pipe: the pipe.
5. Otherwise the caller is anonymous: ``session_key`` returns None and the gateway gives the
   request a throwaway session of its own, so anonymous callers never share state.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from residency._errors import InvalidInput

__all__ = [
    "IDENTITY_STATE",
    "OAUTH_IDENTITY_PREFIX",
    "PRINCIPAL_STATE",
    "SESSION_HEADER",
    "SESSION_META_KEY",
    "connection_of",
    "is_modern",
    "request_principal",
    "session_key",
    "token_identity",
]

SESSION_META_KEY = "residency/session"
"""The ``_meta`` key a client repeats to name its session."""

SESSION_HEADER = "residency-session"
"""The HTTP header that names the session (case-insensitive)."""

IDENTITY_STATE = "residency.identity"
"""Where the HTTP transport puts an authenticated request's identity (ASGI scope ``state``)."""

PRINCIPAL_STATE = "residency.principal"
"""Where the OAuth front puts a request's validated ``Principal`` (ASGI scope ``state``)."""

OAUTH_IDENTITY_PREFIX = "oauth-"
"""How an OAuth principal's identity starts (``_oauth.Principal.identity``)."""

_STATE_KEY = "residency.session"
_KEY_OK = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The connection a request arrived on (private in mcp 2.3.0)."""
    connection: Connection = ctx.session._connection
    return connection


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request speaks the 2026-07-28 era (no handshake, no per-connection state)."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _explicit_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    meta = ctx.meta
    value = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
    if value is None and ctx.params is not None:
        raw = ctx.params.get("_meta")
        if isinstance(raw, dict):
            value = raw.get(SESSION_META_KEY)
    if value is None and ctx.request is not None:
        headers = getattr(ctx.request, "headers", None)
        if headers is not None:
            value = headers.get(SESSION_HEADER)
    if value is None:
        return None
    if not isinstance(value, str) or not _KEY_OK.match(value):
        raise InvalidInput(
            f"{SESSION_META_KEY} must be 1-128 characters of letters, digits and ._:@/+=- "
            f"(got {str(value)[:40]!r})",
            where=SESSION_META_KEY,
        )
    return value


def token_identity(token: str) -> str:
    """The identity of a bearer token, as session keys show it.

    The token itself never becomes part of a key (keys are journaled and logged).
    """
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _bearer_identity(ctx: ServerRequestContext[Any, Any]) -> str | None:
    headers = getattr(ctx.request, "headers", None) if ctx.request is not None else None
    value = headers.get("authorization") if headers is not None else None
    if not isinstance(value, str) or not value.lower().startswith("bearer ") or len(value) <= 7:
        return None
    return token_identity(value[7:])


def _authenticated_identity(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The identity the HTTP transport verified for this request (None: not authenticated)."""
    scope = getattr(ctx.request, "scope", None) if ctx.request is not None else None
    state = scope.get("state") if isinstance(scope, dict) else None
    value = state.get(IDENTITY_STATE) if isinstance(state, dict) else None
    return value if isinstance(value, str) else None


def request_principal(ctx: ServerRequestContext[Any, Any]) -> Any:
    """The ``_oauth.Principal`` the OAuth front validated for this request (None: none)."""
    scope = getattr(ctx.request, "scope", None) if ctx.request is not None else None
    state = scope.get("state") if isinstance(scope, dict) else None
    return state.get(PRINCIPAL_STATE) if isinstance(state, dict) else None


def session_key(ctx: ServerRequestContext[Any, Any], default: str | None) -> str | None:
    """The session key of a request (see the module docstring); None for an anonymous caller.

    Raises:
        InvalidInput: a malformed explicit key.
    """
    explicit = _explicit_key(ctx)
    identity = _authenticated_identity(ctx)
    if identity is not None:
        if explicit is not None:
            explicit = f"{identity}/{explicit}"
        if default is not None and identity.startswith(OAUTH_IDENTITY_PREFIX):
            default = f"{identity}/{default}"
    connection = connection_of(ctx)
    if not is_modern(ctx):
        state = connection.state
        if explicit is not None:
            state[_STATE_KEY] = explicit
            return explicit
        known = state.get(_STATE_KEY)
        if isinstance(known, str):
            return known
        key = default or (
            f"http-{connection.session_id}" if connection.session_id else f"conn-{uuid.uuid4().hex}"
        )
        state[_STATE_KEY] = key
        return key
    if explicit is not None:
        return explicit
    if default is not None:
        return default
    if connection.has_standalone_channel:
        # A 2026-07-28 duplex pipe (stdio): one Connection per request, one outbound per pipe.
        return f"pipe-{id(connection.outbound):x}"
    return identity or _bearer_identity(ctx)


class ListChangedServer(Server[Any]):
    """A low-level server that advertises ``tools.listChanged`` in the handshake era.

    mcp 2.3.0 advertises it as false unless asked, and TypeScript clients then ignore the
    ``list_changed`` notifications we send.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )
