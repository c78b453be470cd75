"""An upstream's start (connect, initialize, first tools/list) is bounded by ``startup_timeout``,
never by the per-call timeout: a restart slower than one call may take still succeeds."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests._timing import scaled
from tests.gateway import flaky_upstream
from tests.gateway.conftest import agent, reason, running, text

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 0.5
RESTART_DELAY = 4 * CALL_TIMEOUT
# The first start is quick; every later start sleeps RESTART_DELAY before it serves.
SLOW_RESTARTS = """
import os, runpy, sys, time
marker, delay, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if os.path.exists(marker):
    time.sleep(delay)
else:
    open(marker, "w").close()
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
"""


@pytest.mark.slow
async def test_a_restart_slower_than_the_call_timeout_is_given_the_startup_timeout(tmp_path: Path) -> None:
    slow = {
        "command": sys.executable,
        "args": ["-c", SLOW_RESTARTS, str(tmp_path / "started"), str(RESTART_DELAY), flaky_upstream.__file__],
        "timeout": CALL_TIMEOUT,
    }
    settings = {"startup_timeout": 120, "ready_wait": 120}
    async with running(settings, servers={"slow": slow}) as gw, agent(gw, "legacy") as a:
        first = await a.use("echo", {"text": "one"})
        assert text(first).startswith("one (pid ")
        crashed = await a.use("crash", {})
        assert reason(crashed) == "upstream_failure"
        with anyio.fail_after(scaled(120)):  # generous: the product's own timeouts are what is tested
            again = await a.use("echo", {"text": "two"})
        assert not again.is_error, text(again)
        assert text(again).split("pid ")[1] != text(first).split("pid ")[1]
        assert gw.upstreams["slow"].starts == 2
        assert gw.upstreams["slow"].timeout == CALL_TIMEOUT
