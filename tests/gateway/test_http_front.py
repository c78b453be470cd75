"""The HTTP front under abuse: timeouts, connection and request caps, bounded bodies, quiet logs.

The gateway is real: uvicorn serving ``serve_http`` on a real socket in this process, or a
``residency serve`` subprocess where the process is the subject (its stderr, its descriptor
limit). The attacks are raw sockets, bound to 127.0.0.2 and up (Linux loopback answers all of
127/8) so they come from another address than the clients they must not stop. A request that
must be seen admitted before the next one is sent carries ``Expect: 100-continue``: the
gateway's ``100 Continue`` is its asking for the body.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._http import bind, serve_http
from residency._gateway._http_limits import HTTPSettings
from tests._timing import START, STEP
from tests.clients._serve import http_serve
from tests.gateway.conftest import config

pytestmark = pytest.mark.anyio

TOKEN = "front-test-token-0123456789"

MAX_BODY = 65536
CONNECTIONS_PER_CLIENT = 8
REQUESTS_PER_CLIENT = 4
SMALL: dict[str, float] = {
    "header_timeout": 0.5,
    "idle_timeout": 0.5,
    "body_timeout": 0.5,
    "max_body_bytes": MAX_BODY,
    "body_budget_bytes": 4 * MAX_BODY,
    "body_budget_per_client_bytes": 2 * MAX_BODY,
    "max_connections": 64,
    "max_connections_per_client": CONNECTIONS_PER_CLIENT,
    "max_requests": 16,
    "max_requests_per_client": REQUESTS_PER_CLIENT,
}
"""Limits small enough to reach from a test; a test that must hold something longer than a
timeout raises that timeout far above its own waits."""

LONG = STEP * 4
"""A timeout no wait in these tests reaches."""


@asynccontextmanager
async def front(token: str | None = None, **limits: Any) -> AsyncIterator[int]:
    """A gateway on the demo desk served by ``serve_http`` on 127.0.0.1; yields its port."""
    gateway = Gateway(config(), upstreams={"desk": IncidentDesk().server})
    ready = anyio.Event()
    settings = HTTPSettings(**{**SMALL, **limits})
    async with gateway, anyio.create_task_group() as tg:
        sock = bind("127.0.0.1", 0)
        port = int(sock.getsockname()[1])
        serve = partial(
            serve_http, gateway, sock, token=token, limits=settings, started=lambda _: ready.set()
        )
        tg.start_soon(serve)
        with anyio.fail_after(STEP):
            await ready.wait()
        yield port
        tg.cancel_scope.cancel()


async def connect(port: int, source: str = "127.0.0.1") -> anyio.abc.SocketStream:
    return await anyio.connect_tcp("127.0.0.1", port, local_host=source)


def request(
    port: int,
    method: str = "GET",
    path: str = "/healthz",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> bytes:
    """A request's bytes: ``Host`` names the gateway; a POST to ``/mcp`` has MCP's headers."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    if path == "/mcp":
        lines += ["Content-Type: application/json", "Accept: application/json, text/event-stream"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def stalled_post(port: int, declared: int, auth: bool = False) -> bytes:
    """Headers of a POST that declares ``declared`` body bytes and asks before sending them."""
    headers = {"Content-Length": str(declared), "Expect": "100-continue"}
    if auth:
        headers["Authorization"] = f"Bearer {TOKEN}"
    return request(port, "POST", "/mcp", headers)


async def until_closed(stream: anyio.abc.SocketStream) -> bytes:
    """All the gateway sends until it closes the connection (a reset counts as closed)."""
    got = bytearray()
    with anyio.fail_after(STEP):
        try:
            while True:
                got += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            pass
    return bytes(got)


async def trickle(stream: anyio.abc.SocketStream, pieces: Iterable[bytes]) -> int | None:
    """Send ``pieces`` a little apart until the gateway closes the connection: how many were
    sent by then, or None if all were (what it sends meanwhile is read and dropped)."""
    with anyio.fail_after(STEP):
        for sent, piece in enumerate(pieces):
            try:
                with anyio.move_on_after(0.05):
                    while True:
                        await stream.receive()
                await stream.send(piece)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                return sent
    return None


async def head(stream: anyio.abc.SocketStream) -> bytes:
    """The next response's status line and headers (lower case)."""
    got = bytearray()
    with anyio.fail_after(STEP):
        while b"\r\n\r\n" not in got:
            got += await stream.receive()
    return bytes(got).lower()


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


async def served(port: int, source: str = "127.0.0.1") -> int:
    """The status of one ``GET /healthz``, or 0 when the connection is closed unanswered."""
    try:
        stream = await connect(port, source)
        async with stream:
            await stream.send(request(port))
            answer = await head(stream)
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        return 0
    return status(answer)


async def calls_succeed(port: int, headers: dict[str, str] | None = None) -> None:
    """A real MCP client on 127.0.0.1 lists tools and calls one."""
    url = f"http://127.0.0.1:{port}/mcp"
    with anyio.fail_after(STEP):
        async with (
            httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(STEP, read=None)) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            names = [t.name for t in (await client.list_tools()).tools]
            assert "search_tools" in names
            found = await client.call_tool("search_tools", {"query": "list open incidents"})
            assert not found.is_error


# -- timeouts ----------------------------------------------------------------------------------


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    async with front() as port, await connect(port, "127.0.0.2") as stream:
        assert await until_closed(stream) == b""


async def test_a_connection_that_trickles_its_headers_is_closed_after_the_header_timeout() -> None:
    # A line now and then keeps bytes coming (uvicorn's keep-alive timer, which any byte
    # cancels, never closed this), but the headers never end.
    async with front() as port, await connect(port, "127.0.0.2") as stream:
        await stream.send(b"GET /healthz HTTP/1.1\r\n")
        lines = (f"X-Filler-{n}: 1\r\n".encode() for n in range(100_000))
        assert await trickle(stream, lines) is not None


async def test_an_idle_connection_after_a_response_is_closed_after_the_idle_timeout() -> None:
    async with front() as port, await connect(port) as stream:
        await stream.send(request(port))
        rest = await until_closed(stream)
        assert status(rest) == 200 and rest.endswith(b"}")


async def test_a_stalled_body_is_answered_408_and_the_connection_closed() -> None:
    async with front() as port, await connect(port, "127.0.0.2") as stream:
        await stream.send(request(port, "POST", "/mcp", {"Content-Length": "1000"}, b'{"jsonrpc":'))
        answer = await until_closed(stream)
        assert status(answer) == 408


async def test_a_request_served_in_time_keeps_its_connection_for_the_next() -> None:
    async with front(idle_timeout=LONG) as port, await connect(port) as stream:
        for _ in range(3):
            await stream.send(request(port))
            answer = await head(stream)
            assert status(answer) == 200 and b"connection: close" not in answer
            length = int(re.search(rb"content-length: (\d+)", answer).group(1))  # type: ignore[union-attr]
            body = answer.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += await stream.receive()


# -- connection and request caps ------------------------------------------------------------------


async def test_a_connection_flood_from_one_address_leaves_other_clients_served() -> None:
    async with front(header_timeout=LONG, idle_timeout=LONG) as port, AsyncExitStack() as stack:
        flood = [await stack.enter_async_context(await connect(port, "127.0.0.2")) for _ in range(50)]
        answers = []
        for stream in flood:
            try:
                await stream.send(request(port))
                answers.append(status(await head(stream)))
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                answers.append(0)  # closed at once, unanswered
        assert answers.count(200) == CONNECTIONS_PER_CLIENT
        assert answers.count(0) == 50 - CONNECTIONS_PER_CLIENT
        # The eight admitted stay open, and a client from another address is served.
        await calls_succeed(port)
        assert await served(port, "127.0.0.3") == 200


async def test_past_the_request_caps_a_request_is_answered_503_with_retry_after() -> None:
    async with (
        front(header_timeout=LONG, body_timeout=LONG, max_requests=6) as port,
        AsyncExitStack() as stack,
    ):

        async def hold(source: str) -> None:
            stream = await stack.enter_async_context(await connect(port, source))
            await stream.send(stalled_post(port, 100))
            assert status(await head(stream)) == 100  # admitted: its body is asked for

        for _ in range(REQUESTS_PER_CLIENT):
            await hold("127.0.0.2")
        # That client's next request is refused; another client's is not.
        stream = await stack.enter_async_context(await connect(port, "127.0.0.2"))
        await stream.send(request(port))
        refused = await until_closed(stream)
        assert status(refused) == 503 and b"\r\nretry-after: 1\r\n" in refused.lower()
        await hold("127.0.0.3")
        await hold("127.0.0.3")
        # Six in flight: the total is reached for every client.
        assert await served(port, "127.0.0.4") == 503


async def test_a_body_past_the_budget_is_answered_503_with_retry_after() -> None:
    limit = MAX_BODY
    async with front(header_timeout=LONG, body_timeout=LONG) as port, AsyncExitStack() as stack:

        async def hold(source: str) -> int:
            stream = await stack.enter_async_context(await connect(port, source))
            await stream.send(stalled_post(port, limit))
            answer = await head(stream)
            if status(answer) != 100:
                assert b"\r\nretry-after: 1\r\n" in answer
            return status(answer)

        # Two bodies of the size cap fill one client's budget, four the total.
        assert [await hold("127.0.0.2") for _ in range(3)] == [100, 100, 503]
        assert [await hold("127.0.0.3") for _ in range(2)] == [100, 100]
        assert await hold("127.0.0.4") == 503
        # A request with no body is not held against the budget.
        assert await served(port, "127.0.0.4") == 200


# -- bodies -----------------------------------------------------------------------------------


async def test_a_declared_body_over_the_cap_is_answered_413_unread() -> None:
    async with front() as port, await connect(port, "127.0.0.2") as stream:
        await stream.send(stalled_post(port, MAX_BODY + 1))
        assert status(await until_closed(stream)) == 413


async def test_a_chunked_body_over_the_cap_is_answered_413_before_its_end() -> None:
    async with front(body_timeout=LONG) as port, await connect(port, "127.0.0.2") as stream:
        chunk = b"x" * (MAX_BODY + 1)
        await stream.send(request(port, "POST", "/mcp", {"Transfer-Encoding": "chunked"}))
        await stream.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        # The body has not ended (no last chunk): the refusal comes on the size alone.
        assert status(await until_closed(stream)) == 413


async def test_a_chunked_body_under_the_cap_reaches_mcp() -> None:
    async with front() as port, await connect(port) as stream:
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        await stream.send(request(port, "POST", "/mcp", {"Transfer-Encoding": "chunked"}))
        await stream.send(b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:9], body[9:])))
        await stream.send(b"0\r\n\r\n")
        answer = await head(stream)
        # Not refused by the front: the SDK's own answer (a session is needed first).
        assert status(answer) in (200, 400, 404)


