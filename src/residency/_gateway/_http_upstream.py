"""HTTP upstreams: which era the gateway speaks to one, and how large a message from it may be.

The era. Each era is cheaper for some upstreams, so the gateway picks per upstream, at each
start (``"era": "auto"``, the default):

* The 2026-07-28 era has no ``initialize`` round trip and no session, and a stock server
  answers a request that finishes without notifications with one JSON body rather than an SSE
  stream: a call costs about a quarter less than in the handshake era on the same small server.
* But there, before each ``tools/call`` with arguments, a server built on the SDK's low-level
  ``Server`` (with no ``get_tool_input_schema``) runs its own ``tools/list`` to check the
  ``Mcp-Param`` headers. A call then costs the whole listing: 3.5x a handshake-era call at
  1,000 tools, even at about 120.

* And an upstream may announce tool changes only in the handshake era: it advertises
  ``tools.listChanged`` there but not in the 2026-07-28 era, where it serves no
  ``subscriptions/listen``. Spoken to there, its changes would be noticed only by the
  ``relist_interval``.

So the gateway asks ``server/discover`` first (the SDK's ``mode="auto"``). An upstream that does
not answer it (a handshake-only server) is spoken to in the handshake era, as before; the probe
costs one round trip at start. One that answers is spoken to in the 2026-07-28 era unless its
first ``tools/list`` page holds more than ``MODERN_MAX_TOOLS`` tools or a cursor, or it
announces tool changes only in the handshake era (when it does not announce them in the
2026-07-28 era, one handshake tells); then the first connection is closed and a handshake-era
one opened. All of it happens at each start, so an upstream that grows past the bound moves to
the handshake era when it is next started. ``"era": "modern"`` keeps the 2026-07-28 era
whenever it is offered (for a large server whose calls do not list); ``"era": "legacy"`` skips
the probe. Tool changes in the 2026-07-28 era arrive on a ``subscriptions/listen`` stream (see
``_upstream``). The client keeps no response cache: a re-list after a change must reach the
upstream.

Large messages. The SDK refuses one SSE event over 1 MiB; a handshake-era ``tools/list`` of
about 1,000 tools in one page is larger, and used to fail the upstream's start. Here the limit
is the entry's ``max_message_bytes`` (16 MiB by default, as for a stdio line). A JSON body (the
2026-07-28 era's usual answer) is read whole: the SDK sets no limit on it. ``tools/list`` is
followed through its cursors (see ``_upstream._list_all``). An event over the limit fails the
start or the relist, and the upstream's ``last_error`` says so in plain words (the limit, and
what to do: ``oversize_message``); the startup summary, ``residency://upstreams`` and the log
show it beside the upstream's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AsyncExitStack

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from residency._gateway._config import HTTPServer

__all__ = ["MODERN_MAX_TOOLS", "SessionsOnly", "open_http_client", "oversize_message"]

MODERN_MAX_TOOLS = 100
"""Tools on an upstream's first page above which ``"era": "auto"`` keeps the handshake era."""


class SessionsOnly(Exception):
    """An upstream with per-caller credentials offers only the handshake era (see ``open_http_client``)."""


_OVERSIZE = re.compile(r"(?:Server-sent )?event exceeded the (\d+) byte limit")


async def open_http_client(
    stack: AsyncExitStack,
    target: HTTPServer,
    *,
    timeout: float,
    message_handler: MessageHandlerFnT,
    auth: httpx2.Auth | None = None,
    sessionless: bool = False,
) -> Client:
    """Connect to an HTTP upstream in the era its entry asks for (see the module docstring).

    Args:
        stack: holds the HTTP client and the MCP client open; closing it closes both.
        target: the configuration entry.
        timeout: seconds a connect, a write or a pool wait may take (a read may take any time:
            the per-call timeout bounds the call itself).
        message_handler: passed to the ``mcp.Client``.
        auth: puts OAuth tokens on its requests (``_upstream_auth``); None: ``headers`` only.
        sessionless: the 2026-07-28 era only (each request may carry another caller's token,
            see ``_upstream_auth``): ``era`` is taken as ``modern``, and an upstream that offers
            only the handshake era is refused.

    Raises:
        Exception: whatever the transport raises when the upstream cannot be reached; an
            ``MCPError`` when it refuses both eras.
        SessionsOnly: ``sessionless`` and the upstream speaks only the handshake era.
    """
    headers = {k: v.get_secret_value() for k, v in target.headers.items()}
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout, read=None), auth=auth)
    )

    def client(mode: str, handler: MessageHandlerFnT | None = message_handler) -> Client:
        transport = streamable_http_client(
            target.url, http_client=http, max_sse_event_size=target.max_message_bytes
        )
        return Client(transport, mode=mode, cache=None, message_handler=handler)

    if sessionless:
        probed = await stack.enter_async_context(client("auto"))
        if probed.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise SessionsOnly(
                "it speaks only the handshake era, where a session belongs to one caller: per-caller "
                "credentials (token_exchange, passthrough) need an upstream that speaks 2026-07-28"
            )
        return probed
    if target.era == "legacy":
        return await stack.enter_async_context(client("legacy"))
    async with AsyncExitStack() as first:
        probed = await first.enter_async_context(client("auto"))
        if target.era == "modern" or not await _handshake_era_is_better(probed, client):
            stack.push_async_callback(first.pop_all().aclose)
            return probed
    return await stack.enter_async_context(client("legacy"))


async def _handshake_era_is_better(probed: Client, client: Callable[..., Client]) -> bool:
    """Whether an upstream that speaks the 2026-07-28 era is better spoken to in the handshake
    era (see the module docstring): its catalog is large, or it announces tool changes only there."""
    if probed.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False  # the handshake era already
    page = await probed.list_tools()
    if page.next_cursor is not None or len(page.tools) > MODERN_MAX_TOOLS:
        return True
    if _announces(probed.server_capabilities):
        return False
    async with client("legacy", None) as handshake:  # only asked, then closed
        return _announces(handshake.server_capabilities)


def _announces(capabilities: types.ServerCapabilities | None) -> bool:
    tools = capabilities.tools if capabilities is not None else None
    return bool(tools is not None and tools.list_changed)


def oversize_message(text: str) -> str | None:
    """A plain description of a message refused for its size, or None if ``text`` is not one.

    Args:
        text: the failure as the SDK words it.
    """
    found = _OVERSIZE.search(text)
    if found is None:
        return None
    return (
        f"it sent one SSE event over the {int(found.group(1))}-byte limit (a tools/list of many "
        f"tools in one page, say): have it page tools/list or answer JSON, or raise "
        f"max_message_bytes in its mcpServers entry"
    )
