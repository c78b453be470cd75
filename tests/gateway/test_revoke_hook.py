"""The gateway's revocation hook (``residency.revoke_command``): a real command, run once per
credential reference of a chain an agent archives over MCP, its outcome journaled, never run
again on a restart, shown by ``residency inspect`` and retried by ``residency admin``."""

from __future__ import annotations

import json
import logging
import os
import select
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.abc import SocketAttribute, SocketStream
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency import Session, SQLiteStore
from residency._cli import main
from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._config import parse_config
from residency._gateway._revoke import command_revoker, hook_argv
from residency._gateway._sessions import store_id
from tests._timing import READY_WAIT, START, STEP, TEST, UPSTREAMS_UP, scaled
from tests.gateway.conftest import agent, running

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ["list_services", "get_service_health", "query_metrics"]
CALLS = [{}, {"service": "api"}, {"service": "api", "metric": "error_rate"}]
FAILURE = "query_metrics: 500 metric store timeout for every service"
CREDENTIALS = ["scraper-api-key", "oauth:crm/read"]
SECRET = "desk-token-5b1f9e"  # an upstream env value: a secret of the config
A = store_id("agent-a")  # the id the gateway journals session agent-a under

HOOK = """\
import sys
from pathlib import Path

ref, log, failing = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
# Noise on both streams: none of it may reach the gateway's MCP stream (its stdout).
print(f"revoking {ref} with {SECRET!r}")
print(f"revoking {ref} with {SECRET!r}", file=sys.stderr)
with log.open("a") as f:
    f.write(ref + "\\n")
sys.exit(3 if failing.exists() and ref in failing.read_text().split() else 0)
""".replace("{SECRET!r}", repr(SECRET))


