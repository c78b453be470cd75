"""Two real ``residency serve`` processes given one session key on one SQLite store.

Each gateway keeps its own copy of the session. Both used to journal calls as if they were the
only writer: they issued the same call ids, and a reopen kept one call of each pair (9 of 20
acknowledged calls lost). Now a gateway whose copy is behind is refused by the store, catches
up and admits the call again, so every acknowledged call is in the journal under its own id.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency import Session, SQLiteStore
from tests._timing import TEST

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KEY = "shared-k"
CALLS = 10  # per gateway
WAIT = TEST  # for the whole test: two interpreters start on a loaded machine


@asynccontextmanager
async def gateway(db: Path, log: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "residency", "serve", "--store", f"sqlite:///{db}", "--session", KEY],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def _call_id(result: types.CallToolResult) -> str | None:
    """The id the gateway journaled the call under (only a recorded call carries one)."""
    value = (result.meta or {}).get("residency/call")
    return value if isinstance(value, str) else None


def _journaled_calls(db: Path) -> dict[str, Any]:
    with SQLiteStore(db) as store:
        calls: dict[str, Any] = Session(store, session_id=f"gateway/{KEY}").snapshot()["calls"]
    return calls


async def test_two_gateways_on_one_session_key_taking_turns_lose_no_acknowledged_call(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    acknowledged: dict[str, str] = {}  # call id -> the query it carried
    with anyio.fail_after(WAIT):
        async with gateway(db, tmp_path / "a.log") as a, gateway(db, tmp_path / "b.log") as b:
            for n in range(2 * CALLS):
                query = f"{'ab'[n % 2]}-{n}"
                result = await (a, b)[n % 2].call_tool("search_runbooks", {"query": query})
                assert not result.is_error, result
                call_id = _call_id(result)
                assert call_id is not None
                assert call_id not in acknowledged, f"{call_id} issued twice"
                acknowledged[call_id] = query
    calls = _journaled_calls(db)
    assert {i: c["arguments"]["query"] for i, c in calls.items()} == acknowledged
    assert len(calls) == 2 * CALLS


async def test_two_gateways_calling_at_once_journal_every_acknowledged_call(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    acknowledged: dict[str, str] = {}
    refused: list[MCPError] = []

    async def work(client: Client, who: str) -> None:
        for n in range(CALLS):
            query = f"{who}-{n}"
            try:
                result = await client.call_tool("search_runbooks", {"query": query})
            except MCPError as exc:  # conflicted twice: nothing was forwarded, the caller may retry
                refused.append(exc)
                continue
            call_id = _call_id(result)
            assert call_id is not None and call_id not in acknowledged
            acknowledged[call_id] = query

    with anyio.fail_after(WAIT):
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(gateway(db, tmp_path / "a.log"))
            b = await stack.enter_async_context(gateway(db, tmp_path / "b.log"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(work, a, "a")
                tg.start_soon(work, b, "b")
    assert all((e.data or {}).get("reason") == "session_conflict" for e in refused)
    assert len(acknowledged) + len(refused) == 2 * CALLS
    calls = _journaled_calls(db)
    assert {i: c["arguments"]["query"] for i, c in calls.items()} == acknowledged
