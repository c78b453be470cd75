"""The streamable HTTP transport: the gateway's ASGI app, an optional bearer token, and a server.

Paths:

``/mcp``      the MCP endpoint (stateful streamable HTTP; SSE responses, or JSON ones, see below).
``/healthz``  ``GET``: ``{"status": "ok" | "degraded", "upstreams": [...]}`` (one entry per
              upstream, as ``residency://upstreams`` has them). ``ok`` and 200 when every
              upstream is connected (or there is none). ``degraded`` when one is not: 503 if
              any has ``failed`` (its last start or connection failed, so calls to its tools
              get error results until a restart succeeds), 200 if they are only ``starting`` or
              ``stopped`` (the next call starts them).
``/metrics``  ``GET``: the Prometheus text format (see ``_telemetry``).
``/ui``       ``GET``: the read-only operator dashboard (``residency._ui``), behind the same
              credentials (with a static token, also a cookie its ``/ui/login`` form sets).
``/``         ``GET``: a short plain-text page for a person with curl: the paths, how to connect,
              examples of both protocol eras (``_http_help``). A request to ``/mcp`` that
              names no session and opens none is told what to send (``SessionHint``).

Bound to 127.0.0.1 by default, with DNS-rebinding protection on (a request whose ``Host`` is
not the bound address gets 421). Binding elsewhere keeps the protection, allowing that host;
bound to every address (``0.0.0.0``, ``::``) it allows the loopback names and the machine's own
names and addresses; ``--allowed-host`` (``residency.allowed_hosts``) adds more, such as the DNS
name clients or a load balancer use.
With a token, every request must carry ``Authorization: Bearer <token>`` (compared in constant
time); others get 401 and never reach MCP. A request that passes is marked with the token's
identity (``IDENTITY_STATE`` in the ASGI scope's state), to which ``_connection`` binds the
session keys it names.
With ``residency.auth`` instead (``auth``), the gateway is an OAuth 2.1 resource server: every
request carries an access token its authorization server issued for this resource, checked by
``_oauth_http.OAuthBearer`` in the token's place; the identity is the token's principal (its
issuer, subject and client), and ``/.well-known/oauth-protected-resource`` (also followed by
the MCP path) tells clients where to get one. A static token and ``auth`` are never mixed.

Responses. By default each request is answered with an SSE stream, which can carry the
request's own notifications before its answer. With ``RESIDENCY_HTTP_RESPONSES=json`` in the
environment (or ``json_response=True``) each is answered with one JSON body. That is cheaper:
no stream to set up, and the SDK's client keeps its connection (it opens a new one after each
SSE answer), so a forwarded call costs about 30% less CPU, client, gateway and upstream
together (``residency bench gateway``). But a request cannot carry its own notifications: the
``tools/list_changed`` of a re-expanding call goes to the caller's standalone (GET) stream
instead, so a client that never opens one learns of the change only from the call's result
(``reexpand_tools`` returns the schemas) or its next ``tools/list``. Other sessions' streams
and ``subscriptions/listen`` are unaffected.
In the 2026-07-28 era a request that finishes promptly without a notification is answered
with JSON either way (the SDK's rule).

Exposure. ``serve_http`` refuses to bind beyond loopback (anything but 127.0.0.0/8, ``::1`` and
``localhost``) without a token unless ``insecure`` is given, and ``http_app`` refuses an empty
token (it would turn authentication off). ``residency serve`` also refuses tokens shorter than
``MIN_TOKEN_CHARS`` characters or with characters other than visible ASCII
(``token_problem``).

The token and the ``Host`` check guard ``/``, ``/healthz`` and ``/metrics`` exactly as they
guard ``/mcp``: both name every upstream and ``/metrics`` names refusal reasons, and a scraper can
send a bearer token (Prometheus' ``authorization`` setting). Without a token they are open to
whoever can reach the bound address, as ``/mcp`` is.

Limits (``residency.http``, ``HTTPSettings``). Connections and requests in flight are capped
per client address and in total, bodies by size and by a budget of bytes being received at
once, and every connection has a timer while no request is served on it: a client cannot hold
the gateway's descriptors or memory by opening connections and sending nothing, or half a
request. The request caps, the ``Host`` check and the token all run before a byte of the body
is read (``_http_guard``); the connection caps and timers are in ``_http_protocol``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from residency._core._tools import JSONObject
from residency._errors import ConfigError
from residency._gateway._config import RESPONSES_ENV, Secrets
from residency._gateway._connection import IDENTITY_STATE, token_identity
from residency._gateway._http_guard import Admission, BoundedBody, Front, raise_fd_limit
from residency._gateway._http_help import SessionHint, root_page
from residency._gateway._http_limits import Caps, HTTPSettings
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._oauth_http import OAuthBearer
from residency._gateway._request_ids import RequestIds
from residency._gateway._resources import upstream_status
from residency._gateway._server import Gateway
from residency._gateway._upstream import Upstream
from residency._ui._front import gateway_dashboard
from residency._ui._live import LiveUpdates, stopping_server

__all__ = [
    "MIN_TOKEN_CHARS",
    "BearerToken",
    "bind",
    "exposure_problem",
    "health",
    "http_app",
    "is_loopback",
    "json_responses",
    "serve_http",
    "token_problem",
]

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROOT_PATH = "/"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
"""Bind addresses that mean every address of the machine."""
_NO_STORE = {"cache-control": "no-store"}
logger = logging.getLogger("residency.gateway.http")

MIN_TOKEN_CHARS = 16
"""Shortest bearer token ``residency serve`` accepts (16 random characters are ~95 bits)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ``::1``) or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def token_problem(token: str) -> str | None:
    """What is wrong with ``token`` as a bearer token, or None."""
    if not token:
        return "is empty, which would turn authentication off"
    if len(token) < MIN_TOKEN_CHARS:
        return f"is {len(token)} characters; use at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)"
    if not all("!" <= c <= "~" for c in token):
        return "may hold only visible ASCII characters (no spaces), as an HTTP header carries it"
    return None


