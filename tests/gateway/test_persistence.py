"""Sessions live in the store: a restarted gateway resumes a session with its tombstones."""

from __future__ import annotations

from pathlib import Path

import pytest

from residency import ToolState
from residency._gateway import IncidentDesk
from residency._store._sqlite import SQLiteStore
from tests.gateway.conftest import agent, reason, running, text

pytestmark = pytest.mark.anyio

TIGHT = {"budget": {"schema_tokens": 400}, "minify": "compact"}
# By list, the tight budget demotes the tools used earlier as the work goes on: tombstones.
TOMBSTONING = {**TIGHT, "delivery": "list"}
WORK = [
    ("get_timeline", {"incident_id": "INC-1"}),
    ("list_services", {}),
    ("get_runbook", {"runbook_id": "RB-2"}),
    ("list_deploys", {"service": "api"}),
]


async def test_a_restarted_gateway_resumes_a_session_with_its_tombstones(era: str, tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    store = SQLiteStore(str(db))
    try:
        async with (
            running(TOMBSTONING, desk=IncidentDesk(), store=store) as gw,
            agent(gw, era, "resumable") as a,
        ):
            await a.use("update_incident", {"incident_id": "INC-1", "notify": False})
            for name, arguments in WORK:
                await a.use(name, arguments)
                if gw.session(a.key).state("update_incident") is ToolState.TOMBSTONED:
                    break
            before = await a.read("residency://tombstones")
            assert before.startswith("update_incident:")
    finally:
        store.close()

    desk = IncidentDesk()
    store = SQLiteStore(str(db))
    try:
        async with running(TOMBSTONING, desk=desk, store=store) as gw, agent(gw, era, "resumable") as a:
            assert await a.read("residency://tombstones") == before
            refused = await a.call("update_incident", {"incident_id": "INC-1", "severity": "SEV-1"})
            assert reason(refused) == "tool_not_resident"
            assert text(refused) == before
            assert desk.calls == []
    finally:
        store.close()


async def test_a_new_key_on_the_same_store_starts_a_fresh_session(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "gateway.db"))
    try:
        async with running(TIGHT, desk=IncidentDesk(), store=store) as gw:
            async with agent(gw, "legacy", "first") as a:
                await a.use("update_incident", {"incident_id": "INC-1", "notify": False})
            async with agent(gw, "legacy", "second") as b:
                assert not gw.session(b.key).resident_calls()
        assert sorted(store.sessions()) == ["gateway/first", "gateway/second"]
    finally:
        store.close()
