"""Two gateway replicas, two processes, one PostgreSQL: any replica serves any request of a session.

The tests share two ``residency serve --transport http`` processes on one PostgreSQL schema (dropped
afterwards); each drives a session of its own key through a real ``mcp.Client`` per replica in the
2026-07-28 era, both naming the session with the same ``Residency-Session`` header. The chain test
starts two of its own on a schema of its own: an archived chain reaches every session of its scope.
Without ``RESIDENCY_PG_URL`` the tests skip, or fail when ``CI`` is set.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from residency import Budget, Session
from residency._gateway import Gateway, IncidentDesk, parse_config
from residency._gateway._demo import SCENARIO_READS
from residency._gateway._meta_tools import REEXPAND_TOOLS, listed_meta_tools
from residency._gateway._resources import CHAINS, EVENTS, TOMBSTONES, TOOLS, read_resource
from residency._gateway._run import DEMO_CONFIG
from residency._gateway._server import CALL_META_KEY
from residency._store import open_store
from residency._store._protocol import Store
from residency._store._sqlite import SQLiteStore
from tests._timing import START, scaled
from tests.clients._serve import Shared, http_serve, serve_shared
from tests.gateway.conftest import reason, text
from tests.incident_tools import incident_tools
from tests.postgres import drop_schema, new_schema, pg_url, with_params

META_TOOLS = listed_meta_tools(chains=False, offload=False)  # a fresh session: no chain yet, no offloading

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
REBUILT = {"incident_id": "INC-7", "severity": "SEV-1", "assignee": {"id": "u-42"}}
RESOURCES = (TOOLS, TOMBSTONES, EVENTS, CHAINS)


class Replica:
    """One MCP client on one replica; the session is named by the ``Residency-Session`` header."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: Client
        self.list_changed = anyio.Event()  # a handshake-era tools/list_changed arrived

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.list_changed.set()

    async def names(self) -> list[str]:
        listed = await self.client.list_tools(cache_mode="refresh")
        return sorted(t.name for t in listed.tools)

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self.client.call_tool(name, arguments)

    async def read(self, uri: str) -> str:
        result = await self.client.read_resource(uri, cache_mode="refresh")
        content = result.contents[0]
        assert isinstance(content, types.TextResourceContents)
        return content.text

    async def use(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Re-expand a withheld tool, then call it (what a careful agent does)."""
        result = await self.call(name, arguments)
        if reason(result) == "tool_not_resident":
            assert not (await self.call(REEXPAND_TOOLS, {"names": [name]})).is_error
            result = await self.call(name, arguments)
        return result


@dataclass(frozen=True)
class Fleet:
    """The module's two replicas and the store URL they share."""

    url: str
    replicas: tuple[Shared, Shared]


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    """Two ``residency serve`` processes on one schema of the module's own, for every test that
    keeps to a session key of its own."""
    base = pg_url()
    schema = new_schema()
    url = with_params(base, schema=schema)
    try:
        # The replicas deliver by list: these tests follow a list that changes across them.
        with (
            serve_shared("--store", url, "--delivery", "list") as a,
            serve_shared("--store", url, "--delivery", "list") as b,
        ):
            yield Fleet(url, (a, b))
    finally:
        drop_schema(base, schema)


@asynccontextmanager
async def replicas(fleet: Fleet, key: str, mode: str = "auto") -> AsyncIterator[tuple[Replica, Replica]]:
    """A client of session ``key`` on each of the fleet's two replicas (2026-07-28 era unless
    ``mode`` is ``"legacy"``)."""
    async with AsyncExitStack() as stack:
        served = [shared.for_a_test() for shared in fleet.replicas]
        pair = []
        for name, serve in zip("AB", served, strict=True):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Residency-Session": key}, timeout=httpx2.Timeout(60, read=None))
            )
            replica = Replica(name)
            replica.client = await stack.enter_async_context(
                Client(
                    streamable_http_client(serve.url, http_client=http),
                    mode=mode,
                    message_handler=replica.on_message,
                )
            )
            assert (replica.client.protocol_version == MODERN) is (mode == "auto")
            pair.append(replica)
        try:
            yield pair[0], pair[1]
        except BaseException:
            for name, serve in zip("AB", served, strict=True):
                print(f"--- replica {name} stderr ---\n{serve.log()}")
            raise


