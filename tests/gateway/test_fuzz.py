"""Fuzzing a running gateway: JSON-RPC messages over stdio and HTTP, and ``tools/call`` arguments.

Three property tests, each bounded in examples and in time:

- ``residency serve`` as a subprocess over stdio (raw JSON lines, ``--log-level debug``);
- a gateway served over HTTP in this process (raw POSTs, both protocol eras);
- ``tools/call`` arguments drawn from the desk tools' own schemas (valid and mutated), over HTTP.

After every example the gateway must still answer (no crash), every request with an id must
have been answered within ``ANSWER_WITHIN`` seconds (no hang), nothing the desk received may
fail the desk's schema (no invalid argument forwarded), and no output (responses, stderr, log
lines) may contain a secret: an upstream's ``env`` value, an upstream's header value or the
bearer token. The upstream ``careless`` repeats its credential in results, errors and stderr.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx2
import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

from residency._core._tools import JSONObject
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._demo import desk_tools
from tests._tiers import examples
from tests._timing import CLEANUP, SERVING, START, STEP, UPSTREAMS_UP
from tests.gateway import secret_upstream
from tests.gateway.conftest import config, served_over_http

ENV_SECRET = "fz-env-credential-7Qm2vX9pL4nR"
HEADER_SECRET = "fz-header-credential-3Rk8wN5tY1cJ"
TOKEN = "fz-bearer-token-6Hd2Ls9Pq4Vb8Xw"
SECRETS = (ENV_SECRET, HEADER_SECRET, TOKEN)

ANSWER_WITHIN = STEP
"""Seconds any one request may take to be answered (a loaded 2-core machine; no call is slow)."""

FIRST_ANSWER_WITHIN = SERVING + STEP
"""Seconds the stdio gateway may take to answer its first request: it serves once its upstreams
are up (``UPSTREAMS_UP``), after its own interpreter has started."""

TIME_BUDGET = 240.0
"""Seconds one property test runs at most (see ``Budget``)."""

EXAMPLES = examples(150)

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

DESK_SCHEMAS: dict[str, JSONObject] = {t["name"]: t["inputSchema"] for t in desk_tools()}
CARELESS_TOOLS = [t["name"] for t in secret_upstream.TOOLS]
META_TOOLS = ["search_tools", "reexpand_tools", "check_chain"]
TOOL_NAMES = [*DESK_SCHEMAS, *CARELESS_TOOLS, *META_TOOLS]
URIS = [
    "residency://tombstones",
    "residency://tools",
    "residency://chains",
    "residency://events",
    "residency://upstreams",
    "residency://spans/x",
]
METHODS = [
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "initialize",
    "server/discover",
]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
INITIALIZE = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _servers(with_desk: bool) -> dict[str, Any]:
    servers: dict[str, Any] = {
        "careless": {
            "command": sys.executable,
            "args": [secret_upstream.__file__],
            "env": {secret_upstream.ENV: ENV_SECRET},
        },
        # Nothing listens there: every start fails, and the failure must not quote the header.
        "remote": {
            "url": f"http://127.0.0.1:{_closed_port()}/mcp",
            "headers": {"Authorization": f"Bearer {HEADER_SECRET}", "X-Api-Key": HEADER_SECRET},
        },
    }
    if with_desk:
        servers["desk"] = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]}
    return servers


# Every upstream tool listed (by list, under a budget that holds them all), and serving only once
# the upstreams are up (a loaded machine starts them slowly): the first list shows them all.
RESIDENCY = {
    **UPSTREAMS_UP,
    "budget": {"schema_tokens": 100_000},
    "call_timeout": 20,
    "delivery": "list",
}


# -- strategies -------------------------------------------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=16)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5)
NOT_OBJECTS = JSON_VALUES.filter(lambda v: not isinstance(v, dict))
BAD_IDS = st.one_of(
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(2**70),
    st.just(-(2**63) - 1),
    st.text(min_size=300, max_size=320),
)
SESSION_META = st.one_of(
    st.fixed_dictionaries({"residency/session": st.sampled_from(["fz-a", "fz-b", "fz-c"])}),
    st.fixed_dictionaries({"residency/session": JSON_VALUES}),
    st.fixed_dictionaries({"residency/phase": JSON_VALUES}),
    st.fixed_dictionaries({"residency/evicted_calls": JSON_VALUES}),
    JSON_OBJECTS,
)


def _tool_call_params() -> st.SearchStrategy[Any]:
    name = st.sampled_from(TOOL_NAMES) | st.text(max_size=30)
    arguments = JSON_OBJECTS | JSON_VALUES
    return st.fixed_dictionaries({"name": name, "arguments": arguments}, optional={"_meta": SESSION_META})


def _params_for(method: str) -> st.SearchStrategy[Any]:
    """Params of a well-formed request: an object (MCP's rule), its fields right or wrong."""
    if method == "tools/call":
        return _tool_call_params() | JSON_OBJECTS
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        uri = st.sampled_from(URIS) | st.text(max_size=40) | JSON_VALUES
        return st.fixed_dictionaries({"uri": uri}) | JSON_OBJECTS
    return JSON_OBJECTS | st.fixed_dictionaries({"cursor": JSON_VALUES})


@dataclass(frozen=True)
class Message:
    """One thing sent: a request (answered by ``id``), or anything else (only liveness checked)."""

    kind: str  # "request" | "notification" | "envelope" | "raw"
    method: Any = None
    params: Any = None
    has_params: bool = True
    bad: JSONObject = field(default_factory=dict)
    raw: bytes = b""

    def enveloped(self) -> Message:
        """The same request in the 2026-07-28 era: its params carry the protocol envelope."""
        if self.kind != "request" or not isinstance(self.params, dict):
            return self
        return Message("request", self.method, _enveloped(self.params))

    def body(self, request_id: int | None) -> bytes:
        if self.kind == "raw":
            return self.raw
        message: JSONObject = {"jsonrpc": "2.0", "method": self.method}
        if self.has_params:
            message["params"] = self.params
        if self.kind == "request":
            message["id"] = request_id
        message.update(self.bad)
        for key in [k for k, v in self.bad.items() if v is _MISSING]:
            del message[key]
        return json.dumps(message).encode()


_MISSING = object()


def _enveloped(params: JSONObject) -> JSONObject:
    meta = params.get("_meta")
    return {**params, "_meta": {**ENVELOPE, **(meta if isinstance(meta, dict) else {})}}


def _requests() -> st.SearchStrategy[Message]:
    method = st.sampled_from(METHODS) | st.text(max_size=20)
    return method.flatmap(
        lambda m: st.builds(
            Message,
            kind=st.just("request"),
            method=st.just(m),
            params=_params_for(m),
            has_params=st.booleans(),
        )
    )


def _notifications() -> st.SearchStrategy[Message]:
    method = st.sampled_from(
        ["notifications/initialized", "notifications/cancelled", "notifications/progress", *METHODS]
    )
    return st.builds(Message, kind=st.just("notification"), method=method, params=JSON_VALUES)


def _envelopes() -> st.SearchStrategy[Message]:
    """Broken JSON-RPC envelopes: a bad id, version or method, or a missing field."""
    bad = st.one_of(
        st.fixed_dictionaries({"id": BAD_IDS}),
        # JSON-RPC allows array params and MCP does not; scalars are wrong in both.
        st.fixed_dictionaries({"id": st.integers(0, 10), "params": NOT_OBJECTS}),
        st.fixed_dictionaries({"jsonrpc": st.sampled_from(["1.0", "3.0", 2, None, _MISSING])}),
        st.fixed_dictionaries(
            {"method": JSON_VALUES.filter(lambda v: not isinstance(v, str)) | st.just(_MISSING)}
        ),
        st.fixed_dictionaries({"id": BAD_IDS, "result": JSON_VALUES}),
        st.fixed_dictionaries({"id": st.integers(0, 10), "error": JSON_VALUES}),
    )
    return st.builds(
        Message, kind=st.just("envelope"), method=st.sampled_from(METHODS), params=JSON_OBJECTS, bad=bad
    )


def _deep(depth: int, opener: str) -> bytes:
    closer = {"[": "]", '{"a":': "}"}[opener]
    return (opener * depth + "1" + closer * depth).encode()


def _raw_call(params: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":"raw","method":"tools/call","params":' + params + b"}"


def _oversized() -> dict[str, bytes]:
    """Lines a gateway must survive: huge, wide and deep (each sent once by the tests below)."""
    lines = {
        f"text of {n:,} bytes": _raw_call(b'{"name":"echo","arguments":{"text":"' + b"x" * n + b'"}}')
        for n in (1_000_000, 3_000_000, 5_000_000)  # the last is over the 4 MiB line and body cap
    }
    lines["50,000 keys"] = _raw_call(
        b'{"name":"get_incident","arguments":{'
        + b",".join(b'"k%d":%d' % (i, i) for i in range(50_000))
        + b',"incident_id":"INC-1"}}'
    )
    for depth in (1_000, 100_000):
        for opener in ("[", '{"a":'):
            shape = "arrays" if opener == "[" else "objects"
            lines[f"{shape} {depth:,} deep"] = _raw_call(
                b'{"name":"echo","arguments":{"text":' + _deep(depth, opener) + b"}}"
            )
    return lines


OVERSIZED = _oversized()


def _raws() -> st.SearchStrategy[Message]:
    junk = st.one_of(
        st.binary(max_size=200).filter(lambda b: b"\n" not in b),
        st.text(max_size=200).filter(lambda t: "\n" not in t).map(str.encode),
        st.just(b"\xff\xfe not utf-8 \x80"),
        st.just(b"[]"),
        st.just(b'[{"jsonrpc":"2.0","id":"batch","method":"ping"}]'),
        st.just(b"null"),
        st.just(b'"just a string"'),
        st.just(b"{"),
    )
    return st.builds(
        Message, kind=st.just("raw"), raw=junk | st.sampled_from(sorted(OVERSIZED)).map(OVERSIZED.__getitem__)
    )


MESSAGES = st.lists(
    st.one_of(_requests(), _requests(), _notifications(), _envelopes(), _raws()), min_size=1, max_size=3
)


# -- checks -----------------------------------------------------------------------------------


def _assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret reached {where}: {text[:300]!r}"
    assert "Traceback (most recent call last)" not in text, f"a traceback reached {where}: {text[:300]!r}"


def _assert_jsonrpc(message: Any) -> None:
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    if "id" in message and "method" not in message:
        assert ("result" in message) != ("error" in message), message
        if "error" in message:
            error = message["error"]
            assert isinstance(error.get("code"), int) and error["code"] != 0, message
            assert isinstance(error.get("message"), str), message


class Budget:
    """A test's time budget (hypothesis has none): past it, the remaining examples do nothing.

    A slow machine so runs fewer examples; a request that hangs still fails its own bound.
    """

    def __init__(self, seconds: float) -> None:
        self._until = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self._until


# -- stdio: ``residency serve`` in a subprocess ---------------------------------------------


class StdioGateway:
    """``residency serve`` over stdio, spoken to in raw JSON lines."""

    def __init__(self, config_path: Path, era: str) -> None:
        self.era = era
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "residency",
                "serve",
                "--config",
                str(config_path),
                "--log-level",
                "debug",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[bytes] = []
        self.answers: dict[str, Any] = {}
        self._next = 0
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True),
        ]
        for thread in self._pumps:
            thread.start()

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in iter(stream.readline, b""):
            put(line)

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def send(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(body + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, request_id: Any, timeout: float = ANSWER_WITHIN) -> Any:
        key = json.dumps(request_id)
        until = time.monotonic() + timeout
        while key not in self.answers:
            left = until - time.monotonic()
            assert left > 0, f"no answer to request {key} within {timeout:.0f} s"
            assert self.proc.poll() is None, (
                f"the gateway exited ({self.proc.returncode}): {self.stderr_tail()}"
            )
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            text = line.decode("utf-8", "replace")
            _assert_clean(text, "stdout")
            message = json.loads(text)
            _assert_jsonrpc(message)
            if isinstance(message, dict) and "id" in message and "method" not in message:
                self.answers[json.dumps(message["id"])] = message
        return self.answers.pop(key)

    def call(self, method: str, params: Any = None, timeout: float = ANSWER_WITHIN) -> Any:
        request_id = self.new_id()
        message: JSONObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if self.era == "modern":
            params = _enveloped(params or {})
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())
        return self.wait_for(request_id, timeout)

    def stderr_tail(self) -> str:
        return b"".join(self.stderr[-20:]).decode("utf-8", "replace")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=CLEANUP)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=CLEANUP)
        for thread in self._pumps:  # they end at EOF; then their pipes can close
            thread.join(timeout=CLEANUP)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module", params=["legacy", "modern"])
