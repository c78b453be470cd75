"""Chains over MCP: an agent archives a chain through the gateway, and a successor session in
another gateway process on the same store inherits it (issue #15, parts 1 and 2).

The tests about other processes run real ``residency serve`` processes; the refusals run on a
gateway in process.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from residency import SQLiteStore
from residency._gateway import IncidentDesk
from tests._timing import READY_WAIT, STEP, TEST, UPSTREAMS_UP
from tests.gateway.conftest import agent, running

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def wait(gateways: int) -> float:
    """Seconds a process test may take: several interpreters start one after another on a loaded
    machine (``TEST``), and each of its ``gateways`` serves once its desk is up (``READY_WAIT``)."""
    return TEST + gateways * READY_WAIT


# Delivered by list, with a budget that lists every tool still in the index: what a chain
# retires (or a refused archive does not) shows in the list.
RESIDENCY = {"delivery": "list", "budget": {"schema_tokens": 20_000}}
CHAIN = ["list_services", "get_service_health", "query_metrics"]
FAILURE = "query_metrics: 500 metric store timeout for every service"
ARGS = {"service": "api", "metric": "error_rate"}


def _config(folder: Path) -> Path:
    """The desk as a stdio upstream, with a budget that lists every tool still in the index."""
    path = folder / "gateway.json"
    if not path.exists():
        desk = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]}
        residency = {**UPSTREAMS_UP, **RESIDENCY}  # serving once the desk is up
        path.write_text(json.dumps({"mcpServers": {"desk": desk}, "residency": residency}))
    return path


@asynccontextmanager
async def gateway(db: Path, key: str, log: Path) -> AsyncIterator[Client]:
    config = _config(db.parent)
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "residency",
            "serve",
            "--config",
            str(config),
            "--store",
            f"sqlite:///{db}",
            "--session",
            key,
        ],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    with log.open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return dict(result.structured_content)


async def names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def refusal(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """The reason a call is refused with (an error result or a protocol error)."""
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as exc:
        return str((exc.data or {}).get("reason"))
    assert result.is_error, f"{name} was not refused: {result}"
    return str((result.meta or {}).get("residency/error", {}).get("reason"))


async def successor_is_protected(db: Path, key: str, log: Path, digest: str) -> None:
    async with gateway(db, key, log) as b:
        listed = await names(b)
        assert {"archive_chain", "check_chain"} <= listed
        assert "read_span" not in listed  # this gateway does not offload results
        assert not {"list_services", "get_service_health"} & listed  # retired prefix tools
        assert "query_metrics" in listed
        assert await refusal(b, "list_services", {}) == "tool_archived"
        verdict = data(await b.call_tool("check_chain", {"sequence": CHAIN, "arguments": [{}, {}, ARGS]}))
        assert verdict["safe"] is False
        assert verdict["expected_failure"] == FAILURE
        chains = await b.read_resource("residency://chains")
        text = chains.contents[0].text  # type: ignore[union-attr]
        assert [c["digest"] for c in json.loads(text)] == [digest]


@pytest.mark.slow
async def test_a_chain_archived_over_mcp_protects_a_successor_in_another_process(tmp_path: Path) -> None:
    db, log = tmp_path / "shared.db", tmp_path / "gateways.log"
    with anyio.fail_after(wait(4)):
        async with gateway(db, "agent-a", log) as a:
            # With nothing archived check_chain could only say "safe": it is not listed yet (the
            # gateway still answers it).
            assert "check_chain" not in await names(a)
            for name, arguments in zip(CHAIN, [{}, {"service": "api"}, ARGS], strict=True):
                assert not (await a.call_tool(name, arguments)).is_error
            assert data(await a.call_tool("check_chain", {"sequence": CHAIN}))["safe"] is True
            archived = data(
                await a.call_tool(
                    "archive_chain",
                    {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "credentials": []},
                )
            )
            digest = archived["digest"]
            # a used both prefix tools only inside the failed run: they leave its list too.
            assert archived["retired"] == ["list_services", "get_service_health"]
            listed = await names(a)
            assert not {"list_services", "get_service_health"} & listed
            assert "check_chain" in listed
        await successor_is_protected(db, "agent-b", log, digest)
        # Both restarted: the same holds, from the journal and the scope.
        await successor_is_protected(db, "agent-b", log, digest)
        await successor_is_protected(db, "agent-c", log, digest)
    with SQLiteStore(db) as store:
        assert [r["digest"] for _, r in store.archived_chains("default")] == [digest]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (
            {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "deterministic": False},
            "deterministic",
        ),
        ({"topology": ["list_services", "nope"], "failure": FAILURE, "constraint": {"all": []}}, "topology"),
        ({"topology": CHAIN, "failure": FAILURE, "constraint": {"bogus": 1}}, "constraint"),
        ({"topology": CHAIN, "failure": FAILURE, "constraint": []}, "constraint"),
        ({"topology": CHAIN, "failure": "", "constraint": {"all": []}}, "failure"),
        ({"topology": CHAIN[:1], "failure": FAILURE, "constraint": {"all": []}}, "topology"),
        (
            {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "credentials": "k"},
            "credentials",
        ),
    ],
)
async def test_a_bad_archive_request_is_refused_naming_the_field_and_archives_nothing(
    tmp_path: Path, arguments: dict[str, Any], field: str
) -> None:
    db = tmp_path / "r.db"
    store = SQLiteStore(db)
    try:
        with anyio.fail_after(STEP):  # in process: a handful of requests
            async with (
                running(RESIDENCY, desk=IncidentDesk(), store=store) as gw,
                agent(gw, "legacy", "agent") as a,
            ):
                result = await a.call("archive_chain", arguments)
                assert result.is_error
                error = data(result)["error"]
                assert error["path"].startswith(f"$.{field}"), error
                assert {"list_services", "get_service_health"} <= set(await a.names())
                assert json.loads(await a.read("residency://chains")) == []
    finally:
        store.close()
    with SQLiteStore(db) as store:
        assert store.archived_chains("default") == []


@pytest.mark.slow
async def test_two_gateways_archiving_different_chains_at_once_agree_on_the_archive(tmp_path: Path) -> None:
    db, log = tmp_path / "shared.db", tmp_path / "gateways.log"
    chains = {
        "agent-a": {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}},
        "agent-b": {
            "topology": ["list_incidents", "get_timeline"],
            "failure": "404",
            "constraint": {"all": []},
        },
    }
    digests: dict[str, str] = {}
    with anyio.fail_after(wait(2)):
        async with gateway(db, "agent-a", log) as a, gateway(db, "agent-b", log) as b:
            clients = {"agent-a": a, "agent-b": b}

            async def archive(key: str) -> None:
                digests[key] = data(await clients[key].call_tool("archive_chain", chains[key]))["digest"]

            async with anyio.create_task_group() as tg:
                for key in clients:
                    tg.start_soon(archive, key)
            seen = [data(await c.call_tool("check_chain", {"sequence": ["echo"]})) for c in clients.values()]
            assert seen[0]["archive_digest"] == seen[1]["archive_digest"]
            for client in clients.values():
                listed = json.loads((await client.read_resource("residency://chains")).contents[0].text)  # type: ignore[union-attr]
                assert sorted(c["digest"] for c in listed) == sorted(digests.values())
    with SQLiteStore(db) as store:
        assert sorted(r["digest"] for _, r in store.archived_chains("default")) == sorted(digests.values())
