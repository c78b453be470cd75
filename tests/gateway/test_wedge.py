"""Upstreams that misbehave on the wire: none wedges the gateway, and none is left behind.

A line that is not UTF-8 or is 64 MiB long drops the connection and the next call restarts
it; a storm of ``tools/list_changed`` costs a few relists; an upstream whose first start fails
is tried again; its stderr is relayed redacted; an HTTP gateway stopped by SIGTERM leaves no
upstream process. All against the real stdio upstream ``rugpull_upstream.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from residency._gateway import IncidentDesk
from tests._timing import SERVING, START, STEP, TEST, UPSTREAMS_UP
from tests.gateway.conftest import agent, reason, text
from tests.gateway.test_rugpull import Rug, gateway
from tests.gateway.test_serve_cli import needs_proc, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "sup3r-s3cret-relay-7f3a9c"


def pid_of(result: Any) -> int:
    found = re.search(r"\(pid (\d+)\)", text(result))
    assert found is not None, text(result)
    return int(found.group(1))


@pytest.mark.parametrize(("tool", "arguments"), [("garbage", {}), ("huge", {"mb": 64})])
async def test_a_line_that_is_not_utf8_or_too_long_drops_the_connection_and_the_next_call_restarts_it(
    tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    rug = Rug(tmp_path)
    with anyio.fail_after(TEST):
        async with gateway(rug) as gw, agent(gw, "legacy") as a:
            first = await a.call("lookup", {"key": "a"})
            bad = await a.call(tool, arguments)
            assert reason(bad) == "upstream_failure"
            assert (bad.meta or {})["residency/error"]["timed_out"] is False  # dropped, not waited out
            again = await a.call("lookup", {"key": "b"})
            assert not again.is_error, text(again)
            assert pid_of(again) != pid_of(first)
            assert gw.upstreams["rug"].starts == 2


async def test_a_storm_of_list_changed_costs_a_few_relists_and_stalls_no_one(tmp_path: Path) -> None:
    rug = Rug(tmp_path)
    with anyio.fail_after(TEST):
        async with (
            # The storm's call lasts until the gateway has read its 2,000 notifications (a few
            # seconds here; on a loaded machine more than STEP): its timeout is not the subject.
            gateway(rug, upstreams={"desk": IncidentDesk().server}, timeout=START) as gw,
            agent(gw, "legacy") as a,
            agent(gw, "legacy", key="other") as b,
        ):
            upstream = gw.upstreams["rug"]
            lists = upstream.lists
            served_to_b = 0
            storming = True

            async def other_session() -> None:
                nonlocal served_to_b
                while storming:
                    with anyio.fail_after(STEP):
                        assert not (await b.call("get_incident", {"incident_id": "INC-1"})).is_error
                    served_to_b += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(other_session)
                assert not (await a.call("storm", {"count": 2000})).is_error
                # A call after the storm waits for a relist still in flight, or makes one.
                assert not (await a.call("lookup", {"key": "a"})).is_error
                storming = False
            assert served_to_b >= 1
            assert upstream.lists - lists <= 8, f"{upstream.lists - lists} relists for 2000 notifications"


async def test_an_upstream_whose_first_start_fails_is_tried_again_and_its_tools_announced(
    tmp_path: Path,
) -> None:
    rug = Rug(tmp_path)
    marker = tmp_path / "failed-once"
    with anyio.fail_after(TEST):
        async with gateway(rug, env={"RUGPULL_FAIL_FIRST": str(marker)}) as gw, agent(gw, "legacy") as a:
            # The first start may still be under way when the gateway serves (a loaded machine
            # starts Python slowly): its tools are announced whenever they come.
            if "lookup" not in await a.names():
                await a.list_changed.wait()
            assert "lookup" in await a.names()
            assert not (await a.call("lookup", {"key": "a"})).is_error
            assert marker.exists()  # the first start did fail
            assert gw.upstreams["rug"].starts >= 2


async def test_upstream_stderr_is_relayed_with_secrets_redacted(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    rug = Rug(tmp_path)
    relayed = ""
    with anyio.fail_after(START + STEP):  # the rug starting (the gateway waits for it), one call
        async with gateway(rug, env={"RUGPULL_SECRET": SECRET}) as gw, agent(gw, "legacy") as a:
            assert not (await a.call("shout")).is_error
            while "upstream says: token" not in relayed:  # stderr and stdout are separate pipes
                relayed += capfd.readouterr().err
                await anyio.sleep(0.05)
    relayed += capfd.readouterr().err
    assert SECRET not in relayed
    assert "upstream says: token ***" in relayed


@needs_proc
async def test_an_http_gateway_stopped_by_sigterm_leaves_no_upstream_process(tmp_path: Path) -> None:
    rug = Rug(tmp_path)
    cfg = tmp_path / "gateway.json"
    cfg.write_text(json.dumps({"mcpServers": {"rug": rug.server()}, "residency": UPSTREAMS_UP}))
    async with served("--transport", "http", "--port", "0", "--config", str(cfg)) as gw:
        with anyio.fail_after(SERVING):  # it serves once the rug is up
            await gw.serving.wait()
        found = re.search(rb"serving MCP at (\S+)", gw.stderr)
        assert found is not None
        pids: set[int] = set(gw.children())
        with anyio.fail_after(START + STEP):  # three calls, one of them restarting the rug
            async with Client(found.group(1).decode(), mode="legacy") as client:
                first = await client.call_tool("lookup", {"key": "a"})
                await client.call_tool("crash", {})  # the restarted process must go too
                again = await client.call_tool("lookup", {"key": "b"})
        pids |= {pid_of(first), pid_of(again)}
        assert len(pids) == 2
        gw.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(STEP):
            code = await gw.process.wait()
        assert code == 143, gw.stderr.decode(errors="replace")
        for pid in pids:  # stopped and reaped by the gateway before it exited
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
