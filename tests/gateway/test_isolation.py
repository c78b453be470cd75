"""Latency isolation: one session's hostile inputs do not stall another session.

A gateway in this process serves the demo desk and a hostile upstream (``hostile.py``) over
HTTP. A hostile client in another process sends, over and over, at most ten a second: a
27-character argument against ``^(a|a)*$``, a 3 MB string without spaces, an object of 50,000
keys, and a call that makes the upstream send 2,000 ``tools/list_changed``. A probe session (an
in-process client, so no network stack in its timings) calls ``get_incident`` 100 times a
second; a call's latency counts from when it was due, so a stall shows in every call it delays.

Windows of probe calls alone and under hostile load alternate in the same run (the machine's
noise hits both alike). The bound: the probe's p99 under load is at most ``RATIO`` (20) times
its p99 alone, the baseline taken no lower than the parse floor: the time this process takes to
parse the costliest hostile message (JSON, then the SDK's params model), which the gateway
spends on its event loop before it can refuse the message (a quiet machine answers the probe
alone faster than that). The floor is the median of one measurement per round.

Measured on a shared 2-core machine (5 rounds, 100 calls alone per round): p99 alone 6.5-9.2
ms, under hostile load 55-129 ms, parse floor 12-25 ms: 2.2-9.4x the floored baseline. The
hostile inputs still cost loop time when refused: about 60 ms to read 50,000 keys, and 100-180
ms for a storm of 2,000 notifications. A 0.3 s stall per hostile call, injected by hand, gave
a p99 of 870 ms (fails); before the limits of issue #12 one hostile call held the loop 3-24 s.
Not isolated: a client flooding the gateway without pause (a single event loop cannot share
its time fairly; with 50,000-key objects back to back the probe's p99 reached 600-730 ms).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client

from residency._gateway import Gateway, IncidentDesk
from tests._timing import START, STEP, TEST, UPSTREAMS_UP
from tests.gateway import hostile
from tests.gateway.conftest import config, served_over_http, session_meta

pytestmark = pytest.mark.anyio

ROUNDS = 5
PER_WINDOW = 100
RATIO = 20.0
"""p99 under hostile load <= RATIO x max(p99 alone, parse floor)."""

INTERVAL = 0.01
"""Seconds between the probe's calls (100 a second; a call takes about 1 ms)."""

INCIDENT = {"incident_id": "INC-1"}

CALL_BOUND = STEP
"""Seconds any one probe call may take, whatever the ratio (fail fast on a stall)."""


def parse_cost() -> float:
    """Seconds to parse the costliest hostile message: JSON, then the SDK's params model."""
    costs = []
    for _, body in hostile.payloads():
        started = time.perf_counter()
        message = json.loads(body)
        types.CallToolRequestParams.model_validate(message["params"])
        costs.append(time.perf_counter() - started)
    return max(costs)


def until(samples: list[float], n: int, also: Callable[[], bool] = lambda: True) -> Callable[[], bool]:
    """A window's end: ``n`` samples taken, and ``also`` holds."""
    return lambda: len(samples) >= n and also()


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


@asynccontextmanager
async def hostile_gateway() -> AsyncIterator[tuple[Gateway, str]]:
    servers = {"hostile": {"command": sys.executable, "args": [hostile.__file__, "upstream"]}}
    # UPSTREAMS_UP: serving once the hostile upstream is up, whose tools the test calls.
    settings = {**UPSTREAMS_UP, "budget": {"schema_tokens": 100_000}}
    gateway = Gateway(config(settings, servers), upstreams={"desk": IncidentDesk().server})
    async with gateway, served_over_http(gateway, wait=START) as url:
        assert all(name in gateway.catalog for name in ("match", "blob", "churn"))
        yield gateway, url


class HostileClient:
    """The hostile client process, let loose and held back between windows."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._lines = BufferedByteReceiveStream(process.stdout)
        self.answered: set[bytes] = set()
        """The hostile tools answered in the current window."""
        self.stopped = anyio.Event()
        self.sent = 0

    async def line(self) -> bytes:
        return await self._lines.receive_until(b"\n", 1 << 16)

    async def ready(self) -> None:
        with anyio.fail_after(START):
            assert await self.line() == b"ready"

    async def read(self) -> None:
        """Follow the client's reports (a task): tools answered, and when it has stopped."""
        while True:
            word, _, rest = (await self.line()).partition(b" ")
            if word == b"sent":
                self.answered.add(rest)
            elif word == b"stopped":
                self.sent = int(rest)
                self.stopped.set()

    async def go(self) -> None:
        self.answered = set()
        self.stopped = anyio.Event()
        await self._stdin.send(b"go\n")

    async def stop(self) -> None:
        await self._stdin.send(b"stop\n")
        with anyio.fail_after(TEST):
            await self.stopped.wait()


@pytest.mark.slow
async def test_a_hostile_session_does_not_stall_another_session() -> None:
    parses: list[float] = []
    alone: list[float] = []
    loaded: list[float] = []
    async with hostile_gateway() as (gateway, url):
        command = [sys.executable, hostile.__file__, "client", url]
        async with await anyio.open_process(command) as process, anyio.create_task_group() as tg:
            client = HostileClient(process)
            await client.ready()
            tg.start_soon(client.read)
            kinds = {tool.encode() for tool, _ in hostile.payloads()}
            async with Client(gateway.server, mode="auto") as probe:
                meta = session_meta("probe")

                async def window(samples: list[float], done: Callable[[], bool]) -> None:
                    # Paced: a call is due every INTERVAL, and its latency counts from when it
                    # was due, so a stall delays every call that falls due during it (no
                    # coordinated omission: a probe that waited would see a stall only once).
                    due = anyio.current_time()
                    while not done():
                        await anyio.sleep_until(due)
                        with anyio.fail_after(CALL_BOUND):
                            result = await probe.call_tool(
                                "get_incident", {"incident_id": "INC-1"}, meta=meta
                            )
                        assert not result.is_error
                        samples.append(anyio.current_time() - due)
                        due += INTERVAL

                warm: list[float] = []
                await window(warm, until(warm, 20))  # caches, the desk, the session
                for rounds in range(1, ROUNDS + 1):
                    enough = PER_WINDOW * rounds
                    await window(alone, until(alone, enough))
                    await client.go()
                    # Under load until every hostile input was answered in this window.
                    await window(loaded, until(loaded, enough, lambda: client.answered == kinds))
                    await client.stop()
                    parses.append(parse_cost())  # between windows: it holds this loop too
            tg.cancel_scope.cancel()
            await process.stdin.aclose()  # type: ignore[union-attr]
            with anyio.fail_after(STEP):
                await process.wait()
        assert client.sent >= ROUNDS * len(kinds), client.sent
    floor = sorted(parses)[len(parses) // 2]
    bound = RATIO * max(p99(alone), floor)
    figures = (
        f"p99 alone {p99(alone) * 1e3:.1f} ms, under hostile load {p99(loaded) * 1e3:.1f} ms, "
        f"parse floor {floor * 1e3:.1f} ms, bound {bound * 1e3:.0f} ms"
    )
    assert p99(loaded) <= bound, figures