async def test_a_token_gateway_answers_an_unauthorized_request_without_reading_its_body() -> None:
    async with front(token=TOKEN, body_timeout=LONG) as port:
        async with await connect(port, "127.0.0.2") as stream:
            await stream.send(request(port, "POST", "/mcp", {"Content-Length": "60000"}))
            # Answered on the headers alone, and closed: the body is not read, not even drained.
            assert status(await head(stream)) == 401
            assert await trickle(stream, [b"x" * 1000] * 60) is not None
        async with await connect(port) as stream:
            await stream.send(stalled_post(port, 60_000, auth=True))
            assert status(await head(stream)) == 100
        await calls_succeed(port, {"Authorization": f"Bearer {TOKEN}"})


async def test_a_foreign_host_is_refused_before_its_body_is_read() -> None:
    async with front(body_timeout=LONG) as port, await connect(port, "127.0.0.2") as stream:
        headers = {"Content-Length": "60000", "Expect": "100-continue", "Host": "evil.example"}
        raw = request(port, "POST", "/mcp", headers).replace(f"Host: 127.0.0.1:{port}\r\n".encode(), b"")
        await stream.send(raw)
        assert status(await until_closed(stream)) == 421


# -- the process: its log and its descriptors ----------------------------------------------------------

_LIMITED_SERVE = (
    sys.executable,
    "-c",
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
    "sys.argv = ['residency', *sys.argv[1:]]; runpy.run_module('residency', run_name='__main__')",
    "serve",
)
"""``residency serve`` with a soft and hard limit of 256 file descriptors."""


