"""A session whose journal was damaged under the running gateway: ``store_error``, not a conflict.

The gateway holds its sessions between requests. When the store loses the entries a held session
already applied (rows deleted, the store rolled back), every write of that session conflicts,
and catching up cannot help: the client is told ``store_error`` (with what to do), never
``session_conflict`` with a retry that would fail forever, and other sessions are served on.
"""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError

from residency._gateway import IncidentDesk
from tests.damage import KINDS, damageable
from tests.gateway.conftest import agent, running

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kind", KINDS)
async def test_a_call_in_a_session_whose_journal_lost_entries_gets_store_error_and_others_go_on(
    kind: str, tmp_path: Path
) -> None:
    with damageable(kind, tmp_path) as (store, execute):
        async with running(store=store, desk=IncidentDesk()) as gw, agent(gw, "legacy") as a:
            assert not (await a.call("list_services")).is_error
            sid = gw.session(a.key).session_id
            execute(
                f"DELETE FROM {{journal}} WHERE session_id = '{sid}' AND seq = "
                f"(SELECT MAX(seq) FROM {{journal}} WHERE session_id = '{sid}')"
            )
            for _ in range(2):  # the same answer each time: retrying cannot help
                with pytest.raises(MCPError) as raised:
                    await a.call("list_services")
                assert raised.value.code == types.INTERNAL_ERROR
                details = raised.value.data or {}
                assert (details.get("reason"), details.get("type")) == ("store_error", "StoreError")
            async with agent(gw, "legacy", "agent-2") as b:
                assert not (await b.call("list_services")).is_error
