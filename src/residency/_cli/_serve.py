"""``residency serve``: run the MCP gateway over stdio or streamable HTTP.

With no ``--config`` it serves the bundled demo upstream (an incident desk), so a client can
connect at once. Logs go to stderr (stdout is the protocol on stdio) and never carry the
values of upstream ``env``/``headers`` or the bearer token: every line written, whichever
library wrote it, passes through ``Secrets.redact`` (``redact_logs``). ``--log-level`` sets
residency's own loggers (``residency.*``) only; other libraries (the lifecycle machine's
``transitions``, the MCP SDK, the HTTP stack) log warnings and errors only, whatever the level,
so SDK debug lines, which may carry request headers or a subprocess's environment, never
appear.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Callable
from typing import TextIO

from residency._errors import ConfigError, ResidencyError
from residency._text import printable, printable_lines

TOKEN_ENV = "RESIDENCY_TOKEN"
SESSION_ENV = "RESIDENCY_SESSION"

QUIET_LOGGERS = ("transitions", "mcp", "mcp_types", "httpx2", "httpcore2", "uvicorn", "starlette", "bm25s")
"""Libraries whose info and debug lines stay out of the gateway's stderr at any --log-level.

Their levels are pinned to WARNING, and the stderr handler drops any other library's record
below WARNING too: a library may set its own level when it is imported (bm25s sets DEBUG), after
``configure_logging`` ran, and its records reach the root's handler whatever the root's level."""

LOG_FORMAT = "residency: %(levelname)s %(message)s"

EPILOG = f"""\
Who a session is:
  A session is what the gateway keeps per client: which tools are resident, the
  tombstones, the call arguments the client has seen. Sessions live in the store
  (--store); naming a session again resumes it from there.

  stdio         one session per process, fresh at every start; its key is printed on
                stderr at startup. --session ID (or env {SESSION_ENV}) names it, and
                so resumes it in a later process.
  HTTP, handshake era (initialize; protocol up to 2025-11-25)
                the connection's Mcp-Session-Id.
  HTTP, 2026-07-28 era
                the Residency-Session request header when sent; else the caller's
                identity when a token (--token) or OAuth (residency.auth) is configured;
                else a throwaway session per request that shares nothing with anyone.
  any transport, any era
                a Residency-Session header or _meta["residency/session"] on a request
                names its session (1-128 of letters, digits and ._:@/+=-).
  --session on HTTP names the session of every request that names none.
  With a token, a key a request names is bound to the token: it names a
  different session under another token. Under OAuth it is bound to the
  caller's identity (issuer, subject and client), the --session default too.

Exposure (HTTP):
  The token comes from --token, else env {TOKEN_ENV}, else the config's
  residency.token. Prefer {TOKEN_ENV} or the config: a --token value is visible
  to every user of the machine in the process list. A token must be at least 16
  visible ASCII characters (e.g. `openssl rand -hex 32`); an empty one is refused,
  not read as "no token". Without a token the gateway binds only loopback
  (127.0.0.1, ::1, localhost); --insecure lets it bind elsewhere unauthenticated,
  for a gateway behind a proxy that authenticates.
  Instead of a token, residency.auth in the config makes the gateway an OAuth 2.1
  resource server: JWT access tokens checked against the issuer's keys (or
  introspected), metadata at /.well-known/oauth-protected-resource. A token and
  residency.auth cannot be set together.

Limits (HTTP):
  Connections and requests in flight are capped per client address and in
  total, request bodies by size (4 MiB, else 413) and by the bytes being
  received at once. Past a request or body cap a request gets 503 with
  Retry-After; past a connection cap a new connection is closed at once. A
  connection is closed when it sends no complete headers within 10 s or idles
  30 s after a response; a body that takes over 30 s gets 408. Set them under
  residency.http in the config. Behind a load balancer every request comes
  from its address: raise the per-client caps (max_connections_per_client,
  max_requests_per_client, body_budget_per_client_bytes) to the totals there.
  The gateway raises its soft file-descriptor limit toward the hard one, and
  keeps its connections to about half of what is left after a reserve.

