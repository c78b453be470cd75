"""``residency demo``, ``residency serve`` argument handling, and the examples."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from residency._cli import main
from residency._gateway import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_plays_the_scenario_with_no_duplicate_incident(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "tool_not_resident" in out and "arguments_invalid" in out
    assert "duplicates created: 0" in out
    assert "INC-7 is SEV-2" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "--store", "mysql://db"], "--store"),
        (["serve", "--config", "/does/not/exist.json"], "exist.json"),
    ],
)
def test_serve_reports_bad_options_and_exits_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_serve_names_the_key_of_a_malformed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gateway.json"
    server = '{"x": {"command": "true", "env": {"TOKEN": "s3cret-v4lue"}}}'
    bad.write_text('{"mcpServers": ' + server + ',\n "residency": {"pinned": 3}}')
    assert main(["serve", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "gateway.json: line 2, key 'residency.pinned'" in err
    assert "s3cret-v4lue" not in err


def test_the_shipped_configs_are_valid() -> None:
    load_config(ROOT / "examples" / "upstreams.json")
    entry = json.loads((ROOT / "mcp.json").read_text())["mcpServers"]["residency"]
    assert entry["args"][0] == "serve"


@pytest.mark.parametrize(
    "script",
    [
        "embed.py",
        # It starts ``residency serve`` over stdio itself.
        pytest.param("ghost_tool_walkthrough.py", marks=pytest.mark.slow),
    ],
)
def test_the_examples_run(
    script: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example runs as ``python examples/SCRIPT`` runs it (as ``__main__``), in this process:
    the script is the subject, not the interpreter (capfd: the walkthrough's ``residency serve``
    writes to the real stderr)."""
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
    assert "refused" in capfd.readouterr().out