@asynccontextmanager
async def replay(url: str, key: str) -> AsyncIterator[tuple[Session, Gateway, Store]]:
    """A fresh ``Session`` replayed from the journal, as a demo gateway would open it."""
    store = open_store(url)
    # As the replicas serve it (by list), and only once its desk is offered: a resource read
    # before would show the desk's tools as not offered.
    demo = json.loads(DEMO_CONFIG)
    demo["residency"] |= {"delivery": "list", "ready_wait": START}
    gateway = Gateway(parse_config(json.dumps(demo)), upstreams={"desk": IncidentDesk().server})
    try:
        async with gateway:
            yield gateway._open_session(key, store), gateway, store
    finally:
        store.close()


def assert_sound(store: Store, session: Session) -> None:
    """The journal has no gap or fork, and the replayed state breaks no invariant."""
    seqs = [entry.seq for entry in store.load(session.session_id)]
    assert seqs == list(range(1, len(seqs) + 1))
    session.check_invariants()


async def assert_replicas_show_the_replay(pair: tuple[Replica, Replica], url: str, key: str) -> None:
    """Both replicas show exactly what a fresh replay of the journal shows."""
    shown = [{uri: await r.read(uri) for uri in RESOURCES} for r in pair]
    listed = [await r.names() for r in pair]
    async with replay(url, key) as (fresh, gateway, store):
        assert_sound(store, fresh)
        expected = {uri: read_resource(uri, fresh, gateway.catalog).text for uri in RESOURCES}
        resident = sorted([n for n in fresh.resident_tools() if n in gateway.catalog] + list(META_TOOLS))
    for r, seen, names in zip(pair, shown, listed, strict=True):
        assert seen == expected, f"replica {r.name} disagrees with the journal"
        assert names == resident, f"replica {r.name} lists other tools"


def test_catch_up_applies_what_another_writer_appended_and_nothing_else(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "shared.db") as store:
        mine = Session(store, session_id="shared")
        mine.register_tools(incident_tools())
        theirs = Session(store, session_id="shared", resume=True)
        revision = theirs.revision
        assert theirs.catch_up() == 0
        assert theirs.revision == revision  # nothing new: cached views stay valid

        mine.plan_turn(Budget(schema_tokens=300, argument_tokens=10_000))
        mine.reexpand("update_incident")
        assert theirs.resident_tools() != mine.resident_tools()
        applied = theirs.catch_up()
        assert applied == len(store.load("shared")) - 1  # all but the registration it replayed
        assert theirs.revision != revision  # what it shows moved: views are made again
        assert theirs.snapshot() == mine.snapshot()
        assert theirs.catch_up() == 0

        # It acts on the caught-up state: its next write follows the other writer's entries.
        theirs.tombstone("update_incident")
        assert mine.catch_up() == 1
        assert mine.snapshot() == theirs.snapshot()


def tombstone_line(withheld: str, name: str) -> str:
    [line] = [line for line in withheld.splitlines() if line.startswith(f"{name}:")]
    return line


