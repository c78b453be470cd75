"""Upstream MCP servers: one ``mcp.Client`` each, run in its own task, restarted on demand.

Each upstream lives in a task that enters its ``mcp.Client`` and holds it open until the
gateway stops or the connection dies; calls from any downstream session go through that one
client (request ids are the client's own, so they never cross downstream sessions). Every
call has a timeout. When the upstream crashes or hangs, the call fails with ``UpstreamFailure``
(which the gateway turns into an error result the model can read) and the next call starts the
upstream again. Messages never carry ``env`` or ``headers`` values.

The tool list is versioned: ``version`` moves whenever a listing differs from the last, and
every start lists. A listing is out of date when the upstream announced a change
(``tools/list_changed``: ``stale`` is set before anything else runs), when it is older than the
caller's ``max_age``, or when the connection is down; ``refresh`` then restarts or re-lists,
and callers that arrive while a relist is in flight wait for it and share the next one
instead of each starting their own. Announcements are followed in the background, coalesced:
one relist in flight and one more (``FOLLOW_GAP`` later) if a change is announced meanwhile, so
a storm of 2,000 notifications costs a handful of relists. ``call``
takes the version the caller checked its definition against and sends nothing if the list has
moved since (``ToolsChanged``), so no call is forwarded under a definition that was replaced.

A stdio upstream speaks through ``_stdio_upstream`` (bounded lines: a line that is not UTF-8
or too long drops the connection, and the next call starts it again; stderr relayed through
``redact``). A call that times out is followed by a ping; an upstream that does not answer it
is dropped and started again on the next call.

stdio upstreams are spoken to in the handshake era; HTTP upstreams in the era that is cheaper
for them and loses none of their change notices (``_http_upstream``). An in-process
upstream is spoken to in the 2026-07-28 era when it can tell of tool changes there (it serves
``subscriptions/listen``: the gateway listens for ``ToolsListChanged``) or has none to tell
(``tools.listChanged`` not advertised): that path skips JSON-RPC framing and costs about half
a handshake-era call. One that advertises ``tools.listChanged`` but serves no listen stream is
spoken to in the handshake era, where its ``tools/list_changed`` notifications arrive.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import AsyncIterable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.server.lowlevel import Server
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS

from residency._core._tools import JSONObject
from residency._errors import UpstreamFailure
from residency._gateway._config import HTTPServer, Secrets, StdioServer
from residency._gateway._http_upstream import open_http_client, oversize_message
from residency._gateway._stdio_upstream import stdio_transport
from residency._gateway._upstream_auth import CALLER, UpstreamCredentials
from residency._text import printable

if TYPE_CHECKING:
    from residency._gateway._tracing import Tracing

__all__ = ["ToolsChanged", "Upstream", "UpstreamFailure"]

logger = logging.getLogger("residency.gateway")

STARTUP_TIMEOUT = 30.0
"""Seconds an upstream may take to start and list its tools (``residency.startup_timeout``)."""

PROBE_TIMEOUT = 10.0
"""Seconds an upstream has to answer the ping that follows a timed-out call."""
FOLLOW_GAP = 0.25
"""Seconds between two background relists that follow announcements (calls do not wait for it)."""

OnToolsChanged = Callable[["Upstream"], Coroutine[Any, Any, None]]


class ToolsChanged(UpstreamFailure):
    """The upstream's tool list moved (or a change was announced) after the caller checked its
    definition against it; the call was not sent. Bring the definitions up to date and check again."""


class Upstream:
    """One upstream server.

    Args:
        name: the server's key in ``mcpServers``.
        target: a config entry, or an in-process ``mcp.server.lowlevel.Server`` (the demo desk
            and tests).
        timeout: seconds a call may take.
        startup_timeout: seconds a start (connect and list the tools) may take; separate from
            ``timeout``, since a cold start (``npx``, a container) is slower than any call.
        on_tools_changed: awaited (coalesced, see the module docstring) when the upstream says
            its tool list changed.
        errlog: where a stdio upstream's stderr is relayed (``sys.stderr`` if None).
        redact: scrubs secrets (``env``/``headers`` values) from what is logged and relayed.
        secrets: where an HTTP upstream's OAuth tokens are added while held (``_upstream_auth``).
        tracing: OpenTelemetry (``_tracing``): each call gets a client span whose trace context
            travels in its ``_meta``; None: off.
    """

    def __init__(
        self,
        name: str,
        target: StdioServer | HTTPServer | Server[Any],
        *,
        timeout: float,
        startup_timeout: float = STARTUP_TIMEOUT,
        on_tools_changed: OnToolsChanged | None = None,
        errlog: Any = None,
        redact: Callable[[str], str] = str,
        secrets: Secrets | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.name = name
        self._tracing = tracing
        self._target = target
        self.credentials: UpstreamCredentials | None = None
        """OAuth tokens toward it (an HTTP entry with ``credentials``), else None."""
        if isinstance(target, HTTPServer) and target.credentials is not None:
            self.credentials = UpstreamCredentials(name, target, secrets=secrets)
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self._redact = redact
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._client: Client | None = None
        self._stop: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._lock = anyio.Lock()
        self._relist_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._following = False
        self._probing = False
        self.tools: list[JSONObject] = []
        self.version = 0
        """Moves whenever a listing differs from the one before."""
        self.listed_at = -math.inf
        """``time.monotonic()`` of the last complete listing."""
        self.lists = 0
        """Complete listings so far (starts included)."""
        self.stale = False
        """A change was announced since the last listing began."""
        self._begun = 0  # listings begun
        self._done_upto = 0  # the number (in ``_begun``) of the last listing completed
        self.last_error: str = ""
        self.starts = 0
        self.starting = False
        """True while a start is under way."""

    @property
    def kind(self) -> str:
        if isinstance(self._target, StdioServer):
            return "stdio"
        if isinstance(self._target, HTTPServer):
            return "http"
        return "in-process"

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def status(self) -> str:
        """``connected``, ``starting``, ``failed`` (its last start or connection failed) or ``stopped``."""
        if self._client is not None:
            return "connected"
        if self.starting:
            return "starting"
        return "failed" if self.last_error else "stopped"

    @property
    def protocol_version(self) -> str | None:
        """The protocol version spoken to the upstream, None while it is not connected."""
        client = self._client
        return client.protocol_version if client is not None else None

    # -- lifetime ----------------------------------------------------------------------------

    async def _open_client(self, stack: AsyncExitStack, stop: anyio.Event) -> Client:
        target = self._target
        handler = self._message_handler
        if isinstance(target, StdioServer):
            params = StdioServerParameters(
                command=target.command,
                args=list(target.args),
                env={k: v.get_secret_value() for k, v in target.env.items()} or None,
                cwd=target.cwd,
            )
            errlog = self._errlog or sys.stderr
            if sys.platform == "win32":
                from mcp.client.stdio import stdio_client

                windows = stdio_client(params, errlog=errlog)
                return await stack.enter_async_context(
                    Client(windows, mode="legacy", message_handler=handler)
                )

            def lost(reason: str) -> None:
                self.last_error = reason
                logger.warning(
                    "upstream %s (stdio): %s; it is started again on the next call",
                    printable(self.name),
                    printable(self._redact(reason)),
                )
                stop.set()

            transport = stdio_transport(params, on_lost=lost, redact=self._redact, errlog=errlog)
            return await stack.enter_async_context(Client(transport, mode="legacy", message_handler=handler))
        if isinstance(target, HTTPServer):
            credentials = self.credentials
            if credentials is None:
                return await open_http_client(stack, target, timeout=self.timeout, message_handler=handler)
            await credentials.own_token()  # a token the issuer refuses fails the start, saying why
            return await open_http_client(
                stack,
                target,
                timeout=self.timeout,
                message_handler=handler,
                auth=credentials.auth(),
                sessionless=credentials.per_caller,
            )
        mode = "auto" if in_process_era(target) == "modern" else "legacy"
        # No response cache: a re-list after a change must reach the upstream.
        return await stack.enter_async_context(Client(target, mode=mode, cache=None, message_handler=handler))

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Connect (in a task of ``tg``) and list the tools.

        Raises:
            UpstreamFailure: it did not start or list its tools within the startup timeout.
        """
        self._tg = tg
        async with self._lock:
            await self._start_locked()

    async def _start_locked(self) -> None:
        if self._client is not None:
            return
        if self._tg is None:
            raise UpstreamFailure(f"upstream {self.name!r} is not running", server=self.name)
        ready = anyio.Event()
        failure: list[BaseException] = []
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._scope = scope = anyio.CancelScope()
        self.starts += 1
        self.starting = True
        self._tg.start_soon(self._run, ready, failure, self._stop, self._done, scope)
        try:
            with anyio.fail_after(self.startup_timeout):
                await ready.wait()
        except TimeoutError:
            # Still connecting: only a cancel ends that (the process goes with it).
            scope.cancel()
            self.last_error = f"did not start within {self.startup_timeout:g} s"
            raise UpstreamFailure(
                f"upstream {self.name!r} did not start within {self.startup_timeout:g} s",
                server=self.name,
                timed_out=True,
            ) from None
        finally:
            self.starting = False
        if failure or self._client is None:
            self.last_error = _describe(failure[0]) if failure else "closed during startup"
            raise UpstreamFailure(
                f"upstream {self.name!r} failed to start: {self.last_error}", server=self.name
            )

    async def _run(
        self,
        ready: anyio.Event,
        failure: list[BaseException],
        stop: anyio.Event,
        done: anyio.Event,
        scope: anyio.CancelScope,
    ) -> None:
        mine: list[Client] = []
        try:
            with scope:
                await self._connected(ready, stop, mine)
        except Exception as exc:  # an upstream's death must not take the gateway down
            failure.append(exc)
            self.last_error = _describe(exc)
            logger.warning(
                "upstream %s (%s) stopped: %s",
                printable(self.name),
                self.kind,
                printable(self._redact(self.last_error)),
            )
        finally:
            if mine and self._client is mine[0]:  # a newer connection is not this run's to clear
                self._client = None
            ready.set()
            done.set()

    async def _connected(self, ready: anyio.Event, stop: anyio.Event, mine: list[Client]) -> None:
        """Connect, list the tools, and hold the connection until ``stop`` is set."""
        async with AsyncExitStack() as stack:
            client = await self._open_client(stack, stop)
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _tools_change(
                client.server_capabilities
            ):
                # Listen before listing, so no change falls between the two.
                subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
                watchers = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(watchers.cancel_scope.cancel)
                watchers.start_soon(self._drain, subscription)
            self.stale = False
            self._begun += 1
            number = self._begun
            self._listed(await _list_all(client, self.name), number)
            mine.append(client)
            self._client = client
            self.last_error = ""
            ready.set()
            await stop.wait()

    async def stop(self) -> None:
        """Close the connection (the subprocess ends with it); cancel one that will not close."""
        if self._stop is not None:
            self._stop.set()
        if self._done is not None:
            with anyio.move_on_after(5):
                await self._done.wait()
            if not self._done.is_set() and self._scope is not None:
                self._scope.cancel()
                with anyio.move_on_after(5):
                    await self._done.wait()

    async def _drop(self, client: Client) -> None:
        """Close a connection that failed, unless it is already gone (a newer one stays)."""
        if self._client is client:
            await self.stop()

    async def _message_handler(self, message: Any) -> None:
        # Handshake era: a notification; 2026-07-28: an event of the listen stream, passed on.
        if not isinstance(message, types.ToolListChangedNotification):
            return
        # Before any await: a call from here on waits for the relist (see ``current``).
        self.stale = True
        if self._on_tools_changed is not None and self._tg is not None and not self._following:
            self._following = True
            self._tg.start_soon(self._follow_changes, self._on_tools_changed)

    async def _follow_changes(self, on_tools_changed: OnToolsChanged) -> None:
        """Apply announced changes, coalesced: while one is applied, further announcements only
        set ``stale``, which asks for one more round when it ends."""
        try:
            while self.stale and self._client is not None:
                lists = self.lists
                await on_tools_changed(self)
                if self.lists == lists:
                    break  # it could not list; the next call tries again (``stale`` is still set)
                if self.stale:
                    await anyio.sleep(FOLLOW_GAP)  # a storm: let it gather into the next round
        finally:
            self._following = False

    @staticmethod
    async def _drain(subscription: AsyncIterable[Any]) -> None:
        """Keep a listen stream drained. Its events also reach ``_message_handler`` as
        notifications (the SDK passes them on), which is where they are acted on; a lost
        stream raises here, and a lost stream is a lost upstream."""
        async for _ in subscription:
            pass

    # -- requests ----------------------------------------------------------------------------

    def current(self, max_age: float) -> bool:
        """Whether a call may go ahead on the tools as last listed: connected, no change
        announced, no relist in flight, and listed less than ``max_age`` seconds ago. Cheap."""
        return (
            self._client is not None
            and not self.stale
            and not self._relist_lock.locked()
            and time.monotonic() - self.listed_at < max_age
        )

    async def refresh(self, max_age: float) -> None:
        """Bring the tool list up to date: start the upstream if it is down (a start lists), and
        list again if a change was announced or the list is ``max_age`` seconds old. Callers
        that arrive while a relist is in flight wait for it rather than start another.

        Raises:
            UpstreamFailure: it could not be started or did not list its tools.
        """
        asked = self._begun
        async with self._relist_lock:
            client = await self._ensure()
            if self._done_upto > asked:
                return  # a listing that began after we asked has completed: it answers us too
            if self.stale or time.monotonic() - self.listed_at >= max_age:
                await self._relist(client)

    async def relist(self) -> list[JSONObject]:
        """List the tools again now (an explicit reload).

        Raises:
            UpstreamFailure: it could not be started or did not list its tools.
        """
        await self.refresh(0.0)
        return self.tools

    async def _relist(self, client: Client) -> None:
        self.stale = False  # a change announced from here on asks for another relist
        self._begun += 1
        number = self._begun
        listed = False
        try:
            with anyio.fail_after(self.timeout):
                tools = await _list_all(client, self.name)
            listed = True
        except TimeoutError:
            await self._drop(client)  # a listing it cannot answer in time: wedged, start it again
            raise UpstreamFailure(
                f"upstream {self.name!r} did not list its tools in time", server=self.name, timed_out=True
            ) from None
        except Exception as exc:
            if not (isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED):
                await self._drop(client)
            raise UpstreamFailure(
                f"upstream {self.name!r} failed to list its tools: {_describe(exc)}", server=self.name
            ) from None
        finally:
            if not listed:
                self.stale = True
        self._listed(tools, number)

    def _listed(self, tools: list[JSONObject], number: int) -> None:
        self._done_upto = number
        self.lists += 1
        self.listed_at = time.monotonic()
        if tools != self.tools:
            self.tools = tools
            self.version += 1

    async def _ensure(self) -> Client:
        client = self._client
        if client is None:
            async with self._lock:
                await self._start_locked()
            client = self._client
        if client is None:
            raise UpstreamFailure(f"upstream {self.name!r} is not connected", server=self.name)
        return client

    async def call(
        self, tool: str, arguments: JSONObject, *, version: int | None = None
    ) -> types.CallToolResult:
        """Forward one ``tools/call``.

        Args:
            tool: the upstream's name of the tool.
            arguments: the call's arguments.
            version: the ``version`` the caller checked the tool's definition against; if the
                list has moved since (a restart listed other tools), nothing is sent. A change
                announced after the check is concurrent with the call, which may go first.

        Raises:
            ToolsChanged: ``version`` is out of date (nothing was sent).
            UpstreamFailure: the upstream could not be reached, crashed, answered with a protocol
                error, or did not answer within the timeout.
        """
        client = await self._ensure()
        if version is not None and version != self.version:
            raise ToolsChanged(
                f"upstream {self.name!r} changed its tools; {tool!r} was not sent", server=self.name
            )
        credentials = self.credentials
        # The token this call carries (the caller's, in per-caller modes): see ``_upstream_auth``.
        sending = await credentials.call_token(CALLER.get()) if credentials is not None else None
        try:
            # One deadline (move_on_after costs less than fail_after); on expiry the SDK still
            # sends the upstream its courtesy cancel.
            with anyio.move_on_after(self.timeout):
                if sending is None or credentials is None:
                    return await self._call_tool(client, tool, arguments)
                with credentials.sending(sending):
                    return await self._call_tool(client, tool, arguments)
        except Exception as exc:
            if isinstance(exc, MCPError) and self._client is client and exc.code != types.CONNECTION_CLOSED:
                # The upstream is alive and refused the request: pass its words on.
                raise UpstreamFailure(
                    f"upstream {self.name!r} refused {tool!r}: {exc.error.message}", server=self.name
                ) from None
            # The connection is gone: make sure the next call starts it again.
            await self._drop(client)
            raise UpstreamFailure(
                f"upstream {self.name!r} failed during {tool!r} ({_describe(exc)}); it will be restarted on "
                f"the next call",
                server=self.name,
            ) from None
        self._check_alive(client)
        raise UpstreamFailure(
            f"upstream {self.name!r} did not answer {tool!r} within {self.timeout:g} s; the call may "
            f"still be running there",
            server=self.name,
            timed_out=True,
        )

    async def _call_tool(self, client: Client, tool: str, arguments: JSONObject) -> types.CallToolResult:
        if self._tracing is not None:
            result = await self._tracing.call_upstream(self.name, self.kind, client, tool, arguments)
        else:
            result = await client.call_tool(tool, arguments)
        return without_hop_meta(result)

    def _check_alive(self, client: Client) -> None:
        """After a timeout: a slow tool, or a wedged connection? A ping tells; one at a time."""
        if not self._probing and self._tg is not None:
            self._probing = True
            self._tg.start_soon(self._probe, client)

    async def _probe(self, client: Client) -> None:
        try:
            with anyio.fail_after(min(self.timeout, PROBE_TIMEOUT)):
                await client.send_ping()
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                await self._drop(client)
            # Any other answer is an answer: it is alive.
        except Exception:
            if self._client is client:
                self.last_error = "did not answer a ping after a call timed out"
                logger.warning(
                    "upstream %s: %s; it is started again on the next call",
                    printable(self.name),
                    self.last_error,
                )
            await self._drop(client)
        finally:
            self._probing = False


