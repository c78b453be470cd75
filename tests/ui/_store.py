"""A populated store for the dashboard's tests: a real gateway session, hostile names, spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from residency import SQLiteStore
from residency._runtime import Session
from tests.test_cli_view import POLICY, _serve_a_session

HOSTILE_TOOL = "evil<img src=x onerror=alert(1)>"
HOSTILE_SOURCE = "tool:<script>alert(2)</script>"
HOSTILE_KEY = 'gateway/k"><script>alert(3)</script>'
LOCAL_SESSIONS = 60


def populate(directory: Path) -> dict[str, Any]:
    """A SQLite store in ``directory``: the seed-000 scenario served through a real gateway
    (``gateway/agent-1``), a session whose tool, span source and id carry markup, and
    ``LOCAL_SESSIONS`` small runtime sessions (``local-000``, ...). Returns the paths and keys."""
    path = directory / "gateway.db"
    seen = anyio.run(_serve_a_session, path)
    config = directory / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {}, "residency": POLICY}))
    store = SQLiteStore(path)
    try:
        hostile = Session(store, session_id=HOSTILE_KEY)
        hostile.register_tools(
            [
                {
                    "name": HOSTILE_TOOL,
                    "description": "<script>alert(4)</script>",
                    "inputSchema": {"type": "object"},
                },
                {"name": "plain_tool", "description": "plain", "inputSchema": {"type": "object"}},
            ]
        )
        hostile.tombstone(HOSTILE_TOOL)
        first = hostile.add_span("the first result", tags=["<b>tag</b>"], source=HOSTILE_SOURCE)
        second = hostile.add_span("the second result", source="tool:plain_tool")
        hostile.summarize([first.id, second.id], "both results, summarized")
        for i in range(LOCAL_SESSIONS):
            s = Session(store, session_id=f"local-{i:03d}")
            s.register_tools([{"name": f"t{i}", "description": "d", "inputSchema": {"type": "object"}}])
    finally:
        store.close()
    return {"path": path, "config": config, "key": seen["key"], "seen": seen}
