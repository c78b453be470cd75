"""Request ids over streamable HTTP: a request whose id collides with one in flight is refused.

The SDK's transport keys a session's response streams by ``str(id)``: ``5`` in flight, then
``"5"``, and the first request was never answered. Now the second is refused (409, ``-32600``,
``request_id_in_flight``) and the first is answered. Tested on a real socket with raw POSTs,
both response modes; the id scan and the middleware's body handling also on their own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import as_request_id
from starlette.types import Message, Receive, Scope, Send

from residency._gateway import Gateway
from residency._gateway._request_ids import IN_FLIGHT_REASON, InFlightIds, RequestIds, request_id_of
from tests._tiers import examples
from tests._timing import STEP
from tests.gateway.conftest import config, served_over_http

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LEGACY = "2025-11-25"
HOLD = {
    "name": "hold",
    "description": "Answer once the test lets it.",
    "inputSchema": {"type": "object"},
    "annotations": {"readOnlyHint": True},
}


class Holder:
    """An in-process upstream whose one tool answers only when the test releases it."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()

        async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool.model_validate(HOLD)])

        async def call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            self.entered.set()
            await self.release.wait()
            return types.CallToolResult(content=[types.TextContent(type="text", text="held")])

        self.server: Server[Any] = Server("holder", on_list_tools=list_tools, on_call_tool=call_tool)


@asynccontextmanager
async def _serving(holder: Holder, json_response: bool) -> AsyncIterator[str]:
    gateway = Gateway(config({"pinned": ["hold"]}), upstreams={"holder": holder.server})
    async with gateway, served_over_http(gateway, json_response=json_response) as url:
        yield url


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message a POST was answered with (a JSON body, or the last SSE event)."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


def _request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def _session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    opened = await http.post(
        url,
        headers=HEADERS,
        json=_request(
            0,
            "initialize",
            {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        ),
    )
    headers = {**HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


@pytest.mark.slow
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_a_request_whose_id_collides_with_one_in_flight_is_refused_and_the_first_is_answered(
    json_response: bool,
) -> None:
    holder = Holder()
    answers: dict[str, httpx2.Response] = {}
    timeout = httpx2.Timeout(STEP, read=None)
    async with _serving(holder, json_response) as url, httpx2.AsyncClient(timeout=timeout) as http:
        headers = await _session(http, url)

        async def first() -> None:
            call = _request(5, "tools/call", {"name": "hold", "arguments": {}})
            answers["first"] = await http.post(url, headers=headers, json=call)

        with anyio.fail_after(STEP):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)
                await holder.entered.wait()  # request 5 is in flight
                for colliding in ("5", 5, "05", "_GET_stream"):
                    refused = await http.post(url, headers=headers, json=_request(colliding, "ping"))
                    assert refused.status_code == 409
                    error = refused.json()
                    assert error["id"] == colliding  # answered under its own id
                    assert error["error"]["code"] == types.INVALID_REQUEST
                    assert error["error"]["data"]["reason"] == IN_FLIGHT_REASON
                other = await http.post(url, headers=headers, json=_request("6", "ping"))
                assert _answer(other) == {"jsonrpc": "2.0", "id": "6", "result": {}}
                holder.release.set()
        answered = _answer(answers["first"])
        assert answered["id"] == 5 and answered["result"]["content"][0]["text"] == "held"
        # Answered, the id is free again.
        again = await http.post(url, headers=headers, json=_request("5", "ping"))
        assert _answer(again) == {"jsonrpc": "2.0", "id": "5", "result": {}}


# -- the parts on their own ---------------------------------------------------------------------


def test_in_flight_ids_collide_as_the_sdk_correlates_them_and_are_released_when_answered() -> None:
    ids = InFlightIds(reserved=("_GET_stream",))
    assert ids.admit("a", 5) is None
    assert ids.admit("a", "5") == 5
    assert ids.admit("a", "05") == 5
    assert ids.admit("b", "5") is None  # another session
    assert ids.admit("a", "_GET_stream") == "_GET_stream"  # the transport's own stream key
    assert ids.admit("a", "x") is None
    ids.release("a", "5")  # the held 5 under any spelling
    assert ids.in_flight("a") == 1
    ids.release("a", "x")
    ids.release("b", 5)
    assert len(ids) == 0 and ids.admit("a", "5") is None


def _reference(body: bytes) -> types.RequestId | None:
    """What a parser says: the id of a request (an object with ``method`` and a valid id)."""
    try:
        parsed = pydantic_core.from_json(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or "method" not in parsed:
        return None
    return as_request_id(parsed.get("id"))


_TEXT = st.text(max_size=6) | st.sampled_from(['"', "\\", ',"id":1}', '{"', "\\\\", "x,", "é\n"])
"""Short texts, and the ones that could fool a scan that did not track strings."""
_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TEXT
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=5,
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0"),
        "id": _SCALARS,
        "method": _TEXT,
        "params": _VALUES,
        "result": _VALUES,
    },
)
_MESSAGES = st.tuples(_FIELDS, st.dictionaries(_TEXT, _VALUES, max_size=2)).flatmap(
    lambda parts: st.permutations(list({**parts[1], **parts[0]}.items())).map(dict)
)
"""JSON-RPC-like objects, their members in any order (requests, notifications, responses, junk)."""


