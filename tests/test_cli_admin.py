"""``residency admin`` over a real SQLite store: round trips and refusals (issue #15, part 4)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from residency import Session, SQLiteStore, ToolState
from residency._cli import main
from tests.test_chain_session import CHAIN, FAILURE, TOOLS, abandon, use


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "r.db"
    with SQLiteStore(path) as store:
        s = Session(store, session_id="agent")
        s.register_tools(TOOLS)
        use(s, "summarize", {"text": "x"})
        abandon(s)  # retires search_api_v2 and html_parser
    return path


def _dump(path: Path) -> list[tuple[object, ...]]:
    """Every row of the journal and the archive: what a failed command must leave as it was."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT session_id, seq, op, data FROM journal ORDER BY id").fetchall()
        rows += conn.execute("SELECT scope, digest, record FROM chain_archive ORDER BY pos").fetchall()
    return rows


def _session(path: Path) -> Session:
    store = SQLiteStore(path)
    s = Session(store, session_id="agent")
    return s


def test_chains_list_shows_the_scope_s_chains(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", str(db), "chains", "list", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["scope"] == "default"
    assert [c["topology"] for c in shown["chains"]] == [CHAIN]
    assert main(["admin", f"sqlite:///{db}", "chains", "list"]) == 0
    out = capsys.readouterr().out
    assert "IF search_api_v2 -> html_parser WHERE" in out and FAILURE.split(":")[0] in out
    assert main(["admin", str(db), "chains", "list", "--scope", "other"]) == 0
    assert "no chains" in capsys.readouterr().out


def test_readmit_round_trips_through_the_journal(db: Path) -> None:
    before = len(_dump(db))
    assert main(["admin", str(db), "readmit", "html_parser", "--session", "agent"]) == 0
    s = _session(db)
    assert s.state("html_parser") in (ToolState.EVICTED, ToolState.TOMBSTONED)
    assert s.state("search_api_v2") is ToolState.ARCHIVED
    assert len(_dump(db)) == before + 1
    assert any(e.subject == "html_parser" and "operator" in e.detail for e in s.events())
    s.store.close()


def test_mark_shared_round_trips_through_the_journal(db: Path) -> None:
    assert main(["admin", str(db), "mark-shared", "summarize", "send_report", "--session", "agent"]) == 0
    s = _session(db)
    assert s.is_shared("summarize") and s.is_shared("send_report")
    s.store.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["readmit", "nope", "--session", "agent"],  # unknown tool
        ["readmit", "summarize", "--session", "agent"],  # not archived
        ["readmit", "html_parser", "--session", "ghost"],  # unknown session
        ["mark-shared", "summarize", "nope", "--session", "agent"],  # one unknown name: none marked
        ["mark-shared", "summarize", "--session", "ghost"],
        ["chains", "list", "--scope", ""],  # a malformed scope
    ],
)
def test_a_refused_command_exits_2_and_changes_nothing(
    db: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _dump(db)
    assert main(["admin", str(db), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("residency admin: ")
    assert _dump(db) == before


def test_a_missing_store_is_refused_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    assert main(["admin", str(missing), "chains", "list"]) == 2
    assert "no such store file" in capsys.readouterr().err
    assert not missing.exists()


def test_readmit_in_a_successor_changes_only_that_session(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteStore(db) as store:
        b = Session(store, session_id="successor")
        b.register_tools(TOOLS)
        assert b.state("html_parser") is ToolState.ARCHIVED
        assert not b.check_chain(CHAIN[:2], [{}, {"url": "u", "payload_bytes": 9_000_000}]).safe
    assert main(["admin", str(db), "readmit", "html_parser", "--session", "successor"]) == 0
    with SQLiteStore(db) as store:
        assert Session(store, session_id="successor").state("html_parser") is not ToolState.ARCHIVED
        assert Session(store, session_id="agent").state("html_parser") is ToolState.ARCHIVED


# -- revocation -------------------------------------------------------------------------------


def _with_credentials(tmp_path: Path) -> Path:
    path = tmp_path / "creds.db"
    with SQLiteStore(path) as store:
        s = Session(store, session_id="agent")
        s.register_tools(TOOLS)
        abandon(s, credentials=["scraper-api-key", "crawler-token-ref"])  # no hook: both pending
    return path


def _hook(tmp_path: Path, fail: str = "") -> tuple[Path, Path]:
    """A gateway config whose revocation hook records each reference (and fails for ``fail``)."""
    log = tmp_path / "revoked.txt"
    script = tmp_path / "revoke.py"
    script.write_text(
        "import sys\n"
        f"open({str(log)!r}, 'a').write(sys.argv[1] + '\\n')\n"
        f"sys.exit(1 if sys.argv[1] == {fail!r} else 0)\n"
    )
    config = tmp_path / "gateway.json"
    config.write_text(
        json.dumps({"mcpServers": {}, "residency": {"revoke_command": [sys.executable, str(script)]}})
    )
    return config, log


def test_revoke_lists_pending_references_and_retry_runs_the_hook_once_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _with_credentials(tmp_path)
    config, log = _hook(tmp_path, fail="crawler-token-ref")
    assert main(["admin", str(db), "revoke", "--session", "agent"]) == 0
    assert capsys.readouterr().out.split() == ["crawler-token-ref", "scraper-api-key"]
    assert main(["admin", str(db), "revoke", "--retry", "--session", "agent", "--config", str(config)]) == 1
    assert "crawler-token-ref: failed" in capsys.readouterr().out
    assert sorted(log.read_text().split()) == ["crawler-token-ref", "scraper-api-key"]
    with SQLiteStore(db) as store:
        s = Session(store, session_id="agent")  # a reopen replays the outcomes, never the hook
        assert s.revocations() == {"scraper-api-key": True, "crawler-token-ref": False}
    # A retry runs the hook only for what is still not revoked.
    config, log = _hook(tmp_path)
    assert main(["admin", str(db), "revoke", "--retry", "--session", "agent", "--config", str(config)]) == 0
    assert log.read_text().split()[2:] == ["crawler-token-ref"]  # appended to the first run's
    assert main(["admin", str(db), "revoke", "--session", "agent"]) == 0
    assert "nothing to revoke" in capsys.readouterr().out


@pytest.mark.parametrize("config", [None, "missing.json", "no-hook.json"])
def test_revoke_retry_without_a_hook_is_refused_and_changes_nothing(
    tmp_path: Path, config: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _with_credentials(tmp_path)
    (tmp_path / "no-hook.json").write_text(json.dumps({"mcpServers": {}}))
    before = _dump(db)
    argv = ["admin", str(db), "revoke", "--retry", "--session", "agent"]
    if config is not None:
        argv += ["--config", str(tmp_path / config)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("residency admin: ")
    assert _dump(db) == before


def test_a_revocation_hook_that_hangs_or_is_missing_counts_as_failed(tmp_path: Path) -> None:
    from residency._gateway._config import command_revoker

    assert command_revoker((sys.executable, "-c", "import time; time.sleep(60)"), 0.5)("ref") is False
    assert command_revoker((str(tmp_path / "nope"),), 5)("ref") is False
    assert command_revoker((sys.executable, "-c", "pass"), 30)("ref") is True
