"""``residency serve`` without the argument parsing: options, then stdio or HTTP until stopped.

Stopping. stdio serves until its stdin closes (exit status 0). SIGINT (Ctrl-C) and SIGTERM stop
either transport at once and gracefully: the serving is cancelled, upstreams are stopped (their
subprocesses end) and the store is closed; the exit status is then 128 + the signal number (130
for SIGINT, 143 for SIGTERM), as a shell reports a process ended by that signal. Signals that
arrive during that bounded shutdown are absorbed: the shutdown is already as quick as it can be
without leaving upstream processes behind.

The SDK's ``stdio_server`` reads stdin in a worker thread, and a thread blocked in ``read`` cannot
be cancelled: Ctrl-C would wait for the client's next line. So stdin is read here, on the event
loop (``anyio.wait_readable``), and handed to ``stdio_server`` as an ``AsyncFile``; stdout is
still claimed by the SDK. When stdin closes, the connection ends and requests still in flight
are cancelled (the SDK's rule): a client reads its answers before it closes stdin.

A stdin line is at most ``MAX_LINE_BYTES`` (4 MiB, what the HTTP transport allows a body). A
longer one is never held whole: its bytes are dropped up to the next newline, the request it
carried is answered with a JSON-RPC error (``-32600``, ``data.reason`` ``"message_too_large"``)
when its ``id`` appears in its first 64 KiB, and the gateway reads on.

Exposure. Over HTTP the token comes from ``--token``, else ``RESIDENCY_TOKEN``, else the
config's ``residency.token`` (the first one given wins, even empty); it must pass
``token_problem`` (at least 16 visible ASCII characters). With ``residency.auth`` (OAuth access
tokens) no static token may be given, from any of the three. Without either, ``serve`` binds
only loopback unless ``--insecure`` is given (``exposure_problem``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import stat
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from residency._errors import ConfigError
from residency._gateway._config import (
    GatewayConfig,
    ResidencySettings,
    Secrets,
    host_name_problem,
    load_config,
    parse_config,
)
from residency._gateway._demo import IncidentDesk
from residency._gateway._meta_tools import listed_meta_tools
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._search import SearchStatus
from residency._gateway._server import Gateway
from residency._gateway._upstream import Upstream
from residency._search import RANKER_ENV

__all__ = [
    "DEMO_CONFIG",
    "DEMO_WORKING_SET",
    "MAX_LINE_BYTES",
    "TOKEN_ENV",
    "ServeOptions",
    "build_gateway",
    "fresh_stdio_session",
    "is_persistent",
    "serve",
    "serve_stdio",
    "startup_summary",
]

DEMO_WORKING_SET = (
    "list_incidents",
    "get_incident",
    "get_timeline",
    "get_service_health",
    "query_metrics",
    "search_runbooks",
)
"""The desk's tools the demo lists from the first turn: a read-only working set (look at
incidents, their timelines, service health and metrics, find a runbook)."""

DEMO_UPSTREAM = "desk"
"""The demo desk's name among the upstreams (with no ``--config``, or with ``--demo``)."""

