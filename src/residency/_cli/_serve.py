"""``residency serve``: run the MCP gateway over stdio or streamable HTTP.

With no ``--config`` it serves the bundled demo upstream (an incident desk), so a client can
connect at once. Logs go to stderr (stdout is the protocol on stdio) and never carry the
values of upstream ``env``/``headers`` or the bearer token.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from residency._errors import ConfigError, ResidencyError

TOKEN_ENV = "RESIDENCY_TOKEN"
SESSION_ENV = "RESIDENCY_SESSION"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the MCP gateway (stdio or streamable HTTP)",
        description="Serve the tools of the upstream MCP servers in a config file (the standard "
        "'mcpServers' shape, plus an optional 'residency' section) through one MCP endpoint that "
        "keeps schemas and call arguments consistent. With no --config, serves a demo incident desk.",
    )
    p.add_argument("--config", metavar="FILE", help="JSON config with 'mcpServers' (default: the demo desk)")
    p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="downstream transport (default: stdio)",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port; 0 picks a free one (default: 8765)")
    p.add_argument(
        "--store", metavar="URL", help="session store: memory:// or sqlite:///path.db (overrides the config)"
    )
    p.add_argument(
        "--session",
        metavar="KEY",
        help=f"session key for requests that name none (stdio default: 'stdio'; env {SESSION_ENV})",
    )
    p.add_argument("--token", help=f"bearer token required over HTTP (env {TOKEN_ENV}; overrides the config)")
    p.add_argument("--timeout", type=float, help="seconds per upstream call (overrides the config)")
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="residency: %(levelname)s %(message)s"
    )
    from residency._gateway._run import ServeOptions, serve

    try:
        options = ServeOptions.from_args(args, os.environ)
    except ConfigError as exc:
        print(f"residency serve: {exc}", file=sys.stderr)
        return 2
    try:
        serve(options)
    except (ConfigError, ResidencyError) as exc:
        print(f"residency serve: {options.secrets.redact(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"residency serve: {options.secrets.redact(str(exc))}", file=sys.stderr)
        return 1
    return 0
