"""The gateway on the wire with real third-party peers, over stdio and streamable HTTP.

Clients: the MCP Inspector CLI and a TypeScript SDK 1.x client script
(``tests/peers/list_changed_client.mjs``). Upstreams: npm ``server-everything`` and
``server-filesystem``, PyPI ``mcp-server-time``, driven through the gateway with ``mcp.Client``
in both protocol eras. The npm peers come from ``tests/peers/package.json`` (``.ci/run`` installs
them); without node or those packages these tests skip locally and fail in CI.

Every subprocess runs in its own process group and is killed with it in ``finally``; every wait
is bounded. The gateway under test is always the ``residency serve`` command. Over HTTP the
tests that only open sessions share one per module (``demo_gateway``, ``desk_gateway``,
``upstreams_gateway``), each test in sessions of its own; a test that needs a fresh process, store
or upstream definition starts its own. Over stdio a peer run starts its gateway itself; a session
that such gateways resume from a store is prepared in process (``prepare``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import anyio
import anyio.abc
import anyio.to_thread
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from residency import SQLiteStore
from residency._gateway import Gateway, IncidentDesk, load_config
from residency._gateway import _meta_tools as meta
from residency._gateway._demo import SCENARIO_READS, desk_tools
from tests._timing import CLEANUP, SERVING, START, STEP, UPSTREAMS_UP
from tests.conftest import ROOT
from tests.gateway.conftest import session_meta

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PEERS = ROOT / "tests" / "peers"
BIN = PEERS / "node_modules" / ".bin"
INSPECTOR = BIN / "mcp-inspector"
EVERYTHING = BIN / "mcp-server-everything"
FILESYSTEM = BIN / "mcp-server-filesystem"
TS_CLIENT = PEERS / "list_changed_client.mjs"
TS_SDK = PEERS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
# Every gateway here delivers by list: the tests probe it through what tools/list shows (resident
# tools, tombstoned tools left out, list changes after re-expansion); by reference it is fixed.
SERVE = [sys.executable, "-m", "residency", "serve", "--delivery", "list"]
# What a fresh session is shown: no chain in its scope yet, no offloading.
META_TOOLS = set(meta.listed_meta_tools(chains=False, offload=False))

CONNECT_TIMEOUT = SERVING
"""Seconds a peer may wait for its connection: over stdio, a gateway starting and serving once its
upstreams are up (``UPSTREAMS_UP``)."""
CONNECT_MS = round(CONNECT_TIMEOUT * 1000)

PEER_TIMEOUT = START + CONNECT_TIMEOUT
"""Seconds one peer run may take (node start, gateway start, upstreams start, the request)."""

# The demo desk's policy withholds update_incident at the start of a session.
WITHHELD = "update_incident"
UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
REBUILT = {"incident_id": "INC-7", "severity": "SEV-1", "assignee": {"id": "u-42"}}
"""A call rebuilt from the visible arguments that drops ``notify``: invalid, never forwarded."""
ESCALATE = {**REBUILT, "notify": True}
"""A valid call: forwarded, it would make INC-7 SEV-1."""


# -- peers present? ----------------------------------------------------------------------------


def _missing(what: str) -> NoReturn:
    reason = f"{what} is not installed (run `npm install` in tests/peers; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so a missing wire peer is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def node_peers() -> None:
    """The npm peers (Inspector, TS SDK, the two npm servers) and node itself."""
    if shutil.which("node") is None:
        _missing("node")
    for path in (INSPECTOR, EVERYTHING, FILESYSTEM, TS_CLIENT, TS_SDK):
        if not path.exists():
            _missing(str(path.relative_to(ROOT)))


@pytest.fixture(scope="module")
def time_server() -> str:
    """The ``mcp-server-time`` executable (the project's test extra installs it)."""
    beside = Path(sys.executable).with_name("mcp-server-time")
    found = str(beside) if beside.exists() else shutil.which("mcp-server-time")
    if found is None:
        _missing("mcp-server-time (pip install -e '.[test]')")
    return found


@pytest.fixture
def peer_env(tmp_path: Path) -> dict[str, str]:
    """The environment for node peers: a private HOME (the Inspector writes its catalog there)."""
    return node_env(tmp_path)


def node_env(folder: Path) -> dict[str, str]:
    """``peer_env`` for a process of ``folder`` (its HOME is ``folder/home``)."""
    home = folder / "home"
    home.mkdir()
    return {
        **os.environ,
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "NO_COLOR": "1",
        "NODE_NO_WARNINGS": "1",
    }


# -- processes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """A finished peer run."""

    argv: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError:
            pytest.fail(
                f"{self.argv[0]} printed no JSON (exit {self.returncode}):\n{self.stdout}\n{self.stderr}"
            )

    def error_envelope(self) -> Any:
        """The Inspector's error envelope (on stderr under ``-q``)."""
        lines = [line for line in self.stderr.splitlines() if line.startswith("{")]
        if not lines:
            pytest.fail(f"no error envelope: {self.explain()}")
        return json.loads(lines[-1])

    def explain(self) -> str:
        return f"exit {self.returncode}\nstdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"


def _kill_group(process: anyio.abc.Process) -> None:
    """Kill ``process`` and everything it started (its process group), if any is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def run_peer(argv: Sequence[str], env: Mapping[str, str], timeout: float = PEER_TIMEOUT) -> Ran:
    """Run a peer to completion in its own process group, bounded by ``timeout``."""
    process = await anyio.open_process(
        list(argv), stdin=subprocess.DEVNULL, env=dict(env), cwd=str(ROOT), start_new_session=True
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
            await process.wait()
    finally:
        _kill_group(process)
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP):
            await process.aclose()
    assert process.returncode is not None
    return Ran(list(argv), process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


_SERVING = re.compile(rb"serving MCP at (http://127\.0\.0\.1:\d+/\S*)")


class HttpGateway:
    """``residency serve --transport http`` on an ephemeral 127.0.0.1 port, in its own process group.

    A thread copies the gateway's stderr to ``log`` for the gateway's whole life (a full pipe
    would stall it) and says when the line naming its URL came: waiting for it polls nothing.
    Its methods block: the module fixtures call them directly, a test's own gateway
    (``http_gateway``) calls them in a worker thread.
    """

    def __init__(self, log: Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [*SERVE, "--transport", "http", "--host", "127.0.0.1", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=dict(env if env is not None else os.environ),
            cwd=str(ROOT),
            start_new_session=True,
        )
        self._seen = bytearray()
        self._found = threading.Event()
        self._copier = threading.Thread(target=self._copy, name=f"stderr of {log.name}", daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        with self.log.open("wb") as out:
            while chunk := os.read(stream.fileno(), 65536):
                out.write(chunk)
                out.flush()
                self._seen.extend(chunk)
                if _SERVING.search(self._seen):
                    self._found.set()
        self._found.set()  # EOF: the gateway exited; ``url`` sees no URL

    def url(self, startup: float = SERVING) -> str:
        """Its URL, once it serves on it.

        Raises:
            pytest.fail.Exception: it exited, or printed no URL within ``startup`` seconds.
        """
        self._found.wait(startup)
        found = _SERVING.search(bytes(self._seen))
        if found is None:
            shown = bytes(self._seen).decode(errors="replace")
            pytest.fail(
                f"residency serve printed no URL within {startup:.0f}s (exit {self.process.poll()}):\n{shown}"
            )
        url = found.group(1).decode()
        port = int(url.split(":")[2].split("/")[0])
        socket.create_connection(("127.0.0.1", port), timeout=START).close()
        return url

    def stop(self, *, grace: float = 0) -> None:
        """SIGKILL its process group (after ``grace`` seconds of SIGTERM, if any) and reap it."""
        if grace and self.process.poll() is None:
            with suppress(ProcessLookupError):
                self.process.terminate()
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(CLEANUP)
        self._copier.join(CLEANUP)
        assert self.process.stderr is not None
        self.process.stderr.close()


@contextmanager
def shared_gateway(folder: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A module's HTTP gateway: its tests open sessions of their own on it (see the fixtures)."""
    gateway = HttpGateway(folder / "gateway-http.log", *args, env=env)
    try:
        yield gateway.url()
    finally:
        gateway.stop()


@asynccontextmanager
async def http_gateway(tmp_path: Path, *args: str) -> AsyncIterator[str]:
    """A test's own HTTP gateway (a fresh process on this test's config and store); yields its URL."""
    log = tmp_path / f"gateway-http-{len(list(tmp_path.glob('gateway-http-*')))}.log"
    gateway = HttpGateway(log, *args)
    try:
        yield await anyio.to_thread.run_sync(gateway.url)
    finally:
        with anyio.CancelScope(shield=True):
            # Politely first: the next gateway of the test reopens its store.
            await anyio.to_thread.run_sync(partial(gateway.stop, grace=CLEANUP))


@pytest.fixture(scope="module")
def demo_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo (``residency serve`` with no config) over HTTP, shared by the module's tests.

    Each Inspector run is a session of its own on it: a handshake-era run is its
    ``Mcp-Session-Id``, a 2026-07-28 run without a key is anonymous (a throwaway session per
    request); the TypeScript client names its own key.
    """
    with shared_gateway(tmp_path_factory.mktemp("demo-gateway")) as url:
        yield url


@pytest.fixture(scope="module")
def desk_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The desk (``desk_config``) behind one HTTP gateway, shared: each test has its session key."""
    folder = tmp_path_factory.mktemp("desk-gateway")
    with shared_gateway(folder, "--config", str(desk_config(folder)), DEMO) as url:
        yield url


@asynccontextmanager
async def prepare(config: Path, db: Path, key: str, *, demo: bool = False) -> AsyncIterator[Client]:
    """A client of what ``residency serve --config CONFIG --store DB --session KEY`` serves, in process.

    For a session the peers then resume: their own gateway processes reopen it from the store.
    Preparing it needs no process of its own (the upstreams in ``config`` still start as theirs).
    """
    upstreams = {"desk": IncidentDesk().server} if demo else {}  # as ``DEMO`` serves it
    with SQLiteStore(db) as store:
        async with (
            Gateway(load_config(config), upstreams=upstreams, store=store, default_session=key) as gateway,
            Client(gateway.server, mode="legacy") as client,
        ):
            yield client


DEMO = "--demo"
"""Serves the desk in the gateway's process beside ``desk_config``'s (no) servers: the peers'
tests are about the wire between them and the gateway, not about its upstream's; a desk process
per gateway start would double every stdio peer run's interpreters."""


def desk_config(tmp_path: Path) -> Path:
    """A config (served with ``DEMO``) with a budget that tombstones update_incident."""
    config = {
        "mcpServers": {},
        # By list, as SERVE: the session is also prepared in process from this config (``prepare``).
        "residency": {
            **UPSTREAMS_UP,
            "budget": {"schema_tokens": 700},
            "minify": "compact",
            "delivery": "list",
        },
    }
    path = tmp_path / "desk.json"
    path.write_text(json.dumps(config))
    return path


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


# -- talking to the gateway from Python ------------------------------------------------------------


def reason(result: types.CallToolResult) -> str | None:
    details = (result.meta or {}).get("residency/error")
    return details.get("reason") if isinstance(details, dict) else None


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


Call = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


def caller(client: Client, key: str | None = None) -> Call:
    meta = session_meta(key) if key is not None else None

    async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await client.call_tool(name, arguments, meta=meta)

    return call


async def use(call: Call, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """What a careful agent does: re-expand a withheld tool, then call it."""
    result = await call(name, arguments)
    if reason(result) == "tool_not_resident":
        assert not (await call("reexpand_tools", {"names": [name]})).is_error
        result = await call(name, arguments)
    return result


async def tombstone_update_incident(client: Client, key: str | None = None) -> str:
    """Call update_incident, then read-only tools until the schema budget tombstones it.

    Returns:
        Its tombstone line, as ``residency://tombstones`` and the result of the call that
        created it show it.
    """
    call = caller(client, key)
    meta = session_meta(key) if key is not None else None
    done = await use(call, WITHHELD, UPDATE)
    assert not done.is_error, text_of(done)
    for name, arguments in SCENARIO_READS:
        result = await use(call, name, arguments)
        assert not result.is_error
        listed = {t.name: t for t in (await client.list_tools(meta=meta, cache_mode="refresh")).tools}
        if WITHHELD not in listed:
            read = await client.read_resource("residency://tombstones", meta=meta, cache_mode="refresh")
            content = read.contents[0]
            assert isinstance(content, types.TextResourceContents)
            [line] = [line for line in content.text.splitlines() if line.startswith(f"{WITHHELD}:")]
            # The call that withheld it carried the same lines in one more text block.
            assert result.content[-1] == types.TextContent(type="text", text=f"Withheld now:\n{content.text}")
            assert WITHHELD not in (listed["reexpand_tools"].description or "")
            return line
    pytest.fail("the schema budget never tombstoned update_incident")


# -- the Inspector CLI ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """How the Inspector reaches the gateway: a catalog entry (stdio) or a URL plus headers."""

    argv: tuple[str, ...]

    @classmethod
    def stdio(cls, tmp_path: Path, *serve_args: str) -> Target:
        # The server command goes through a config file: on the command line, options such as
        # --config or --store would be read as the Inspector's own.
        catalog = tmp_path / "inspector.json"
        entry = {
            "command": SERVE[0],
            "args": [*SERVE[1:], *serve_args],
            "cwd": str(ROOT),
            "connectionTimeout": CONNECT_MS,
        }
        catalog.write_text(json.dumps({"mcpServers": {"residency": entry}}))
        return cls(("--config", str(catalog), "--server", "residency"))

    @classmethod
    def http(cls, url: str, session: str | None = None) -> Target:
        headers = ("--header", f"Residency-Session: {session}") if session else ()
        return cls((url, *headers))


async def inspector(target: Target, env: Mapping[str, str], *method: str, era: str = "legacy") -> Ran:
    """One Inspector CLI run (one MCP session); ``era`` is its ``--protocol-era``."""
    argv = [str(INSPECTOR), "--cli", *target.argv, "--protocol-era", era, *method, "--format", "json", "-q"]
    return await run_peer(argv, env)


def inspector_result(ran: Ran) -> dict[str, Any]:
    envelope = ran.json()
    assert ran.returncode == 0 and "result" in envelope, ran.explain()
    result: dict[str, Any] = envelope["result"]
    return result


def demo_target(transport: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    """The demo as the Inspector reaches it: a gateway of the run's own over stdio, or the module's
    HTTP gateway (``demo_gateway``), where the run is a session of its own."""
    if transport == "stdio":
        return Target.stdio(tmp_path)
    return Target.http(request.getfixturevalue("demo_gateway"))


TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])
INSPECTOR_ERAS = pytest.mark.parametrize("era", ["legacy", "modern"])


@INSPECTOR_ERAS
@TRANSPORTS
async def test_the_inspector_lists_resident_tools_and_the_meta_tools(
    transport: str,
    era: str,
    tmp_path: Path,
    node_peers: None,
    peer_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    target = demo_target(transport, tmp_path, request)
    ran = await inspector(target, peer_env, "--method", "tools/list", era=era)
    tools = {t["name"]: t for t in inspector_result(ran)["tools"]}
    assert set(tools) >= META_TOOLS
    assert set(tools) - META_TOOLS <= {t["name"] for t in desk_tools()}
    assert WITHHELD not in tools  # withheld by the demo's schema budget
    assert all(t["inputSchema"]["type"] == "object" for t in tools.values())
    # reexpand_tools' description is the same for every session: it never names a tool.
    assert WITHHELD not in tools["reexpand_tools"]["description"]


@INSPECTOR_ERAS
@TRANSPORTS
async def test_the_inspector_reexpands_a_withheld_tool_and_gets_its_full_schema(
    transport: str,
    era: str,
    tmp_path: Path,
    node_peers: None,
    peer_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    reexpand = ["--method", "tools/call", "--tool-name", "reexpand_tools"]
    target = demo_target(transport, tmp_path, request)
    ran = await inspector(
        target, peer_env, *reexpand, "--tool-args-json", json.dumps({"names": [WITHHELD]}), era=era
    )
    result = inspector_result(ran)
    assert result.get("isError") is not True, ran.explain()
    (definition,) = result["structuredContent"]["tools"]
    assert definition["name"] == WITHHELD
    assert definition["inputSchema"]["required"] == ["incident_id", "notify"]
    assert definition["inputSchema"]["properties"]["assignee"]["type"] == "object"
    assert WITHHELD in result["content"][0]["text"]


@TRANSPORTS
async def test_the_inspector_cannot_get_a_tombstoned_tool_forwarded_until_it_is_reexpanded(
    transport: str,
    tmp_path: Path,
    node_peers: None,
    peer_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    async with tombstoned(transport, tmp_path, "inspector-tombstone", request) as prepared:
        target, tombstone = prepared.inspector_target(tmp_path), prepared.tombstone
        listed = inspector_result(await inspector(target, peer_env, "--method", "tools/list"))
        tools = {t["name"]: t for t in listed["tools"]}
        # The tombstone is not in the tool list (it would change the host's cached prompt): it
        # came in the result of the call that created it, and is in residency://tombstones.
        assert WITHHELD not in tools["reexpand_tools"]["description"]

        call = ["--method", "tools/call", "--tool-name", WITHHELD, "--tool-args-json", json.dumps(ESCALATE)]
        ran = await inspector(target, peer_env, *call)
        if WITHHELD in tools:
            # A gateway that lists the tombstoned tool must refuse the call with the tombstone.
            result = inspector_result(ran)
            assert result["isError"] is True
            assert tombstone in result["content"][0]["text"]
        else:
            # The Inspector only calls listed tools: it refuses on its own side (exit 5).
            assert ran.returncode == 5, ran.explain()
            assert ran.error_envelope()["error"]["code"] == "tool_not_found"
        await prepared.assert_not_escalated()

        # Re-expanded from the Inspector, the tool is listed again in that session and callable.
        reexpand = ["--method", "tools/call", "--tool-name", "reexpand_tools"]
        expanded = inspector_result(
            await inspector(
                target, peer_env, *reexpand, "--tool-args-json", json.dumps({"names": [WITHHELD]})
            )
        )
        assert expanded.get("isError") is not True
        assert [t["name"] for t in expanded["structuredContent"]["tools"]] == [WITHHELD]
        relisted = inspector_result(await inspector(target, peer_env, "--method", "tools/list"))
        assert WITHHELD in {t["name"] for t in relisted["tools"]}
        done = inspector_result(await inspector(target, peer_env, *call))
        assert done.get("isError") is not True, done
        assert json.loads(done["content"][0]["text"])["severity"] == "SEV-1"


def pinned_desk_config(tmp_path: Path, schema: str) -> Path:
    """The desk serving ``update_incident`` at ``schema`` (v1 or v2), with that tool pinned."""
    desk = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio", "--schema", schema]}
    config = {
        "mcpServers": {"desk": desk},
        "residency": {**UPSTREAMS_UP, "pinned": [WITHHELD], "minify": "compact"},
    }
    path = tmp_path / f"desk-{schema}.json"
    path.write_text(json.dumps(config))
    return path


V1_UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee_id": "u-42", "notify": True}


@TRANSPORTS
async def test_the_inspector_calls_a_pinned_tool_redefined_upstream_and_the_gateway_refuses_it(
    transport: str, tmp_path: Path, node_peers: None, peer_env: dict[str, str]
) -> None:
    """Seed 000 with a third-party client.

    update_incident is called under its v1 definition (in process: that call only fills the
    journal); the gateway restarts, a ``residency serve`` process now, on an upstream that
    serves v2 while those arguments are still in the transcript. Pinned or not, the tool is
    tombstoned: the session's 2026-07-28 list leaves it out (the tombstone is a resource), so the
    Inspector (which calls listed tools only) refuses the call on its own side; nothing reaches
    the upstream until the tool is re-expanded.
    """
    key, db = "inspector-redefined", tmp_path / "sessions.db"
    v2 = ("--config", str(pinned_desk_config(tmp_path, "v2")), "--store", sqlite_url(db))
    with anyio.fail_after(PEER_TIMEOUT):
        async with prepare(pinned_desk_config(tmp_path, "v1"), db, key) as client:
            first = await caller(client)(WITHHELD, V1_UPDATE)
    assert not first.is_error, text_of(first)

    async with AsyncExitStack() as stack:
        if transport == "stdio":
            target = Target.stdio(tmp_path, *v2, "--session", key)
        else:
            target = Target.http(await stack.enter_async_context(http_gateway(tmp_path, *v2)), key)
        listed = inspector_result(await inspector(target, peer_env, "--method", "tools/list", era="modern"))
        tools = {t["name"]: t for t in listed["tools"]}
        assert WITHHELD not in tools
        assert WITHHELD not in tools["reexpand_tools"]["description"]

        call = ["--method", "tools/call", "--tool-name", WITHHELD, "--tool-args-json", json.dumps(UPDATE)]
        refused = await inspector(target, peer_env, *call, era="modern")
        assert refused.returncode == 5, refused.explain()
        assert refused.error_envelope()["error"]["code"] == "tool_not_found"

        reexpand = ["--method", "tools/call", "--tool-name", "reexpand_tools"]
        names = json.dumps({"names": [WITHHELD]})
        expanded = inspector_result(
            await inspector(target, peer_env, *reexpand, "--tool-args-json", names, era="modern")
        )
        assert expanded.get("isError") is not True, expanded
        done = inspector_result(await inspector(target, peer_env, *call, era="modern"))
        assert done.get("isError") is not True, done
        assert json.loads(done["content"][0]["text"])["assignee"] == {"id": "u-42"}


@dataclass(frozen=True)
class Tombstoned:
    """A gateway session in which update_incident is tombstoned, and how to reach it.

    Attributes:
        key: the session key.
        tombstone: the tombstone text the gateway showed.
        serve_args: stdio: the ``residency serve`` arguments that reopen the session.
        url: HTTP: the running gateway.
    """

    key: str
    tombstone: str
    serve_args: tuple[str, ...] = ()
    url: str | None = None

    def inspector_target(self, tmp_path: Path) -> Target:
        if self.url is not None:
            return Target.http(self.url, self.key)
        return Target.stdio(tmp_path, *self.serve_args)

    def ts_client_target(self) -> list[str]:
        if self.url is not None:
            return ["--url", self.url, "--session", self.key]
        return ["--stdio", *SERVE, *self.serve_args]

    async def assert_not_escalated(self) -> None:
        """HTTP (one desk behind one gateway): INC-7 is still SEV-2, no escalation reached it."""
        if self.url is None:
            return  # stdio: every gateway process has a fresh desk; the call's result tells
        with anyio.fail_after(PEER_TIMEOUT):
            async with Client(self.url, mode="legacy") as client:
                shown = await use(caller(client, "checker"), "get_incident", {"incident_id": "INC-7"})
        assert json.loads(text_of(shown))["severity"] == "SEV-2"


@asynccontextmanager
async def tombstoned(
    transport: str, tmp_path: Path, key: str, request: pytest.FixtureRequest
) -> AsyncIterator[Tombstoned]:
    """Prepare a ``Tombstoned`` session with ``mcp.Client``.

    stdio: every peer run starts its own gateway, so the session lives in a SQLite store under a
    fixed session key, which those gateways reopen (it is prepared in process, ``prepare``).
    HTTP: the module's desk gateway (``desk_gateway``), the session named by the
    ``Residency-Session`` header (``_meta`` from Python). Its desk is shared too: the preparing
    update makes INC-7 SEV-2 again, so ``assert_not_escalated`` sees this test's escalation
    only, not an earlier test's.
    """
    if transport == "stdio":
        config, db = desk_config(tmp_path), tmp_path / "sessions.db"
        with anyio.fail_after(PEER_TIMEOUT):
            async with prepare(config, db, key, demo=True) as client:
                tombstone = await tombstone_update_incident(client)
        args = ("--config", str(config), DEMO, "--store", sqlite_url(db), "--session", key)
        yield Tombstoned(key, tombstone, serve_args=args)
        return
    url: str = request.getfixturevalue("desk_gateway")
    with anyio.fail_after(PEER_TIMEOUT):
        async with Client(url, mode="legacy") as client:
            tombstone = await tombstone_update_incident(client, key)
    yield Tombstoned(key, tombstone, url=url)


# -- the TypeScript SDK client ---------------------------------------------------------------------


@TRANSPORTS
async def test_a_typescript_sdk_client_is_told_the_list_changed_after_reexpansion(
    transport: str, node_peers: None, peer_env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    script = [
        "node",
        str(TS_CLIENT),
        "--tool",
        WITHHELD,
        "--timeout",
        "20000",
        "--connect-timeout",
        str(CONNECT_MS),
    ]
    if transport == "stdio":
        ran = await run_peer([*script, "--stdio", *SERVE], peer_env)
    else:
        url = request.getfixturevalue("demo_gateway")
        ran = await run_peer([*script, "--url", url, "--session", "ts-client"], peer_env)
    verdict = ran.json()
    assert verdict["advertised_list_changed"] is True, ran.explain()
    assert verdict["listed_before"] is False
    assert verdict["schema_in_result"] is True
    assert verdict["list_changed"] is True, ran.explain()
    assert verdict["listed_after"] is True
    assert verdict["ok"] is True and ran.returncode == 0, ran.explain()


@TRANSPORTS
async def test_a_typescript_sdk_client_calling_a_tombstoned_tool_gets_the_tombstone_then_reexpands(
    transport: str,
    tmp_path: Path,
    node_peers: None,
    peer_env: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    async with tombstoned(transport, tmp_path, "ts-tombstone", request) as prepared:
        script = [
            "node",
            str(TS_CLIENT),
            "--tool",
            WITHHELD,
            "--timeout",
            "20000",
            "--connect-timeout",
            str(CONNECT_MS),
            "--refuse-args",
            json.dumps(ESCALATE),
        ]
        ran = await run_peer([*script, *prepared.ts_client_target()], peer_env)
        verdict = ran.json()
        assert verdict["refused"] is True, ran.explain()
        assert verdict["refused_text"] == prepared.tombstone
        assert verdict["list_changed"] is True and verdict["listed_after"] is True, ran.explain()
        assert verdict["ok"] is True and ran.returncode == 0, ran.explain()
        await prepared.assert_not_escalated()


# -- real third-party upstreams ----------------------------------------------------------------------


ERAS = pytest.mark.parametrize("mode", ["legacy", "auto"])
PINNED = ("echo", "read_text_file", "time__get_current_time", "clock__get_current_time")


def _upstreams_config(tmp_path: Path, time_server: str) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    (files / "note.txt").write_text("residency was here\n")
    config = {
        "mcpServers": {
            "everything": {"command": str(EVERYTHING), "args": ["stdio"]},
            "files": {"command": str(FILESYSTEM), "args": [str(files)]},
            # Two time servers: their tool names collide and must be namespaced.
            "time": {"command": time_server, "args": ["--local-timezone", "Etc/UTC"]},
            "clock": {"command": time_server, "args": ["--local-timezone", "Europe/Paris"]},
        },
        "residency": {
            **UPSTREAMS_UP,
            "budget": {"schema_tokens": 1_000_000},
            "pinned": list(PINNED),
            "call_timeout": 30,
        },
    }
    path = tmp_path / "upstreams.json"
    path.write_text(json.dumps(config))
    return path


@dataclass(frozen=True)
class Upstreams:
    """The shared gateway in front of the real upstreams, and the folder ``files`` serves."""

    url: str
    files: Path


@pytest.fixture(scope="module")
def upstreams_gateway(
    tmp_path_factory: pytest.TempPathFactory, node_peers: None, time_server: str
) -> Iterator[Upstreams]:
    """The real upstreams behind one HTTP gateway, started once for the module's tests.

    The tests only call the upstreams (none changes a definition), each in a session of its own
    (``upstreams_client``).
    """
    folder = tmp_path_factory.mktemp("upstreams-gateway")
    config = _upstreams_config(folder, time_server)
    with shared_gateway(folder, "--config", str(config), env=node_env(folder)) as url:
        yield Upstreams(url, folder / "files")


@asynccontextmanager
async def upstreams_client(upstreams: Upstreams, mode: str, key: str) -> AsyncIterator[Client]:
    """A client of the shared gateway in session ``key``, in ``mode``.

    The ``Residency-Session`` header names the session on every request: in 2026-07-28 no
    connection holds one (without a key each request would be a throwaway session).
    """
    async with (
        httpx2.AsyncClient(
            headers={"Residency-Session": key}, timeout=httpx2.Timeout(STEP, read=None)
        ) as http,
        Client(streamable_http_client(upstreams.url, http_client=http), mode=mode) as client,
    ):
        yield client


@ERAS
async def test_real_upstreams_are_aggregated_and_their_calls_forwarded(
    mode: str, upstreams_gateway: Upstreams
) -> None:
    with anyio.fail_after(PEER_TIMEOUT):
        async with upstreams_client(upstreams_gateway, mode, f"aggregated-{mode}") as client:
            modern = client.protocol_version == "2026-07-28"
            assert modern is (mode == "auto")
            names = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
            assert names >= META_TOOLS
            # Unique names are kept; the colliding time tools are namespaced by server.
            assert names >= set(PINNED)
            assert "get_current_time" not in names

            # The rest of every upstream's tools is there to re-expand, under the same rule.
            others = ["get-sum", "list_directory", "time__convert_time", "clock__convert_time"]
            expanded = await client.call_tool("reexpand_tools", {"names": others})
            assert not expanded.is_error, text_of(expanded)
            assert [t["name"] for t in (expanded.structured_content or {})["tools"]] == others
            unknown = await client.call_tool("reexpand_tools", {"names": ["get_current_time"]})
            assert unknown.is_error
            if not modern:
                listed = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
                assert listed >= set(others)

            call = caller(client)
            echoed = await use(call, "echo", {"message": "through the gateway"})
            assert not echoed.is_error and "through the gateway" in text_of(echoed)

            total = await use(call, "get-sum", {"a": 2, "b": 40})
            assert not total.is_error and "42" in text_of(total)

            note = await use(call, "read_text_file", {"path": str(upstreams_gateway.files / "note.txt")})
            assert not note.is_error and "residency was here" in text_of(note)

            for server, zone in (("time", "Etc/UTC"), ("clock", "Europe/Paris")):
                now = await use(call, f"{server}__get_current_time", {"timezone": zone})
                assert not now.is_error, text_of(now)
                assert json.loads(text_of(now))["timezone"] == zone

            # Invalid arguments are refused naming the field and never reach the upstream.
            refused = await use(call, "time__convert_time", {"source_timezone": "Etc/UTC", "time": "12:00"})
            assert refused.is_error and reason(refused) == "arguments_invalid"


@ERAS
async def test_a_real_upstream_outside_its_sandbox_answers_with_an_error_the_model_can_read(
    mode: str, tmp_path: Path, upstreams_gateway: Upstreams
) -> None:
    outside = tmp_path / "outside.txt"  # beside the gateway's folders, outside what files serves
    outside.write_text("secret\n")
    with anyio.fail_after(PEER_TIMEOUT):
        async with upstreams_client(upstreams_gateway, mode, f"sandbox-{mode}") as client:
            result = await use(caller(client), "read_text_file", {"path": str(outside)})
            assert result.is_error
            assert "secret" not in text_of(result)
            # The gateway keeps serving after the upstream's error.
            again = await use(caller(client), "echo", {"message": "still here"})
            assert not again.is_error
