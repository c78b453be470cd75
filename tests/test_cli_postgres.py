"""``residency inspect`` and ``residency admin`` on a PostgreSQL store, over a real server.

The URL carries a password (trust auth ignores it): it must never be printed. Without
``RESIDENCY_PG_URL`` the tests skip, or fail when ``CI`` is set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from residency import Session, ToolState
from residency._cli import main
from residency._store import open_store
from tests.postgres import drop_schema, new_schema, pg_url, with_params, with_password
from tests.test_chain_session import CHAIN, TOOLS, abandon, use

PASSWORD = "cli-pw-8d2f"


@pytest.fixture
def url() -> Iterator[str]:
    base = pg_url()
    schema = new_schema()
    store = open_store(with_params(base, schema=schema))
    try:
        s = Session(store, session_id="agent")
        s.register_tools(TOOLS)
        use(s, "summarize", {"text": "x"})
        abandon(s)  # retires search_api_v2 and html_parser
        store.close()
        yield with_params(with_password(base, PASSWORD), schema=schema)
    finally:
        store.close()
        drop_schema(base, schema)


def test_inspect_lists_and_shows_sessions_of_a_postgresql_store(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sessions": ["agent"]}
    assert main(["inspect", url, "--session", "agent", "--json"]) == 0
    out = capsys.readouterr()
    with open_store(url) as store:  # type: ignore[attr-defined]
        expected = json.loads(json.dumps(Session(store, session_id="agent").snapshot(), default=str))
    assert json.loads(out.out) == expected
    assert main(["inspect", url]) == 0
    out2 = capsys.readouterr()
    assert "agent" in out2.out
    assert PASSWORD not in out.out + out.err + out2.out + out2.err


def test_inspect_of_an_unknown_session_or_an_unreachable_server_exits_2_without_the_password(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", url, "--session", "nobody"]) == 2
    unreachable = with_password("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", PASSWORD)
    assert main(["inspect", unreachable]) == 2
    out = capsys.readouterr()
    assert "127.0.0.1:1" in out.err
    assert PASSWORD not in out.out + out.err


def test_admin_reads_and_changes_a_postgresql_store(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", url, "chains", "list", "--json"]) == 0
    out = capsys.readouterr()
    assert [c["topology"] for c in json.loads(out.out)["chains"]] == [CHAIN]
    assert PASSWORD not in out.out + out.err

    assert main(["admin", url, "readmit", "html_parser", "--session", "agent"]) == 0
    assert PASSWORD not in "".join(capsys.readouterr())
    with open_store(url) as store:  # type: ignore[attr-defined]
        s = Session(store, session_id="agent", resume=True)
        assert s.state("html_parser") in (ToolState.EVICTED, ToolState.TOMBSTONED)
        assert s.state("search_api_v2") is ToolState.ARCHIVED
