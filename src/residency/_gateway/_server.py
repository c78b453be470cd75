"""The gateway: an MCP server in front of upstream MCP servers, one ``Session`` per client session.

Theory of operation
-------------------
``Gateway`` is an async context manager. Entering it opens the store, starts every upstream
(each in its own task, see ``_upstream``) and builds the aggregated catalog; leaving it stops
them. ``gateway.server`` is the low-level ``mcp`` server to run over stdio, streamable HTTP or
in-process.

Every request is mapped to a session key (``_connection.session_key``) and so to a
``GatewaySession``. Each ``tools/call`` is a turn of that session (``_calls``: admit, forward,
plan, announce); the ``residency://`` resources and their subscriptions are ``_reads``'. If
what the client sees changed, it is told: ``tools/list_changed`` in the handshake era,
``ToolsListChanged`` (and ``resources/updated`` for ``residency://tombstones``) on the
session's listen streams in the 2026-07-28 era. Every handler is wrapped in the error table's
boundary (``_errors.protocol_errors``): handlers raise domain errors and map none.

In both eras ``tools/list`` is the caller's session view (``_listing``): the tools its list
shows (delivered by list: its resident tools, minified, in the order they became resident; by
reference: its pinned tools, see ``_delivery``) plus the meta-tools, whose definitions never
change for it; tombstones reach the model in the result of the call that creates them. Agent
frameworks let the model call listed tools only, so a tool delivered by list is listed, and a
session delivered by reference lists ``call_tool``. 2026-07-28 answers are
``cacheScope: "private"`` with ``ttlMs: 0`` (the list differs per caller and may change), and
changes go out on the session's ``subscriptions/listen`` stream.

Upstreams start in parallel. The gateway serves once every upstream has started or failed, or
after ``ready_wait`` seconds; one still starting joins later (its tools are announced like any
other change), so a hung upstream holds up no one. One that fails to start is tried again in
the background, after 1, 2, 4, ... seconds (at most ``START_RETRY_MAX`` apart), until it starts.
The catalog remembers which version of each upstream's list it was built from (``_applied``),
so a call can tell whether its definition is still the upstream's (see "Rug pulls" in
``_calls``). A tool whose definition residency cannot take (a malformed definition, an
``inputSchema`` that is not a valid JSON Schema) is left out of the catalog and logged: the
check is the one ``Session.register_tools`` makes (``check_tool``).

Each catalog built is warmed for search at once (``_search.SearchWarmup``: its index built and
its vectors computed in a thread), and before it serves the gateway waits for those vectors
within what is left of ``ready_wait`` and at most ``search_wait``, so that its first searches
are fused where the vectors come from the cache (kept beside the store, ``vector_directory``) or
the catalog is small; past it, BM25 answers until they are ready, and the log says when. A
gateway that does not wait (``search_wait`` 0, as the demo) starts that warm-up once its first
``tools/list`` is answered, or ``QUIET_START`` seconds after it began serving: importing numpy
and loading the model holds the GIL for most of a second, which would delay a newly spawned
gateway's first answers (``initialize``, the first list) by as much.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus

from residency._core._minify import MinifyLevel, minify_tool
from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import ConfigError, ResidencyError, SessionConflict, UpstreamFailure
from residency._gateway import _meta_tools as meta
from residency._gateway._aggregate import Catalog, build_catalog, check_server_names
from residency._gateway._audit import note_denied
from residency._gateway._calls import CALL_META_KEY, PHASE_META_KEY, TOMBSTONE_NOTICE, ToolCalls
from residency._gateway._config import MINIFY_LEVELS, GatewayConfig, Secrets
from residency._gateway._connection import (
    ListChangedServer,
    connection_of,
    is_modern,
    request_principal,
    session_key,
)
from residency._gateway._gate import request_gate
from residency._gateway._listing import ToolListing
from residency._gateway._policy import UNRESTRICTED, Access, Policy, caller_of
from residency._gateway._policy_config import PolicySettings
from residency._gateway._reads import ResourceHandlers
from residency._gateway._search import (
    SearchStatus,
    SearchWarmup,
    catalog_index,
    idle_status,
    vector_directory,
)
from residency._gateway._sessions import GatewaySession, SessionTable, View, store_id
from residency._gateway._telemetry import Telemetry, count_tokens_aside
from residency._gateway._upstream import Upstream
from residency._runtime import Session
from residency._runtime._tool_cache import checked_tool
from residency._search import ToolIndex, embedding_cache
from residency._store import open_store
from residency._store._memory import MemoryStore
from residency._store._protocol import Store
from residency._text import printable

if TYPE_CHECKING:
    import mcp_types as types

    from residency._gateway._fanout import Fanout
    from residency._gateway._tracing import Tracing

__all__ = ["CALL_META_KEY", "PHASE_META_KEY", "TOMBSTONE_NOTICE", "Gateway"]

logger = logging.getLogger("residency.gateway")
search_logger = logging.getLogger("residency.search")

_UNBOUNDED = 1 << 62
ANONYMOUS = "anonymous"
"""The key of a throwaway session given to a caller that names none and has no identity."""
RELIST_INTERVAL = 30.0
"""Seconds after which a call re-lists its upstream before it is forwarded (``relist_interval``)."""
START_RETRY_FIRST = 1.0
START_RETRY_MAX = 15.0
"""Seconds between attempts to start an upstream whose start failed (doubling from the first)."""
NAME_SHOWN = 80
"""Characters of an upstream's tool name a log line shows (a name may be 10 kB long)."""
MESSAGE_SHOWN = 500
"""Characters of an upstream's error a log line about its tool shows."""


