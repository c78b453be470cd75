"""kill -9 a replica in the middle of a call, again and again: nothing acknowledged is lost.

Two ``residency serve --transport http`` processes share one PostgreSQL schema and one session
(named by the ``Residency-Session`` header), in front of a real stdio upstream whose mutating
tool takes a moment and logs each call it receives. Round after round, replica A is started,
serves a call, gets a second call, and is killed with SIGKILL once the upstream has that call
(or a little later: some kills land after the answer). Meanwhile a client of replica B keeps
calling, and B must serve through every kill. At the end the journal has no gap or fork, a fresh
replay breaks no invariant and shows what both replicas show, every call a client saw succeed is
in it under the id it was given, and every call the upstream received was journaled first.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from residency._gateway import Gateway, parse_config
from residency._gateway._resources import CHAINS, EVENTS, TOMBSTONES, TOOLS, read_resource
from residency._gateway._server import CALL_META_KEY
from residency._store import open_store
from tests._timing import START, UPSTREAMS_UP, scaled
from tests.clients._serve import _SERVING, ROOT, SERVE, STARTUP, _close, _kill_group
from tests.gateway import slow_upstream
from tests.gateway.test_replicas import assert_sound

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KILLS = 20
KEY = "killed-1"
DELAY = 0.4  # seconds the upstream's ``work`` takes: the window the kill lands in
RESOURCES = (TOOLS, TOMBSTONES, EVENTS, CHAINS)


@dataclass
class Replica:
    process: anyio.abc.Process
    url: str
    stderr: bytearray


@asynccontextmanager
async def replica(config: Path, store: str) -> AsyncIterator[Replica]:
    """``residency serve --transport http`` on ``store``; its process, for kill -9."""
    process = await anyio.open_process(
        [
            *SERVE,
            "--transport",
            "http",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--config",
            str(config),
            "--store",
            store,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=str(ROOT),
        start_new_session=True,
    )
    err = bytearray()
    found = anyio.Event()

    async def drain() -> None:
        assert process.stderr is not None
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in process.stderr:
                err.extend(chunk)
                if _SERVING.search(err):
                    found.set()
        found.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            with anyio.move_on_after(STARTUP):
                await found.wait()
            match = _SERVING.search(err)
            if match is None:
                raise RuntimeError(f"no URL (exit {process.returncode}):\n{err.decode(errors='replace')}")
            yield Replica(process, match.group(1).decode(), err)
            tg.cancel_scope.cancel()
    finally:
        await _close(process)


@asynccontextmanager
async def client(served: Replica) -> AsyncIterator[Client]:
    """A client of session ``KEY`` on ``served``, once its upstream is up (``/healthz`` is ok)."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Residency-Session": KEY}, timeout=httpx2.Timeout(60, read=None))
        )
        health = served.url.rpartition("/")[0] + "/healthz"
        with anyio.fail_after(START):  # up when it serves, unless its first start failed
            while (await http.get(health)).json().get("status") != "ok":
                await anyio.sleep(0.1)
        yield await stack.enter_async_context(Client(streamable_http_client(served.url, http_client=http)))


def kill_9(served: Replica) -> None:
    """SIGKILL the gateway process (then whatever it started, its upstream)."""
    with suppress(ProcessLookupError):
        os.kill(served.process.pid, signal.SIGKILL)
    _kill_group(served.process)


def write_config(tmp_path: Path, log: Path) -> Path:
    config = tmp_path / "fleet.json"
    upstream = {
        "command": sys.executable,
        "args": [str(Path(slow_upstream.__file__))],
        "env": {"SLOW_UPSTREAM_LOG": str(log), "SLOW_UPSTREAM_DELAY": str(DELAY)},
    }
    # UPSTREAMS_UP: a replica serves once its upstream is up (its start is not the subject).
    config.write_text(json.dumps({"mcpServers": {"slow": upstream}, "residency": UPSTREAMS_UP}))
    return config


class Ledger:
    """What the clients saw succeed: (call id, tool, ticket)."""

    def __init__(self) -> None:
        self.acknowledged: list[tuple[str, str, str]] = []

    async def call(self, c: Client, tool: str, ticket: str, *, retries: int = 0) -> types.CallToolResult:
        """Call ``tool``; a conflict with the other replica's writes is retried ``retries`` times."""
        for _ in range(retries):
            try:
                return await self.call(c, tool, ticket)
            except MCPError as exc:
                # Both replicas wrote the session at once, twice in a row: nothing was applied.
                assert (exc.data or {}).get("reason") == "session_conflict", exc
        result = await c.call_tool(tool, {"ticket": ticket})
        assert not result.is_error, result
        call_id = (result.meta or {}).get(CALL_META_KEY)
        assert call_id, result
        self.acknowledged.append((str(call_id), tool, ticket))
        return result