Stopping:
  stdio serves until stdin closes (exit status 0). SIGINT (Ctrl-C) and SIGTERM stop
  either transport at once: upstreams are stopped and the store closed, then the exit
  status is 130 (SIGINT) or 143 (SIGTERM). Exit status 2: bad options or config;
  1: the address cannot be bound (taken: choose another --port, or --port 0).
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.description = (
        "Serve the tools of the upstream MCP servers in a config file (the standard "
        "'mcpServers' shape, plus an optional 'residency' section) through one MCP endpoint that "
        "keeps schemas and call arguments consistent. With no --config, serves a demo incident desk. "
        "SIGHUP reloads the config file's residency.policy (which tools each caller may see)."
    )
    p.add_argument("--config", metavar="FILE", help="JSON config with 'mcpServers' (default: the demo desk)")
    p.add_argument(
        "--demo",
        action="store_true",
        help="also serve the demo incident desk (in this process, as the upstream 'desk') beside "
        "the config's servers: to try a config's settings without an upstream of your own",
    )
    p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="downstream transport (default: stdio)",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port; 0 picks a free one (default: 8765)")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name or address clients may reach the HTTP gateway by, besides the bound "
        "address (repeatable; bound to 0.0.0.0 or ::, the machine's own names and addresses are "
        "allowed already); other Host headers get 421",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="session store: memory://, sqlite:///path.db or postgresql://... (overrides the config)",
    )
    p.add_argument(
        "--delivery",
        choices=("reference", "list", "auto"),
        help="how a withheld tool reaches the model: reference (a fixed list; schemas in search "
        "results; calls through call_tool), list (it joins the tool list) or auto (overrides the "
        "config; default: reference)",
    )
    p.add_argument(
        "--session",
        metavar="KEY",
        help=f"the session of requests that name none; resumes it from the store (env {SESSION_ENV}; "
        "stdio default: a fresh one per process; HTTP default: one per client)",
    )
    p.add_argument(
        "--token",
        help=f"bearer token required over HTTP, 16+ characters; prefer env {TOKEN_ENV} (a flag shows in "
        "the process list); overrides the config",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow HTTP beyond loopback without a token (only behind a proxy that authenticates)",
    )
    p.add_argument("--timeout", type=float, help="seconds per upstream call (overrides the config)")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="level of residency's own log lines on stderr (default: info); other libraries log "
        "warnings only",
    )
    p.set_defaults(run=run)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """The handler ``serve`` puts on the root logger (recognised, so a second run replaces it).

    It writes to whatever ``sys.stderr`` is when a record is emitted: ``serve`` run in-process
    (tests) must not leave a handler holding a stream that has since been closed.
    """

    redact: Callable[[str], str] | None = None
    """Scrubs every formatted line (set by ``redact_logs``)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def filter(self, record: logging.LogRecord) -> bool:
        # Another library's info and debug lines never show, whatever level it set itself.
        ours = record.name == "residency" or record.name.startswith("residency.")
        if not ours and record.levelno < logging.WARNING:
            return False
        return super().filter(record)

    def format(self, record: logging.LogRecord) -> str:
        # The whole line, traceback included: a library may put a secret in a message or an
        # exception, and its records reach this handler too. The message is then one line of
        # visible text (an upstream's name or error may carry a newline that forges a log line,
        # or terminal controls); a traceback keeps its line breaks, each line escaped.
        message = record.getMessage()
        if self.redact is not None:
            message = self.redact(message)
        shown = logging.makeLogRecord({**record.__dict__, "msg": printable(message), "args": None})
        text = super().format(shown)
        text = self.redact(text) if self.redact is not None else text
        return printable_lines(text)


def configure_logging(level: str) -> None:
    """Log to stderr: ``residency.*`` at ``level``, everything else at WARNING and above.

    The root logger stays at WARNING, so a library logger without a level of its own inherits
    that; the noisy ones are pinned too, in case something lowered the root.

    Args:
        level: ``debug``, ``info``, ``warning`` or ``error``.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("residency").setLevel(level.upper())


def redact_logs(redact: Callable[[str], str]) -> None:
    """Scrub every line the stderr handler of ``configure_logging`` writes with ``redact``."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _StderrHandler):
            handler.redact = redact


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    from residency._gateway._run import ServeOptions, serve

    try:
        options = ServeOptions.from_args(args, os.environ)
    except ConfigError as exc:
        print(f"residency serve: {exc}", file=sys.stderr)
        return 2
    redact_logs(options.secrets.redact)
    try:
        return serve(options)
    except (ConfigError, ResidencyError) as exc:
        print(f"residency serve: {printable_lines(options.secrets.redact(str(exc)))}", file=sys.stderr)
        return 2
    except OSError as exc:
        message = _bind_problem(exc, options.host, options.port) if args.transport == "http" else None
        shown = message or printable_lines(options.secrets.redact(str(exc)))
        print(f"residency serve: {shown}", file=sys.stderr)
        return 1


def _bind_problem(exc: OSError, host: str, port: int) -> str | None:
    """One line saying why the HTTP address cannot be bound and what to do, or None."""
    address = printable(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {address}: the address is already in use (another program, or "
            "another gateway, listens there); choose another --port, or --port 0 for a free one"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {address}: {printable(host)} is not an address of this machine; "
            "choose another --host (127.0.0.1 by default)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"cannot listen on {address}: permission denied (ports below 1024 need privileges); "
            "choose another --port, or --port 0 for a free one"
        )
    return None