@settings(max_examples=examples(500), deadline=None)
@given(_MESSAGES, st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]), st.booleans(), st.booleans())
def test_the_id_scan_reads_what_a_parser_reads(
    message: dict[str, Any], separators: tuple[str, str], ascii_only: bool, padded: bool
) -> None:
    body = json.dumps(message, separators=separators, ensure_ascii=ascii_only).encode()
    if padded:
        body = b" \n" + body + b"\r\n "
    assert request_id_of(body) == _reference(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"id":9}}',
        b'{"method":"tools/call","params":{"a":"x,\\"id\\":7}"},"jsonrpc":"2.0","id":"5"}',
        b'{"params":{"t":"v,"},"method":"m","id":"a\\\\"}',
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b'{"jsonrpc":"2.0","id":0,"result":{"method":"x"}}',
        b'{"jsonrpc":"2.0","id":5.0,"method":"ping"}',
        b"not json",
        b"",
    ],
)
def test_the_id_scan_reads_the_shapes_clients_send_and_nothing_else(body: bytes) -> None:
    assert request_id_of(body) == _reference(body)


@pytest.mark.parametrize(
    ("head", "tail", "found"),
    [
        (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":', b"}", 5),  # the Python SDK's order
        (b'{"method":"tools/call","params":', b',"jsonrpc":"2.0","id":"a\\"b\\\\"}', 'a"b\\'),  # TypeScript's
    ],
)
def test_the_id_is_read_from_the_ends_of_a_body_without_parsing_its_middle(
    head: bytes, tail: bytes, found: types.RequestId
) -> None:
    middle = b'{"rows": [' + b"1, " * 100_000 + b"?"  # not JSON: a parse would fail here
    assert request_id_of(head + middle + tail) == found


class _App:
    """A fake ASGI app that records what it received and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.release = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        self.bodies.append(b"".join(chunks))
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _scope(session: str, *, version: str = LEGACY, length: int | None = None) -> Scope:
    headers = [(b"mcp-session-id", session.encode()), (b"mcp-protocol-version", version.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}


async def _post(app: RequestIds, scope: Scope, chunks: list[bytes]) -> int:
    pending: list[Message] = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


async def test_the_middleware_hands_the_app_the_body_it_read_and_passes_what_it_does_not_check() -> None:
    inner = _App()
    app = RequestIds(inner, max_body_bytes=64)
    ping = json.dumps(_request(5, "ping")).encode()
    inner.release.set()
    assert await _post(app, _scope("s"), [ping[:10], ping[10:]]) == 200
    large = json.dumps(_request(5, "ping", {"pad": "x" * 100})).encode()
    assert await _post(app, _scope("s"), [large[:50], large[50:]]) == 200  # over the cap: unread, passed
    assert await _post(app, _scope("s", length=len(large)), [large]) == 200
    assert inner.bodies == [ping, large, large]
    assert len(app.ids) == 0


async def test_the_middleware_leaves_2026_era_requests_alone_they_cannot_collide() -> None:
    inner = _App()
    app = RequestIds(inner)
    ping = json.dumps(_request(5, "ping")).encode()
    statuses: list[int] = []

    async def post(scope: Scope) -> None:
        statuses.append(await _post(app, scope, [ping]))

    with anyio.fail_after(STEP):
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, _scope("s"))
            while not inner.bodies:
                await anyio.lowlevel.checkpoint()
            tg.start_soon(post, _scope("s", version="2026-07-28"))  # passes: its own exchange
            while len(inner.bodies) < 2:
                await anyio.lowlevel.checkpoint()
            assert await _post(app, _scope("s"), [ping]) == 409
            inner.release.set()
    assert statuses == [200, 200]
