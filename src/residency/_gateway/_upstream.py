"""Upstream MCP servers: one ``mcp.Client`` each, run in its own task, restarted on demand.

Each upstream lives in a task that enters its ``mcp.Client`` and holds it open until the
gateway stops or the connection dies; calls from any downstream session go through that one
client (request ids are the client's own, so they never cross downstream sessions). Every
call has a timeout. When the upstream crashes or hangs, the call fails with ``UpstreamFailure``
(which the gateway turns into an error result the model can read) and the next call starts the
upstream again. Messages never carry ``env`` or ``headers`` values.

stdio and HTTP upstreams are spoken to in the handshake era. An in-process upstream is spoken
to in the 2026-07-28 era when it can tell of tool changes there (it serves
``subscriptions/listen``: the gateway listens for ``ToolsListChanged``) or has none to tell
(``tools.listChanged`` not advertised): that path skips JSON-RPC framing and costs about half
a handshake-era call. One that advertises ``tools.listChanged`` but serves no listen stream is
spoken to in the handshake era, where its ``tools/list_changed`` notifications arrive.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS

from residency._core._tools import JSONObject
from residency._gateway._config import HTTPServer, StdioServer

__all__ = ["Upstream", "UpstreamFailure"]

logger = logging.getLogger("residency.gateway")

STARTUP_TIMEOUT = 30.0
"""Seconds an upstream may take to start and list its tools (``residency.startup_timeout``)."""

OnToolsChanged = Callable[["Upstream"], Coroutine[Any, Any, None]]


class UpstreamFailure(Exception):
    """An upstream failed, timed out or could not be reached; the call may or may not have run.

    Internal to the gateway: the error table turns it into an ``isError`` result naming the
    upstream, and the gateway keeps serving.
    """

    def __init__(self, message: str, *, server: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.server = server
        self.timed_out = timed_out


class Upstream:
    """One upstream server.

    Args:
        name: the server's key in ``mcpServers``.
        target: a config entry, or an in-process ``mcp.server.lowlevel.Server`` (the demo desk
            and tests).
        timeout: seconds a call may take.
        startup_timeout: seconds a start (connect and list the tools) may take; separate from
            ``timeout``, since a cold start (``npx``, a container) is slower than any call.
        on_tools_changed: awaited when the upstream says its tool list changed.
        redact: scrubs secrets (``env``/``headers`` values) from what is logged.
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
    ) -> None:
        self.name = name
        self._target = target
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self._redact = redact
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._client: Client | None = None
        self._stop: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self.tools: list[JSONObject] = []
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

    async def _open_client(self, stack: AsyncExitStack) -> Client:
        target = self._target
        handler = self._message_handler
        if isinstance(target, StdioServer):
            params = StdioServerParameters(
                command=target.command,
                args=list(target.args),
                env={k: v.get_secret_value() for k, v in target.env.items()} or None,
                cwd=target.cwd,
            )
            from mcp.client.stdio import stdio_client

            transport = stdio_client(params, errlog=self._errlog or sys.stderr)
            return await stack.enter_async_context(Client(transport, mode="legacy", message_handler=handler))
        if isinstance(target, HTTPServer):
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {k: v.get_secret_value() for k, v in target.headers.items()}
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(self.timeout, read=None))
            )
            transport = streamable_http_client(target.url, http_client=http)
            return await stack.enter_async_context(Client(transport, mode="legacy", message_handler=handler))
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
        self.starts += 1
        self.starting = True
        self._tg.start_soon(self._run, ready, failure, self._stop, self._done)
        try:
            with anyio.fail_after(self.startup_timeout):
                await ready.wait()
        except TimeoutError:
            self._stop.set()
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
        self, ready: anyio.Event, failure: list[BaseException], stop: anyio.Event, done: anyio.Event
    ) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await self._open_client(stack)
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _tools_change(
                    client.server_capabilities
                ):
                    # Listen before listing, so no change falls between the two.
                    subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
                    watchers = await stack.enter_async_context(anyio.create_task_group())
                    stack.callback(watchers.cancel_scope.cancel)
                    watchers.start_soon(self._drain, subscription)
                self.tools = await _list_all(client)
                self._client = client
                self.last_error = ""
                ready.set()
                await stop.wait()
        except Exception as exc:  # an upstream's death must not take the gateway down
            failure.append(exc)
            self.last_error = _describe(exc)
            logger.warning(
                "upstream %s (%s) stopped: %s", self.name, self.kind, self._redact(self.last_error)
            )
        finally:
            self._client = None
            ready.set()
            done.set()

    async def stop(self) -> None:
        """Close the connection (the subprocess ends with it)."""
        if self._stop is not None:
            self._stop.set()
        if self._done is not None:
            with anyio.move_on_after(5):
                await self._done.wait()

    async def _message_handler(self, message: Any) -> None:
        # Handshake era: a notification; 2026-07-28: an event of the listen stream, passed on.
        changed = isinstance(message, types.ToolListChangedNotification)
        if changed and self._on_tools_changed is not None and self._tg is not None:
            self._tg.start_soon(self._on_tools_changed, self)

    @staticmethod
    async def _drain(subscription: AsyncIterable[Any]) -> None:
        """Keep a listen stream drained. Its events also reach ``_message_handler`` as
        notifications (the SDK passes them on), which is where they are acted on; a lost
        stream raises here, and a lost stream is a lost upstream."""
        async for _ in subscription:
            pass

    # -- requests ----------------------------------------------------------------------------

    async def relist(self) -> list[JSONObject]:
        """List the tools again (after ``tools/list_changed``)."""
        client = await self._ensure()
        try:
            with anyio.fail_after(self.timeout):
                self.tools = await _list_all(client)
        except TimeoutError:
            raise UpstreamFailure(
                f"upstream {self.name!r} did not list its tools in time", server=self.name, timed_out=True
            ) from None
        except Exception as exc:
            raise UpstreamFailure(
                f"upstream {self.name!r} failed to list its tools: {_describe(exc)}", server=self.name
            ) from None
        return self.tools

    async def _ensure(self) -> Client:
        client = self._client
        if client is None:
            async with self._lock:
                await self._start_locked()
            client = self._client
        if client is None:
            raise UpstreamFailure(f"upstream {self.name!r} is not connected", server=self.name)
        return client

    async def call(self, tool: str, arguments: JSONObject) -> types.CallToolResult:
        """Forward one ``tools/call``.

        Raises:
            UpstreamFailure: the upstream could not be reached, crashed, answered with a protocol
                error, or did not answer within the timeout.
        """
        client = await self._ensure()
        try:
            # One deadline (move_on_after costs less than fail_after); on expiry the SDK still
            # sends the upstream its courtesy cancel.
            with anyio.move_on_after(self.timeout):
                return await client.call_tool(tool, arguments)
        except Exception as exc:
            from mcp import MCPError

            if isinstance(exc, MCPError) and self._client is client and exc.code != types.CONNECTION_CLOSED:
                # The upstream is alive and refused the request: pass its words on.
                raise UpstreamFailure(
                    f"upstream {self.name!r} refused {tool!r}: {exc.error.message}", server=self.name
                ) from None
            # The connection is gone: make sure the next call starts it again.
            await self.stop()
            raise UpstreamFailure(
                f"upstream {self.name!r} failed during {tool!r} ({_describe(exc)}); it will be restarted on "
                f"the next call",
                server=self.name,
            ) from None
        raise UpstreamFailure(
            f"upstream {self.name!r} did not answer {tool!r} within {self.timeout:g} s; the call may "
            f"still be running there",
            server=self.name,
            timed_out=True,
        )


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


async def _list_all(client: Client) -> list[JSONObject]:
    tools: list[JSONObject] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await client.list_tools(cursor=cursor)
        tools.extend(t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """A short description of a failure: the type, and the message when it is not a group."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
