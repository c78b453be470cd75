"""A chain archived by one session of a gateway reaches the others it holds at once: they adopt
it, and a client whose list moved hears ``tools/list_changed`` (issue #15, part 1)."""

from __future__ import annotations

import anyio
import pytest

from residency._gateway import IncidentDesk
from tests._timing import NOTICE
from tests.gateway.conftest import agent, running

pytestmark = pytest.mark.anyio

CHAIN = ["list_services", "get_service_health", "query_metrics"]
FAILURE = "query_metrics: 500 metric store timeout for every service"
ARCHIVE = {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "credentials": []}


async def test_a_chain_archived_in_one_session_reaches_another_session_of_the_gateway() -> None:
    async with (
        running({"budget": {"schema_tokens": 20_000}}, desk=IncidentDesk()) as gw,
        agent(gw, "legacy", "a") as a,
        agent(gw, "legacy", "b") as b,
    ):
        assert {"list_services", "get_service_health"} <= set(await b.names())
        assert "check_chain" not in await b.names()
        steps = [{}, {"service": "api"}, {"service": "api", "metric": "error_rate"}]
        for name, arguments in zip(CHAIN, steps, strict=True):
            assert not (await a.call(name, arguments)).is_error
        b.list_changed = anyio.Event()
        assert not (await a.call("archive_chain", ARCHIVE)).is_error
        with anyio.fail_after(NOTICE):
            await b.list_changed.wait()
        listed = set(await b.names())
        assert "check_chain" in listed
        assert not {"list_services", "get_service_health"} & listed  # retired in b as well
        verdict = await b.call("check_chain", {"sequence": CHAIN})
        assert verdict.structured_content is not None and verdict.structured_content["safe"] is False
