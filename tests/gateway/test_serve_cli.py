"""``residency serve`` as a process: who its session is, what it says at startup, how it stops."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency._cli import main
from residency._cli._serve import configure_logging
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._run import ServeOptions, redact_url, startup_summary
from tests._timing import SERVING, START, STEP, UPSTREAMS_UP
from tests.gateway.conftest import config

ROOT = Path(__file__).resolve().parents[2]
SERVE = (sys.executable, "-m", "residency", "serve")
SESSION_LINE = re.compile(r"residency: session (\S+) \(resume with --session \1\)")
MEMORY_SESSION_LINE = re.compile(
    r"residency: session stdio-[0-9a-f]{12} \(in memory: it ends with this process\)"
)
WAIT = START  # a loaded machine starts Python slowly
HANDSHAKE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "test_serve_cli", "version": "1"},
}


# -- the startup summary ------------------------------------------------------------------------


def _options(gateway: Gateway, **kwargs: Any) -> ServeOptions:
    options = ServeOptions(config=gateway.config, **kwargs)
    options.secrets = gateway.config.secrets()
    if options.token:
        options.secrets.add(options.token)
    return options


@pytest.mark.anyio
async def test_the_summary_shows_each_upstream_budget_store_minify_and_the_stdio_session(
    tmp_path: Path,
) -> None:
    secret = "s3cret-value-4711"
    servers = {
        "broken": {"command": str(tmp_path / secret), "env": {"TOKEN": secret}},
        "off": {"command": "true", "disabled": True},
    }
    residency = {
        "budget": {"schema_tokens": 900, "argument_tokens": 5000, "idle_turns": 3},
        "minify": "minimal",
    }
    gateway = Gateway(config(residency, servers), upstreams={"desk": IncidentDesk().server})
    async with gateway:
        summary = startup_summary(gateway, _options(gateway, session="stdio-0123456789ab"))
    lines = summary.splitlines()
    assert all(line.startswith("residency: ") for line in lines)
    assert "residency: upstream desk (in-process): 14 tools" in lines
    broken = next(line for line in lines if line.startswith("residency: upstream broken (stdio): failed: "))
    assert secret not in summary and "***" in broken
    assert "residency: upstream off: disabled in the config" in lines
    assert "residency: transport stdio" in lines
    assert "residency: store memory://" in lines
    assert "residency: budget schema_tokens=900 argument_tokens=5000 idle_turns=3 planner=stable" in lines
    assert "residency: minify minimal" in lines
    assert "residency: delivery reference" in lines
    assert "residency: session stdio-0123456789ab (in memory: it ends with this process)" in lines
    assert not any("resume with" in line for line in lines)
    assert "residency: stop with Ctrl-C or by closing stdin" in lines


def test_the_summary_says_starting_for_an_upstream_not_up_yet_and_hides_http_secrets() -> None:
    gateway = Gateway(config({}, {"slow": {"url": "http://127.0.0.1:9/mcp"}}))  # not entered: nothing started
    settings = gateway.config.residency.model_copy(
        update={"store": "postgresql://app:pa55word@db:5432/residency"}
    )
    gateway.config = gateway.config.model_copy(update={"residency": settings})
    options = _options(gateway, transport="http", token="tok-en-value-99")
    summary = startup_summary(gateway, options, url="http://127.0.0.1:4242/mcp")
    lines = summary.splitlines()
    assert "residency: upstream slow (http): starting" in lines
    assert "residency: transport http at http://127.0.0.1:4242/mcp, bearer token required" in lines
    assert "residency: store postgresql://app:***@db:5432/residency" in lines
    assert "residency: budget schema_tokens=6000 argument_tokens=20000 idle_turns=off planner=stable" in lines
    assert "tok-en-value-99" not in summary and "pa55word" not in summary
    assert not any(line.startswith("residency: session ") for line in lines)  # one per client


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("memory://", "memory://"),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
        ("postgresql://user:pw@host/db", "postgresql://user:***@host/db"),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
    ],
)
def test_a_store_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# -- logging ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("level", ["debug", "info"])
def test_log_level_moves_residency_loggers_only(level: str) -> None:
    configure_logging(level)
    wanted = logging.getLevelName(level.upper())
    assert logging.getLogger("residency.gateway").getEffectiveLevel() == wanted
    assert logging.getLogger("residency").isEnabledFor(logging.INFO)
    # The lifecycle machine's own chatter (transitions.core logs every callback at debug and
    # info) and the SDK and HTTP stack stay at warnings.
    for name in ("transitions.core", "mcp.server.lowlevel.server", "httpx2", "uvicorn.error", "asyncio"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    configure_logging(level)  # a second run replaces its handler rather than adding one
    ours = [h for h in logging.getLogger().handlers if type(h).__name__ == "_StderrHandler"]
    assert len(ours) == 1


def test_the_default_log_level_is_info() -> None:
    assert _args().log_level == "info"


# -- session identity ---------------------------------------------------------------------------


def _args(*argv: str) -> Any:
    from residency._cli import build_parser

    return build_parser().parse_args(["serve", *argv])


def test_stdio_gets_a_fresh_session_per_process_unless_one_is_named() -> None:
    first = ServeOptions.from_args(_args(), {})
    second = ServeOptions.from_args(_args(), {})
    assert first.session is not None and re.fullmatch(r"stdio-[0-9a-f]{12}", first.session)
    assert first.session != second.session
    assert ServeOptions.from_args(_args("--session", "mine"), {}).session == "mine"
    assert ServeOptions.from_args(_args(), {"RESIDENCY_SESSION": "env-key"}).session == "env-key"
    assert ServeOptions.from_args(_args("--transport", "http"), {}).session is None


def test_delivery_is_by_reference_unless_the_command_line_or_config_says() -> None:
    assert ServeOptions.from_args(_args(), {}).config.residency.delivery == "reference"
    chosen = ServeOptions.from_args(_args("--delivery", "list"), {}).config.residency
    assert chosen.delivery == "list" and chosen.minify == "compact"  # the rest of the demo's policy
    with pytest.raises(SystemExit):
        _args("--delivery", "sometimes")


@asynccontextmanager
async def stdio_gateway(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """A real ``residency serve`` over stdio (handshake era) with its stderr in ``tmp_path/stderr-N``."""
    n = len(list(tmp_path.glob("stderr-*")))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "residency", "serve", *argv],
        env={**os.environ, **(env or {})},
        cwd=str(ROOT),
    )
    with (tmp_path / f"stderr-{n}").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def _session_printed(tmp_path: Path, n: int) -> str:
    match = SESSION_LINE.search((tmp_path / f"stderr-{n}").read_text())
    assert match is not None, (tmp_path / f"stderr-{n}").read_text()
    return match.group(1)


async def _names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


@pytest.mark.slow
@pytest.mark.anyio
async def test_two_stdio_processes_without_a_session_journal_two_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    with anyio.fail_after(2 * WAIT):
        for _ in range(2):
            async with stdio_gateway(tmp_path, "--store", store) as client:
                assert "search_tools" in await _names(client)
    keys = [_session_printed(tmp_path, 0), _session_printed(tmp_path, 1)]
    assert keys[0] != keys[1]
    capsys.readouterr()
    assert main(["inspect", store, "--json"]) == 0
    journaled = json.loads(capsys.readouterr().out)["sessions"]
    assert {f"gateway/{k}" for k in keys} <= set(journaled)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_named_stdio_session_resumes_in_the_next_process(tmp_path: Path) -> None:
    # By list, a re-expansion shows in the list: what the next process lists says what it resumed.
    store = ("--store", f"sqlite:///{tmp_path / 'resume.db'}", "--delivery", "list")
    with anyio.fail_after(3 * WAIT):
        async with stdio_gateway(tmp_path, *store, "--session", "desk-k") as client:
            assert "update_incident" not in await _names(client)  # withheld by the demo budget
            assert not (await client.call_tool("reexpand_tools", {"names": ["update_incident"]})).is_error
            assert "update_incident" in await _names(client)
        # The same key, named by the environment this time: the re-expansion is still there.
        async with stdio_gateway(tmp_path, *store, env={"RESIDENCY_SESSION": "desk-k"}) as client:
            assert "update_incident" in await _names(client)
        async with stdio_gateway(tmp_path, *store) as client:  # a fresh session does not see it
            assert "update_incident" not in await _names(client)
    assert _session_printed(tmp_path, 1) == "desk-k"
    assert _session_printed(tmp_path, 2).startswith("stdio-")


# -- stopping -----------------------------------------------------------------------------------


class Served:
    """A ``residency serve`` process spoken to in raw JSON lines, its stderr collected."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.stderr = bytearray()
        self.serving = anyio.Event()
        """Set once stderr says ``serving MCP at`` (HTTP)."""
        self._out = bytearray()
        self._next_id = 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        await self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params or {}})
        while True:
            message = await self._line()
            if message.get("id") == self._next_id and "method" not in message:
                return message

    async def notify(self, method: str) -> None:
        await self._send({"jsonrpc": "2.0", "method": method})

    async def handshake(self) -> list[str]:
        """``initialize``, ``notifications/initialized``, then the names ``tools/list`` gives."""
        assert "result" in await self.request("initialize", HANDSHAKE)
        await self.notify("notifications/initialized")
        listed = await self.request("tools/list")
        return [t["name"] for t in listed["result"]["tools"]]

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._out:
            self._out.extend(await self.process.stdout.receive())
        line, _, rest = bytes(self._out).partition(b"\n")
        self._out[:] = rest
        message: dict[str, Any] = json.loads(line)
        return message

    def children(self) -> set[int]:
        """The gateway's child processes (Linux: ``/proc/PID/task/*/children``)."""
        found: set[int] = set()
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            with suppress(OSError):
                found.update(int(p) for p in (task / "children").read_text().split())
        return found


