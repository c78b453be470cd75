"""The scenario gateways with their desk up, for the SDK and Inspector client tests.

``residency serve`` serves once its upstreams have started, or after ``ready_wait`` (5 s by
default) with the late ones joining afterwards. On a loaded machine the stdio desk can take
longer than that, and then a session's first list lacks the desk's tools and changes when the
desk joins: not the first list either task asserts (by list ``INITIAL_TOOLS``, by reference the
pinned ``get_runbook``). So a gateway a test starts itself waits for its desk
(``write_ready_config``, ``write_ready_reference_config``), and a test on a module's shared
gateway first waits, bounded, for the desk to have joined it (``desk_joined``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests._timing import START, STEP
from tests.clients import scenario
from tests.clients._serve import Served

DESK_TOOL = "get_runbook"
"""A desk tool a new session lists under either config (``INITIAL_TOOLS``; pinned by reference)."""


def ready(body: dict[str, Any]) -> dict[str, Any]:
    """The gateway config ``body``, serving only once the desk has started (within ``START``)."""
    return {**body, "residency": {**body["residency"], "ready_wait": START}}


def write_ready_config(directory: Path) -> Path:
    """Write ``ready(scenario.config())`` to ``directory/gateway.json`` and return its path."""
    return scenario.write_config(directory, ready(scenario.config()))


def write_ready_reference_config(directory: Path) -> Path:
    """Write ``ready(scenario.reference_config())`` to ``directory/gateway.json``; return its path."""
    return scenario.write_config(directory, ready(scenario.reference_config()))


async def desk_joined(served: Served) -> None:
    """Return once the desk has joined the HTTP gateway ``served`` (``DESK_TOOL`` is listed).

    Asked in a handshake-era session of its own: if its first list lacks that tool, the desk is
    still starting, and its joining is announced to that session by list_changed.

    Raises:
        TimeoutError: the desk did not join within ``START`` seconds.
    """
    joined = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            joined.set()

    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(STEP, read=None)) as http,
        Client(
            streamable_http_client(served.url, http_client=http), mode="legacy", message_handler=on_message
        ) as client,
    ):
        listed = {t.name for t in (await client.list_tools()).tools}
        if DESK_TOOL not in listed:
            with anyio.fail_after(START):
                await joined.wait()