def exposure_problem(host: str, token: str | None, *, insecure: bool = False) -> str | None:
    """Why serving on ``host`` with ``token`` is refused, or None."""
    if token or insecure or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host!r} without a bearer token: anyone who can reach it could call "
        "every upstream tool. Set a token (RESIDENCY_TOKEN, --token or residency.token), bind "
        "127.0.0.1, or pass --insecure if something in front of the gateway authenticates"
    )


class BearerToken:
    """ASGI middleware: refuse HTTP requests without the bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self._identity = token_identity(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"connection", b"close"),  # the body, if any, is never read
                        ],
                    }
                )
                await send(
                    {"type": "http.response.body", "body": b'{"error":"missing or wrong bearer token"}'}
                )
                return
            # Authenticated: session keys this request names are bound to the token's identity.
            scope.setdefault("state", {})[IDENTITY_STATE] = self._identity
        await self._app(scope, receive, send)


def health(upstreams: Mapping[str, Upstream], secrets: Secrets) -> tuple[int, JSONObject]:
    """The health answer: HTTP status and body (see the module docstring)."""
    entries = upstream_status(upstreams, secrets)
    statuses = {e["status"] for e in entries}
    if statuses <= {"connected"}:
        return 200, {"status": "ok", "upstreams": entries}
    return (503 if "failed" in statuses else 200), {"status": "degraded", "upstreams": entries}


def machine_names() -> list[str]:
    """The names and addresses a client on the network may reach this machine by: its host
    name, fully qualified name, the addresses they resolve to, and the address it reaches other
    hosts from (no packet is sent to find it)."""
    names: dict[str, None] = {}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names[name] = None
            with contextlib.suppress(OSError):
                for *_, address in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP):
                    names[str(address[0])] = None
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect((probe, 9))  # a documentation address: nothing is sent
            names[str(udp.getsockname()[0])] = None
    return list(names)


def _patterns(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``Host`` and ``Origin`` values that name one of ``names``, with or without a port."""
    hosts: list[str] = []
    origins: list[str] = []
    for name in dict.fromkeys(names):
        shown = f"[{name}]" if ":" in name else name
        hosts += [shown, f"{shown}:*"]
        origins += [f"http://{shown}", f"http://{shown}:*", f"https://{shown}", f"https://{shown}:*"]
    return hosts, origins