class Hook:
    """A revocation command that records each reference it gets and fails for chosen ones."""

    def __init__(self, folder: Path) -> None:
        self.script = folder / "revoke.py"
        self.script.write_text(HOOK)
        self.log = folder / "revoked.txt"
        self.failing = folder / "failing.txt"

    def command(self) -> list[str]:
        # {ref} first among the arguments: the reference goes there, not at the end.
        return [sys.executable, str(self.script), "{ref}", str(self.log), str(self.failing)]

    def fail(self, *refs: str) -> None:
        self.failing.write_text("\n".join(refs))

    def runs(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


def _settings(hook: Hook) -> dict[str, Any]:
    return {"budget": {"schema_tokens": 20_000}, "revoke_command": hook.command(), "revoke_timeout": 60}


def _config(folder: Path, hook: Hook) -> Path:
    path = folder / "gateway.json"
    desk = {
        "command": sys.executable,
        "args": ["-m", "residency._gateway._desk_stdio"],
        "env": {"DESK_TOKEN": SECRET},
    }
    # UPSTREAMS_UP: the process serves once its desk is up (the in-process restart: ``running``).
    residency = {**UPSTREAMS_UP, **_settings(hook)}
    path.write_text(json.dumps({"mcpServers": {"desk": desk}, "residency": residency}))
    return path


@asynccontextmanager
async def gateway(config: Path, db: Path, key: str, log: Path) -> AsyncIterator[Client]:
    """``residency serve`` over stdio as session ``key``, its stderr appended to ``log``."""
    args = ["-m", "residency", "serve", "--config", str(config), "--store", f"sqlite:///{db}"]
    params = StdioServerParameters(
        command=sys.executable, args=[*args, "--session", key], env=dict(os.environ), cwd=str(ROOT)
    )
    with log.open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


@asynccontextmanager
async def restarted(hook: Hook, db: Path) -> AsyncIterator[Gateway]:
    """The gateway restarted in process on the same store and settings (the demo desk in process).

    What a restart does to the hook is the journal's business, not the process's: the process
    itself (the hook's noise kept off its MCP stream, its scrubbed log) is the first run's.
    """
    with SQLiteStore(db) as store:
        async with running(_settings(hook), desk=IncidentDesk(), store=store) as gw:
            yield gw


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert result.structured_content is not None, result
    return dict(result.structured_content)


async def archive(client: Client) -> dict[str, Any]:
    arguments = {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "credentials": CREDENTIALS}
    return data(await client.call_tool("archive_chain", arguments))


def inspect_text(db: Path, key: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["inspect", f"sqlite:///{db}", "--session", key]) == 0
    return capsys.readouterr().out


def inspect_json(db: Path, key: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["inspect", f"sqlite:///{db}", "--session", key, "--json"]) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    return shown


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_hook_runs_once_per_reference_is_never_rerun_and_a_failure_is_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = Hook(tmp_path)
    hook.fail("scraper-api-key")
    config, db, log = _config(tmp_path, hook), tmp_path / "shared.db", tmp_path / "gateway.log"
    with anyio.fail_after(TEST + READY_WAIT):  # the stdio gateway waits for its desk
        # A real `residency serve` over stdio: the hook's noise must stay off its MCP stream.
        async with gateway(config, db, "agent-a", log) as a:
            for name, arguments in zip(CHAIN, CALLS, strict=True):
                assert not (await a.call_tool(name, arguments)).is_error
            digest = (await archive(a))["digest"]
            # Run once per reference (the record keeps them sorted), before the answer came.
            assert hook.runs() == ["oauth:crm/read", "scraper-api-key"]
            # The hook's output went nowhere near the MCP stream: the connection still works.
            assert data(await a.call_tool("check_chain", {"sequence": CHAIN}))["safe"] is False
            assert (await archive(a))["digest"] == digest  # the same chain again: no new run
            assert hook.runs() == ["oauth:crm/read", "scraper-api-key"]
        # A restart replays the journaled outcomes; a successor adopts the chain: no runs.
        async with (
            restarted(hook, db) as gw,
            agent(gw, "legacy", "agent-a") as a,
            agent(gw, "legacy", "agent-b") as b,
        ):
            for client in (a, b):
                assert data(await client.call("check_chain", {"sequence": CHAIN}))["safe"] is False
                assert not (await client.call("query_metrics", CALLS[2])).is_error
        assert hook.runs() == ["oauth:crm/read", "scraper-api-key"]

    failed = [line for line in log.read_text().splitlines() if "scraper-api-key not revoked" in line]
    assert len(failed) == 1 and "exit status 3" in failed[0], log.read_text()
    assert "***" in failed[0] and SECRET not in log.read_text()

    shown = inspect_text(db, A, capsys)
    assert "credential oauth:crm/read: revoked" in shown
    assert "credential scraper-api-key: not revoked (last attempt failed)" in shown
    assert inspect_json(db, A, capsys)["revocations"] == {
        "oauth:crm/read": True,
        "scraper-api-key": False,
    }
    assert inspect_json(db, store_id("agent-b"), capsys)["revocations"] == {}  # b adopted, a archived

    # Still failing: the retry runs the hook again for that reference only, and says so.
    argv = ["admin", str(db), "revoke", "--retry", "--session", A, "--config", str(config)]
    assert main(argv) == 1
    assert "scraper-api-key: failed" in capsys.readouterr().out
    hook.fail()
    assert main(argv) == 0
    assert "scraper-api-key: revoked" in capsys.readouterr().out
    assert hook.runs() == ["oauth:crm/read", "scraper-api-key", "scraper-api-key", "scraper-api-key"]
    assert "credential scraper-api-key: revoked" in inspect_text(db, A, capsys)
    assert main(argv) == 0  # nothing left to retry
    assert "nothing to revoke" in capsys.readouterr().out

    with anyio.fail_after(TEST):
        async with restarted(hook, db) as gw, agent(gw, "legacy", "agent-a") as a:
            assert data(await a.call("check_chain", {"sequence": CHAIN}))["safe"] is False
    assert len(hook.runs()) == 4
    with SQLiteStore(db) as store:
        assert Session(store, session_id=A).revocations() == {
            "oauth:crm/read": True,
            "scraper-api-key": True,
        }


# -- the command itself --------------------------------------------------------------------


def test_the_reference_replaces_each_placeholder_or_is_appended() -> None:
    assert hook_argv(["revoke", "--ref={ref}", "{ref}"], "vault:kv/a#b") == [
        "revoke",
        "--ref=vault:kv/a#b",
        "vault:kv/a#b",
    ]
    assert hook_argv(["revoke", "--now"], "key-1") == ["revoke", "--now", "key-1"]


@pytest.mark.slow
def test_a_hook_that_outlives_its_timeout_fails_and_leaves_no_process_behind(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The hook's own child is a fork: no second interpreter to wait for before the timeout.
    script = (
        "import os, time\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        f"open({str(pids)!r}, 'w').write(str(child))\n"
        "time.sleep(120)\n"
    )
    # Long enough for one interpreter to start and fork on a loaded machine, far below the sleeps.
    revoke = command_revoker([sys.executable, "-c", script, "{ref}"], timeout=scaled(5))
    started = time.monotonic()
    assert revoke("key-1") is False
    assert time.monotonic() - started < 100
    assert pids.exists(), "the hook was killed before it started its child: raise the timeout"
    grandchild = int(pids.read_text())
    # The whole group was sent SIGKILL; on a loaded machine the kernel may take a moment to
    # deliver it, so the grandchild is given a bounded while to be gone.
    assert _gone_within(grandchild, STEP), "the hook's own child outlived the timeout"


def _gone_within(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exits within ``timeout`` seconds; killed but not yet reaped counts as gone.

    A pidfd turns readable when its process exits (a zombie has), so nothing polls.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    return bool(readable)


def test_a_failed_run_logs_its_status_and_scrubbed_output_a_success_logs_no_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = "import sys; print('token s3cr3t-t0ken-x for', sys.argv[1]); sys.exit(sys.argv[1] == 'bad')"
    revoke = command_revoker(
        [sys.executable, "-c", script], timeout=60, redact=lambda s: s.replace("s3cr3t-t0ken-x", "***")
    )
    with caplog.at_level(logging.INFO, logger="residency"):
        assert revoke("good") is True
        assert revoke("bad") is False
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "revocation hook: good revoked"
    assert lines[1].startswith("revocation hook: bad not revoked (exit status 1); output: token *** for bad")
    unredacted = command_revoker([sys.executable, "-c", script], timeout=60)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="residency"):
        assert unredacted("bad") is False
    assert "s3cr3t" not in caplog.text and "output" not in caplog.text  # no scrubber: not shown


def test_a_missing_program_is_a_failed_revocation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="residency"):
        assert command_revoker([str(tmp_path / "nope")], timeout=5)("key-1") is False
    assert "cannot start" in caplog.text


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("revoke {ref}", "expected a list"),
        (["", "{ref}"], "the program first"),
        (["{ref}"], "cannot be {ref}"),
        (["revoke", 7], "expected a string"),
        (["revoke", "a\u0000b"], "NUL"),
    ],
)
def test_a_bad_revoke_command_is_a_config_error_naming_the_key(command: object, expected: str) -> None:
    text = json.dumps({"mcpServers": {}, "residency": {"revoke_command": command}}, indent=1)
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gateway.json")
    assert caught.value.where is not None and caught.value.where.startswith("residency.revoke_command")
    assert expected in str(caught.value)