DEMO_CONFIG = json.dumps(
    {
        "mcpServers": {},
        "residency": {
            "budget": {"schema_tokens": 700, "argument_tokens": 20000},
            "minify": "compact",
            "pinned": list(DEMO_WORKING_SET),
            "search_wait": 0,
        },
    },
    indent=2,
)
"""The demo desk's policy (``residency serve`` with no config), on the default delivery, by
reference: the list is the read-only working set (pinned) and the meta-tools with
``call_tool``; the desk's other tools (every one that changes the desk among them) are found
with ``search_tools`` and called through ``call_tool``. The schema budget matters by list only
(``--delivery list``: the working set alone is over it, so nothing else is listed until a
re-expansion asks for it). It serves without waiting for the search vectors
(``search_wait`` 0): BM25 answers until they are ready, a few seconds later, and a newcomer's
client connects that much sooner."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_READ_SIZE = 1 << 16

MAX_LINE_BYTES = 4 << 20
"""Longest stdin line (one JSON-RPC message) read: 4 MiB, as the HTTP transport caps a body."""

TOKEN_ENV = "RESIDENCY_TOKEN"
"""The environment variable that carries the bearer token (kept out of the process list)."""

_ID_WINDOW = 1 << 16
logger = logging.getLogger("residency.gateway")


def fresh_stdio_session() -> str:
    """A new stdio session key: one process serves one client, and a new process a new one."""
    return f"stdio-{uuid.uuid4().hex[:12]}"


@dataclass
class ServeOptions:
    """What ``residency serve`` runs.

    ``session`` is the key of requests that name no session: over stdio always set (given, or
    fresh per process); over HTTP None unless given, so each client gets its own.
    """

    config: GatewayConfig
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    allowed_hosts: tuple[str, ...] = ()
    """Host names the HTTP ``Host`` check allows besides the bound address (config and CLI)."""
    session: str | None = None
    token: str | None = None
    auth: OAuthSettings | None = None
    """OAuth access tokens instead of ``token`` (``residency.auth``, HTTP only)."""
    timeout: float | None = None
    demo: bool = False
    """Serve the demo desk in-process as ``DEMO_UPSTREAM``: no ``--config``, or ``--demo``."""
    secrets: Secrets = field(default_factory=Secrets)
    insecure: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> ServeOptions:
        """Options from the command line and environment.

        Raises:
            ConfigError: the config file is missing or malformed, or it names a server
                ``DEMO_UPSTREAM`` and ``--demo`` asks for the demo desk under that name.
        """
        demo = args.config is None or bool(args.demo)
        if args.config is None:
            config = parse_config(DEMO_CONFIG, source="<demo>")
        else:
            config = load_config(args.config)
            if demo and DEMO_UPSTREAM in config.servers:
                raise ConfigError(
                    f"--demo serves the demo desk as the upstream '{DEMO_UPSTREAM}', and "
                    f"{config.source} names a server '{DEMO_UPSTREAM}' already: rename it or drop --demo",
                    where="--demo",
                )
        if args.store:
            try:
                settings = ResidencySettings.model_validate(
                    {**config.residency.model_dump(), "store": args.store}
                )
            except ValidationError as exc:
                raise ConfigError(
                    f"--store: {exc.errors()[0]['msg'].removeprefix('Value error, ')}", where="--store"
                ) from None
            config = config.model_copy(update={"residency": settings})
        if args.delivery is not None:
            settings = config.residency.model_copy(update={"delivery": args.delivery})
            config = config.model_copy(update={"residency": settings})
        for name in args.allowed_host:
            problem = host_name_problem(name)
            if problem is not None:
                raise ConfigError(f"--allowed-host: {problem}", where="--allowed-host")
        allowed_hosts = tuple(dict.fromkeys([*config.residency.allowed_hosts, *args.allowed_host]))
        token = _token(args, environ, config) if args.transport == "http" else None
        auth = config.residency.auth if args.transport == "http" else None
        if token and auth is not None:
            raise ConfigError(
                f"{config.source} sets residency.auth (OAuth), so a static bearer token (--token or "
                f"{TOKEN_ENV}) cannot be used as well: drop one",
                where="--token" if args.token is not None else TOKEN_ENV,
            )
        insecure = bool(args.insecure)
        if args.transport == "http":
            from residency._gateway._http import exposure_problem

            problem = exposure_problem(args.host, token, insecure=insecure or auth is not None)
            if problem is not None:
                raise ConfigError(problem, where="--host")
        session = args.session or environ.get("RESIDENCY_SESSION") or None
        if session is None and args.transport == "stdio":
            session = fresh_stdio_session()
        secrets = config.secrets()
        if token:
            secrets.add(token)
        return cls(
            config=config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            allowed_hosts=allowed_hosts,
            session=session,
            token=token,
            auth=auth,
            timeout=args.timeout,
            demo=demo,
            secrets=secrets,
            insecure=insecure,
        )


def _token(args: argparse.Namespace, environ: Mapping[str, str], config: GatewayConfig) -> str | None:
    """The HTTP bearer token: ``--token``, else ``RESIDENCY_TOKEN``, else the config's.

    Raises:
        ConfigError: the one given is empty, too short or not visible ASCII.
    """
    token: str
    if args.token is not None:
        token, source = args.token, "--token"
    elif TOKEN_ENV in environ:
        token, source = environ[TOKEN_ENV], TOKEN_ENV
    elif config.residency.token is not None:
        token, source = config.residency.token.get_secret_value(), f"{config.source}: residency.token"
    else:
        return None
    from residency._gateway._http import token_problem

    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"the bearer token ({source}) {problem}", where=source)
    return token


# -- the startup summary ----------------------------------------------------------------------


def startup_summary(gateway: Gateway, options: ServeOptions, url: str | None = None) -> str:
    """What ``serve`` prints on stderr before it serves: one ``residency: `` line per fact.

    Args:
        gateway: the entered gateway (its upstreams have started, failed or are starting).
        options: what is being served.
        url: the HTTP endpoint once bound (None over stdio).

    Returns:
        The lines, joined by newlines; no secret value (upstream ``env``/``headers`` values, the
        token, a password in the store URL) appears in them, nor any control, bidi or invisible
        character (an upstream's tool names and errors are shown escaped).
    """
    from residency._text import printable

    redact = options.secrets.redact
    settings = gateway.config.residency
    lines: list[str] = []
    for name, upstream in gateway.upstreams.items():
        what = upstream.kind
        if options.demo and name == DEMO_UPSTREAM:
            what += ", the demo incident desk"
        lines.append(f"upstream {printable(name)} ({what}): {printable(redact(_upstream_state(upstream)))}")
    renamed, most = gateway.catalog.renamed(), 10  # a hostile upstream may offer thousands
    for moved in renamed[:most]:
        offered = printable(redact(moved.upstream_name), limit=80)
        server = printable(moved.server)
        lines.append(f"upstream {server}: tool '{offered}' {moved.renamed}; listed as {moved.name}")
    if len(renamed) > most:
        lines.append(f"upstreams: {len(renamed) - most} more tool names renamed (see the log)")
    for name, entry in gateway.config.servers.items():
        if entry.disabled:
            lines.append(f"upstream {printable(name)}: disabled in the config")
    if not gateway.config.servers and not gateway.upstreams:
        lines.append("upstreams: none configured")
    if options.transport == "http":
        where = f" at {url}" if url else f" on {options.host}:{options.port}"
        auth = ", bearer token required" if options.token else ""
        if options.auth is not None:
            auth = (
                f", OAuth access tokens from {printable(options.auth.issuer)} required "
                f"(resource {printable(options.auth.resource)})"
            )
        lines.append(f"transport http{where}{auth}")
        from residency._gateway._http import is_loopback

        if not options.token and options.auth is None and not is_loopback(options.host):
            lines.append(
                f"WARNING: no bearer token on {options.host} (--insecure): whoever can reach it can "
                "call every upstream tool"
            )
    else:
        lines.append("transport stdio")
    lines.append(f"store {printable(redact(redact_url(settings.store)))}")
    budget = settings.budget
    idle = "off" if budget.idle_turns is None else str(budget.idle_turns)
    lines.append(
        f"budget schema_tokens={budget.schema_tokens} argument_tokens={budget.argument_tokens} "
        f"idle_turns={idle} planner={budget.planner}"
    )
    lines.append(f"minify {settings.minify}")
    lines.append(f"delivery {settings.delivery}")
    lines.append(printable(_search_line(gateway.search_status())))
    key = options.session
    if options.transport == "stdio" and key is not None:
        if is_persistent(settings.store):
            lines.append(f"session {key} (resume with --session {key})")
        else:
            lines.append(f"session {key} (in memory: it ends with this process)")
    elif key is not None:
        lines.append(f"session {key} for every request that names none")
    else:
        lines.append("sessions: one per client (see 'residency serve --help': Who a session is)")
    lines.append(
        "stop with Ctrl-C or by closing stdin" if options.transport == "stdio" else "stop with Ctrl-C"
    )
    lines.append(printable(_ready_line(gateway)))  # last: what a client finds, once it is all up
    return "\n".join(f"residency: {line}" for line in lines)


def is_persistent(store: str) -> bool:
    """Whether sessions in ``store`` (a store URL) outlive the process: SQLite and PostgreSQL."""
    return store.startswith(("sqlite:", "postgresql:", "postgres:"))


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _ready_line(gateway: Gateway) -> str:
    """What a client finds: upstream tools, how many its first list shows, how it reaches the rest."""
    settings = gateway.config.residency
    up = sum(1 for u in gateway.upstreams.values() if u.connected)
    total = len(gateway.catalog)
    found = f"ready: {_count(total, 'tool')} from {_count(up, 'upstream')}"
    if up < len(gateway.upstreams):
        found += f" ({len(gateway.upstreams) - up} not up)"
    meta = listed_meta_tools(
        chains=False, offload=settings.spans.recorded, call_tool=settings.delivery != "list"
    )
    metas = _count(len(meta), "meta-tool")
    pinned = [n for n in dict.fromkeys(settings.pinned) if n in gateway.catalog]
    if settings.delivery == "reference":
        withheld = total - len(pinned)
        line = f"{found}; listed {len(pinned)} pinned + {metas}, {withheld} withheld"
        if withheld:
            line += " (search_tools finds them, call_tool calls them)"
        return line
    fits = f"what {'else ' if pinned else ''}fits schema_tokens={settings.budget.schema_tokens}"
    listed = f"{len(pinned)} pinned and {fits}" if pinned else fits
    return f"{found}; listed {listed}, + {metas}; search_tools and reexpand_tools bring the rest"


def _search_line(status: SearchStatus) -> str:
    """Which ranker answers searches now, and what comes next."""
    if status.state == "off":
        return f"search BM25 ({RANKER_ENV}=bm25)"
    if status.state == "absent":
        return "search BM25 (no semantic model installed: pip install 'residency[search]')"
    if status.state == "failed":
        return "search BM25 (computing the vectors failed: see the log)"
    tools = "1 tool" if status.tools == 1 else f"{status.tools} tools"
    cache = "in memory only" if status.cache is None else str(status.cache)
    if status.state == "ready":
        return f"search fusion (BM25 + {status.model}), vectors of {tools} ready (cache {cache})"
    return f"search BM25 until the vectors of {tools} are computed (then fusion; cache {cache})"


def _upstream_state(upstream: Upstream) -> str:
    if upstream.connected:
        count = len(upstream.tools)
        return f"{count} tool" if count == 1 else f"{count} tools"
    if upstream.last_error:
        return f"failed: {upstream.last_error}"
    return "starting"


def redact_url(url: str) -> str:
    """``url`` with the password of its user part (``scheme://user:password@host``) shown as ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- serving ----------------------------------------------------------------------------------


def serve(options: ServeOptions) -> int:
    """Run the gateway until stdin closes (stdio) or a stop signal arrives.

    Returns:
        The exit status: 0 when stdin closed, 128 + the signal number after SIGINT or SIGTERM.
    """
    return anyio.run(_serve, options)


async def _serve(options: ServeOptions) -> int:
    if not options.demo and not options.config.enabled_servers:
        logging.getLogger("residency.gateway").warning(
            "no enabled upstream under 'mcpServers': serving only the meta-tools "
            "(see 'residency config check FILE')"
        )
    stopped_by: list[int] = []
    failure: Exception | None = None
    if sys.platform == "win32":  # no signal receivers there: Ctrl-C raises KeyboardInterrupt
        await _run_gateway(options)
        return 0
    # The receiver stays open through the shutdown, so a signal arriving then (uvicorn re-raises
    # the one it caught) is absorbed instead of killing the process before upstreams stop.
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                async for signum in signals:
                    stopped_by.append(signum)
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(watch)
            try:
                await _run_gateway(options)
            except Exception as exc:  # raised as itself, not inside the task group's ExceptionGroup
                failure = exc
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if not stopped_by:
        return 0
    name = signal.Signals(stopped_by[0]).name
    _say(f"residency: stopped by {name}; upstreams closed")
    return 128 + stopped_by[0]


def build_gateway(options: ServeOptions) -> Gateway:
    """The gateway ``serve`` runs for ``options`` (not entered): with no config, on the demo desk."""
    upstreams: dict[str, Server[Any]] = {}
    if options.demo:
        upstreams[DEMO_UPSTREAM] = IncidentDesk().server
    return Gateway(
        options.config, upstreams=upstreams, default_session=options.session, timeout=options.timeout
    )


async def reload_on_hangup(
    gateway: Gateway, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Reload the tool policy on each SIGHUP until cancelled (``Gateway.reload_policy``); a
    policy that does not load is refused with its error and the one in force keeps serving.
    Started once SIGHUP is received here (until then it would end the process)."""
    if sys.platform == "win32":
        task_status.started()
        return
    with anyio.open_signal_receiver(signal.SIGHUP) as hangups:
        task_status.started()
        async for _ in hangups:
            try:
                rules = await gateway.reload_policy()
            except ConfigError as exc:
                logger.error("policy reload refused, the policy in force keeps serving: %s", exc)
                continue
            logger.info(
                "policy reloaded from %s: %d rules in force (other settings take effect at a restart)",
                gateway.config.source,
                rules,
            )


async def _run_gateway(options: ServeOptions) -> None:
    gateway = build_gateway(options)
    if options.transport == "stdio":
        async with gateway, _reloading(gateway):
            _say(startup_summary(gateway, options))
            await serve_stdio(gateway)
        return
    # The HTTP front (Starlette, uvicorn, the web UI) is imported only for this transport.
    from residency._gateway._http import bind, serve_http

    # Bound before the upstreams start, so a taken port fails at once, not after their startup.
    sock = bind(options.host, options.port)

    def started(url: str) -> None:
        _say(startup_summary(gateway, options, url))
        _say(f"residency: serving MCP at {url}")

    with sock:
        async with gateway, _reloading(gateway):
            await serve_http(
                gateway,
                sock,
                host=options.host,
                token=options.token,
                insecure=options.insecure,
                started=started,
                allowed_hosts=options.allowed_hosts,
                limits=options.config.residency.http,
                auth=options.auth,
            )


@asynccontextmanager
async def _reloading(gateway: Gateway) -> AsyncIterator[None]:
    """SIGHUP reloads the gateway's policy while the body runs (``reload_on_hangup``)."""
    async with anyio.create_task_group() as tg:
        await tg.start(reload_on_hangup, gateway)
        yield
        tg.cancel_scope.cancel()


async def serve_stdio(gateway: Gateway) -> None:
    """Serve an entered gateway on this process's stdin and stdout until stdin closes.

    stdin is read on the event loop, so cancelling this (Ctrl-C) ends it at once; a line over
    ``MAX_LINE_BYTES`` is refused with a JSON-RPC error and a line that is not JSON with a parse
    error (see the module docstring).
    """
    async with _stdin() as stdin, stdio_server(stdin=stdin) as (read, write):
        if isinstance(stdin, _StdinLines):
            stdin.refuse = _refuser(write)
            stdin.unreadable = _parse_error(write)
        await gateway.server.run(read, write, gateway.server.create_initialization_options())


def _say(text: str) -> None:
    """Write to stderr; a client that closed our stderr must not stop the gateway."""
    with suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


# -- stdin, read on the event loop ------------------------------------------------------------


Refusal = Callable[["types.RequestId | None", int], Awaitable[None]]
"""Answers a dropped oversized line: its request id (None when not found) and its size."""


class _StdinLines(anyio.AsyncFile[str]):
    """Lines from a file descriptor, awaited on the event loop so a cancellation ends the wait.

    A descriptor the loop cannot poll (a regular file, which never blocks for long) is read in a
    worker thread instead. A line over ``MAX_LINE_BYTES`` is dropped as it streams in (only its
    first ``_ID_WINDOW`` bytes are kept, to find its request id) and ``refuse`` is awaited.
    """

    def __init__(self, fd: int) -> None:
        # The wrapped file only backs AsyncFile's other methods; it never owns (closes) the fd.
        super().__init__(open(fd, encoding="utf-8", errors="replace", closefd=False))  # noqa: SIM115
        self._fd = fd
        self._buffer = bytearray()
        self._scanned = 0  # the buffer holds no newline before this offset
        self._eof = False
        self._pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
        self._head: bytes | None = None  # set while an oversized line is being dropped
        self._dropped = 0
        self.refuse: Refusal | None = None
        self.unreadable: Callable[[], Awaitable[None]] | None = None
        """Awaited for a line that is not a JSON-RPC message (the SDK would drop it unanswered)."""

    async def readline(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                size = end + 1
                if self._head is None and end <= MAX_LINE_BYTES:
                    line = bytes(self._buffer[:size])
                    del self._buffer[:size]
                    self._scanned = 0
                    if self.unreadable is not None and not _is_message(line):
                        await self.unreadable()
                        continue
                    return line.decode("utf-8", errors="replace")
                head = self._head if self._head is not None else bytes(self._buffer[:_ID_WINDOW])
                total = self._dropped + size
                del self._buffer[:size]
                self._scanned, self._head, self._dropped = 0, None, 0
                await self._refused(head, total)
                continue
            if self._head is not None or len(self._buffer) > MAX_LINE_BYTES:
                # Over the limit with no end in sight: keep the head, drop the rest as it comes.
                if self._head is None:
                    self._head = bytes(self._buffer[:_ID_WINDOW])
                self._dropped += len(self._buffer)
                self._buffer.clear()
            self._scanned = len(self._buffer)
            if self._eof:
                if self._head is not None:
                    head, total = self._head, self._dropped
                    self._head, self._dropped = None, 0
                    await self._refused(head, total)
                line = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return line.decode("utf-8", errors="replace")
            chunk = await self._read()
            self._eof = not chunk
            self._buffer += chunk

    async def _refused(self, head: bytes, size: int) -> None:
        request_id = _request_id(head)
        logger.warning(
            "dropped a stdin message of %d bytes (over the %d-byte limit); request id %s",
            size,
            MAX_LINE_BYTES,
            "unknown" if request_id is None else repr(request_id),
        )
        if self.refuse is not None:
            await self.refuse(request_id, size)

    async def _read(self) -> bytes:
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except OSError:  # e.g. epoll refuses the descriptor: fall back to a thread
                self._pollable = False
            else:
                # Readable: data or end of file is there, so this read does not block.
                return os.read(self._fd, _READ_SIZE)
        return await anyio.to_thread.run_sync(os.read, self._fd, _READ_SIZE)


def _is_message(line: bytes) -> bool:
    """Whether a line can be a JSON-RPC message (or is blank, which the SDK skips itself)."""
    if not line.strip():
        return True
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested past what any parser here takes
        return False
    return isinstance(value, dict | list)


def _parse_error(write: Any) -> Callable[[], Awaitable[None]]:
    """Answers a line that is not JSON (or not a JSON object) with JSON-RPC's parse error."""

    async def answer() -> None:
        logger.warning("answered a stdin line that is not a JSON-RPC message with a parse error")
        error = types.ErrorData(
            code=types.PARSE_ERROR, message="parse error: a line that is not a JSON object"
        )
        await write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))

    return answer


def _refuser(write: Any) -> Refusal:
    """Answers a dropped request on the wire (a request whose id is unknown gets no answer)."""

    async def refuse(request_id: types.RequestId | None, size: int) -> None:
        if request_id is None:
            return
        error = types.ErrorData(
            code=types.INVALID_REQUEST,
            message=(
                f"message of {size:,} bytes refused: a stdio message may be at most {MAX_LINE_BYTES:,} bytes"
            ),
            data={"reason": "message_too_large", "limit": MAX_LINE_BYTES},
        )
        await write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))

    return refuse


