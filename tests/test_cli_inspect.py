"""``residency inspect`` reads a real SQLite store without changing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from residency import Budget, Session, SQLiteStore
from residency._cli import main
from tests.incident_tools import incident_tools


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "r.db"
    store = SQLiteStore(path)
    s = Session(store, session_id="desk")
    s.register_tools(incident_tools())
    s.record_call("update_incident", {"incident_id": "INC-7", "severity": "SEV-2", "notify": True})
    s.prune("update_incident")
    s.add_span("schema dump", tags={"constraint"})
    s.plan_turn(Budget(schema_tokens=10_000, argument_tokens=10_000))
    store.close()
    return path


def test_listing_the_sessions_of_a_store(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", f"sqlite:///{store_path}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"sessions": ["desk"]}


def test_a_session_snapshot_equals_the_reopened_session(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(store_path), "--session", "desk", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tools"]["update_incident"]["state"] == "tombstoned"
    store = SQLiteStore(store_path)
    expected = json.loads(json.dumps(Session(store, session_id="desk").snapshot(), default=str))
    store.close()
    assert shown == expected


def test_the_table_view_shows_tombstones(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(store_path), "--session", "desk"]) == 0
    assert "update_incident: mutation tool schema withheld" in capsys.readouterr().out


def test_inspecting_changes_nothing(store_path: Path) -> None:
    def journal() -> list[tuple[str, object]]:
        store = SQLiteStore(store_path)
        try:
            return [(e.op, dict(e.data)) for e in store.load("desk")]
        finally:
            store.close()

    before = journal()
    assert main(["inspect", str(store_path), "--session", "desk"]) == 0
    assert journal() == before


def test_a_missing_store_or_session_is_exit_code_2(tmp_path: Path, store_path: Path) -> None:
    assert main(["inspect", str(tmp_path / "nope.db")]) == 2
    assert not (tmp_path / "nope.db").exists()
    assert main(["inspect", str(store_path), "--session", "other"]) == 2
