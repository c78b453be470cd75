"""Helpers for the gateway tests: a running gateway on the demo desk, and an agent per era."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import anyio
import mcp_types as types
import pytest
from mcp import Client

from residency._gateway import Gateway, IncidentDesk, parse_config
from residency._gateway._connection import SESSION_META_KEY
from residency._gateway._http import bind, serve_http
from residency._store._protocol import Store
from tests._timing import STEP, UPSTREAMS_UP
from tests.postgres import schema_url

ERAS = ("legacy", "modern")


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def config(residency: Mapping[str, Any] | None = None, servers: Mapping[str, Any] | None = None) -> Any:
    import json

    return parse_config(json.dumps({"mcpServers": dict(servers or {}), "residency": dict(residency or {})}))


class Agent:
    """An MCP client that names its session on every request, and collects notifications."""

    def __init__(self, client: Client, key: str) -> None:
        self.client = client
        self.key = key
        self.notifications: list[Any] = []
        self.list_changed = anyio.Event()

    @property
    def meta(self) -> types.RequestParamsMeta:
        return session_meta(self.key)

    @property
    def modern(self) -> bool:
        return self.client.protocol_version == "2026-07-28"

    async def names(self) -> list[str]:
        return [t.name for t in (await self.tools())]

    async def tools(self) -> list[types.Tool]:
        result = await self.client.list_tools(meta=self.meta, cache_mode="refresh")
        return list(result.tools)

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> types.CallToolResult:
        return await self.client.call_tool(name, dict(arguments or {}), meta=self.meta)

    async def read(self, uri: str) -> str:
        result = await self.client.read_resource(uri, meta=self.meta, cache_mode="refresh")
        content = result.contents[0]
        assert isinstance(content, types.TextResourceContents)
        return content.text

    async def use(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """What a careful agent does: re-expand a withheld tool, then call it."""
        result = await self.call(name, arguments)
        if reason(result) == "tool_not_resident":
            assert not (await self.call("reexpand_tools", {"names": [name]})).is_error
            result = await self.call(name, arguments)
        return result


def session_meta(key: str) -> types.RequestParamsMeta:
    """A request's ``_meta`` naming the gateway session ``key``.

    ``RequestParamsMeta`` is an open map (PEP 728 ``extra_items=Any``) that mypy does not read
    yet: it takes the TypedDict as closed and refuses any key of our own, hence the cast.
    """
    return cast(types.RequestParamsMeta, {SESSION_META_KEY: key})


def reason(result: types.CallToolResult) -> str | None:
    """The machine reason of a refusal (``_meta["residency/error"]["reason"]``), None if none."""
    details = (result.meta or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@asynccontextmanager
async def running(
    residency: Mapping[str, Any] | None = None,
    *,
    desk: IncidentDesk | None = None,
    upstreams: Mapping[str, Any] | None = None,
    servers: Mapping[str, Any] | None = None,
    store: Store | None = None,
    timeout: float | None = None,
) -> AsyncIterator[Gateway]:
    ups = dict(upstreams or {})
    if desk is not None:
        ups["desk"] = desk.server
    # Subprocess upstreams start slowly on a loaded machine: unless the test sets its own, the
    # gateway waits for them (up to a generous bound) before it serves, so no first call finds
    # one still starting, and fails none for starting slowly (``UPSTREAMS_UP``).
    settings = {**UPSTREAMS_UP, **(residency or {})}
    gateway = Gateway(config(settings, servers), upstreams=ups, store=store, timeout=timeout)
    async with gateway:
        yield gateway


@asynccontextmanager
async def served_over_http(gateway: Gateway, *, wait: float = STEP, **serve: Any) -> AsyncIterator[str]:
    """``gateway`` (already entered) served by ``serve_http`` on an ephemeral loopback port, with
    ``serve``'s keyword arguments; yields its MCP URL once it serves (within ``wait``)."""
    ready = anyio.Event()
    urls: list[str] = []

    def started(url: str) -> None:
        urls.append(url)
        ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(gateway, bind("127.0.0.1", 0), started=started, **serve))
        with anyio.fail_after(wait):
            await ready.wait()
        yield urls[0]
        tg.cancel_scope.cancel()


@asynccontextmanager
async def agent(gateway: Gateway, era: str, key: str = "agent-1") -> AsyncIterator[Agent]:
    mode = "legacy" if era == "legacy" else "auto"
    holder: list[Agent] = []

    async def on_message(message: Any) -> None:
        if holder:
            holder[0].notifications.append(message)
            if isinstance(message, types.ToolListChangedNotification):
                holder[0].list_changed.set()

    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            Client(gateway.server, mode=mode, message_handler=on_message)
        )
        a = Agent(client, key)
        holder.append(a)
        await a.tools()  # the session opens in this agent's era
        yield a


@pytest.fixture
def store_url() -> Iterator[str]:
    """A PostgreSQL store URL on a schema of its own, dropped afterwards (skips without one)."""
    with schema_url() as url:
        yield url