def _unminified(tool: JSONObject) -> JSONObject:
    return tool


def _minifier(level: str) -> Callable[[JSONObject], JSONObject]:
    """How resident tools are shown at a config minify level (``none`` or one of the core's
    ``LEVELS``); a tool the minifier cannot process is shown in full.

    Raises:
        ConfigError: a level that is not one of ``MINIFY_LEVELS``.
    """
    if level not in MINIFY_LEVELS:
        raise ConfigError(f"unknown minify level {level!r}; choose one of {', '.join(MINIFY_LEVELS)}")
    if level == "none":
        return _unminified
    chosen = cast(MinifyLevel, level)

    def minify(tool: JSONObject) -> JSONObject:
        try:
            shown: JSONObject = minify_tool(tool, chosen)
        except ResidencyError as exc:
            logger.warning(
                "tool %s is shown unminified: %s", printable(str(tool.get("name"))), printable(str(exc))
            )
            return tool
        return shown

    return minify


class Gateway:
    """The MCP gateway (see the module docstring).

    Args:
        config: the configuration (``load_config``); its upstreams are started on entry.
        upstreams: extra in-process upstream servers by name (the demo desk, tests).
        store: where sessions are journaled (opened from ``config.residency.store`` if omitted).
        default_session: the session key for requests that name none (stdio: one client per
            process, so its session survives a restart); None gives each connection its own.
        timeout: seconds per upstream call (``config.residency.call_timeout`` if omitted).
        relist_interval: seconds after which a call re-lists its upstream before it is
            forwarded, so a change made without ``tools/list_changed`` is noticed within it
            (``config.residency.relist_interval`` if set, else ``RELIST_INTERVAL``).
        clock: seconds of a monotonic clock, for the rate limits (``time.monotonic`` if omitted).
    """

    def __init__(
        self,
        config: GatewayConfig | None = None,
        *,
        upstreams: Mapping[str, Server[Any]] | None = None,
        store: Store | None = None,
        default_session: str | None = None,
        timeout: float | None = None,
        relist_interval: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config = config if config is not None else GatewayConfig()
        settings = self.config.residency
        self.secrets: Secrets = self.config.secrets()
        # Rate limits and the audit log: a server middleware (None: neither is configured).
        self.gate = request_gate(settings, self.secrets, default_session=default_session, clock=clock)
        self.telemetry = Telemetry(self.secrets)
        """Log lines and metrics (served at ``/metrics`` over HTTP)."""
        self.tracing = _tracing_for(self.config, self.telemetry, self.secrets)
        """OpenTelemetry spans and metrics (``residency.telemetry``), None when off."""
        self.policy = Policy(settings.policy)
        """Which tools each caller may see (``_policy``); ``set_policy`` replaces it."""
        self.default_session = default_session
        self._budget = settings.budget.budget()
        # What the planner gets when the host keeps every argument (the usual case).
        self._schema_budget = dataclasses.replace(self._budget, argument_tokens=_UNBOUNDED)
        self._minify = _minifier(settings.minify)
        # The revocation hook runs in a worker thread after an archive (``_revoke``), never on
        # the event loop: sessions get no ``revoke`` callback. ``_revoking``: references running.
        self._revoker = settings.revoker(redact=self.secrets.redact)
        self._revoking: set[str] = set()
        self._store = store
        self._owns_store = store is None
        call_timeout = timeout if timeout is not None else settings.call_timeout
        if relist_interval is None:
            relist_interval = settings.relist_interval
        self.relist_interval = relist_interval
        # The version of each upstream's tool list the catalog was built from.
        self._applied: dict[str, int] = {}
        self.upstreams: dict[str, Upstream] = {}
        startup = settings.startup_timeout
        for name, entry in self.config.enabled_servers.items():
            self.upstreams[name] = Upstream(
                name,
                entry,
                timeout=entry.timeout or call_timeout,
                startup_timeout=startup,
                on_tools_changed=self._upstream_changed,
                redact=self.secrets.redact,
                secrets=self.secrets,
                tracing=self.tracing,
            )
        for name, target in (upstreams or {}).items():
            self.upstreams[name] = Upstream(
                name,
                target,
                timeout=call_timeout,
                startup_timeout=startup,
                on_tools_changed=self._upstream_changed,
                redact=self.secrets.redact,
                tracing=self.tracing,
            )
        # Every configured server owns its namespace, up, down or disabled (``_aggregate``).
        self._servers = (*self.config.servers, *(upstreams or {}))
        check_server_names(self._servers)
        self._warned_names: set[tuple[str, str]] = set()
        self._serving = False
        overrides: dict[str, dict[str, bool]] = {}
        for name in settings.read_only:
            overrides[name] = {"readOnlyHint": True, "destructiveHint": False}
        for name in settings.mutating:
            overrides[name] = {"readOnlyHint": False}
        self._overrides = overrides
        self.catalog = Catalog()
        self._catalog_count: Future[int] = Future()
        self._catalog_count.set_result(0)
        self._gauged: Future[int] | None = None
        self._warmup: SearchWarmup | None = None  # the current catalog's
        self._first_list = threading.Event()  # set once a tools/list has been answered
        self._vectors_news = False  # vectors ready from now on are logged (before: the summary)
        self._announced: weakref.WeakSet[ToolIndex] = weakref.WeakSet()  # indexes logged ready
        self._announcing = threading.Lock()
        self._sessions: SessionTable | None = None
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._fanout: Fanout | None = None  # cross-replica notices (PostgreSQL stores)
        self._calls = ToolCalls(self)
        self._listing = ToolListing(self)
        self._resources = ResourceHandlers(self)
        self.server = self._build_server()

    # -- lifetime ----------------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            if self._store is None:
                self._store = open_store(self.config.residency.store)
            if self._owns_store:
                stack.callback(self._store.close)
            if self.gate is not None:
                stack.enter_context(self.gate.opened())
            # Search vectors are kept where the store is (RESIDENCY_SEARCH_CACHE overrides).
            cache = embedding_cache()
            stack.callback(cache.set_default_directory, cache.default_directory)
            cache.set_default_directory(vector_directory(self._store))
            self._sessions = SessionTable(
                self._store, self._open_session, delivery=self.config.residency.delivery
            )
            if self.tracing is not None:
                # Pushed first, so it runs last: the upstreams' last spans are sent too.
                self.tracing.start()
                stack.push_async_callback(_stop_tracing, self.tracing)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            if self.tracing is not None:
                await self._tg.start(self.tracing.run_exports)  # spans sent from this loop
            self._fanout = _fanout_for(self._store)
            if self._fanout is not None:
                stack.push_async_callback(self._fanout.aclose)
                await self._tg.start(self._fanout.run, self._journal_moved, self._archive_grew)
            stack.push_async_callback(self._stop_upstreams)
            await self._start_upstreams()
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        # A warm-up thread may finish after this: a stopped gateway announces nothing.
        self._vectors_news = False
        stack, self._stack = self._stack, None
        if stack is not None:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)

    async def _start_upstreams(self) -> None:
        assert self._tg is not None
        tg = self._tg
        ready_by = anyio.current_time() + self.config.residency.ready_wait
        pending = len(self.upstreams)
        settled = anyio.Event()

        async def start(upstream: Upstream) -> None:
            nonlocal pending
            delay = START_RETRY_FIRST
            attempt = 1
            while True:
                try:
                    await upstream.start(tg)
                    break
                except UpstreamFailure as exc:
                    log = logger.warning if attempt == 1 else logger.debug
                    log("%s; trying again in %g s", printable(self.secrets.redact(str(exc))), delay)
                finally:
                    if attempt == 1:
                        pending -= 1
                        if pending == 0:
                            settled.set()
                await anyio.sleep(delay)
                delay = min(delay * 2, START_RETRY_MAX)
                attempt += 1
            if attempt > 1:
                logger.info("upstream %s started (attempt %d)", printable(upstream.name), attempt)
            if self._serving:
                await self._apply_catalog()  # a late upstream: its tools are news to every session

        for upstream in self.upstreams.values():
            tg.start_soon(start, upstream)
        if pending:
            with anyio.move_on_after(self.config.residency.ready_wait):
                await settled.wait()
        # No await from here on: an upstream that starts after this line is applied by its task.
        waits = min(ready_by - anyio.current_time(), self.config.residency.search_wait) > 0
        self._rebuild_catalog(after_first_list=not waits)
        self._serving = True
        await self._wait_for_vectors(ready_by)

    async def _wait_for_vectors(self, ready_by: float) -> None:
        """Wait for the catalog's search vectors until ``ready_by`` and at most ``search_wait``
        (a catalog rebuilt meanwhile, by an upstream that started late, is waited for instead)."""
        wait = min(ready_by - anyio.current_time(), self.config.residency.search_wait)
        deadline = anyio.current_time() + wait
        while (warmup := self._warmup) is not None:
            left = deadline - anyio.current_time()
            if left <= 0:
                break
            # In a worker thread, bounded: a thread cannot be cancelled, so it must end by itself.
            await anyio.to_thread.run_sync(warmup.wait, left, abandon_on_cancel=True)
            if warmup is self._warmup:
                break
        with self._announcing:  # a warm-up that ends meanwhile sees either side of this
            self._vectors_news = True

    async def _stop_upstreams(self) -> None:
        with anyio.CancelScope(shield=True):
            for upstream in self.upstreams.values():
                await upstream.stop()

    # -- the catalog -------------------------------------------------------------------------

    def _rebuild_catalog(self, *, after_first_list: bool = False) -> None:
        offered: dict[str, list[JSONObject]] = {}
        for name, upstream in self.upstreams.items():
            offered[name] = [t for t in upstream.tools if self._usable(name, t)]
            self._applied[name] = upstream.version
        self.catalog = build_catalog(
            offered, reserved=meta.META_TOOLS, overrides=self._overrides, servers=self._servers
        )
        for entry in self.catalog.renamed():
            if (entry.server, entry.upstream_name) not in self._warned_names:
                self._warned_names.add((entry.server, entry.upstream_name))
                logger.warning(
                    "upstream %s: tool '%s' %s; listed as %s",
                    printable(entry.server),
                    printable(entry.upstream_name, limit=NAME_SHOWN),
                    entry.renamed,
                    entry.name,
                )
        # Only telemetry needs it, first at the first list: counted meanwhile, beside the loop.
        self._catalog_count = count_tokens_aside(self.catalog.definitions())
        # The search index and its vectors too, so that searches need not wait for them.
        # Unless the gateway waits for them before it serves, they wait for the first list to be
        # answered (at most QUIET_START seconds): numpy and the model load in another thread,
        # but a thread that imports holds the GIL, and would slow the client's first answers.
        gate = self._first_list if after_first_list else None
        self._warmup = SearchWarmup(self.catalog, on_ready=self._vectors_ready, after=gate)

    def _vectors_ready(self, warmup: SearchWarmup, seconds: float) -> None:
        """Called in the warm-up's thread: said once serving began, once per index, and only for
        the index the catalog now served uses (a reload that changed nothing builds another
        catalog of the same tools: it shares the index, and its own warm-up found it ready)."""
        index = warmup.index
        if index is None or catalog_index(self.catalog) is not index:
            return
        with self._announcing:
            if index in self._announced:
                return
            self._announced.add(index)
            if not self._vectors_news:  # ready before serving began: the startup summary says so
                return
        status = warmup.status()
        search_logger.info(
            "tool search: fusion answers now: the vectors of %d tools are ready after %.1f s (%s)",
            status.tools,
            seconds,
            status.model,
        )

    def search_status(self) -> SearchStatus:
        """Which ranker answers ``search_tools`` now, and what comes next (the startup summary)."""
        warmup = self._warmup
        return warmup.status() if warmup is not None else idle_status(len(self.catalog))

    def catalog_tokens(self) -> int:
        """Tokens of every upstream tool's full definition: what a list without residency costs.

        Counted in a thread from each catalog rebuild on (the encoder runs outside the GIL, so
        at 10,000 tools the count overlaps the first session's registration instead of
        following it); this waits for that count if it is still running."""
        count = self._catalog_count
        tokens = count.result()
        if self._gauged is not count:
            self._gauged = count
            self.telemetry.set_catalog(len(self.catalog), tokens)
        return tokens

    def _usable(self, server: str, tool: Mapping[str, Any]) -> bool:
        try:
            # The sessions' own check; a schema's verdict is kept once per process (most of a startup).
            checked_tool(tool, f"{server} tool")
        except ResidencyError as exc:
            logger.warning(
                "upstream %s: skipping a malformed tool: %s",
                printable(server),
                printable(self.secrets.redact(str(exc)), limit=MESSAGE_SHOWN),
            )
            return False
        return True

    async def _upstream_changed(self, upstream: Upstream) -> None:
        """An upstream announced a change (called once at a time per upstream: coalesced)."""
        try:
            await self.reload(upstream.name)
        except UpstreamFailure as exc:
            logger.warning("%s", printable(self.secrets.redact(str(exc))))

    async def _refresh(self, upstream: Upstream, max_age: float) -> None:
        """Bring an upstream's tools up to date (``Upstream.refresh``) and apply a changed list.

        Raises:
            UpstreamFailure: it could not be started or did not list its tools.
        """
        await upstream.refresh(max_age)
        if upstream.version != self._applied.get(upstream.name):
            await self._apply_catalog()

    async def reload(self, server: str | None = None) -> None:
        """List an upstream's tools again (all upstreams when ``server`` is None) and apply changes.

        Every open session re-registers the definitions: a changed definition of a tool with
        resident arguments is tombstoned until re-expanded. Clients whose view changed are told.

        Raises:
            UpstreamFailure: the upstream could not list its tools.
        """
        names = [server] if server is not None else list(self.upstreams)
        for name in names:
            await self._refresh(self.upstreams[name], 0.0)

    async def _apply_catalog(self) -> None:
        """Rebuild the catalog from the upstreams' tools and bring every open session up to date."""
        self._rebuild_catalog()
        for gs in self._table:
            mine = self.catalog_for(gs)
            before = gs.view(mine)
            try:
                gs.session.register_tools(mine.definitions())
            except ResidencyError as exc:
                # This session stays behind; its next call catches up (or is refused) in _forward.
                logger.warning("session %s: %s", gs.key, printable(self.secrets.redact(str(exc))))
                continue
            await self._announce(gs, before, current=None)

    # -- sessions ----------------------------------------------------------------------------

    @property
    def _table(self) -> SessionTable:
        if self._sessions is None:
            raise RuntimeError("the gateway is not running: use 'async with Gateway(...)'")
        return self._sessions

    @property
    def open_sessions(self) -> int:
        """How many sessions are held in memory now (0 before the gateway is entered)."""
        return len(self._sessions) if self._sessions is not None else 0

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the gateway is not running: use 'async with Gateway(...)'")
        return self._store

    def _open_session(self, key: str, store: Store) -> Session:
        settings = self.config.residency
        return Session(
            store,
            session_id=store_id(key),
            minify=self._minify,
            pinned=settings.pinned,
            phases={k: list(v) for k, v in settings.phases.items()},
            reexpand_tool=meta.REEXPAND_TOOLS,
            chain_policy=settings.chains,
        )

    def session(self, key: str) -> Session:
        """The ``Session`` of a session key (opened or reopened from the store if needed)."""
        return self._session_for(key).session

    def _session_for(self, key: str | None, access: Access = UNRESTRICTED) -> GatewaySession:
        if key is None:
            # An anonymous caller: a throwaway session of its own, never stored or shared.
            gs = GatewaySession(
                ANONYMOUS,
                self._open_session(ANONYMOUS, MemoryStore()),
                InMemorySubscriptionBus(),
                self.config.residency.delivery,
            )
            gs.access = access
            opened = True
        else:
            # A session is opened under one access: its key says which (``_policy``).
            gs, opened = self._table.get(key + access.fingerprint)
            if opened:
                gs.access = access
                self.telemetry.set_sessions(len(self._table))
            if not isinstance(self.store, MemoryStore):
                # Other replicas (or processes) may journal to this session too: act on the
                # journal's current state, not this copy's (one indexed read; a memory store
                # has no other writer). Also when "opened": the table may hand back a copy
                # that a request in flight kept alive.
                gs.session.catch_up()
        if opened:
            try:
                self._bring_up_to_date(gs)
            except SessionConflict:
                # Another writer (a second gateway on this key) moved the session while it was
                # opened: it has caught up, so the work is done once more against its state.
                self._bring_up_to_date(gs)
        return gs

    async def _journal_moved(self, session_id: str) -> None:
        """Another replica changed what ``session_id`` shows: catch up and tell our clients.

        ``session_id`` is empty after the listener reconnected: every held session may have.
        """
        for gs in list(self._table):
            if session_id and gs.session.session_id != session_id:
                continue
            before = gs.view(self.catalog_for(gs))
            try:
                gs.session.catch_up()
            except ResidencyError as exc:
                # The next request of the session catches up (or reports it) by itself.
                logger.warning(
                    "session %s: catching up failed: %s", gs.key, printable(self.secrets.redact(str(exc)))
                )
                continue
            await self._announce(gs, before, current=None)

    async def _archive_grew(self, scope: str) -> None:
        """A chain entered archive scope ``scope`` (on any replica; empty: any scope may have
        grown): every held session adopts what is new and tells its clients if its view moved.
        """
        for gs in list(self._table):
            mine = self.catalog_for(gs)
            before = gs.view(mine)
            try:
                gs.session.catch_up()
                gs.session.register_tools(mine.definitions())  # adopts the scope's new chains
            except ResidencyError as exc:
                # The next request of the session adopts them (or reports the failure) by itself.
                logger.warning(
                    "session %s: adopting archived chains failed: %s",
                    gs.key,
                    printable(self.secrets.redact(str(exc))),
                )
                continue
            await self._announce(gs, before, current=None)

    def _bring_up_to_date(self, gs: GatewaySession) -> None:
        s = gs.session
        s.register_tools(self.catalog_for(gs).definitions())
        if s.turn == 0:
            # A new session: tools to the budget (by reference: its pinned tools only).
            s.plan_turn(self._turn_budget(gs), by_reference=gs.delivery.by_reference)

    def _request_session(self, ctx: ServerRequestContext[Any, Any]) -> GatewaySession:
        """The session a request acts on.

        Raises:
            InvalidInput: a malformed session key.
            ResidencyError: the session cannot be opened (a store failure, the session limit).
        """
        caller = caller_of(request_principal(ctx))
        gs = self._session_for(session_key(ctx, self.default_session), self.policy.access(caller))
        gs.caller = caller
        if not is_modern(ctx):
            gs.connections.add(connection_of(ctx))
        return gs

    def catalog_for(self, gs: GatewaySession) -> Catalog:
        """The catalog a session is built from: the part its caller may see (``_policy``). Every
        path that names a tool for a session goes through this, and a denied tool is not in it."""
        return gs.access.catalog(self.catalog)

    def note_denied(self, gs: GatewaySession, name: str) -> None:
        """A call named a tool unknown to the session: if the policy hides it from the session's
        caller, the operator's log says so (the caller was answered as for an unknown tool)."""
        if gs.access.everything or name not in self.catalog:
            return
        note_denied()  # the audit line says denied; the caller was answered as for an unknown tool
        logger.info(
            "policy: session %s called %s, a tool its caller may not see; answered as an unknown tool",
            gs.key,
            printable(name, limit=NAME_SHOWN),
        )

    async def set_policy(self, settings: PolicySettings | None) -> None:
        """Apply another policy now: each caller's next request is decided by it. A held session
        whose caller's access changed is told its tool list changed (its next request continues
        in the session of its new access, see ``_policy``)."""
        policy = Policy(settings)
        self.policy = policy
        for gs in list(self._table):
            access = policy.access(gs.caller)
            if access.fingerprint == gs.access.fingerprint:
                gs.access = access  # the same tools: the session stays the caller's
                continue
            await self._listing.tell_list_changed(gs)

    async def reload_policy(self) -> int:
        """Read the config file again and apply its ``residency.policy`` (``set_policy``); the
        file's other settings take effect at the next start. ``residency serve`` does this on
        SIGHUP.

        Returns:
            The number of rules now in force.

        Raises:
            ConfigError: the gateway was not started from a file, or the file is unreadable or
                invalid: nothing changes and the policy in force keeps serving.
        """
        from residency._gateway._config import load_config

        source = self.config.source
        if source == "<config>":
            raise ConfigError("the gateway was not started from a config file: no policy to reload")
        config = await anyio.to_thread.run_sync(load_config, source)
        settings = config.residency.policy
        await self.set_policy(settings)
        return len(settings.rules) if settings is not None else 0

    def _turn_budget(self, gs: GatewaySession) -> Budget:
        return self._budget if gs.host_applies_evictions else self._schema_budget

    # -- handlers ----------------------------------------------------------------------------

    def _build_server(self) -> Server[Any]:
        server = ListChangedServer(
            "residency",
            version=_version(),
            instructions=_instructions(self.config.residency.delivery),
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._calls.handle,
            on_list_resources=self._resources.list_resources,
            on_list_resource_templates=self._resources.list_templates,
            on_read_resource=self._resources.read_resource,
            on_subscribe_resource=self._resources.subscribe,
            on_unsubscribe_resource=self._resources.unsubscribe,
            on_subscriptions_listen=self._resources.listen,
        )
        if self.tracing is not None:
            self.tracing.instrument(server)
        if self.gate is not None:
            server.middleware.append(self.gate)
        return server

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            return await self._listing.list_tools(ctx, params)
        finally:
            self._first_list.set()

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        if self.policy.configured:
            # Asked without the caller (``Mcp-Param`` header checks): under a policy, no tool's
            # schema, so a refusal there tells no caller that a tool it may not see exists.
            return None
        entry = self.catalog.get(name)
        if entry is not None:
            schema: Mapping[str, Any] | None = entry.definition.get("inputSchema")
            return schema
        return None

    async def _announce(
        self, gs: GatewaySession, before: View, *, current: ServerRequestContext[Any, Any] | None
    ) -> None:
        """Tell the session's clients what changed since ``before`` (``_listing``)."""
        await self._listing.announce(gs, before, current=current)


