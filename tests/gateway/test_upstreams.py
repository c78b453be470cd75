"""Upstream failures: a crash or a hang gives the agent a clear error and the gateway keeps serving."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server

from residency._gateway import IncidentDesk, desk_tools
from tests._timing import NOTICE, START, STEP
from tests.gateway import flaky_upstream
from tests.gateway.conftest import agent, reason, running, text

pytestmark = pytest.mark.anyio

SECRET = "sup3r-s3cret-value"
FLAKY = {
    "command": sys.executable,
    "args": [str(Path(flaky_upstream.__file__))],
    "env": {"FLAKY_SECRET": SECRET},
    "timeout": STEP,  # the upstream's call timeout: no test here waits it out
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
        with anyio.fail_after(STEP):
            again = await a.use("echo", {"text": "two"})
        assert text(again).startswith("two (pid ")
        assert text(again).split("pid ")[1] != text(first).split("pid ")[1]
        assert gw.upstreams["flaky"].starts == 2


async def test_a_hanging_upstream_call_times_out_and_the_gateway_keeps_serving(era: str) -> None:
    async with running(upstreams={"flaky": flaky_upstream.build()}, timeout=0.5) as gw, agent(gw, era) as a:
        with anyio.fail_after(STEP):
            hung = await a.use("hang", {})
        assert reason(hung) == "upstream_failure"
        assert (hung.meta or {})["residency/error"]["timed_out"] is True
        assert text(await a.use("echo", {"text": "still here"})).startswith("still here")


@pytest.mark.slow
async def test_upstream_secrets_never_reach_results_resources_or_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level("DEBUG")
    # ``broken``'s env makes SECRET a configured upstream secret; ``leak`` quotes it from the
    # environment it runs in (this process's: the upstream is in-process, the subject is what the
    # gateway lets out, not how the value reached the upstream).
    monkeypatch.setenv("FLAKY_SECRET", SECRET)
    broken = {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.exit(7)"],
        "env": {"API_TOKEN": SECRET},
    }
    async with (
        running(upstreams={"flaky": flaky_upstream.build()}, servers={"broken": broken}) as gw,
        agent(gw, "legacy") as a,
    ):
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


def listing_when(gate: anyio.Event, tools: list[dict[str, Any]]) -> Server[Any]:
    """An upstream whose start (its first ``tools/list``) completes only once ``gate`` is set."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        await gate.wait()
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])

    return Server("gated", on_list_tools=list_tools)


async def test_a_hung_upstream_holds_up_neither_the_list_nor_the_others_and_says_it_is_down(
    era: str,
) -> None:
    hung = listing_when(anyio.Event(), [])  # never set: its start never completes
    # get_incident is pinned: by reference (the default) the list shows the pinned tools only.
    settings = {"ready_wait": 0.5, "startup_timeout": 4 * START, "pinned": ["get_incident"]}
    with anyio.fail_after(START):  # far below the hung upstream's startup timeout
        async with (
            running(settings, desk=IncidentDesk(), upstreams={"hung": hung}) as gw,
            agent(gw, era) as a,
        ):
            assert "get_incident" in await a.names()
            assert gw.upstreams["hung"].status == "starting"
            assert not (await a.call("get_incident", {"incident_id": "INC-1"})).is_error
            # A tool no running upstream offers: the agent hears which upstream is down, not "unknown".
            down = await a.call("hung_tool", {})
            assert reason(down) == "upstream_failure"
            assert "hung" in text(down) and "still starting" in text(down)
            assert (down.meta or {})["residency/error"]["server"] == "hung"


async def test_an_upstream_that_starts_late_joins_and_its_tools_are_announced() -> None:
    ready = anyio.Event()
    # get_incident is pinned: by reference (the default) the list changes when a pinned tool
    # joins the catalog, and only then.
    settings = {"ready_wait": 0.5, "startup_timeout": 2 * START, "pinned": ["get_incident"]}
    with anyio.fail_after(2 * START):
        async with (
            running(settings, upstreams={"late": listing_when(ready, desk_tools())}) as gw,
            agent(gw, "legacy") as a,
        ):
            assert "get_incident" not in await a.names()
            assert gw.upstreams["late"].status == "starting"
            ready.set()  # its start completes after the gateway began serving without it
            with anyio.fail_after(NOTICE):
                await a.list_changed.wait()
            assert "get_incident" in await a.names()
            assert gw.upstreams["late"].status == "connected"


@pytest.mark.slow
async def test_an_upstream_that_failed_to_start_is_named_when_a_call_cannot_be_routed() -> None:
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(7)"]}
    async with running(desk=IncidentDesk(), servers={"broken": broken}) as gw, agent(gw, "legacy") as a:
        assert gw.upstreams["broken"].status == "failed"
        down = await a.call("broken_tool", {})
        assert reason(down) == "upstream_failure"
        assert "broken" in text(down)