def stdio_gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StdioGateway]:
    path = tmp_path_factory.mktemp("fuzz") / "gateway.json"
    path.write_text(json.dumps({"mcpServers": _servers(with_desk=True), "residency": RESIDENCY}))
    gateway = StdioGateway(path, request.param)
    try:
        # The first request is answered once the gateway serves; every later one within ANSWER_WITHIN.
        if gateway.era == "legacy":  # the first request picks the era; modern needs no handshake
            init = gateway.call("initialize", INITIALIZE, timeout=FIRST_ANSWER_WITHIN)
            assert "result" in init, init
            gateway.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        first = FIRST_ANSWER_WITHIN if gateway.era == "modern" else ANSWER_WITHIN
        tools = gateway.call("tools/list", timeout=first)
        names = {t["name"] for t in tools["result"]["tools"]}
        assert {"get_incident", "whoami"} <= names, names
        yield gateway
    finally:
        gateway.close()
        _assert_clean(b"".join(gateway.stderr).decode("utf-8", "replace"), "stderr")


@pytest.mark.slow
@FUZZ_SETTINGS
@given(messages=MESSAGES)
def test_stdio_gateway_survives_any_jsonrpc_line(
    stdio_gateway: StdioGateway, messages: list[Message]
) -> None:
    if _budget(f"stdio-{stdio_gateway.era}").spent():
        return
    expected = []
    for message in messages:
        request_id = stdio_gateway.new_id()
        if stdio_gateway.era == "modern":
            message = message.enveloped()
        body = message.body(request_id)
        event(f"{message.kind}, {'over 1 MB' if len(body) > 1 << 20 else 'small'}")
        stdio_gateway.send(body)
        if message.kind == "request":
            expected.append(request_id)
    # Alive: a ping and a tools/list are answered after whatever came before.
    assert "result" in stdio_gateway.call("ping") or stdio_gateway.era == "modern"  # answered
    assert stdio_gateway.call("tools/list")["result"]["tools"]
    for request_id in expected:  # and nothing with an id went unanswered
        stdio_gateway.wait_for(request_id)
    stdio_gateway.answers.clear()  # answers to ids only the message knew ("raw", bad ids)
    for line in stdio_gateway.stderr:
        _assert_clean(line.decode("utf-8", "replace"), "stderr")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OVERSIZED))
