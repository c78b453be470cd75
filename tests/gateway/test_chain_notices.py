"""A chain archived by one session of a gateway reaches the others it holds at once: they adopt
it, and a client whose list moved hears ``tools/list_changed``."""

from __future__ import annotations

import anyio
import pytest

from residency._gateway import IncidentDesk
from tests._timing import NOTICE
from tests.gateway.conftest import Agent, agent, running

pytestmark = pytest.mark.anyio

CHAIN = ["list_services", "get_service_health", "query_metrics"]
FAILURE = "query_metrics: 500 metric store timeout for every service"
ARCHIVE = {"topology": CHAIN, "failure": FAILURE, "constraint": {"all": []}, "credentials": []}


async def archive_and_hear(a: Agent, b: Agent) -> None:
    """``a`` makes the chain's calls and archives it; ``b`` hears its list changed (bounded)."""
    steps = [{}, {"service": "api"}, {"service": "api", "metric": "error_rate"}]
    for name, arguments in zip(CHAIN, steps, strict=True):
        assert not (await a.call(name, arguments)).is_error
    b.list_changed = anyio.Event()
    assert not (await a.call("archive_chain", ARCHIVE)).is_error
    with anyio.fail_after(NOTICE):
        await b.list_changed.wait()


async def test_a_chain_archived_in_one_session_reaches_another_session_of_the_gateway() -> None:
    async with (
        # By list, with every tool listed: b's list shows the prefix tools the chain retires.
        running({"delivery": "list", "budget": {"schema_tokens": 20_000}}, desk=IncidentDesk()) as gw,
        agent(gw, "legacy", "a") as a,
        agent(gw, "legacy", "b") as b,
    ):
        assert {"list_services", "get_service_health"} <= set(await b.names())
        assert "check_chain" not in await b.names()
        await archive_and_hear(a, b)
        listed = set(await b.names())
        assert "check_chain" in listed
        assert not {"list_services", "get_service_health"} & listed  # retired in b as well
        verdict = await b.call("check_chain", {"sequence": CHAIN})
        assert verdict.structured_content is not None and verdict.structured_content["safe"] is False


@pytest.mark.parametrize("called_since_listing", [False, True], ids=["listed only", "called since"])
async def test_a_session_delivered_by_reference_hears_check_chain_join_its_list(
    called_since_listing: bool,
) -> None:
    # By reference the chain retires nothing from b's list (it shows no desk tool): check_chain
    # joining is the change, measured against the list b was served, whether or not b called since.
    async with (
        running({"budget": {"schema_tokens": 20_000}}, desk=IncidentDesk()) as gw,
        agent(gw, "legacy", "a") as a,
        agent(gw, "legacy", "b") as b,
    ):
        if called_since_listing:
            assert not (await b.call("get_incident", {"incident_id": "INC-1"})).is_error
        assert "check_chain" not in await b.names()
        await archive_and_hear(a, b)
        assert "check_chain" in await b.names()
