"""Seed 000 over MCP, in both protocol eras: the demoted mutation tool is tombstoned, never a ghost."""

from __future__ import annotations

import json

import anyio
import mcp_types as types
import pytest

from residency import ToolState
from residency._gateway import IncidentDesk
from residency._gateway._demo import SCENARIO_READS
from residency._gateway._meta_tools import listed_meta_tools
from tests._timing import NOTICE
from tests.gateway.conftest import agent, reason, running, text

META_TOOLS = listed_meta_tools(chains=False, offload=False)  # a fresh session: no chain yet, no offloading

# Seed 000 is a scenario of delivery by list: the schema budget demotes a listed tool, and the
# list (and its list_changed notices) follows. By reference the list stays fixed (``_delivery``).
SEED_000 = {"delivery": "list", "budget": {"schema_tokens": 700}, "minify": "compact"}


def text_blocks(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


pytestmark = pytest.mark.anyio

UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
REBUILT = {"incident_id": "INC-7", "severity": "SEV-1", "assignee": {"id": "u-42"}}


async def test_a_demoted_mutation_tool_is_refused_with_its_tombstone_until_reexpanded(era: str) -> None:
    desk = IncidentDesk()
    async with running(SEED_000, desk=desk) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        assert not (await a.use("update_incident", UPDATE)).is_error
        assert desk.incidents["INC-7"].severity == "SEV-2"

        # Read-only work until the tools used pass the schema budget's margin (1.5 x 700) and
        # one cut demotes update_incident, the least recently used.
        for name, arguments in SCENARIO_READS:
            read = await a.use(name, arguments)
            assert not read.is_error
            if session.state("update_incident") is not ToolState.RESIDENT:
                break
        assert session.state("update_incident") is ToolState.TOMBSTONED
        assert session.arguments_resident("update_incident")

        # The tombstone reaches the model in the result of the call that created it, and in the
        # resource; the tool list loses the tool and nothing else changes in it.
        tools = {t.name: t for t in await a.tools()}
        assert "update_incident" not in tools
        withheld = await a.read("residency://tombstones")
        assert text_blocks(read)[-1] == f"Withheld now:\n{withheld}"
        assert "update_incident" not in (tools["reexpand_tools"].description or "")
        [tombstones] = [line for line in withheld.splitlines() if line.startswith("update_incident:")]

        # "Bump to SEV-1 and re-notify", rebuilt from the visible arguments: refused, not forwarded.
        calls_before = list(desk.calls)
        refused = await a.call("update_incident", REBUILT)
        assert refused.is_error
        assert reason(refused) == "tool_not_resident"
        assert text(refused) == tombstones
        assert desk.calls == calls_before
        assert desk.incidents["INC-7"].severity == "SEV-2"

        # The model asks for the schema back and gets it in the result itself.
        a.list_changed = anyio.Event()
        expanded = await a.call("reexpand_tools", {"names": ["update_incident"]})
        assert not expanded.is_error
        definitions = (expanded.structured_content or {})["tools"]
        assert definitions[0]["inputSchema"]["required"] == ["incident_id", "notify"]
        assert "update_incident" in text(expanded)
        if not a.modern:
            with anyio.fail_after(NOTICE):
                await a.list_changed.wait()
            assert "update_incident" in await a.names()

        # Its rebuilt call now fails validation naming the missing field, still not forwarded.
        invalid = await a.call("update_incident", REBUILT)
        assert reason(invalid) == "arguments_invalid"
        assert (invalid.meta or {})["residency/error"]["path"] == "$.notify"
        assert desk.calls == calls_before

        done = await a.call("update_incident", {**REBUILT, "notify": True})
        assert not done.is_error
        assert json.loads(text(done))["severity"] == "SEV-1"
        assert desk.incidents["INC-7"].severity == "SEV-1"
        assert [n for n, _ in desk.calls].count("create_incident") == 0
        kinds = [e["kind"] for e in json.loads(await a.read("residency://events"))]
        assert "reexpanded" in kinds and "refused" in kinds and "tombstoned" in kinds


async def test_an_upstream_schema_migration_tombstones_a_tool_with_visible_arguments(era: str) -> None:
    desk = IncidentDesk(schema="v1")
    # By list: update_incident is listed, so the migration changes the list and the client hears it.
    async with running({"delivery": "list"}, desk=desk) as gw, agent(gw, era) as a:
        session = gw.session(a.key)
        old = {"incident_id": "INC-7", "severity": "SEV-2", "assignee_id": "u-42", "notify": True}
        assert not (await a.use("update_incident", old)).is_error
        before = session.tool("update_incident").hash

        a.list_changed = anyio.Event()
        await desk.migrate()
        if a.modern:
            await gw.reload("desk")
        else:
            # The desk's list_changed makes the gateway reload, and the gateway tells us.
            with anyio.fail_after(NOTICE):
                await a.list_changed.wait()
        assert session.tool("update_incident").hash != before

        assert session.state("update_incident") is ToolState.TOMBSTONED
        refused = await a.call("update_incident", {**old, "severity": "SEV-1"})
        assert reason(refused) == "tool_not_resident"
        assert [n for n, _ in desk.calls] == ["update_incident"]

        expanded = await a.call("reexpand_tools", {"names": ["update_incident"]})
        schema = (expanded.structured_content or {})["tools"][0]["inputSchema"]
        assert schema["properties"]["assignee"]["type"] == "object"
        stale = await a.call("update_incident", {**old, "severity": "SEV-1"})
        assert reason(stale) == "arguments_invalid"
        fixed = {"incident_id": "INC-7", "severity": "SEV-1", "assignee": {"id": "u-42"}, "notify": True}
        assert not (await a.call("update_incident", fixed)).is_error
        assert desk.incidents["INC-7"].assignee == {"id": "u-42"}


async def test_the_meta_tools_are_listed_the_same_before_and_after_tools_are_withheld(era: str) -> None:
    async with running(SEED_000, desk=IncidentDesk()) as gw, agent(gw, era) as a:
        session = gw.session(a.key)

        async def meta_tools() -> dict[str, dict[str, object]]:
            return {t.name: t.model_dump() for t in await a.tools() if t.name in META_TOOLS}

        first = await meta_tools()
        assert set(first) == set(META_TOOLS)
        assert not (await a.use("update_incident", UPDATE)).is_error
        for name, arguments in SCENARIO_READS:
            assert not (await a.use(name, arguments)).is_error
            assert await meta_tools() == first
        assert session.tombstones()  # the reads pushed tools out: tombstones, and still the same
        # The notice was given once, with the call that created the tombstones; later results
        # carry none.
        later = await a.use("get_incident", {"incident_id": "INC-7"})
        assert not any(block.startswith("Withheld now:") for block in text_blocks(later))
        assert await meta_tools() == first