def _lines(text: str) -> int:
    return len(text.splitlines())


@pytest.mark.slow
async def test_clients_that_disconnect_mid_body_are_logged_as_a_count_without_tracebacks() -> None:
    async with http_serve() as gateway:
        port = int(gateway.url.rsplit(":", 1)[1].split("/")[0])
        since = len(gateway.stderr)
        for _ in range(40):
            async with await connect(port, "127.0.0.2") as stream:
                await stream.send(request(port, "POST", "/mcp", {"Content-Length": "1000"}, b'{"json'))
        # Served again: the last disconnects have been seen by the time this is answered.
        assert await served(port) == 200
        log = gateway.stderr[since:].decode(errors="replace")
        assert "Traceback" not in log
        assert _lines(log) <= 2, log


@pytest.mark.slow
async def test_a_flood_past_the_descriptor_limit_logs_little_and_the_gateway_serves_after_it() -> None:
    async with http_serve(serve=_LIMITED_SERVE) as gateway, AsyncExitStack() as stack:
        port = int(gateway.url.rsplit(":", 1)[1].split("/")[0])
        since = len(gateway.stderr)
        # 600 connections (more than the gateway's 256 descriptors) from 30 addresses.
        flood = []
        with anyio.fail_after(START):
            for i in range(600):
                stream = await connect(port, f"127.0.1.{i % 30 + 1}")
                flood.append(await stack.enter_async_context(stream))
            # Answered or refused, this one is accepted after all the others.
            await served(port, "127.0.1.250")
        log = gateway.stderr[since:].decode(errors="replace")
        assert "Traceback" not in log
        assert _lines(log) <= 10, log
        for stream in flood:
            await stream.aclose()
        await calls_succeed(port)
        log = gateway.stderr[since:].decode(errors="replace")
        assert "Traceback" not in log and _lines(log) <= 10, log
