"""Search learns from use over MCP: a ``search_tools`` query followed by a successful call of one
of its hits (through ``call_tool`` or directly) is kept in the store, and another client's
session of the scope finds the tool with the phrasing that found nothing before.
"""

from __future__ import annotations

from typing import Any

import pytest

from residency._gateway import IncidentDesk
from residency._gateway._meta_tools import CALL_TOOL, SEARCH_TOOLS
from residency._search import RANKER_ENV, clear_shared_indexes
from tests.gateway.conftest import agent, running

pytestmark = pytest.mark.anyio

UNFOUND = "ring the duty engineer"  # no word of any desk tool's text
FOUND = "page the oncall responder"
PAGE = {"team": "payments", "message": "checkout is down"}


@pytest.fixture(autouse=True)
def _bm25_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RANKER_ENV, "bm25")  # hits must not depend on when vectors are ready
    clear_shared_indexes()


def hit_names(result: Any) -> list[str]:
    return [tool["name"] for tool in (result.structured_content or {}).get("tools", [])]


@pytest.mark.parametrize("through", ["call_tool", "direct"])
async def test_a_search_that_led_to_a_call_helps_another_client(era: str, through: str) -> None:
    async with running(desk=IncidentDesk()) as gw:
        async with agent(gw, era, "agent-1") as first:
            assert "page_oncall" not in hit_names(await first.call(SEARCH_TOOLS, {"query": UNFOUND}))
            assert "page_oncall" in hit_names(await first.call(SEARCH_TOOLS, {"query": FOUND}))
            if through == "call_tool":
                result = await first.call(CALL_TOOL, {"name": "page_oncall", "arguments": PAGE})
            else:  # the search's result carries its schema: a direct call is admitted
                result = await first.call("page_oncall", PAGE)
            assert not result.is_error
        labels = [label for _, label in gw.store.search_labels("default")]  # type: ignore[attr-defined]
        assert [(label["query"], label["tool"]) for label in labels] == [
            (UNFOUND, "page_oncall"),
            (FOUND, "page_oncall"),
        ]
        async with agent(gw, era, "agent-2") as second:
            assert hit_names(await second.call(SEARCH_TOOLS, {"query": UNFOUND}))[0] == "page_oncall"


async def test_a_refused_or_failed_call_teaches_nothing(era: str) -> None:
    async with running(desk=IncidentDesk()) as gw, agent(gw, era) as a:
        assert "page_oncall" in hit_names(await a.call(SEARCH_TOOLS, {"query": FOUND}))
        bad = await a.call(CALL_TOOL, {"name": "page_oncall", "arguments": {"team": 3}})
        assert bad.is_error  # refused by its pinned schema: never forwarded
        assert gw.store.search_labels("default") == []  # type: ignore[attr-defined]
