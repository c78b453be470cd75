"""The stdio transport to an upstream subprocess: bounded lines, a redacted stderr relay.

The SDK's ``stdio_client`` decodes stdout strictly and joins chunks until a newline. A line that
is not UTF-8 stops its reader in a drain that lasts as long as the process, and a 64 MB line
costs time quadratic in its length: either way every later request waits out its timeout and
the upstream is never restarted. Here stdout is read as bytes and split on newlines. A line
that is not UTF-8 or longer than ``max_line`` ends the connection, as does the end of stdout:
``on_lost`` is told why, pending requests fail with ``CONNECTION_CLOSED``, and the upstream is
started again on its next call. A line that is UTF-8 but not JSON-RPC is logged and skipped,
as the SDK does.

stderr is relayed line by line through ``redact`` (an upstream may print its own credentials)
and ``printable`` (its control and bidi characters shown as escapes), in pieces of at most
``_ERR_LINE`` bytes. Stopping follows the MCP shutdown sequence: close stdin, wait, then
terminate the process group (the upstream runs in a session of its own, so what it started goes
with it); after a protocol violation there is no grace period.

POSIX only; on Windows the SDK's ``stdio_client`` is used unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio
import anyio.abc
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from residency._text import printable

__all__ = ["MAX_LINE", "stdio_transport"]

logger = logging.getLogger("residency.gateway")

MAX_LINE = 16 * 1024 * 1024
"""Bytes one stdout line (one JSON-RPC message) may take; a longer one ends the connection."""

_CHUNK = 1 << 16
_ERR_LINE = 1 << 14
_EXIT_GRACE = 2.0  # seconds the process may take to exit after its stdin closes
_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL to the process group
_STREAM_ERRORS = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters,
    *,
    on_lost: Callable[[str], None],
    redact: Callable[[str], str] = str,
    errlog: TextIO,
    max_line: int = MAX_LINE,
) -> AsyncIterator[TransportStreams]:
    """Start the upstream process and yield the streams an ``mcp.Client`` speaks over.

    Args:
        params: the command, arguments, extra environment and working directory.
        on_lost: called once, with the reason, when the connection ends other than by leaving
            this context (stdout closed, a line not UTF-8 or too long).
        redact: applied to every stderr line before it is written to ``errlog``.
        errlog: where the upstream's stderr goes.
        max_line: the longest stdout line accepted, in bytes.

    Raises:
        OSError: the process could not be started.
    """
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        cwd=params.cwd,
        start_new_session=True,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    closing = False
    violated = False

    def lost(reason: str) -> None:
        if not closing:
            on_lost(reason)

    async def read_stdout() -> None:
        nonlocal violated
        assert process.stdout is not None
        async with read_writer:
            problem = await _read_lines(process.stdout, read_writer, max_line)
        # The read stream is closed now: pending requests fail with CONNECTION_CLOSED.
        violated = problem is not None
        lost(problem or "the upstream closed its stdout")
        # A process still writing must not block on a full pipe while it is being stopped.
        await _discard(process.stdout)

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except _STREAM_ERRORS:
            await read_writer.aclose()  # the process is gone or deaf: end the session's wait

    async def relay_stderr() -> None:
        assert process.stderr is not None
        buffer = bytearray()
        with suppress(*_STREAM_ERRORS):
            while True:
                buffer += await process.stderr.receive(_CHUNK)
                end = buffer.find(b"\n")
                while end >= 0 or len(buffer) > _ERR_LINE:
                    size = end if 0 <= end <= _ERR_LINE else _ERR_LINE
                    _relay(bytes(buffer[:size]), redact, errlog)
                    del buffer[: size + 1 if size == end else size]
                    end = buffer.find(b"\n")
        if buffer:
            _relay(bytes(buffer), redact, errlog)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            tg.start_soon(relay_stderr)
            try:
                yield read_stream, write_stream
            finally:
                closing = True
                with anyio.CancelScope(shield=True):
                    write_stream.close()
                    read_stream.close()
                    await _stop(process, grace=0.0 if violated else _EXIT_GRACE)
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_KILL_GRACE):
            await process.aclose()  # the pipes, and the exit status reaped


async def _read_lines(
    stdout: anyio.abc.ByteReceiveStream,
    sink: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    max_line: int,
) -> str | None:
    """Pass stdout on line by line until it ends (None) or breaks the rules (the reason)."""
    buffer = bytearray()
    with suppress(*_STREAM_ERRORS):
        while True:
            scanned = len(buffer)
            buffer += await stdout.receive(_CHUNK)
            end = buffer.find(b"\n", scanned)
            while end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                problem = await _deliver(line, sink)
                if problem is not None:
                    return problem
                end = buffer.find(b"\n")
            if len(buffer) > max_line:
                return f"the upstream wrote a line longer than {max_line} bytes"
    return None


async def _deliver(line: bytes, sink: anyio.abc.ObjectSendStream[SessionMessage | Exception]) -> str | None:
    """Pass one stdout line on; the reason to end the connection if it cannot be."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "the upstream wrote a line that is not UTF-8"
    if not text.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        logger.warning("upstream wrote a line that is not a JSON-RPC message (%d bytes); skipped", len(line))
        return None
    await sink.send(SessionMessage(message))
    return None


def _relay(raw: bytes, redact: Callable[[str], str], errlog: TextIO) -> None:
    # A closed or broken stderr must not stop the gateway.
    with suppress(OSError, ValueError):
        line = raw.decode("utf-8", errors="replace").removesuffix("\r")
        # Escaped: an upstream's line must not pass for the gateway's own or drive the terminal.
        errlog.write(printable(redact(line)) + "\n")
        errlog.flush()


async def _stop(process: anyio.abc.Process, *, grace: float) -> None:
    """Close stdin, give the process ``grace`` seconds, then terminate its process group."""
    assert process.stdin is not None
    with suppress(*_STREAM_ERRORS):
        await process.stdin.aclose()
    if not await _exited(process, grace):
        await terminate_posix_process_tree(process, _KILL_GRACE)
        if not await _exited(process, _KILL_GRACE):
            logger.warning("upstream process %d outlived SIGKILL; abandoning it", process.pid)


async def _discard(stream: anyio.abc.ByteReceiveStream) -> None:
    with suppress(*_STREAM_ERRORS):
        while True:
            await stream.receive(_CHUNK)


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the process exits within ``timeout`` seconds (polled: ``wait()`` also waits for
    pipe EOF, which a surviving grandchild holding the pipe would delay)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None