def test_stdio_gateway_survives_an_oversized_line(stdio_gateway: StdioGateway, name: str) -> None:
    stdio_gateway.send(OVERSIZED[name])
    assert stdio_gateway.call("tools/list")["result"]["tools"]
    stdio_gateway.answers.clear()


_BUDGETS: dict[str, Budget] = {}


def _budget(name: str) -> Budget:
    return _BUDGETS.setdefault(name, Budget(TIME_BUDGET))


# -- HTTP: a gateway in this process ---------------------------------------------------------


class RecordingDesk(IncidentDesk):
    """The demo desk, recording every call it receives before it validates it."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[tuple[str, JSONObject]] = []

    def call(self, name: str, arguments: JSONObject) -> Any:
        self.received.append((name, copy.deepcopy(arguments)))
        return super().call(name, arguments)


class LogLines(logging.Handler):
    """Every log line the gateway writes, formatted as it would reach stderr."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class HttpGateway:
    url: str
    desk: RecordingDesk
    logs: LogLines
    http: httpx2.Client
    session_id: str = ""
    checked: int = 0
    _next: int = 0

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def headers(self, era: str, method: Any = None, params: Any = None) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN}",
        }
        if era == "legacy":
            headers["Mcp-Session-Id"] = self.session_id
            headers["Mcp-Protocol-Version"] = LEGACY
        else:
            headers["Mcp-Protocol-Version"] = MODERN
            if isinstance(method, str) and method.isprintable() and method.isascii():
                headers["Mcp-Method"] = method
            named = NAME_BEARING_METHODS.get(method) if isinstance(method, str) else None
            value = params.get(named) if named is not None and isinstance(params, dict) else None
            if isinstance(value, str):  # the SDK wants the tool name (resource URI) mirrored
                headers["Mcp-Name"] = encode_header_value(value)
        return headers

    def post(self, body: bytes, headers: dict[str, str]) -> list[Any]:
        """POST one body; the JSON-RPC messages of the answer (SSE or JSON), checked."""
        started = time.monotonic()
        response = self.http.post(self.url, content=body, headers=headers)
        assert time.monotonic() - started < ANSWER_WITHIN, "an HTTP request hung"
        _assert_clean(response.text, "an HTTP response")
        assert response.status_code < 500, f"HTTP {response.status_code}: {response.text[:300]}"
        messages = []
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            # SSE ends lines with CR, LF or CRLF only (``str.splitlines`` also splits on U+0085).
            for line in re.split(r"\r\n|\r|\n", response.text):
                if line.startswith("data:") and line[5:].strip():
                    messages.append(json.loads(line[5:]))
        elif response.content and response.headers.get("content-type", "").startswith("application/json"):
            messages.append(response.json())
        for message in messages:
            if isinstance(message, dict) and "jsonrpc" in message:
                _assert_jsonrpc(message)
        return messages

    def call(self, era: str, method: str, params: Any = None) -> Any:
        request_id = self.new_id()
        if era == "modern":
            params = _enveloped(params or {})
        message: JSONObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        answers = self.post(json.dumps(message).encode(), self.headers(era, method, params))
        found = [a for a in answers if isinstance(a, dict) and a.get("id") == request_id]
        assert found, f"no answer to {method}: {answers}"
        return found[0]

    def assert_alive_and_clean(self) -> None:
        assert self.call("legacy", "ping")["result"] == {}
        assert self.call("modern", "tools/list")["result"]["tools"]
        for name, arguments in self.desk.received[self.checked :]:
            schema = DESK_SCHEMAS.get(name)
            assert schema is not None, f"the desk received an unknown tool {name!r}"
            assert jsonschema.Draft202012Validator(schema).is_valid(arguments), (
                f"an invalid call was forwarded: {name} {arguments!r}"
            )
        self.checked = len(self.desk.received)
        for line in self.logs.lines:
            _assert_clean(line, "the gateway's log")
        self.logs.lines.clear()


