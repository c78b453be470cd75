"""``residency ui``: the read-only dashboard over a store alone (no gateway, no upstreams).

The same pages as a gateway's ``/ui`` (``residency._ui``), read from ``--store``, served over
HTTP on ``--host``/``--port``. Beyond loopback a bearer token is required (``--token`` or
``RESIDENCY_TOKEN``): a browser signs in once at ``/ui/login`` and gets a cookie for the
dashboard's pages only. How sessions were served (minify level, delivery, pins) comes from
``--config`` as for ``residency view``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from residency._cli._view import add_served_arguments, add_store_argument
from residency._errors import ConfigError, ResidencyError
from residency._text import printable

TOKEN_ENV = "RESIDENCY_TOKEN"
DEFAULT_PORT = 8766


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Serve the read-only operator dashboard for a store: sessions, each session's timeline, "
        "spans, the chain archive and token plots, in a browser at /ui/. Nothing in the store is "
        "changed. Exit codes: 0 stopped, 2 bad usage or a missing or unreadable store or config."
    )
    add_store_argument(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to bind (default {DEFAULT_PORT}; 0: a free one)"
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"bearer token the pages require (default: env {TOKEN_ENV}); required beyond loopback",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name browsers may use (repeatable), e.g. a DNS name",
    )
    add_served_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import anyio
    import uvicorn

    from residency._cli._view import _served_with
    from residency._gateway._http import bind, is_loopback, token_problem
    from residency._store import redact_url
    from residency._ui._front import store_dashboard
    from residency._ui._live import LiveUpdates, stopping_server
    from residency._ui._reads import open_readonly

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    try:
        if token is not None:
            problem = token_problem(token)
            if problem is not None:
                raise ConfigError(f"the bearer token {problem}", where="token")
        if token is None and not is_loopback(args.host):
            raise ConfigError(
                f"refusing to serve the dashboard on {args.host!r} without a bearer token: anyone who "
                f"can reach it could read every session. Set --token or {TOKEN_ENV}, or bind 127.0.0.1",
                where="host",
            )
        if not 0 <= args.port <= 65535:
            raise ConfigError(f"--port {args.port} is not a port number", where="port")
        served = _served_with(args)
        store = open_readonly(args.store)
    except ResidencyError as exc:
        print(f"residency ui: {printable(str(exc))}", file=sys.stderr)
        return 2
    try:
        try:
            sock = bind(args.host, args.port)
        except OSError as exc:
            print(f"residency ui: cannot bind {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return 2
        live = LiveUpdates()
        app = store_dashboard(
            store,
            served,
            where=redact_url(args.store),
            host=args.host,
            token=token,
            loopback=is_loopback(args.host),
            allowed_hosts=args.allowed_host,
            live=live,
        )
        config = uvicorn.Config(
            app, log_level="warning", log_config=None, lifespan="off", ws="none", access_log=False
        )
        server = stopping_server(config, live)  # open event streams end as it stops
        shown = f"[{args.host}]" if ":" in args.host else args.host
        port = sock.getsockname()[1]

        async def serve() -> None:
            async with anyio.create_task_group() as tg:

                async def announce() -> None:
                    while not server.started:
                        await anyio.sleep(0.05)
                    print(f"residency ui: serving http://{shown}:{port}/ui/", file=sys.stderr, flush=True)

                tg.start_soon(announce)
                await server.serve(sockets=[sock])
                tg.cancel_scope.cancel()

        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve)
        return 0
    finally:
        store.close()
