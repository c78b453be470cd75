"""Resource subscriptions are bounded: how many, how long a URI, and only to what the gateway serves.

A subscription is held in memory while it lasts (a connection's ``resources/subscribe`` set, a
``subscriptions/listen`` filter), so a client could otherwise grow the gateway at will (5,000
subscriptions to 10 kB URIs once cost 49 MB). Each refusal is a JSON-RPC error with its reason
and changes nothing: what was held before is held still.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import mcp_types as types
import pytest
from mcp import MCPDeprecationWarning, MCPError

from residency._gateway import IncidentDesk
from residency._gateway._config import ResidencySettings
from residency._gateway._reads import MAX_URI_CHARS
from residency._gateway._resources import CHAINS, EVENTS, SPAN_LIST, SPANS, TOMBSTONES, TOOLS, UPSTREAMS
from tests.gateway.conftest import Agent, agent, running

pytestmark = pytest.mark.anyio

LIMIT = 3
SERVED = [TOMBSTONES, TOOLS, CHAINS, EVENTS, UPSTREAMS, SPAN_LIST]


@contextmanager
def _handshake_era() -> Iterator[None]:
    """``resources/subscribe`` is the handshake era's, and the SDK's client warns of that."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


async def _subscribe(a: Agent, uri: str) -> None:
    with _handshake_era():
        await a.client.session.subscribe_resource(uri)


async def _unsubscribe(a: Agent, uri: str) -> None:
    with _handshake_era():
        await a.client.session.unsubscribe_resource(uri)


async def _refused(a: Agent, uri: str) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await _subscribe(a, uri)
    return raised.value


async def test_a_connection_holds_at_most_the_configured_subscriptions_and_a_refusal_changes_nothing() -> (
    None
):
    async with running({"max_subscriptions": LIMIT}, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        for uri in SERVED[:LIMIT]:
            await _subscribe(a, uri)
        for uri in SERVED[LIMIT:]:
            refused = await _refused(a, uri)
            assert refused.code == types.INVALID_REQUEST
            assert (refused.data or {}).get("reason") == "subscription_limit"
            assert (refused.data or {}).get("limit") == LIMIT
        for uri in SERVED[:LIMIT]:
            await _subscribe(a, uri)  # held already: subscribing again is no new subscription
        await _unsubscribe(a, SERVED[0])
        await _subscribe(a, SERVED[LIMIT])  # the freed place is there to take
        assert (await _refused(a, SERVED[0])).data["reason"] == "subscription_limit"


async def test_by_default_a_connection_holds_a_few_hundred_subscriptions() -> None:
    limit = ResidencySettings().max_subscriptions
    assert 100 <= limit <= 1000
    async with running(desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        session = gw.session(a.key)
        uris = [f"{SPANS}{session.add_span(f'result {i}').id}" for i in range(limit + 1)]
        for uri in uris[:limit]:
            await _subscribe(a, uri)
        assert (await _refused(a, uris[limit])).data["reason"] == "subscription_limit"


async def test_a_uri_over_the_length_limit_is_refused_and_takes_no_place() -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        long = f"{SPANS}{'x' * 10_000}"
        for i in range(50):
            refused = await _refused(a, f"{long}{i}")
            assert refused.code == types.INVALID_PARAMS
            assert (refused.data or {}).get("where") == "uri"
        refused = await _refused(a, SPANS + "x" * (MAX_URI_CHARS - len(SPANS) + 1))
        assert (refused.data or {}).get("reason") == "invalid_input"
        # Whatever was refused took no place: every served resource can still be subscribed to.
        for uri in SERVED:
            await _subscribe(a, uri)


async def test_a_subscription_to_a_resource_the_gateway_does_not_serve_is_refused_as_not_found() -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
        span = gw.session(a.key).add_span("db-3 is read-only until the migration ends", tags=["constraint"])
        await _subscribe(a, f"{SPANS}{span.id}")
        for uri in ("file:///etc/passwd", "residency://nothing", f"{SPANS}s999", SPANS):
            refused = await _refused(a, uri)
            assert refused.code == types.INVALID_PARAMS
            assert (refused.data or {}).get("reason") == "not_found"


async def test_a_listen_filter_is_bounded_by_the_same_rules() -> None:
    async with (
        running({"max_subscriptions": LIMIT}, desk=IncidentDesk()) as gw,
        agent(gw, "modern") as a,
    ):
        assert a.modern
        async with a.client.listen(resource_subscriptions=SERVED[:LIMIT]) as held:
            assert list(held.honored.resource_subscriptions or ()) == SERVED[:LIMIT]
        for uris, reason in (
            (SERVED[: LIMIT + 1], "subscription_limit"),
            ([TOMBSTONES, "residency://nothing"], "not_found"),
            ([TOMBSTONES, TOMBSTONES + "?" + "x" * MAX_URI_CHARS], "invalid_input"),
        ):
            with pytest.raises(MCPError) as raised:
                async with a.client.listen(resource_subscriptions=uris):
                    pass
            assert (raised.value.data or {}).get("reason") == reason
