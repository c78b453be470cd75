"""Spans over MCP: a large upstream result comes back as a preview and a link, and reads back
whole by range, also after the gateway was killed with SIGKILL (issue #15, part 3).

The behaviour runs on a gateway in process; the kill runs on a real ``residency serve``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency import MemoryStore, Session
from residency._gateway._resources import MAX_RANGE, span_range
from residency._store._sqlite import SQLiteStore
from tests._timing import READY_WAIT, STEP, TEST, UPSTREAMS_UP
from tests.gateway.big_upstream import build, text_of
from tests.gateway.conftest import Agent, agent, running
from tests.gateway.test_serve_cli import served

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
# Per process test: interpreters start one after another on a loaded machine, and each of its two
# gateways serves once its upstream is up (UPSTREAMS_UP).
WAIT = TEST + 2 * READY_WAIT
SIZE = 300_000
KEY = "spans-k"
SPANS = {"offload_tokens": 2000, "preview_chars": 300, "tags": {"dump": ["constraint"]}}


def _config(folder: Path, offload_tokens: int | None = 2000) -> Path:
    path = folder / "gateway.json"
    big = {"command": sys.executable, "args": [str(ROOT / "tests" / "gateway" / "big_upstream.py")]}
    spans = {**SPANS, "offload_tokens": offload_tokens}
    residency = {**UPSTREAMS_UP, "spans": spans}
    path.write_text(json.dumps({"mcpServers": {"big": big}, "residency": residency}))
    return path


def _argv(folder: Path) -> list[str]:
    return ["--config", str(_config(folder)), "--store", f"sqlite:///{folder / 'r.db'}", "--session", KEY]


@asynccontextmanager
async def in_process(folder: Path) -> AsyncIterator[Agent]:
    """The same gateway in process, on the same store file, and an agent on session ``KEY``."""
    store = SQLiteStore(folder / "r.db")
    try:
        async with (
            running({"spans": SPANS}, upstreams={"big": build()}, store=store) as gw,
            agent(gw, "legacy", KEY) as a,
        ):
            yield a
    finally:
        store.close()


@asynccontextmanager
async def gateway(folder: Path, argv: list[str] | None = None) -> AsyncIterator[Client]:
    """``residency serve`` over stdio with ``argv`` (default: this module's config and store)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "residency", "serve", *(_argv(folder) if argv is None else argv)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    with (folder / "gateway.log").open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def _read_by_tool(
    client: Client, span_id: str, length: int, meta: types.RequestParamsMeta | None = None
) -> str:
    parts: list[str] = []
    offset = 0
    while True:
        arguments = {"id": span_id, "offset": offset, "length": length}
        result = await client.call_tool("read_span", arguments, meta=meta)
        assert not result.is_error, result
        data = dict(result.structured_content or {})
        assert data["offset"] == offset
        parts.append(data["text"])
        if data["done"]:
            return "".join(parts)
        offset = data["next_offset"]


async def _read_by_resource(a: Agent, uri: str, length: int) -> str:
    parts: list[str] = []
    offset = 0
    while True:
        data = json.loads(await a.read(f"{uri}?offset={offset}&length={length}"))
        parts.append(data["text"])
        if data["done"]:
            return "".join(parts)
        offset = data["next_offset"]