@pytest.mark.slow
async def test_requests_alternating_between_replicas_see_one_session(fleet: Fleet) -> None:
    key = "replicated-1"
    calls: list[tuple[str, str]] = []  # (call id, tool) of every forwarded call

    def forwarded(result: types.CallToolResult, tool: str) -> types.CallToolResult:
        assert not result.is_error, text(result)
        calls.append(((result.meta or {})[CALL_META_KEY], tool))
        return result

    with anyio.fail_after(scaled(300)):
        async with replicas(fleet, key) as (a, b):
            both = (a, b)
            assert await a.names() == await b.names()
            assert "update_incident" not in await a.names()  # withheld by the demo's budget

            # A re-expansion on A is B's state too: B lists the tool and calls it.
            assert not (await a.call(REEXPAND_TOOLS, {"names": ["update_incident"]})).is_error
            assert "update_incident" in await b.names()
            forwarded(await b.call("update_incident", UPDATE), "update_incident")

            # Read-only work, alternating, until one replica's plan tombstones update_incident;
            # the other replica shows the same tombstone.
            for i, (name, arguments) in enumerate(SCENARIO_READS):
                forwarded(await both[i % 2].use(name, dict(arguments)), name)
                if "update_incident:" in await both[(i + 1) % 2].read(TOMBSTONES):
                    break
            else:
                pytest.fail("the scenario's reads never tombstoned update_incident")
            withheld = await a.read(TOMBSTONES)
            assert await b.read(TOMBSTONES) == withheld
            line = tombstone_line(withheld, "update_incident")

            # The tombstoned tool is refused, with its tombstone, by either replica.
            for r in both:
                assert "update_incident" not in await r.names()
                refused = await r.call("update_incident", REBUILT)
                assert refused.is_error
                assert reason(refused) == "tool_not_resident", r.name
                assert text(refused) == line

            # Re-expanded on B, it is callable through A, and listed by both.
            assert not (await b.call(REEXPAND_TOOLS, {"names": ["update_incident"]})).is_error
            forwarded(await a.call("update_incident", {**REBUILT, "notify": True}), "update_incident")
            for r in both:
                assert "update_incident" in await r.names()

            ids = [call_id for call_id, _ in calls]
            assert len(set(ids)) == len(ids), ids
            await assert_replicas_show_the_replay((a, b), fleet.url, key)

    async with replay(fleet.url, key) as (fresh, _, _):
        assert [(call_id, fresh.call(call_id).tool) for call_id, _ in calls] == calls
        kinds = {e.kind.value for e in fresh.events()}
        assert {"reexpanded", "refused", "tombstoned"} <= kinds


@pytest.mark.slow
async def test_a_list_change_on_one_replica_reaches_a_listener_on_the_other(fleet: Fleet) -> None:
    with anyio.fail_after(scaled(120)):
        async with replicas(fleet, "announced-1") as (a, b):
            assert "list_services" not in await b.names()  # B holds the session now
            async with b.client.listen(tools_list_changed=True) as events:
                assert not (await a.call(REEXPAND_TOOLS, {"names": ["list_services"]})).is_error
                # B sent no request: only A's notice tells it (LISTEN/NOTIFY on the store).
                with anyio.fail_after(scaled(30)):
                    assert isinstance(await events.__anext__(), ToolsListChanged)
            assert "list_services" in await b.names()


@pytest.mark.slow
async def test_a_list_change_on_one_replica_reaches_a_handshake_client_of_the_other(fleet: Fleet) -> None:
    with anyio.fail_after(scaled(120)):
        async with replicas(fleet, "announced-2", mode="legacy") as (a, b):
            assert "list_services" not in await b.names()  # B holds the session now
            assert not (await a.call(REEXPAND_TOOLS, {"names": ["list_services"]})).is_error
            with anyio.fail_after(scaled(30)):
                await b.list_changed.wait()  # on B's standalone stream: B sent no request
            assert "list_services" in await b.names()


# Conflicting work: re-expansions and calls whose plans evict what the other replica re-expanded.
HAMMER: tuple[tuple[str, dict[str, Any]], ...] = (
    ("update_incident", {"incident_id": "INC-1", "notify": False}),
    *SCENARIO_READS,
    ("update_incident", {"incident_id": "INC-7", "notify": False}),
)
WORKERS = 2  # concurrent request loops per replica
ROUNDS = 6  # requests per loop: 2 x 2 x 6 = 24 operations, each one or two requests