def _security(host: str, allowed: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection: the ``Host`` (and ``Origin``) a request may carry.

    Bound to loopback: the loopback names. Bound to an address: that address. Bound to every
    address (``0.0.0.0``, ``::``): the loopback names and the machine's own (``machine_names``).
    ``allowed`` (``--allowed-host``, ``residency.allowed_hosts``) adds names in every case: the
    DNS name clients use, a load balancer's.
    """
    if host in _LOOPBACK:
        names = ["127.0.0.1", "localhost", "::1"]
    elif host in WILDCARD_HOSTS:
        names = ["127.0.0.1", "localhost", "::1", *machine_names()]
    else:
        names = [host]
    hosts, origins = _patterns([*names, *allowed])
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def _operator_routes(
    gateway: Gateway, security: TransportSecuritySettings, *, token: bool, oauth: bool = False
) -> list[Route]:
    checks = TransportSecurityMiddleware(security)

    async def root(request: Request) -> Response:
        refused = await checks.validate_request(request)
        if refused is not None:
            return refused
        # The Host header passed the check above: it is one of the names the gateway allows.
        base = f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"
        page = root_page(base, MCP_PATH, HEALTH_PATH, METRICS_PATH, token=token, oauth=oauth)
        return PlainTextResponse(page, headers=_NO_STORE)

    async def healthz(request: Request) -> Response:
        refused = await checks.validate_request(request)
        if refused is not None:
            return refused
        status, body = health(gateway.upstreams, gateway.secrets)
        return JSONResponse(body, status_code=status, headers=_NO_STORE)

    async def metrics(request: Request) -> Response:
        refused = await checks.validate_request(request)
        if refused is not None:
            return refused
        gateway.catalog_tokens()  # counted lazily: make the catalog gauges current before any list
        gateway.telemetry.set_sessions(gateway.open_sessions)  # sessions leave memory at any time
        body, content_type = gateway.telemetry.prometheus()
        return Response(body, media_type=content_type, headers=_NO_STORE)

    return [
        Route(ROOT_PATH, root, methods=["GET"]),
        Route(HEALTH_PATH, healthz, methods=["GET"]),
        Route(METRICS_PATH, metrics, methods=["GET"]),
    ]


def json_responses(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``RESPONSES_ENV`` asks for JSON responses (see the module docstring).

    Raises:
        ConfigError: it holds anything but ``json``, ``sse`` or nothing.
    """
    value = environ.get(RESPONSES_ENV, "").strip().lower()
    if value not in ("", "sse", "json"):
        raise ConfigError(f"{RESPONSES_ENV} is {value!r}; use 'json' or 'sse'", where=RESPONSES_ENV)
    return value == "json"


def http_app(
    gateway: Gateway,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    json_response: bool | None = None,
    allowed_hosts: Sequence[str] = (),
    front: Front | None = None,
    auth: OAuthSettings | None = None,
    live: LiveUpdates | None = None,
) -> ASGIApp:
    """The gateway's ASGI app: ``/mcp`` (streamable HTTP), ``/``, ``/healthz``, ``/metrics``.

    Args:
        gateway: the gateway to serve.
        host: the address it is bound to (the ``Host`` check allows it).
        token: the bearer token every request must carry, or None.
        json_response: answer each request with one JSON body instead of an SSE stream (see
            the module docstring); None: as ``RESPONSES_ENV`` says (SSE when unset).
        allowed_hosts: more names the ``Host`` check allows (see ``_security``).
        front: the request and body limits and what clients hold against them (see
            ``_http_guard``); None: the default ``residency.http`` settings.
        auth: OAuth access tokens instead of a static token (``residency.auth``), or None.
        live: the dashboard's live updates (the server closes them as it stops), or None:
            its own.

    Raises:
        ConfigError: ``token`` is the empty string (None means no token), both ``token`` and
            ``auth`` are given, or ``RESPONSES_ENV`` holds an unknown value.
    """
    if token == "":
        raise ConfigError("the bearer token is empty, which would turn authentication off", where="token")
    if token and auth is not None:
        raise ConfigError(
            "a static bearer token and residency.auth (OAuth) cannot be mixed: use one", where="token"
        )
    if json_response is None:
        json_response = json_responses()
    if front is None:
        front = Front()
    security = _security(host, allowed_hosts)
    # The operator routes ride on the SDK's own app, so its lifespan (the session manager)
    # runs as it would without them.
    app: ASGIApp = gateway.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=json_response,
        host=host,
        transport_security=security,
        custom_starlette_routes=_operator_routes(
            gateway, security, token=bool(token), oauth=auth is not None
        ),
        max_request_body_size=front.settings.max_body_bytes,
    )
    # The SDK's "Missing session ID" answer says what to send instead.
    app = SessionHint(app, path=MCP_PATH)
    # Innermost: a request whose id collides with one in flight in its session is refused.
    app = RequestIds(app, path=MCP_PATH, max_body_bytes=front.settings.max_body_bytes)
    # Outermost last: the request caps and the Host check, the token, then the bounded body.
    app = BoundedBody(app, front)
    validator = None
    if token:
        app = BearerToken(app, token)
    elif auth is not None:
        bearer = OAuthBearer(app, auth, mcp_path=MCP_PATH)
        app, validator = bearer, bearer.validator
    # The read-only dashboard (/ui) answers behind the same credentials (``residency._ui._app``).
    app = gateway_dashboard(
        app,
        gateway,
        loopback=is_loopback(host),
        token=token,
        auth=auth,
        validator=validator,
        mcp_path=MCP_PATH,
        live=live,
    )
    app = Admission(app, front, security)
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (``port`` 0: a free one, read it from ``getsockname()``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it: without it every response waits out a delayed ACK (~40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
    insecure: bool = False,
    started: Callable[[str], Awaitable[None] | None] | None = None,
    json_response: bool | None = None,
    allowed_hosts: Sequence[str] = (),
    limits: HTTPSettings | None = None,
    auth: OAuthSettings | None = None,
) -> None:
    """Serve the gateway on ``sock`` until cancelled (uvicorn on the running event loop).

    ``json_response``, ``allowed_hosts`` and ``auth`` are passed to ``http_app``. ``limits`` (None: the
    defaults) bound connections, requests, bodies and their timeouts (``_http_guard``,
    ``_http_protocol``). The process's soft file-descriptor limit is raised toward its hard
    limit, and the connection caps are kept under it (``Caps.under``). For as long as it
    serves, failed accepts and uvicorn's per-request warnings are counted, not logged each.

    Raises:
        ConfigError: ``host`` is beyond loopback with no token and not ``insecure``, the
            token is empty, or ``RESPONSES_ENV`` holds an unknown value (see the module docstring).
    """
    import uvicorn

    from residency._gateway._http_protocol import guarded_protocol

    problem = exposure_problem(host, token, insecure=insecure or auth is not None)
    if problem is not None:
        raise ConfigError(problem, where="host")
    settings = limits if limits is not None else HTTPSettings()
    fd_limit = raise_fd_limit()
    caps = Caps.under(settings, fd_limit, upstreams=len(gateway.upstreams))
    if caps.clamped:
        logger.info(
            "HTTP: at most %d connections (%d per client) under the file-descriptor limit of %s",
            caps.connections,
            caps.connections_per_client,
            fd_limit,
        )
    front = Front(settings, caps)
    live = LiveUpdates()
    app = http_app(
        gateway,
        host=host,
        token=token,
        json_response=json_response,
        allowed_hosts=allowed_hosts,
        front=front,
        auth=auth,
        live=live,
    )
    # log_config=None: uvicorn's records go through the process's own handlers (which scrub
    # secrets, see ``residency._cli._serve``) instead of handlers of its own. ws="none": MCP has
    # no WebSocket transport, and an upgraded connection would leave the connection caps.
    config = uvicorn.Config(
        app,
        http=guarded_protocol(front),
        ws="none",
        backlog=caps.backlog,
        log_level="warning",
        log_config=None,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = stopping_server(config, live)  # the dashboard's event streams end as it stops
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

    with front.counting(asyncio.get_running_loop()):
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