async def shown(c: Client) -> dict[str, str]:
    out = {}
    for uri in RESOURCES:
        result = await c.read_resource(uri, cache_mode="refresh")
        content = result.contents[0]
        assert isinstance(content, types.TextResourceContents)
        out[uri] = content.text
    return out


async def test_replicas_killed_mid_call_lose_no_acknowledged_call(store_url: str, tmp_path: Path) -> None:
    log = tmp_path / "upstream.log"
    log.touch()
    config = write_config(tmp_path, log)
    ledger = Ledger()
    rng = random.Random(20261201)
    mid_call = 0  # kills that landed while A's call was in flight
    b_served = 0
    b_conflicts = 0

    async def received(ticket: str, failed: list[BaseException]) -> None:
        """Wait until the upstream has the call with ``ticket`` (or A's client failed)."""
        while ticket not in log.read_text().split():
            if failed:
                raise failed[0]
            await anyio.sleep(0.01)

    async def b_loop(on_b: Client, stop: anyio.Event) -> None:
        nonlocal b_served, b_conflicts
        i = 0
        while not stop.is_set():
            i += 1
            try:
                await ledger.call(on_b, "look" if i % 2 else "work", f"b-{i}")
            except MCPError as exc:
                # A and B wrote the session at once twice in a row: refused, nothing applied.
                assert (exc.data or {}).get("reason") == "session_conflict", exc
                b_conflicts += 1
                continue
            b_served += 1

    with anyio.fail_after(scaled(600)):
        async with replica(config, store_url) as b, client(b) as on_b:
            await ledger.call(on_b, "look", "b-0")
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(b_loop, on_b, stop)
                for round_ in range(KILLS):
                    async with replica(config, store_url) as a:
                        answered = anyio.Event()
                        with anyio.CancelScope() as scope:
                            failed: list[BaseException] = []

                            async def on_a_call(ticket: str, answered: anyio.Event = answered) -> None:
                                async with client(a) as on_a:
                                    await ledger.call(on_a, "look", f"{ticket}-warm", retries=5)
                                    await ledger.call(on_a, "work", ticket, retries=5)
                                    answered.set()
                                    await anyio.sleep_forever()

                            ticket = f"a-{round_}"
                            async with anyio.create_task_group() as a_tg:

                                async def run(
                                    ticket: str = ticket, failed: list[BaseException] = failed
                                ) -> None:
                                    try:
                                        await on_a_call(ticket)
                                    except Exception as exc:
                                        # After the kill its connection breaks: expected. Before it,
                                        # a failure is the test's (``received`` raises it).
                                        failed.append(exc)

                                a_tg.start_soon(run)
                                with anyio.fail_after(scaled(60)):
                                    await received(ticket, failed)
                                if round_ % 2:
                                    await anyio.sleep(rng.uniform(0, 1.5 * DELAY))
                                mid_call += not answered.is_set()
                                served_before = b_served
                                kill_9(a)
                                with anyio.move_on_after(scaled(10)):
                                    await a.process.wait()
                                assert a.process.returncode == -signal.SIGKILL
                                # B serves on while A is dead.
                                with anyio.fail_after(scaled(60)):
                                    while b_served == served_before:
                                        await anyio.sleep(0.05)
                                scope.cancel()
                stop.set()

            # A restarted once more: both replicas show what the journal replays to.
            async with replica(config, store_url) as a, client(a) as on_a:
                await ledger.call(on_a, "look", "a-final")
                await ledger.call(on_b, "look", "b-final")
                seen_a, seen_b = await shown(on_a), await shown(on_b)

    assert mid_call >= KILLS // 2, f"only {mid_call} kills landed mid-call"
    gateway = Gateway(
        parse_config('{"mcpServers": {}, "residency": {}}'), upstreams={"slow": slow_upstream.build()}
    )
    store = open_store(store_url)
    try:
        async with gateway:
            fresh = gateway._open_session(KEY, store)
            assert_sound(store, fresh)
            expected = {uri: read_resource(uri, fresh, gateway.catalog).text for uri in RESOURCES}
        journaled = {
            e.data["id"]: e.data["arguments"].get("ticket")
            for e in store.load(fresh.session_id)
            if e.op == "call"
        }
    finally:
        store.close()
    assert seen_a == expected, "replica A disagrees with the journal"
    assert seen_b == expected, "replica B disagrees with the journal"
    # Every acknowledged call is in the journal, under the id its client was given.
    ids = [call_id for call_id, _, _ in ledger.acknowledged]
    assert len(set(ids)) == len(ids)
    for call_id, tool, ticket in ledger.acknowledged:
        assert fresh.call(call_id).tool == tool
        assert fresh.call(call_id).arguments == {"ticket": ticket}
    # Every call the upstream received was journaled before it was sent.
    assert set(log.read_text().split()) <= set(journaled.values())
    print(f"{KILLS} kills ({mid_call} mid-call); B served {b_served} calls, {b_conflicts} conflicts")
