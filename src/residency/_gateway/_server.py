"""The gateway: an MCP server in front of upstream MCP servers, one ``Session`` per client session.

Theory of operation
-------------------
``Gateway`` is an async context manager. Entering it opens the store, starts every upstream
(each in its own task, see ``_upstream``) and builds the aggregated catalog; leaving it stops
them. ``gateway.server`` is the low-level ``mcp`` server to run over stdio, streamable HTTP or
in-process.

Every request is mapped to a session key (``_connection.session_key``) and so to a
``GatewaySession``. Each ``tools/call`` is a turn:

1. a meta-tool runs against the session; any other call is authorized by the session first
   (withheld, archived, invalid arguments, chain collision: refused with the tombstone or error
   text, never forwarded);
2. the call's arguments are recorded (they are in the model's transcript now) and the call is
   forwarded upstream with a timeout;
3. the session plans the next turn (``plan_turn``), so a tool unused for a while is demoted
   under budget pressure, and a demoted tool with visible arguments is tombstoned;
4. if what the client sees changed, it is told: ``tools/list_changed`` in the handshake era,
   ``ToolsListChanged`` (and ``resources/updated`` for ``residency://tombstones``) on the
   session's listen streams in the 2026-07-28 era.

In both eras ``tools/list`` is the caller's session view: its resident tools (minified, in the
order they became resident) plus the meta-tools, whose definitions never change; tombstones
reach the model in the result of the call that creates them. Agent frameworks let
the model call listed tools only, so a re-expanded tool must be listed. 2026-07-28 answers are
``cacheScope: "private"`` with ``ttlMs: 0`` (the list differs per caller and may change), and
changes go out on the session's ``subscriptions/listen`` stream. A call to an evicted tool (no
arguments of it in the transcript, so it cannot be a ghost call) whose arguments validate
against the full schema is admitted: the tool is re-expanded implicitly. A tombstoned tool
stays refused until it is re-expanded explicitly.

Upstreams start in parallel. The gateway serves once every upstream has started or failed, or
after ``ready_wait`` seconds; one still starting joins later (its tools are announced like any
other change), so a hung upstream holds up no one. One that fails to start is tried again in
the background, after 1, 2, 4, ... seconds (at most ``START_RETRY_MAX`` apart), until it starts.

Rug pulls. An upstream may change a tool's definition at any time: after announcing it
(``tools/list_changed``), silently, or across a restart. The catalog remembers which version of
each upstream's list it was built from, and a call is forwarded only under the definition the
session pinned when the call came in:

1. the call is admitted against the session's pin (a session that missed a catalog update
   catches up first), which records its arguments;
2. if the upstream's list may have moved (a change announced or being listed, the connection
   down, or ``relist_interval`` seconds since the last listing), it is brought up to date
   first: restarted (a start lists) or re-listed, waiting for a relist already in flight, and
   a changed list is applied to the catalog and every open session;
3. if the tool's definition is no longer the one pinned at step 1, the call is not sent: the
   session has re-registered it, and the redefinition tombstoned it (its arguments are visible),
   so the agent gets the tombstone and ``reexpand_tools`` gives the new schema. A tool renamed
   (even only in case) is a new tool; the old name is offered by no one and is never routed to
   the new definition.

The upstream refuses to send a call checked against a version of its list that has moved since
(``ToolsChanged``), which closes the gap between steps 2 and 3 and the send. Step 2 costs
nothing on most calls (two comparisons); a listing round trip happens at most once per
``relist_interval`` per upstream, or after an announcement, so a silent change is noticed
within that interval. Announcements are coalesced (see ``_upstream``).

The gateway assumes call arguments stay in the transcript (it cannot edit it), so the planner
gets no argument budget, unless the host takes part: a host that sends
``_meta["residency/evicted_calls"]`` (call ids it dropped; each forwarded result names its call
id in ``_meta["residency/call"]``) gets the configured argument budget and the planner's
evictions in ``_meta["residency/evict"]``.

Phases (the config's ``phases``) favour their tools while active. The agent's own calls select
one: a forwarded call to a tool outside the active phase activates the first configured phase
that has it. A host that knows better sends ``_meta["residency/phase"]`` (a phase name; ``""`` or
null for none) on a ``tools/call``; from then on it alone chooses that session's phase.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated, ToolsListChanged

from residency._core._lifecycle import ToolState
from residency._core._planner import Budget
from residency._core._tools import JSONObject, parse_tool
from residency._errors import InvalidInput, NotFound, ResidencyError, SchemaError, SessionConflict
from residency._gateway import _meta_tools as meta
from residency._gateway import _resources as res
from residency._gateway._aggregate import Catalog, CatalogEntry, build_catalog
from residency._gateway._config import GatewayConfig, Secrets
from residency._gateway._connection import ListChangedServer, connection_of, is_modern, session_key
from residency._gateway._errors import call_outcome, error_result, redact_result, rule_for, to_mcp_error
from residency._gateway._sessions import GatewaySession, SessionTable, View, store_id
from residency._gateway._telemetry import Telemetry, meta_tool_tokens
from residency._gateway._upstream import ToolsChanged, Upstream, UpstreamFailure
from residency._session import Session
from residency._store._memory import MemoryStore
from residency._store._protocol import Store
from residency._tokens import count_tokens
from residency._tool_cache import schema_problem
from residency._tool_ops import TurnPlan

if TYPE_CHECKING:
    from residency._gateway._fanout import Fanout

__all__ = ["Gateway"]

logger = logging.getLogger("residency.gateway")

CALL_META_KEY = "residency/call"
EVICTED_META_KEY = "residency/evicted_calls"
EVICT_META_KEY = "residency/evict"
PHASE_META_KEY = "residency/phase"
_UNBOUNDED = 1 << 62
_META_TOOL_MODELS = tuple(types.Tool.model_validate(d) for d in meta.meta_tool_definitions())
"""The meta-tools as listed: the same for every session, so built once."""
ANONYMOUS = "anonymous"
"""The key of a throwaway session given to a caller that names none and has no identity."""
RELIST_INTERVAL = 30.0
"""Seconds after which a call re-lists its upstream before it is forwarded (``relist_interval``)."""
START_RETRY_FIRST = 1.0
START_RETRY_MAX = 15.0
"""Seconds between attempts to start an upstream whose start failed (doubling from the first)."""
_SEND_ATTEMPTS = 3


def open_store(url: str) -> Store:
    """The store for a URL (``memory://``, ``sqlite:///path`` or ``postgresql://...``).

    Raises:
        ConfigError: an unknown URL.
        StoreError: the store cannot be opened.
    """
    from residency._store import open_store as open_by_url

    return open_by_url(url)


def _unminified(tool: JSONObject) -> JSONObject:
    return tool


def _minifier(level: str) -> Callable[[JSONObject], JSONObject] | None:
    """How resident tools are shown; a tool the minifier cannot process is shown in full."""
    if level == "none":
        return _unminified
    try:
        module = importlib.import_module("residency._core._minify")
    except ImportError:
        return None
    minify_tool = module.minify_tool
    chosen = "full-text" if level == "lossless" else level

    def minify(tool: JSONObject) -> JSONObject:
        try:
            shown: JSONObject = minify_tool(tool, chosen)
        except ResidencyError as exc:
            logger.warning("tool %s is shown unminified: %s", tool.get("name"), exc)
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
    ) -> None:
        self.config = config if config is not None else GatewayConfig()
        settings = self.config.residency
        self.secrets: Secrets = self.config.secrets()
        self.telemetry = Telemetry(self.secrets)
        """Log lines and metrics (served at ``/metrics`` over HTTP)."""
        self.default_session = default_session
        self._budget = settings.budget.budget()
        # What the planner gets when the host keeps every argument (the usual case).
        self._schema_budget = dataclasses.replace(self._budget, argument_tokens=_UNBOUNDED)
        self._minify = _minifier(settings.minify)
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
            )
        for name, target in (upstreams or {}).items():
            self.upstreams[name] = Upstream(
                name,
                target,
                timeout=call_timeout,
                startup_timeout=startup,
                on_tools_changed=self._upstream_changed,
                redact=self.secrets.redact,
            )
        self._serving = False
        # The phase a call to each tool selects: the first configured phase that has it.
        self._phase_of: dict[str, str] = {}
        for phase, names in settings.phases.items():
            for name in names:
                self._phase_of.setdefault(name, phase)
        overrides: dict[str, dict[str, bool]] = {}
        for name in settings.read_only:
            overrides[name] = {"readOnlyHint": True, "destructiveHint": False}
        for name in settings.mutating:
            overrides[name] = {"readOnlyHint": False}
        self._overrides = overrides
        self.catalog = Catalog()
        self._sessions: SessionTable | None = None
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._fanout: Fanout | None = None  # cross-replica notices (PostgreSQL stores)
        self._tool_models: dict[tuple[str, str], types.Tool] = {}
        self._shown_cache: dict[str, JSONObject] = {}
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
            self._sessions = SessionTable(self._store, self._open_session)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._fanout = _fanout_for(self._store)
            if self._fanout is not None:
                stack.push_async_callback(self._fanout.aclose)
                await self._tg.start(self._fanout.run, self._journal_moved)
            stack.push_async_callback(self._stop_upstreams)
            await self._start_upstreams()
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)

    async def _start_upstreams(self) -> None:
        assert self._tg is not None
        tg = self._tg
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
                    log("%s; trying again in %g s", self.secrets.redact(str(exc)), delay)
                finally:
                    if attempt == 1:
                        pending -= 1
                        if pending == 0:
                            settled.set()
                await anyio.sleep(delay)
                delay = min(delay * 2, START_RETRY_MAX)
                attempt += 1
            if attempt > 1:
                logger.info("upstream %s started (attempt %d)", upstream.name, attempt)
            if self._serving:
                await self._apply_catalog()  # a late upstream: its tools are news to every session

        for upstream in self.upstreams.values():
            tg.start_soon(start, upstream)
        if pending:
            with anyio.move_on_after(self.config.residency.ready_wait):
                await settled.wait()
        # No await from here on: an upstream that starts after this line is applied by its task.
        self._rebuild_catalog()
        self._serving = True

    async def _stop_upstreams(self) -> None:
        with anyio.CancelScope(shield=True):
            for upstream in self.upstreams.values():
                await upstream.stop()

    # -- the catalog -------------------------------------------------------------------------

    def _rebuild_catalog(self) -> None:
        offered: dict[str, list[JSONObject]] = {}
        for name, upstream in self.upstreams.items():
            offered[name] = [t for t in upstream.tools if self._usable(name, t)]
            self._applied[name] = upstream.version
        self.catalog = build_catalog(offered, reserved=meta.META_TOOLS, overrides=self._overrides)
        self._shown_cache.clear()
        self._catalog_tokens: int | None = None  # counted on first use: only telemetry needs it

    def catalog_tokens(self) -> int:
        """Tokens of every upstream tool's full definition: what a list without residency costs."""
        if self._catalog_tokens is None:
            self._catalog_tokens = sum(count_tokens(d) for d in self.catalog.definitions())
            self.telemetry.set_catalog(len(self.catalog), self._catalog_tokens)
        return self._catalog_tokens

    def _usable(self, server: str, tool: Mapping[str, Any]) -> bool:
        try:
            parsed = parse_tool(tool, where=f"{server} tool")
            # Checked once per distinct schema in the process: the check is most of a startup.
            problem = schema_problem(parsed["inputSchema"])
            if problem is not None:
                raise SchemaError(
                    f"{server} tool {parsed['name']!r}: inputSchema is not a valid JSON Schema at {problem}",
                    where="inputSchema",
                )
        except ResidencyError as exc:
            logger.warning(
                "upstream %s: skipping a malformed tool: %s", server, self.secrets.redact(str(exc))
            )
            return False
        return True

    async def _upstream_changed(self, upstream: Upstream) -> None:
        """An upstream announced a change (called once at a time per upstream: coalesced)."""
        try:
            await self.reload(upstream.name)
        except UpstreamFailure as exc:
            logger.warning("%s", self.secrets.redact(str(exc)))

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
            before = gs.view(self.catalog)
            try:
                gs.session.register_tools(self.catalog.definitions())
            except ResidencyError as exc:
                # This session stays behind; its next call catches up (or is refused) in _forward.
                logger.warning("session %s: %s", gs.key, self.secrets.redact(str(exc)))
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

    def _session_for(self, key: str | None) -> GatewaySession:
        if key is None:
            # An anonymous caller: a throwaway session of its own, never stored or shared.
            gs = GatewaySession(
                ANONYMOUS, self._open_session(ANONYMOUS, MemoryStore()), InMemorySubscriptionBus()
            )
            opened = True
        else:
            gs, opened = self._table.get(key)
            if opened:
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
            before = gs.view(self.catalog)
            try:
                gs.session.catch_up()
            except ResidencyError as exc:
                # The next request of the session catches up (or reports it) by itself.
                logger.warning("session %s: catching up failed: %s", gs.key, self.secrets.redact(str(exc)))
                continue
            await self._announce(gs, before, current=None)

    def _bring_up_to_date(self, gs: GatewaySession) -> None:
        s = gs.session
        s.register_tools(self.catalog.definitions())
        if s.turn == 0:
            s.plan_turn(self._turn_budget(gs))  # a new session: tools to the budget

    def _request_session(self, ctx: ServerRequestContext[Any, Any]) -> GatewaySession:
        try:
            key = session_key(ctx, self.default_session)
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        try:
            gs = self._session_for(key)
        except ResidencyError as exc:
            raise to_mcp_error(exc, self.secrets) from None
        if not is_modern(ctx):
            gs.connections.add(connection_of(ctx))
        return gs

    def _turn_budget(self, gs: GatewaySession) -> Budget:
        return self._budget if gs.host_applies_evictions else self._schema_budget

    # -- handlers ----------------------------------------------------------------------------

    def _build_server(self) -> Server[Any]:
        return ListChangedServer(
            "residency",
            version=_version(),
            instructions=(
                "Tools from several MCP servers behind one gateway. Some tool schemas may be withheld "
                "to save context: use search_tools to find them and reexpand_tools before calling one. "
                "When a tool whose earlier arguments you can still see is withheld, the result of that "
                "call says so (and residency://tombstones lists them); call reexpand_tools first "
                "instead of rebuilding the call from memory."
            ),
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        entry = self.catalog.get(name)
        if entry is not None:
            schema: Mapping[str, Any] | None = entry.definition.get("inputSchema")
            return schema
        return None

    def _tool_model(self, name: str, digest: str, shown: JSONObject) -> types.Tool:
        """The listed ``Tool`` of a definition, built once per (name, definition hash)."""
        key = (name, digest)
        found = self._tool_models.get(key)
        if found is None:
            found = types.Tool.model_validate(shown)
            if len(self._tool_models) > 100_000:
                self._tool_models.clear()
            self._tool_models[key] = found
        return found

    def _shown(self, name: str, definition: JSONObject) -> JSONObject:
        shown = self._shown_cache.get(name)
        if shown is None:
            shown = self._minify(definition) if self._minify is not None else definition
            self._shown_cache[name] = shown
        return shown

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        gs = self._request_session(ctx)
        s = gs.session
        resident = gs.resident_definitions(self.catalog)
        tools = [self._tool_model(n, h, d) for n, h, d in resident]
        tools += _META_TOOL_MODELS
        shown = sum(s.tool(n).tokens for n, _, _ in resident) + meta_tool_tokens()
        self.telemetry.listed(gs.key, shown, self.catalog_tokens())
        if is_modern(ctx):
            # Per caller and liable to change at any turn: never cached, never shared.
            return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Another gateway may journal to this session too (one store, one session key). A
        # SessionConflict means this gateway's copy was behind: it has caught up and applied
        # nothing, so unless the call was already admitted (and so may have been forwarded), the
        # work runs once more on the new state. A second conflict is the caller's to retry.
        extra_meta: JSONObject = {}
        try:
            return await self._call_tool_once(ctx, params, extra_meta)
        except (SessionConflict, MCPError) as exc:
            if not _is_conflict(exc) or CALL_META_KEY in extra_meta:
                if isinstance(exc, MCPError):
                    raise
                raise to_mcp_error(exc, self.secrets) from None
        try:
            return await self._call_tool_once(ctx, params, {})
        except SessionConflict as exc:
            raise to_mcp_error(exc, self.secrets) from None

    async def _call_tool_once(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, extra_meta: JSONObject
    ) -> types.CallToolResult:
        gs = self._request_session(ctx)
        s = gs.session
        name = params.name
        arguments: JSONObject = dict(params.arguments or {})
        phase = self._host_phase(gs, ctx)
        self._host_evictions(gs, ctx)
        before = gs.view(self.catalog)
        if name in meta.META_TOOLS:
            result = self._meta_call(gs, name, arguments)
        else:
            result = await self._forward(gs, name, arguments, extra_meta)
            if CALL_META_KEY in extra_meta and not gs.host_sets_phase:
                phase = self._phase_after_call(phase, name)
        budget = self._turn_budget(gs)
        plan: TurnPlan | None = None
        try:
            try:
                plan = s.plan_turn(budget, phase=phase)
            except SessionConflict:
                plan = s.plan_turn(budget, phase=phase)  # caught up: planned on the new state
        except SessionConflict:
            # The call's own work is done (it may have been forwarded): its result is not
            # dropped for a plan. Losing a plan leaves a more cautious state; the next request
            # plans the turn.
            logger.warning("session %s: another writer keeps changing it; turn not planned", gs.key)
        except ResidencyError as exc:
            raise to_mcp_error(exc, self.secrets) from None
        if plan is not None and gs.host_applies_evictions and plan.evictions:
            extra_meta[EVICT_META_KEY] = list(plan.evictions)
        _add_tombstone_notice(result, before[1], gs.view(self.catalog)[1])
        await self._announce(gs, before, current=ctx)
        if self._fanout is not None and gs.view(self.catalog) != before:
            await self._fanout.notify(s.session_id)  # clients of other replicas hear of it too
        if extra_meta:
            # The result is this call's own (fresh from the upstream client or a meta-tool).
            result.meta = {**(result.meta or {}), **extra_meta}
        return result

    def _meta_call(self, gs: GatewaySession, name: str, arguments: JSONObject) -> types.CallToolResult:
        handler = {
            meta.SEARCH_TOOLS: meta.search_tools,
            meta.REEXPAND_TOOLS: meta.reexpand_tools,
            meta.CHECK_CHAIN: meta.check_chain,
            meta.ARCHIVE_CHAIN: meta.archive_chain,
            meta.READ_SPAN: meta.read_span,
        }[name]
        try:
            result = handler(gs.session, self.catalog, arguments)
        except ResidencyError as exc:
            return call_outcome(exc, self.secrets)
        if name == meta.REEXPAND_TOOLS and not result.is_error:
            names = [t["name"] for t in (result.structured_content or {}).get("tools", ())]
            self.telemetry.reexpanded(gs.key, names, implicit=False)
        return result

    async def _forward(
        self, gs: GatewaySession, name: str, arguments: JSONObject, extra_meta: JSONObject
    ) -> types.CallToolResult:
        s = gs.session
        entry = self.catalog.get(name)
        if entry is None:
            down = self._upstreams_down()
            if name not in s.tools():
                if down:
                    # It may be one of theirs: say so rather than "unknown tool".
                    return error_result(self._down_failure(name, down), self.secrets)
                raise MCPError(
                    code=types.INVALID_PARAMS,
                    message=f"unknown tool {name!r}: use {meta.SEARCH_TOOLS} to find tools",
                    data={"reason": "not_found", "type": "NotFound", "tool": name},
                )
            return self._not_offered(gs, name, arguments, down)
        if not _pinned(s, name, entry.hash):
            # The session missed a catalog update (or was opened from an older journal).
            problem = self._catch_up(gs)
            if problem is not None:
                return problem
        evicted = s.state(name) is ToolState.EVICTED
        try:
            record = s.admit_call(name, arguments, reexpand_evicted=True)
        except ResidencyError as exc:
            rule = rule_for(exc)
            self.telemetry.refused(gs.key, name, rule.reason if rule is not None else type(exc).__name__)
            return call_outcome(exc, self.secrets)
        if evicted:
            self.telemetry.reexpanded(gs.key, (name,), implicit=True)
        extra_meta[CALL_META_KEY] = record.id
        started = time.perf_counter()
        try:
            result = await self._send(gs, entry, arguments)
        except UpstreamFailure as exc:
            self.telemetry.forwarded(gs.key, name, entry.server, time.perf_counter() - started, ok=False)
            return error_result(exc, self.secrets)
        if result is None:  # its definition changed under the call: not sent
            return self._redefined_under_call(gs, name, arguments)
        self.telemetry.forwarded(
            gs.key, name, entry.server, time.perf_counter() - started, ok=not result.is_error
        )
        # An upstream may quote its own env or headers, in an isError result above all.
        # Offloaded after redaction: what the store keeps is what the client may see.
        return res.offload_result(s, redact_result(result, self.secrets), name, self.config.residency.spans)

    async def _send(
        self, gs: GatewaySession, entry: CatalogEntry, arguments: JSONObject
    ) -> types.CallToolResult | None:
        """Forward an admitted call under the definition it was admitted against (see "Rug pulls"
        in the module docstring); None if that definition is no longer the upstream's.

        Raises:
            UpstreamFailure: the upstream failed, or did not answer (or list its tools) in time.
        """
        upstream = self.upstreams[entry.server]
        for _ in range(_SEND_ATTEMPTS):
            if not upstream.current(self.relist_interval) or upstream.version != self._applied.get(
                entry.server
            ):
                await self._refresh(upstream, self.relist_interval)
                now = self.catalog.get(entry.name)
                if now is None or now.hash != entry.hash or not _pinned(gs.session, entry.name, entry.hash):
                    return None
            try:
                return await upstream.call(
                    entry.upstream_name, arguments, version=self._applied.get(entry.server)
                )
            except ToolsChanged:
                continue  # its list moved after the check above: check again
        raise UpstreamFailure(
            f"upstream {entry.server!r} kept changing its tools; {entry.name!r} was not sent",
            server=entry.server,
        )

    def _catch_up(self, gs: GatewaySession) -> types.CallToolResult | None:
        """Bring one session's pins up to the catalog; the refusal to return if it cannot be."""
        try:
            gs.session.register_tools(self.catalog.definitions())
        except ResidencyError as exc:
            return call_outcome(exc, self.secrets)
        return None

    def _not_offered(
        self, gs: GatewaySession, name: str, arguments: JSONObject, down: list[Upstream]
    ) -> types.CallToolResult:
        """A call to a tool the session knows but no upstream offers now: never forwarded."""
        try:
            gs.session.authorize_call(name, arguments)  # a refusal still reads as one
        except ResidencyError as exc:
            return call_outcome(exc, self.secrets)
        if down:
            return error_result(self._down_failure(name, down), self.secrets)
        failure = UpstreamFailure(f"{name}: no upstream offers this tool any more", server="")
        return error_result(failure, self.secrets)

    def _redefined_under_call(
        self, gs: GatewaySession, name: str, arguments: JSONObject
    ) -> types.CallToolResult:
        """The tool's definition changed between the call's admission and its sending."""
        if name not in self.catalog:  # gone, or renamed (a name differing only in case is another tool)
            return self._not_offered(gs, name, arguments, self._upstreams_down())
        problem = self._catch_up(gs)
        if problem is not None:
            return problem
        try:
            # Its arguments are resident now, so the redefinition tombstoned it: the refusal.
            gs.session.authorize_call(name, arguments)
        except ResidencyError as exc:
            rule = rule_for(exc)
            self.telemetry.refused(gs.key, name, rule.reason if rule is not None else type(exc).__name__)
            return call_outcome(exc, self.secrets)
        failure = UpstreamFailure(
            f"{name}: its definition changed upstream while the call was made; it was not sent. "
            f"Call {meta.REEXPAND_TOOLS} to see the new definition.",
            server=self.catalog.get(name).server,  # type: ignore[union-attr]
        )
        return error_result(failure, self.secrets)

    def _host_phase(self, gs: GatewaySession, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The phase this turn is planned in: the host's choice if it sent one, else the session's.

        Raises:
            MCPError: the host named a phase the config does not define (nothing is changed).
        """
        meta_in: Mapping[str, Any] = ctx.meta if isinstance(ctx.meta, dict) else {}
        phases = self.config.residency.phases
        if PHASE_META_KEY not in meta_in:
            current = gs.session.phase
            return current if current in phases else None  # a phase dropped from the config ends
        chosen = meta_in[PHASE_META_KEY]
        if chosen == "":
            chosen = None  # some SDKs drop nulls from _meta: an empty name also means none
        if chosen is not None and (not isinstance(chosen, str) or chosen not in phases):
            known = sorted(phases)
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=(
                    f'_meta[{PHASE_META_KEY!r}] must name a configured phase, or be "" for none; '
                    f"known: {known}"
                ),
                data={"reason": "unknown_phase", "type": "InvalidInput", "phases": known},
            )
        gs.host_sets_phase = True
        return chosen

    def _phase_after_call(self, phase: str | None, tool: str) -> str | None:
        """The agent's call selects the phase: the active one if it has the tool, else the first that does."""
        if phase is not None and tool in self.config.residency.phases.get(phase, ()):
            return phase
        return self._phase_of.get(tool, phase)

    def _host_evictions(self, gs: GatewaySession, ctx: ServerRequestContext[Any, Any]) -> None:
        meta_in = ctx.meta if isinstance(ctx.meta, dict) else {}
        ids = meta_in.get(EVICTED_META_KEY)
        if not isinstance(ids, list):
            return
        gs.host_applies_evictions = True
        s = gs.session
        # Ids this session never issued are ignored; already-evicted ones change nothing.
        known = [i for i in ids if isinstance(i, str) and _is_call(s, i)]
        if known:
            s.evict_arguments(*known)

    async def _announce(
        self, gs: GatewaySession, before: View, *, current: ServerRequestContext[Any, Any] | None
    ) -> None:
        after = gs.view(self.catalog)
        if after == before:
            return
        # Tombstones are not in the list: a change of them alone leaves the list (and the
        # host's cached prompt) alone and is announced on the resource only.
        list_changed = after[0] != before[0]
        tombstones_changed = after[1] != before[1]
        here = connection_of(current) if current is not None else None
        if list_changed:
            self.telemetry.list_changed(gs.key)
            # 2026-07-28 listeners of this session (a bus with no listener drops it).
            await gs.bus.publish(ToolsListChanged())
            if current is not None and not is_modern(current):
                # On the request's own stream: a client that never opens the standalone stream
                # (stateful HTTP) still sees it.
                await current.session.send_notification(
                    types.ToolListChangedNotification(), related_request_id=current.request_id
                )
        for connection in list(gs.connections):
            if list_changed and connection is not here:
                await connection.send_tool_list_changed()
            if tombstones_changed and res.TOMBSTONES in connection.state.get("residency.subscriptions", ()):
                await connection.send_resource_updated(res.TOMBSTONES)
        if tombstones_changed:
            await gs.bus.publish(ResourceUpdated(uri=res.TOMBSTONES))

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=res.resources(), ttl_ms=0, cache_scope="public")

    async def _list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=res.resource_templates(), ttl_ms=0, cache_scope="public"
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        gs = self._request_session(ctx)
        try:
            contents = res.read_resource(
                str(params.uri), gs.session, self.catalog, upstreams=self.upstreams, secrets=self.secrets
            )
        except (NotFound, InvalidInput) as exc:  # an unknown resource, or a malformed range in its URI
            raise to_mcp_error(exc, self.secrets) from None
        return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        gs = self._request_session(ctx)
        subs = connection_of(ctx).state.setdefault("residency.subscriptions", set())
        subs.add(str(params.uri))
        gs.connections.add(connection_of(ctx))
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        connection_of(ctx).state.setdefault("residency.subscriptions", set()).discard(str(params.uri))
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        gs = self._request_session(ctx)
        return await gs.listen(ctx, params)

    def _upstreams_down(self) -> list[Upstream]:
        return [u for u in self.upstreams.values() if not u.connected]

    def _down_failure(self, tool: str, down: list[Upstream]) -> UpstreamFailure:
        states = ", ".join(
            f"{u.name} ({'still starting' if u.starting else u.last_error or 'not connected'})" for u in down
        )
        return UpstreamFailure(
            f"{tool}: no running upstream offers this tool; down: {states}. It may be one of theirs: "
            f"retry when the upstream is back.",
            server=",".join(u.name for u in down),
        )


def _fanout_for(store: Store) -> Fanout | None:
    """Cross-replica notices for a store other replicas share (PostgreSQL), else None."""
    if "residency._store._postgres" not in sys.modules:
        return None  # psycopg is optional: no PostgreSQL store was ever opened
    from residency._gateway._fanout import fanout_for

    return fanout_for(store)


def _is_conflict(exc: BaseException) -> bool:
    """A ``SessionConflict``, raw or as the JSON-RPC error the error table made of it."""
    if isinstance(exc, SessionConflict):
        return True
    data = exc.data if isinstance(exc, MCPError) else None
    return isinstance(data, dict) and data.get("type") == SessionConflict.__name__


def _pinned(session: Session, name: str, digest: str) -> bool:
    """Whether the session pins ``name`` at ``digest`` (one dict lookup: on every call's path)."""
    try:
        return session.tool(name).hash == digest
    except NotFound:
        return False


TOMBSTONE_NOTICE = "Withheld now:"
"""The first line of the text block a call's result gets when the call created tombstones."""


def _add_tombstone_notice(
    result: types.CallToolResult, before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """Append the tombstones this call created to its result, as one more text block.

    Tombstones are not in the tool list (it would change, and the host's cached prompt with
    it, whenever a tool is withheld); the model learns of them here, in the result of the call
    that creates them, and from ``residency://tombstones``.
    """
    known = set(before)
    new = [line for line in after if line not in known]
    if new:
        notice = types.TextContent(type="text", text="\n".join([TOMBSTONE_NOTICE, *new]))
        result.content = [*result.content, notice]


def _is_call(session: Session, call_id: str) -> bool:
    try:
        session.call(call_id)
    except NotFound:
        return False
    return True


def _version() -> str:
    from residency import __version__

    return __version__