@pytest.mark.slow
async def test_replicas_hammering_one_session_never_fork_or_lose_a_call(fleet: Fleet) -> None:
    key = "hammered-1"
    calls: list[tuple[str, str]] = []
    conflicts = 0

    async def worker(r: Replica, start: int) -> None:
        nonlocal conflicts
        for i in range(ROUNDS):
            name, arguments = HAMMER[(start + i) % len(HAMMER)]
            try:
                result = await r.use(name, dict(arguments))
            except MCPError as exc:
                # Two conflicts in a row on one request: the caller's to retry, nothing applied.
                assert (exc.data or {}).get("reason") == "session_conflict", exc
                conflicts += 1
                continue
            call_id = (result.meta or {}).get(CALL_META_KEY)
            if call_id is None:
                # Refused: another writer withheld it again between the re-expansion and the call.
                assert reason(result) == "tool_not_resident", text(result)
                continue
            assert not result.is_error, text(result)
            calls.append((call_id, name))

    with anyio.fail_after(scaled(300)):
        async with replicas(fleet, key) as (a, b):
            async with anyio.create_task_group() as tg:
                for w in range(WORKERS):
                    tg.start_soon(worker, a, 2 * w)
                    tg.start_soon(worker, b, 2 * w + 1)
            assert calls, "no call went through"
            ids = [call_id for call_id, _ in calls]
            assert len(set(ids)) == len(ids), ids
            await assert_replicas_show_the_replay((a, b), fleet.url, key)

    async with replay(fleet.url, key) as (fresh, _, _):
        # Every acknowledged call is in the journal, under the id its caller was given.
        assert [(call_id, fresh.call(call_id).tool) for call_id, _ in calls] == calls
    print(f"{len(calls)} calls, {conflicts} surfaced conflicts")


# Tools the demo does not pin: a pinned tool is reused elsewhere by definition, so archiving a
# chain leaves it resident (guarded) instead of archived.
CHAIN: dict[str, Any] = {
    "topology": ["list_services", "list_deploys", "get_runbook"],
    "failure": "get_runbook: 500 runbook store timeout for every service",
    "constraint": {"all": []},
    "credentials": [],
}


@asynccontextmanager
async def connect(serve: Any, key: str) -> AsyncIterator[Replica]:
    """A 2026-07-28 client of session ``key`` on one ``residency serve`` process."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Residency-Session": key}, timeout=httpx2.Timeout(60, read=None))
        )
        replica = Replica(key)
        replica.client = await stack.enter_async_context(
            Client(streamable_http_client(serve.url, http_client=http), message_handler=replica.on_message)
        )
        yield replica


@pytest.mark.slow
async def test_a_chain_archived_on_one_replica_reaches_every_session_of_the_scope_on_every_replica(
    store_url: str,
) -> None:
    prefix = CHAIN["topology"][:2]
    with anyio.fail_after(scaled(180)):
        async with (
            http_serve("--store", store_url, "--delivery", "list") as served_a,
            http_serve("--store", store_url, "--delivery", "list") as served_b,
            connect(served_a, "archiver") as archiver,
            connect(served_a, "neighbour") as neighbour,  # another session, same replica
            connect(served_b, "remote") as remote,  # another session, the other replica
        ):
            for r in (neighbour, remote):
                assert not (await r.call(REEXPAND_TOOLS, {"names": prefix})).is_error
                assert set(prefix) <= set(await r.names())
            async with (
                neighbour.client.listen(tools_list_changed=True) as near,
                remote.client.listen(tools_list_changed=True) as far,
            ):
                archived = await archiver.call("archive_chain", dict(CHAIN))
                assert not archived.is_error, text(archived)
                # Neither listener sent a request: only the store's notice tells their replicas.
                with anyio.fail_after(scaled(30)):
                    assert isinstance(await near.__anext__(), ToolsListChanged)
                    assert isinstance(await far.__anext__(), ToolsListChanged)
            for r in (neighbour, remote):
                assert not set(prefix) & set(await r.names()), r.name
                refused = await r.call("list_services", {})
                assert reason(refused) == "tool_archived", r.name
                chains = await r.read(CHAINS)
                assert CHAIN["failure"] in chains