def _request_id(head: bytes) -> types.RequestId | None:
    """The top-level ``"id"`` of a JSON-RPC message from its first bytes, or None.

    A small scanner, not a parser: it tracks strings and nesting so that an ``"id"`` inside
    ``params`` is not taken for the request's, and stops where ``head`` ends.
    """
    text = head.decode("utf-8", errors="replace")
    depth = 0
    i, n = 0, len(text)
    key: str | None = None
    expect_key = False
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return None
            string = text[i + 1 : j]
            if depth == 1 and expect_key:
                key = string
            elif depth == 1 and key == "id":
                return string
            i = j + 1
            continue
        if c in "{[":
            depth += 1
            expect_key = c == "{" and depth == 1
        elif c in "}]":
            depth -= 1
        elif depth == 1 and c == ",":
            expect_key, key = True, None
        elif depth == 1 and c == ":":
            expect_key = False
        elif depth == 1 and key == "id" and (c == "-" or c.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            if j >= n or (j == i + 1 and c == "-"):
                return None
            return int(text[i:j])
        i += 1
    return None


@asynccontextmanager
async def _stdin() -> AsyncIterator[anyio.AsyncFile[str] | None]:
    """The wire's stdin, read on the event loop; None (the SDK's own reader) where it cannot be.

    Like the SDK, it moves the wire off fd 0 while serving (fd 0 reads the null device, so a
    handler or child that reads stdin cannot eat protocol bytes) and puts it back on exit.
    """
    claimed = _claim_stdin()
    if claimed is None:
        yield None
        return
    private, restore = claimed
    try:
        yield _StdinLines(private)
    finally:
        restore()


def _claim_stdin() -> tuple[int, Callable[[], None]] | None:
    if sys.platform == "win32" or sys.stdin is None:
        return None
    try:
        if sys.stdin.fileno() != 0:
            return None
        import fcntl

        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(devnull, 0)
        finally:
            os.close(devnull)
    except OSError:
        os.close(private)
        return None

    def restore() -> None:
        try:
            os.dup2(private, 0)
        finally:
            os.close(private)

    return private, restore
