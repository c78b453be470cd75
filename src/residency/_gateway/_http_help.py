"""What the HTTP front tells a person trying it by hand: the page at ``/`` and the hint on a POST
that names no session.

``GET /`` answers a short plain-text page: what this is, its paths, how an MCP client connects,
and curl examples of both protocol eras (the handshake era's ``initialize``, then its
``Mcp-Session-Id``; the 2026-07-28 era's per-request headers and ``_meta`` envelope). The page
is guarded as ``/healthz`` is (the ``Host``/``Origin`` check, and the token when one is set) and
shows no secret: the URL is the one the request used, a token appears only as
``$RESIDENCY_TOKEN`` (an OAuth access token as ``$ACCESS_TOKEN``).

A request to the MCP path with no ``Mcp-Session-Id`` that is not an ``initialize`` gets the
SDK's 400 "Bad Request: Missing session ID". ``SessionHint`` keeps that answer's status and
JSON-RPC error and only lengthens its message with what to send instead.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from residency._gateway._oauth_http import METADATA_PATH

__all__ = [
    "HANDSHAKE_VERSION",
    "MISSING_SESSION",
    "MODERN_VERSION",
    "SessionHint",
    "root_page",
]

HANDSHAKE_VERSION = "2025-11-25"
"""The newest handshake-era protocol version (the page's ``initialize`` example)."""

MODERN_VERSION = "2026-07-28"
"""The protocol version without a handshake."""

MISSING_SESSION = "Bad Request: Missing session ID"
"""The SDK's message for a request that names no session and does not open one."""

_HINT = (
    f"{MISSING_SESSION}: send an initialize request first (no Mcp-Session-Id) and repeat the "
    "Mcp-Session-Id header of its answer on every later request, or speak the "
    f"{MODERN_VERSION} era, which has no sessions: send 'MCP-Protocol-Version: {MODERN_VERSION}' "
    "and 'Mcp-Method: <method>' headers and params._meta with "
    "io.modelcontextprotocol/protocolVersion, clientInfo and clientCapabilities. "
    "GET / shows curl examples of both"
)

_JSON_HEADERS = ("Content-Type: application/json", "Accept: application/json, text/event-stream")
_CLIENT_INFO = {"name": "curl", "version": "0"}


def _curl(url: str, headers: list[str], body: dict[str, Any], *, show_headers: bool = False) -> str:
    """One curl command, a header per line; every value in single quotes but ``$VARIABLES``."""

    def quoted(value: str) -> str:
        return f'"{value}"' if "$" in value else f"'{value}'"

    lines = [f"curl -s{'i' * show_headers} {url}"]
    lines += [f"-H {quoted(h)}" for h in headers]
    lines.append(f"-d '{json.dumps(body, separators=(',', ':'))}'")
    return " \\\n    ".join(lines)


def root_page(
    base: str, mcp_path: str, health_path: str, metrics_path: str, *, token: bool, oauth: bool = False
) -> str:
    """The page at ``/`` for a gateway reached at ``base`` (``http://host:port``).

    Args:
        base: scheme, host and port as the request named them (the ``Host`` check passed).
        mcp_path: the MCP endpoint's path; ``health_path`` and ``metrics_path`` likewise.
        token: whether requests need the gateway's static bearer token (shown as
            ``$RESIDENCY_TOKEN``, never its value).
        oauth: whether requests need an OAuth access token instead (shown as ``$ACCESS_TOKEN``).
    """
    url = base + mcp_path
    variable = "ACCESS_TOKEN" if oauth else "RESIDENCY_TOKEN"
    auth = [f"Authorization: Bearer ${variable}"] if token or oauth else []
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE_VERSION, "capabilities": {}, "clientInfo": _CLIENT_INFO},
    }
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientInfo": _CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    modern = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
    session = ["Mcp-Session-Id: $SESSION", f"MCP-Protocol-Version: {HANDSHAKE_VERSION}"]
    modern_headers = [f"MCP-Protocol-Version: {MODERN_VERSION}", "Mcp-Method: tools/list"]
    config = json.dumps({"mcpServers": {"residency": {"url": url}}})
    if oauth:
        needs = (
            "every request needs 'Authorization: Bearer <access token>', an OAuth access token from "
            f"an authorization server that {base + METADATA_PATH} names"
        )
    elif token:
        needs = "every request needs 'Authorization: Bearer <token>', the gateway's token"
    else:
        needs = "no token is needed"
    return f"""\
residency: an MCP gateway

This serves the tools of its upstream MCP servers through one MCP endpoint (Model Context
Protocol, streamable HTTP). It is for MCP clients; a browser has nothing to do here.

  {url}    the MCP endpoint (POST JSON-RPC; GET opens a session's event stream)
  {base + health_path}    health of the upstreams (JSON)
  {base + metrics_path}    metrics (Prometheus text)

Here {needs}.

Connect an MCP client to {url}; in a host's config:

  {config}

or from Python with the mcp SDK: mcp.Client("{url}").

Try it with curl. Handshake era (protocol versions up to {HANDSHAKE_VERSION}): initialize first,
then repeat the Mcp-Session-Id header of its answer on every request:

  {_curl(url, [*_JSON_HEADERS, *auth], initialize, show_headers=True)}

  SESSION=<the Mcp-Session-Id of that answer>
  {_curl(url, [*_JSON_HEADERS, *auth, *session], listed)}

{MODERN_VERSION} era: no handshake and no session id; every request carries the protocol
version and its method as headers, and an envelope in params._meta:

  {_curl(url, [*_JSON_HEADERS, *auth, *modern_headers], modern)}

To keep one session across requests in either era, send 'Residency-Session: <key>'.
"""


class SessionHint:
    """ASGI middleware on the MCP path: the SDK's 400 "Missing session ID" says what to send.

    Only that answer is changed, and only its message: the status, the headers and the JSON-RPC
    error (code, id) stay the SDK's. Every other response passes through unbuffered.
    """

    def __init__(self, app: ASGIApp, *, path: str) -> None:
        self._app = app
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self._path:
            await self._app(scope, receive, send)
            return
        held: list[Message] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 400:
                held.append(message)  # a candidate: hold it until its body is known
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                for out in _hinted(held):
                    await send(out)
                held.clear()

        await self._app(scope, receive, watch)


def _hinted(messages: list[Message]) -> list[Message]:
    """A held 400 response, its message lengthened when it is the SDK's missing-session error."""
    start, *bodies = messages
    body = b"".join(m.get("body", b"") for m in bodies)
    try:
        answer = json.loads(body)
    except ValueError:
        return messages
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict) or error.get("message") != MISSING_SESSION:
        return messages
    error["message"] = _HINT
    new = json.dumps(answer, separators=(",", ":")).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(new)).encode()))
    return [{**start, "headers": headers}, {"type": "http.response.body", "body": new, "more_body": False}]