HOP_META_PREFIX = "io.modelcontextprotocol/"
"""The ``_meta`` keys the protocol reserves for itself. On a result they describe the connection
that carried it (a 2026-07-28 server stamps its own ``serverInfo`` there), so they stop at the
gateway: its client is told of the gateway, in the era it speaks to the gateway."""


def without_hop_meta(result: types.CallToolResult) -> types.CallToolResult:
    """``result`` (an upstream's) without the protocol's own ``_meta`` keys (``HOP_META_PREFIX``)."""
    meta = result.meta
    if meta and any(key.startswith(HOP_META_PREFIX) for key in meta):
        kept = {key: value for key, value in meta.items() if not key.startswith(HOP_META_PREFIX)}
        result.meta = kept or None
    return result


def in_process_era(server: object) -> str:
    """The era the gateway speaks to an in-process upstream in: ``"modern"`` or ``"legacy"``.

    Modern unless the server would announce tool changes only in the handshake era (it
    advertises ``tools.listChanged`` there but serves no ``subscriptions/listen``). Anything
    but a low-level ``Server`` (an ``MCPServer``, say) keeps the handshake era.
    """
    if not isinstance(server, Server):
        return "legacy"
    legacy = server.create_initialization_options().capabilities
    modern = server.get_capabilities(protocol_version=LATEST_MODERN_VERSION)
    if _tools_change(legacy) and not _tools_change(modern):
        return "legacy"
    return "modern"


def _tools_change(capabilities: types.ServerCapabilities | None) -> bool:
    tools = capabilities.tools if capabilities is not None else None
    return bool(tools is not None and tools.list_changed)


MAX_PAGES = 10_000
"""Pages of one ``tools/list`` followed before the listing counts as failed (never cut short)."""


async def _list_all(client: Client, name: str) -> list[JSONObject]:
    """Every page of ``tools/list``; a list that does not end is an error, not a shorter list."""
    tools: list[JSONObject] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise UpstreamFailure(
                f"upstream {name!r} sent the tools/list cursor {cursor[:80]!r} twice", server=name
            )
        seen.add(cursor)
    raise UpstreamFailure(f"upstream {name!r} sent more than {MAX_PAGES} pages of tools/list", server=name)


def _describe(exc: BaseException) -> str:
    """A short description of a failure: the type, and the message when it is not a group."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    oversize = oversize_message(text)
    if oversize is not None:
        return oversize
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
