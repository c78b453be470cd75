"""``residency serve`` with no config: the first list a client gets, and what the ready lines say.

The demo desk is served by reference with a read-only working set pinned: a client's first list
shows those desk tools beside the meta-tools, and the rest of the desk (every tool that changes
it) is found by ``search_tools`` and called through ``call_tool``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency._cli import build_parser
from residency._gateway._run import DEMO_WORKING_SET, ServeOptions, build_gateway, startup_summary
from residency.demo import desk_tools
from tests._timing import START, STEP

pytestmark = pytest.mark.embeddings  # a newcomer's first run: search as it comes

ROOT = Path(__file__).resolve().parents[2]
META_TOOLS = {"search_tools", "reexpand_tools", "call_tool", "archive_chain"}
DESK = {str(t["name"]): t for t in desk_tools()}
READ_ONLY = {name for name, t in DESK.items() if t["annotations"]["readOnlyHint"]}


def _options(*argv: str) -> ServeOptions:
    return ServeOptions.from_args(build_parser().parse_args(["serve", *argv]), {})


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


# -- the first list, in process -----------------------------------------------------------------


@pytest.mark.anyio
async def test_with_no_config_the_first_list_shows_a_read_only_working_set_of_the_desk() -> None:
    options = _options()
    async with build_gateway(options) as gateway, Client(gateway.server) as client:
        with anyio.fail_after(STEP):
            listed = [t.name for t in (await client.list_tools()).tools]
    desk_listed = [n for n in listed if n in DESK]
    assert len(desk_listed) >= 5
    assert set(desk_listed) <= READ_ONLY  # nothing that changes the desk is listed up front
    assert set(desk_listed) == set(DEMO_WORKING_SET)
    assert set(listed) - set(desk_listed) == META_TOOLS


@pytest.mark.anyio
async def test_a_withheld_desk_tool_is_found_by_search_and_called_through_call_tool() -> None:
    async with build_gateway(_options()) as gateway, Client(gateway.server) as client:
        with anyio.fail_after(STEP):
            listed = {t.name for t in (await client.list_tools()).tools}
            assert "page_oncall" not in listed
            found = await client.call_tool("search_tools", {"query": "page the on-call team"})
            assert not found.is_error and "page_oncall" in _text(found)
            arguments = {"team": "platform", "message": "INC-7: 502s on the payment API"}
            called = await client.call_tool("call_tool", {"name": "page_oncall", "arguments": arguments})
    assert _structured(called) == {"paged": "platform", "urgency": "high"}


@pytest.mark.anyio
async def test_a_listed_desk_tool_answers_from_the_desk() -> None:
    async with build_gateway(_options()) as gateway, Client(gateway.server) as client:
        with anyio.fail_after(STEP):
            result = await client.call_tool("get_incident", {"incident_id": "INC-7"})
    assert _structured(result)["title"] == "Payment API returning 502s"


# -- the ready lines ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_ready_lines_say_what_was_found_and_how_to_stop_and_no_resume_for_memory() -> None:
    options = _options()
    async with build_gateway(options) as gateway:
        lines = startup_summary(gateway, options).splitlines()
    withheld = len(DESK) - len(DEMO_WORKING_SET)
    assert (
        f"residency: ready: {len(DESK)} tools from 1 upstream; listed {len(DEMO_WORKING_SET)} pinned + "
        f"4 meta-tools, {withheld} withheld (search_tools finds them, call_tool calls them)"
    ) in lines
    assert lines[-1].startswith("residency: ready: ")  # the last line: the client can come
    assert "residency: stop with Ctrl-C or by closing stdin" in lines
    assert not any("resume with" in line for line in lines)  # memory:// keeps nothing
    assert len(lines) <= 12  # short enough to read at a glance


@pytest.mark.anyio
async def test_a_persistent_store_says_how_to_resume_the_stdio_session(tmp_path: Path) -> None:
    options = _options("--store", f"sqlite:///{tmp_path / 'first.db'}", "--session", "desk-1")
    async with build_gateway(options) as gateway:
        lines = startup_summary(gateway, options).splitlines()
    assert "residency: session desk-1 (resume with --session desk-1)" in lines


@pytest.mark.anyio
async def test_by_list_the_ready_line_names_the_budget_that_decides_the_rest() -> None:
    options = _options("--delivery", "list")
    async with build_gateway(options) as gateway:
        lines = startup_summary(gateway, options).splitlines()
    assert (
        f"residency: ready: {len(DESK)} tools from 1 upstream; listed {len(DEMO_WORKING_SET)} pinned and "
        "what else fits schema_tokens=700, + 3 meta-tools; search_tools and reexpand_tools bring the rest"
    ) in lines


def test_over_http_the_stop_line_names_ctrl_c_only() -> None:
    options = _options("--transport", "http")
    gateway = build_gateway(options)  # not entered: the summary reads only the config and catalog
    lines = startup_summary(gateway, options, url="http://127.0.0.1:8765/mcp").splitlines()
    assert "residency: stop with Ctrl-C" in lines
    assert any(line.startswith("residency: ready: 0 tools from 0 upstreams (1 not up)") for line in lines)


# -- --demo beside a config ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_demo_serves_the_desk_in_process_under_a_configs_own_settings(tmp_path: Path) -> None:
    config = tmp_path / "gateway.json"
    config.write_text('{"mcpServers": {}, "residency": {"delivery": "list", "minify": "compact"}}')
    options = _options("--config", str(config), "--demo")
    assert options.config.residency.delivery == "list"  # the config's, not the demo's own
    async with build_gateway(options) as gateway, Client(gateway.server) as client:
        assert gateway.upstreams["desk"].kind == "in-process"
        with anyio.fail_after(STEP):
            listed = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("get_incident", {"incident_id": "INC-7"})
        lines = startup_summary(gateway, options).splitlines()
    assert "call_tool" not in listed and "get_incident" in listed  # by list, as the config says
    assert _structured(result)["title"] == "Payment API returning 502s"
    assert "residency: upstream desk (in-process, the demo incident desk): 14 tools" in lines


def test_demo_refuses_a_config_that_names_a_desk_of_its_own(tmp_path: Path) -> None:
    from residency._errors import ConfigError

    config = tmp_path / "gateway.json"
    config.write_text('{"mcpServers": {"desk": {"command": "my-desk"}}}')
    with pytest.raises(ConfigError, match="rename it or drop --demo") as caught:
        _options("--config", str(config), "--demo")
    assert caught.value.where == "--demo"
    assert not _options("--config", str(config)).demo  # without --demo the config's desk is served


# -- the process --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_real_client_of_residency_serve_with_no_config_lists_and_calls_desk_tools(
    tmp_path: Path,
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "residency", "serve"], env=dict(os.environ), cwd=str(tmp_path)
    )
    errlog = tmp_path / "stderr"
    with errlog.open("w") as err, anyio.fail_after(START + 2 * STEP):
        async with Client(stdio_client(params, errlog=err)) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("list_incidents", {"status": "open"})
    assert len([n for n in listed if n in DESK]) >= 5
    incidents = _structured(result)["incidents"]
    assert {i["incident_id"] for i in incidents} == {"INC-1", "INC-2", "INC-7"}
    stderr = errlog.read_text()
    assert "residency: ready: 14 tools from 1 upstream" in stderr
    assert "resume with" not in stderr


@pytest.mark.slow
@pytest.mark.anyio
async def test_python_m_residency_demo_serves_the_desk_on_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "residency.demo", "--schema", "v1"], cwd=str(tmp_path)
    )
    with anyio.fail_after(START + STEP):
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            result = await client.call_tool("get_timeline", {"incident_id": "INC-7"})
    assert set(tools) == set(DESK)
    assert "assignee_id" in tools["update_incident"].input_schema["properties"]  # the v1 schema
    assert _structured(result)["timeline"] == ["opened: Payment API returning 502s"]
