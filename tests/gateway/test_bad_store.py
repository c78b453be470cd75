"""A session whose stored journal is malformed: a JSON-RPC error over the wire, then service."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency import JournalEntry, SQLiteStore
from tests._timing import TEST

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


async def test_a_malformed_journal_entry_is_a_store_error_over_the_wire_and_the_gateway_serves_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "bad.db"
    with SQLiteStore(db) as store:
        # Valid JSON, but the call names no tool: what a broken writer or a hand edit leaves.
        store.append("gateway/broken", [JournalEntry("call", {"id": "c1", "arguments": {}}, 0.0)])
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "residency", "serve", "--store", f"sqlite:///{db}", "--session", "broken"],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    log = tmp_path / "stderr"
    with anyio.fail_after(TEST), log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            for _ in range(2):  # the gateway answers, and answers again
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("list_services", {})
                assert raised.value.code == types.INTERNAL_ERROR
                assert (raised.value.data or {}).get("reason") == "store_error"
                assert "Traceback" not in raised.value.message
    assert "Traceback" not in log.read_text()
