"""Shared process helpers for the client tests: ``residency serve`` over HTTP, and client runs.

Every process starts in its own process group and is killed with that group at the end, under a
shielded, bounded cleanup; every wait is bounded. The gateway under test is always the real
``residency serve`` command, started from the interpreter running the tests.

``http_serve`` is one gateway for one test (async); ``serve_shared`` is one for a whole module
(sync, for a module-scoped fixture: ``conftest.py``), whose tests keep apart by session.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests._timing import CLEANUP, SERVING, TEST

ROOT = Path(__file__).resolve().parents[2]
SERVE: tuple[str, ...] = (sys.executable, "-m", "residency", "serve")
"""``residency serve`` as an argv prefix (stdio by default)."""

STARTUP = SERVING
"""Seconds the gateway may take to print its URL (a loaded machine starts Python slowly, and the
scenario configs serve once the desk is up: ``UPSTREAMS_UP``)."""

_SERVING = re.compile(rb"serving MCP at (http://\S+?:\d+/\S*)")


def _kill_group(process: anyio.abc.Process) -> None:
    """Kill ``process`` and everything it started (its process group), if any is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _close(process: anyio.abc.Process, grace: float = CLEANUP) -> None:
    """Terminate politely, then kill the group; never blocks longer than ``grace`` seconds each."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            with suppress(ProcessLookupError):
                process.terminate()
            with anyio.move_on_after(grace):
                await process.wait()
        _kill_group(process)
        with anyio.move_on_after(grace):
            await process.aclose()


def _argv(args: Sequence[str], serve: Sequence[str] = SERVE) -> list[str]:
    return [*serve, "--transport", "http", "--host", "127.0.0.1", "--port", "0", *args]


@dataclass
class Served:
    """A running ``residency serve --transport http``: its URL and what it printed on stderr.

    ``since``: where in ``stderr`` this view's log starts (a shared gateway's test reads only
    what was printed while it ran).
    """

    url: str
    stderr: bytearray
    since: int = 0

    def log(self) -> str:
        return self.stderr[self.since :].decode(errors="replace")


@asynccontextmanager
async def http_serve(
    *args: str,
    env: Mapping[str, str] | None = None,
    startup: float = STARTUP,
    serve: Sequence[str] = SERVE,
) -> AsyncIterator[Served]:
    """Run ``residency serve --transport http --port 0 ARGS`` and yield it once it serves.

    The URL is read from the gateway's stderr line ``serving MCP at URL``; stderr is drained for
    the gateway's whole life (a full pipe would stall it) and kept for failure messages.
    ``serve`` is the command that runs ``residency serve`` (e.g. under a lower resource limit).

    Raises:
        RuntimeError: the gateway exited, or printed no URL within ``startup`` seconds.
    """
    process = await anyio.open_process(
        _argv(args, serve),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(env if env is not None else os.environ),
        cwd=str(ROOT),
        start_new_session=True,
    )
    err = bytearray()
    found = anyio.Event()

    async def drain() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            err.extend(chunk)
            if not found.is_set() and _SERVING.search(err):
                found.set()
        found.set()  # EOF: the gateway exited; the waiter below sees no URL

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            with anyio.move_on_after(startup):
                await found.wait()
            match = _SERVING.search(err)
            if match is None:
                raise RuntimeError(
                    f"residency serve printed no URL within {startup:.0f}s "
                    f"(exit {process.returncode}):\n{err.decode(errors='replace')}"
                )
            yield Served(match.group(1).decode(), err)
            tg.cancel_scope.cancel()
    finally:
        await _close(process)


@dataclass
class Shared:
    """A ``residency serve --transport http`` that the tests of one module share (``serve_shared``)."""

    process: subprocess.Popen[bytes]
    served: Served

    def for_a_test(self) -> Served:
        """The gateway as one test sees it: its log from now on.

        Raises:
            RuntimeError: the gateway has exited (an earlier test's traffic ended it).
        """
        if self.process.poll() is not None:
            raise RuntimeError(
                f"the shared residency serve exited ({self.process.returncode}):\n{self.served.log()}"
            )
        # A copy of the log's length under the GIL: the reader thread only ever appends.
        return Served(self.served.url, self.served.stderr, since=len(self.served.stderr))


@contextmanager
def serve_shared(*args: str, startup: float = STARTUP) -> Iterator[Shared]:
    """``http_serve`` without an event loop: for a module-scoped fixture.

    A thread drains stderr for the gateway's whole life. At the end the gateway is asked to stop
    (so it stops its upstreams itself), then its process group is killed and the process reaped;
    every wait is bounded, and this runs however the module's tests ended.

    Raises:
        RuntimeError: the gateway exited, or printed no URL within ``startup`` seconds.
    """
    process = subprocess.Popen(
        _argv(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        bufsize=0,  # unbuffered: a read returns what the pipe holds, not 64 KiB or EOF
        cwd=str(ROOT),
        start_new_session=True,
    )
    err = bytearray()
    found = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        while chunk := process.stderr.read(65536):
            err.extend(chunk)
            if not found.is_set() and _SERVING.search(err):
                found.set()
        found.set()  # EOF: the gateway exited; the waiter below sees no URL

    reader = threading.Thread(target=drain, name=f"residency serve {process.pid} stderr", daemon=True)
    reader.start()
    try:
        found.wait(startup)
        match = _SERVING.search(err)
        if match is None:
            raise RuntimeError(
                f"residency serve printed no URL within {startup:.0f}s "
                f"(exit {process.poll()}):\n{err.decode(errors='replace')}"
            )
        yield Shared(process, Served(match.group(1).decode(), err))
    finally:
        if process.poll() is None:
            process.terminate()
            with suppress(subprocess.TimeoutExpired):
                process.wait(CLEANUP)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            process.wait(CLEANUP)
        reader.join(CLEANUP)
        assert process.stderr is not None
        process.stderr.close()


@dataclass(frozen=True)
class HttpSession:
    """A session of one test's own on the module's shared HTTP gateway: in the handshake era the
    connection's own, in the 2026-07-28 era (no protocol session) the one ``key`` names."""

    url: str
    key: str


def http_session(transport: str, request: pytest.FixtureRequest) -> HttpSession | None:
    """For a test run over ``transport``: over ``"http"`` a session of its own on the module's
    shared gateway (``conftest.py``; started when first asked for), over stdio None (the client
    starts its gateway itself)."""
    if transport == "stdio":
        return None
    served: Served = request.getfixturevalue("gateway")
    return HttpSession(served.url, request.getfixturevalue("session_key"))


@dataclass(frozen=True)
class Ran:
    """A finished client process."""

    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"exit {self.returncode}\nstdout: {self.stdout[-4000:]}\nstderr: {self.stderr[-4000:]}"


async def run_client(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    timeout: float = TEST,
) -> Ran:
    """Run a client process to completion in its own process group, bounded by ``timeout``.

    Raises:
        TimeoutError: the client did not finish in time (its whole group is killed).
    """
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env if env is not None else os.environ),
        cwd=str(ROOT),
        start_new_session=True,
    )
    out, err = bytearray(), bytearray()

    async def drain(stream: anyio.abc.ByteReceiveStream | None, into: bytearray) -> None:
        if stream is not None:
            async for chunk in stream:
                into.extend(chunk)

    try:
        with anyio.fail_after(timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout, out)
                tg.start_soon(drain, process.stderr, err)
                assert process.stdin is not None
                await process.stdin.send(stdin)
                await process.stdin.aclose()
            await process.wait()
    finally:
        await _close(process)
    assert process.returncode is not None
    return Ran(list(argv), process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