def _fanout_for(store: Store) -> Fanout | None:
    """Cross-replica notices for a store other replicas share (PostgreSQL), else None."""
    if "residency._store._postgres" not in sys.modules:
        return None  # psycopg is optional: no PostgreSQL store was ever opened
    from residency._gateway._fanout import fanout_for

    return fanout_for(store)


def _tracing_for(config: GatewayConfig, telemetry: Telemetry, secrets: Secrets) -> Tracing | None:
    """The gateway's OpenTelemetry side, or None: without a ``residency.telemetry`` section (or
    with ``OTEL_SDK_DISABLED=true``) no OpenTelemetry SDK module is imported."""
    settings = config.residency.telemetry
    if settings is None or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from residency._gateway._tracing import Tracing
    except ImportError as exc:
        raise ConfigError(
            f"residency.telemetry needs the OpenTelemetry SDK ({exc.name} is not installed): "
            "pip install 'residency[otel]'"
        ) from None
    return Tracing(settings, telemetry.registry, secrets, _version())


async def _stop_tracing(tracing: Tracing) -> None:
    with anyio.CancelScope(shield=True):
        await tracing.aclose_exports()
        await anyio.to_thread.run_sync(tracing.shutdown)


def _instructions(delivery: str) -> str:
    """The server's instructions: the same for every session of a gateway (one config)."""
    text = (
        "Tools from several MCP servers behind one gateway. Some tool schemas may be withheld "
        "to save context: use search_tools to find them and reexpand_tools before calling one. "
        "When a tool whose earlier arguments you can still see is withheld, the result of that "
        "call says so (and residency://tombstones lists them); call reexpand_tools first "
        "instead of rebuilding the call from memory."
    )
    if delivery != "list":
        text += " " + meta.CALL_HINT
    return text


def _version() -> str:
    from residency import __version__

    return __version__