async def test_a_large_result_is_a_preview_and_a_link_that_reads_back_whole(tmp_path: Path) -> None:
    expected = text_of(SIZE)
    with anyio.fail_after(STEP):  # in process: a few dozen requests, no interpreter to start
        async with in_process(tmp_path) as a:
            small = await a.call("echo", {"text": "hi"})
            assert _text(small) == "echo: hi" and "residency/span" not in (small.meta or {})
            result = await a.call("dump", {"size": SIZE})
            assert not result.is_error
            link = (result.meta or {})["residency/span"]
            assert link["bytes"] == len(expected.encode("utf-8"))
            shown = _text(result)
            assert shown.startswith(expected[:300]) and len(shown) < 1000  # a preview, not the result
            assert link["uri"] in shown and link["id"] in shown
            # 4999 bytes: ranges end inside multi-byte characters and are moved to whole ones.
            assert await _read_by_tool(a.client, link["id"], 4999, a.meta) == expected
            assert await _read_by_resource(a, link["uri"], 65_537) == expected
            whole = json.loads(await a.read(link["uri"]))
            assert whole["text"] == expected and whole["tags"] == ["constraint"]
            assert whole["state"] == "externalized"
            bad = await a.call("read_span", {"id": "nope"})
            assert bad.is_error and (bad.structured_content or {})["error"]["path"] == "$.id"
            bad = await a.call("read_span", {"id": link["id"], "offset": -1})
            assert bad.is_error and (bad.structured_content or {})["error"]["path"] == "$.offset"
            bad = await a.call("read_span", {"id": link["id"], "offset": 10**9})
            assert bad.is_error and (bad.structured_content or {})["error"]["path"] == "$.offset"
            with pytest.raises(MCPError):
                await a.read("residency://spans/nope?offset=0&length=5")


@pytest.mark.slow
async def test_the_link_resolves_after_the_gateway_is_killed_and_restarted(tmp_path: Path) -> None:
    expected = text_of(SIZE)
    with anyio.fail_after(WAIT):
        async with served(*_argv(tmp_path)) as first:
            assert "read_span" in await first.handshake()
            answer = await first.request("tools/call", {"name": "dump", "arguments": {"size": SIZE}})
            link = answer["result"]["_meta"]["residency/span"]
        # ``served`` ends the gateway with SIGKILL: no shutdown code ran.
        async with gateway(tmp_path) as client:
            assert await _read_by_tool(client, link["id"], MAX_RANGE) == expected


def test_span_ranges_join_to_the_original_at_every_boundary() -> None:
    s = Session(MemoryStore())
    text = "aé✓日😀" * 50
    record = s.offload_span(text, source="tool:x")
    raw = text.encode("utf-8")
    for length in (1, 2, 3, 5, 7, 64):
        for start in range(0, 9):
            parts, offset = [], start
            first = span_range(s, record.id, offset, length)
            assert first["offset"] <= start
            offset = first["offset"]
            while True:
                data = span_range(s, record.id, offset, length)
                parts.append(data["text"])
                if data["done"]:
                    break
                assert data["next_offset"] > offset
                offset = data["next_offset"]
            assert "".join(parts).encode("utf-8") == raw[first["offset"] :]


def test_an_offloaded_span_keeps_its_text_out_of_the_journal_and_survives_a_reopen() -> None:
    store = MemoryStore()
    s = Session(store, session_id="x")
    text = "secret-free but large " * 5000
    record = s.offload_span(text, tags=["constraint"], source="tool:dump")
    assert all(text not in json.dumps(dict(e.data)) for e in store.load("x"))
    again = Session(store, session_id="x")
    assert again.snapshot() == s.snapshot()
    assert again.restore(record.id) == text
    assert store.get_content(record.key) == text.encode("utf-8")


def test_an_offloaded_span_keeps_the_callers_token_count_and_refuses_a_bad_one() -> None:
    from residency import InvalidInput
    from residency._tokens import count_tokens

    store = MemoryStore()
    s = Session(store, session_id="x")
    text = "counted once " * 9000
    assert s.offload_span(text).tokens == count_tokens(text)
    assert s.offload_span(text + "!", tokens=1234).tokens == 1234  # the gateway's own count
    length = len(store.load("x"))
    for bad in (-1, True, 1.5, "12"):
        with pytest.raises(InvalidInput) as caught:
            s.offload_span(text, tokens=bad)  # type: ignore[arg-type]
        assert caught.value.where == "tokens"
    assert len(store.load("x")) == length  # nothing journaled


@pytest.mark.parametrize("bad", [{"offload_tokens": 0}, {"preview_chars": -1}, {"tags": {"x": "constraint"}}])
def test_bad_span_settings_are_refused(bad: dict[str, Any]) -> None:
    from residency import ConfigError
    from tests.gateway.conftest import config

    with pytest.raises(ConfigError):
        config({"spans": bad})