@asynccontextmanager
async def _serve(desk: RecordingDesk) -> AsyncIterator[str]:
    gateway = Gateway(config(RESIDENCY, _servers(with_desk=False)), upstreams={"desk": desk.server})
    async with gateway, served_over_http(gateway, wait=START, token=TOKEN) as url:
        yield url


@pytest.fixture(scope="module")
def http_gateway() -> Iterator[HttpGateway]:
    logs = LogLines()
    logs.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    residency_logger = logging.getLogger("residency")
    level = residency_logger.level
    residency_logger.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(logs)
    desk = RecordingDesk()
    try:
        with (
            anyio.from_thread.start_blocking_portal() as portal,
            portal.wrap_async_context_manager(_serve(desk)) as url,
            httpx2.Client(timeout=httpx2.Timeout(ANSWER_WITHIN)) as http,
        ):
            gateway = HttpGateway(url, desk, logs, http)
            gateway.session_id = _session_id(http, url, gateway)
            gateway.post(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', gateway.headers("legacy"))
            gateway.assert_alive_and_clean()
            yield gateway
    finally:
        logging.getLogger().removeHandler(logs)
        residency_logger.setLevel(level)


def _session_id(http: httpx2.Client, url: str, gateway: HttpGateway) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": INITIALIZE,
    }
    headers = {k: v for k, v in gateway.headers("legacy").items() if not k.startswith("Mcp-")}
    response = http.post(url, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code == 200, response.text
    return str(response.headers["mcp-session-id"])


@pytest.mark.slow
@FUZZ_SETTINGS
@given(messages=MESSAGES, eras=st.lists(st.sampled_from(["legacy", "modern"]), min_size=3, max_size=3))
def test_http_gateway_survives_any_jsonrpc_body(
    http_gateway: HttpGateway, messages: list[Message], eras: list[str]
) -> None:
    if _budget("http").spent():
        return
    for message, era in zip(messages, eras, strict=False):
        request_id = http_gateway.new_id()
        if era == "modern":
            message = message.enveloped()
        headers = http_gateway.headers(era, message.method, message.params)
        answers = http_gateway.post(message.body(request_id), headers)
        if message.kind == "request" and answers:
            # Answered at all (a refused request may get an HTTP error instead): then by its id.
            assert any(isinstance(a, dict) and a.get("id") == request_id for a in answers), answers
    http_gateway.assert_alive_and_clean()


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("name", sorted(OVERSIZED))
def test_http_gateway_survives_an_oversized_body(http_gateway: HttpGateway, name: str, era: str) -> None:
    body = OVERSIZED[name]
    params = None
    if era == "modern" and "deep" not in name:  # the deep ones are past what json can rebuild
        message = json.loads(body)
        params = _enveloped(message["params"])
        body = json.dumps({**message, "params": params}).encode()
    http_gateway.post(body, http_gateway.headers(era, "tools/call", params))
    http_gateway.assert_alive_and_clean()


# -- tools/call arguments ---------------------------------------------------------------------


def _an_object(value: object) -> JSONObject:
    """A value drawn from an object schema, typed as what it is."""
    assert isinstance(value, dict)
    return value


def _mutations(name: str, arguments: JSONObject) -> st.SearchStrategy[Any]:
    """Arguments made wrong in one of the ways a model gets them wrong."""
    schema = DESK_SCHEMAS[name]
    properties = list(schema.get("properties", {}))
    options: list[st.SearchStrategy[Any]] = [JSON_VALUES.filter(lambda v: not isinstance(v, dict))]
    if arguments:
        options.append(
            st.sampled_from(sorted(arguments)).map(lambda k: {x: arguments[x] for x in arguments if x != k})
        )
    if properties:
        options.append(
            st.tuples(st.sampled_from(properties), JSON_VALUES).map(lambda kv: {**arguments, kv[0]: kv[1]})
        )
        options.append(
            st.tuples(st.sampled_from(properties), st.sampled_from([5_000, 100_000])).map(
                lambda kv: {**arguments, kv[0]: "y" * kv[1]}
            )
        )
    options.append(st.text(min_size=1, max_size=10).map(lambda k: {**arguments, f"extra_{k}": 1}))
    return st.one_of(options)


def _arguments() -> st.SearchStrategy[tuple[str, Any, bool]]:
    def for_tool(name: str) -> st.SearchStrategy[tuple[str, Any, bool]]:
        valid = from_schema(DESK_SCHEMAS[name]).map(_an_object)
        return st.one_of(
            valid.map(lambda a: (name, a, True)),
            valid.flatmap(lambda a: _mutations(name, a)).map(lambda a: (name, a, False)),
        )

    return st.sampled_from(sorted(DESK_SCHEMAS)).flatmap(for_tool)


@pytest.mark.slow
@FUZZ_SETTINGS
@given(call=_arguments(), era=st.sampled_from(["legacy", "modern"]))
def test_only_valid_arguments_reach_the_desk(
    http_gateway: HttpGateway, call: tuple[str, Any, bool], era: str
) -> None:
    if _budget("arguments").spent():
        return
    name, arguments, _ = call
    # The desk's schema says what is valid (a mutation may happen to still be valid); every
    # value drawn here is far under the gateway's argument limits. Null arguments mean none.
    sent = {} if arguments is None else arguments
    valid = jsonschema.Draft202012Validator(DESK_SCHEMAS[name]).is_valid(sent)
    before = len(http_gateway.desk.received)
    answer = http_gateway.call(era, "tools/call", {"name": name, "arguments": arguments})
    forwarded = http_gateway.desk.received[before:]
    if valid:
        # Every desk tool is resident (budget) or evicted (admitted when valid): it goes through.
        assert "result" in answer, answer
        assert forwarded == [(name, sent)], answer
    else:
        assert forwarded == [], f"forwarded invalid arguments: {arguments!r}"
        assert "error" in answer or answer["result"].get("isError"), answer
    http_gateway.assert_alive_and_clean()


@pytest.mark.slow
def test_the_careless_upstream_really_leaks_without_the_gateway() -> None:
    """The fuzz's secret checks can fail: the upstream does print and return its credential."""
    env = {**os.environ, secret_upstream.ENV: ENV_SECRET}
    proc = subprocess.run(
        [sys.executable, secret_upstream.__file__], input=b"", capture_output=True, env=env, timeout=START
    )
    assert ENV_SECRET.encode() in proc.stderr


@pytest.mark.slow
def test_the_careless_upstream_answers_with_its_credential_and_the_gateway_redacts_it(
    http_gateway: HttpGateway,
) -> None:
    """The secret checks above can fail: these answers carried the credential before redaction."""
    for era in ("legacy", "modern"):
        for tool in ("whoami", "refuse", "explode"):
            answer = http_gateway.call(era, "tools/call", {"name": tool, "arguments": {}})
            assert "***" in json.dumps(answer), answer  # and ``post`` found no secret in it
    http_gateway.assert_alive_and_clean()
