"""Upstream failures: a crash or a hang gives the agent a clear error and the gateway keeps serving."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway import flaky_upstream
from tests.gateway.conftest import agent, reason, running, text

pytestmark = pytest.mark.anyio

SECRET = "sup3r-s3cret-value"
FLAKY = {
    "command": sys.executable,
    "args": [str(Path(flaky_upstream.__file__))],
    "env": {"FLAKY_SECRET": SECRET},
    "timeout": 5,
}


@pytest.mark.slow
async def test_a_crashed_subprocess_upstream_gives_an_error_and_is_restarted_on_the_next_call(
    era: str,
) -> None:
    async with running(servers={"flaky": FLAKY}) as gw, agent(gw, era) as a:
        first = await a.use("echo", {"text": "one"})
        assert text(first).startswith("one (pid ")
        crashed = await a.use("crash", {})
        assert crashed.is_error and reason(crashed) == "upstream_failure"
        assert "flaky" in text(crashed)
        with anyio.fail_after(20):
            again = await a.use("echo", {"text": "two"})
        assert text(again).startswith("two (pid ")
        assert text(again).split("pid ")[1] != text(first).split("pid ")[1]
        assert gw.upstreams["flaky"].starts == 2


async def test_a_hanging_upstream_call_times_out_and_the_gateway_keeps_serving(era: str) -> None:
    async with running(upstreams={"flaky": flaky_upstream.build()}, timeout=0.5) as gw, agent(gw, era) as a:
        with anyio.fail_after(10):
            hung = await a.use("hang", {})
        assert reason(hung) == "upstream_failure"
        assert (hung.meta or {})["residency/error"]["timed_out"] is True
        assert text(await a.use("echo", {"text": "still here"})).startswith("still here")


@pytest.mark.slow
async def test_upstream_secrets_never_reach_results_resources_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    broken = {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.exit(7)"],
        "env": {"API_TOKEN": SECRET},
    }
    async with running(servers={"flaky": FLAKY, "broken": broken}) as gw, agent(gw, "legacy") as a:
        leaked = await a.use("leak", {})
        assert leaked.is_error
        assert SECRET not in leaked.model_dump_json()
        assert "***" in text(leaked)
        seen: list[Any] = [
            await a.read(uri) for uri in ("residency://tools", "residency://events", "residency://tombstones")
        ]
        seen.append((await a.client.list_tools(meta=a.meta)).model_dump_json())
        assert all(SECRET not in str(s) for s in seen)
        assert "broken" not in gw.catalog.servers()  # it never started; the gateway serves the rest
    assert SECRET not in caplog.text
    assert "broken" in caplog.text