@asynccontextmanager
async def served(*argv: str) -> AsyncIterator[Served]:
    process = await anyio.open_process(
        [*SERVE, *argv],
        stdin=subprocess.PIPE,  # kept open: the gateway waits for more
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(ROOT),
        start_new_session=True,
    )
    s = Served(process)

    async def drain() -> None:
        assert process.stderr is not None
        async for chunk in process.stderr:
            s.stderr.extend(chunk)
            if b"serving MCP at" in s.stderr:
                s.serving.set()

    try:
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            tg.start_soon(drain)
            yield s
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(STEP):
                await process.aclose()


def _desk_upstream_config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.json"
    desk = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]}
    residency = {**UPSTREAMS_UP, "budget": {"schema_tokens": 1200}}  # serving once the desk is up
    path.write_text(json.dumps({"mcpServers": {"desk": desk}, "residency": residency}))
    return path


needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc to find children")


@pytest.mark.slow
@pytest.mark.anyio
@needs_proc
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
async def test_a_stop_signal_ends_stdio_serve_at_once_and_stops_its_upstreams(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    async with served("--config", str(_desk_upstream_config(tmp_path))) as gateway:
        with anyio.fail_after(SERVING + STEP):  # it answers once it serves
            names = await gateway.handshake()
        assert "reexpand_tools" in names
        upstreams = gateway.children()
        assert upstreams, "the desk upstream should run as a child process"
        gateway.process.send_signal(sig)
        # stdin stays open: only the signal can end the process.
        with anyio.fail_after(STEP):
            code = await gateway.process.wait()
        assert code == status, gateway.stderr.decode(errors="replace")
        assert f"stopped by {sig.name}".encode() in gateway.stderr
        for pid in upstreams:  # stopped and reaped by the gateway before it exited
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.anyio
async def test_ctrl_c_ends_http_serve_with_status_130() -> None:
    async with served("--transport", "http", "--port", "0") as gateway:
        with anyio.fail_after(WAIT):
            await gateway.serving.wait()
        assert b"residency: transport http at http://127.0.0.1:" in gateway.stderr
        gateway.process.send_signal(signal.SIGINT)
        with anyio.fail_after(STEP):
            code = await gateway.process.wait()
        assert code == 130, gateway.stderr.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.anyio
async def test_stdio_serve_exits_0_when_its_stdin_closes() -> None:
    async with served() as gateway:
        with anyio.fail_after(WAIT):
            await gateway.handshake()
        assert gateway.process.stdin is not None
        await gateway.process.stdin.aclose()
        with anyio.fail_after(STEP):
            assert await gateway.process.wait() == 0
    assert MEMORY_SESSION_LINE.search(gateway.stderr.decode())  # memory:// cannot be resumed