def test_no_revoke_command_means_no_hook_and_a_timeout_out_of_range_is_refused() -> None:
    assert parse_config(json.dumps({"mcpServers": {}})).residency.revoker() is None
    with pytest.raises(ConfigError) as caught:
        parse_config(json.dumps({"mcpServers": {}, "residency": {"revoke_timeout": 0}}))
    assert caught.value.where == "residency.revoke_timeout"


# -- a slow hook does not stall the gateway ------------------------------------------------------

# The hook tells the test it runs, then waits for the test's "go": over a socket, so neither side
# polls. It gives up after a while of its own, far above the test's bounds.
WAITING_HOOK = """\
import socket, sys

ref, port = sys.argv[1], int(sys.argv[2])
try:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as test:
        test.sendall(ref.encode())
        test.shutdown(socket.SHUT_WR)
        go = test.recv(2) == b"go"
except OSError:
    go = False
sys.exit(0 if go else 4)
"""


@pytest.mark.anyio
async def test_other_clients_are_served_while_the_hook_runs(tmp_path: Path) -> None:
    # The gateway runs in process, on this event loop: a hook run on the loop would stall it,
    # the bystander included, until the hook gave up (and the revocation would then fail).
    script = tmp_path / "wait.py"
    script.write_text(WAITING_HOOK)
    running_hook: list[str] = []
    hook_runs, go = anyio.Event(), anyio.Event()

    async def hook_connected(stream: SocketStream) -> None:
        async with stream:
            running_hook.append(b"".join([chunk async for chunk in stream]).decode())
            hook_runs.set()
            await go.wait()
            await stream.send(b"go")

    answered: dict[str, Any] = {}
    with anyio.fail_after(START):
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
            anyio.create_task_group() as hooks,
        ):
            hooks.start_soon(listener.serve, hook_connected)
            port = listener.extra(SocketAttribute.local_port)
            residency = {
                "budget": {"schema_tokens": 20_000},
                "revoke_command": [sys.executable, str(script), "{ref}", str(port)],
                "revoke_timeout": 120,
            }
            with SQLiteStore(tmp_path / "r.db") as store:
                async with (
                    running(residency, desk=IncidentDesk(), store=store) as gw,
                    agent(gw, "modern", "archiver") as a,
                    agent(gw, "modern", "bystander") as b,
                ):
                    for name, arguments in zip(CHAIN, CALLS, strict=True):
                        assert not (await a.call(name, arguments)).is_error

                    async def archive_it() -> None:
                        answered["archive"] = data(
                            await a.call(
                                "archive_chain",
                                {
                                    "topology": CHAIN,
                                    "failure": FAILURE,
                                    "constraint": {"all": []},
                                    "credentials": ["k1"],
                                },
                            )
                        )

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(archive_it)
                        await hook_runs.wait()  # the hook is running, and waits for "go"
                        assert running_hook == ["k1"]
                        # Another client is answered meanwhile: the hook is not on the event loop.
                        with anyio.fail_after(STEP):
                            assert not (await b.call("get_incident", {"incident_id": "INC-7"})).is_error
                            assert await b.tools()
                        assert "archive" not in answered  # the archiving call still waits for its hook
                        go.set()
                    assert answered["archive"]["digest"]
            hooks.cancel_scope.cancel()
    with SQLiteStore(tmp_path / "r.db") as store:
        assert Session(store, session_id=store_id("archiver")).revocations() == {"k1": True}
