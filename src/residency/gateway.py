"""The MCP gateway, embedded: what ``residency serve`` runs, as a library.

``Gateway`` is an async context manager: entering it opens the store and starts the upstreams
of its config; ``gateway.server`` is then an MCP server. Give it to ``mcp.Client`` to use it in
the same process, or serve it with ``serve_stdio`` or ``serve_http``::

    from mcp import Client
    from residency.demo import IncidentDesk
    from residency.gateway import Gateway, parse_config

    config = parse_config('{"residency": {"pinned": ["list_incidents", "get_incident"]}}')
    gateway = Gateway(config, upstreams={"desk": IncidentDesk().server})
    async with gateway, Client(gateway.server) as client:
        tools = await client.list_tools()  # the pinned tools, then the meta-tools
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from residency._gateway._config import GatewayConfig, load_config, parse_config
from residency._gateway._run import serve_stdio
from residency._gateway._server import Gateway

__all__ = ("Gateway", "GatewayConfig", "load_config", "parse_config", "serve_http", "serve_stdio")


async def serve_http(
    gateway: Gateway,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    insecure: bool = False,
    started: Callable[[str], Awaitable[None] | None] | None = None,
) -> None:
    """Serve an entered gateway over streamable HTTP at ``http://host:port/mcp`` until cancelled.

    The HTTP limits, the extra host names the ``Host`` check allows and OAuth (when set) come
    from the gateway's config (``residency.http``, ``residency.allowed_hosts``,
    ``residency.auth``), as for ``residency serve``.

    Args:
        gateway: the gateway, entered (``async with gateway``).
        host: the address to bind; beyond loopback a token (or ``residency.auth``) is required
            unless ``insecure``.
        port: the port to bind; 0 picks a free one (``started`` is told the URL).
        token: the bearer token clients must send; None: the config's ``residency.token``, if any.
        insecure: serve beyond loopback without a token.
        started: called with the endpoint's URL once the gateway listens.

    Raises:
        ConfigError: ``host`` is beyond loopback with no token and not ``insecure``, the token
            is too short (at least 16 visible ASCII characters), or a token is given while the
            config sets ``residency.auth``. Nothing is bound then.
        OSError: the address cannot be bound (e.g. the port is taken).
    """
    from residency._errors import ConfigError
    from residency._gateway import _http

    settings = gateway.config.residency
    auth = settings.auth
    if token is None and settings.token is not None:
        token = settings.token.get_secret_value()
    if token is not None:
        if auth is not None:
            raise ConfigError(
                "the config sets residency.auth (OAuth): a static bearer token cannot be used as well",
                where="token",
            )
        problem = _http.token_problem(token)
        if problem is not None:
            raise ConfigError(f"the bearer token {problem}", where="token")
    problem = _http.exposure_problem(host, token, insecure=insecure or auth is not None)
    if problem is not None:
        raise ConfigError(problem, where="host")
    sock = _http.bind(host, port)
    try:
        await _http.serve_http(
            gateway,
            sock,
            host=host,
            token=token,
            insecure=insecure,
            started=started,
            allowed_hosts=settings.allowed_hosts,
            limits=settings.http,
            auth=auth,
        )
    finally:
        sock.close()


def _report_public_homes() -> None:
    from residency import _report_public_home

    for name in __all__:
        _report_public_home(globals()[name], home="residency.gateway")


_report_public_homes()
