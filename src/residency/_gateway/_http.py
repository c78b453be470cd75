"""The streamable HTTP transport: the gateway's ASGI app, an optional bearer token, and a server.

Bound to 127.0.0.1 by default, with DNS-rebinding protection on (a request whose ``Host`` is
not the bound address gets 421). Binding elsewhere keeps the protection, allowing that host.
With a token, every request must carry ``Authorization: Bearer <token>`` (compared in constant
time); others get 401 and never reach MCP.
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Awaitable, Callable

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from residency._gateway._server import Gateway

__all__ = ["BearerToken", "bind", "http_app", "serve_http"]

MCP_PATH = "/mcp"


class BearerToken:
    """ASGI middleware: refuse HTTP requests without the bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send(
                    {"type": "http.response.body", "body": b'{"error":"missing or wrong bearer token"}'}
                )
                return
        await self._app(scope, receive, send)


def http_app(gateway: Gateway, *, host: str = "127.0.0.1", token: str | None = None) -> ASGIApp:
    """The gateway's ASGI app at ``/mcp`` (stateful streamable HTTP, SSE responses)."""
    if host in ("127.0.0.1", "localhost", "::1"):
        security = None  # the SDK's loopback default: protection on, loopback hosts allowed
    else:
        shown = f"[{host}]" if ":" in host else host
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{shown}:*", shown],
            allowed_origins=[f"http://{shown}:*", f"https://{shown}:*"],
        )
    app: ASGIApp = gateway.server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security
    )
    if token:
        app = BearerToken(app, token)
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (``port`` 0: a free one, read it from ``getsockname()``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_http(
    gateway: Gateway,
    sock: socket.socket,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    started: Callable[[str], Awaitable[None] | None] | None = None,
) -> None:
    """Serve the gateway on ``sock`` until cancelled (uvicorn on the running event loop)."""
    import uvicorn

    app = http_app(gateway, host=host, token=token)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}{MCP_PATH}"
    done = anyio.Event()

    async def run() -> None:
        # Shielded: on cancellation uvicorn is asked to exit and shuts down cleanly (closing
        # its sockets and streams) instead of being torn down mid-flight.
        try:
            with anyio.CancelScope(shield=True):
                await server.serve(sockets=[sock])
        finally:
            sock.close()
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            while not server.started and not done.is_set():
                await anyio.sleep(0.01)
            if started is not None and server.started:
                maybe = started(url)
                if maybe is not None:
                    await maybe
            await done.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await done.wait()
