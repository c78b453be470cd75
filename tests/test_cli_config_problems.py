"""``residency config check`` reports every problem of a file in one run, and always a summary.

Each problem names its line and key path, a near-miss key or value gets the one it was likely
meant to be, and ``parse_config`` raises one ``ConfigError`` that carries them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from residency import ConfigError
from residency._cli import main
from residency._gateway import parse_config

# Four problems, one per line from line 3 on; a near-miss key and a near-miss value among them.
BROKEN = """{
  "mcpServers": {"a": {"command": "x"}},
  "residency": {
    "budget": {"schema_token": 5000},
    "minify": "compat",
    "call_timeout": "soon",
    "colour": "blue"
  }
}"""


def _problems(text: str) -> list[tuple[int | None, str, str | None]]:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source="gateway.json")
    return [(p.line, p.key, p.suggestion) for p in raised.value.problems]


def test_every_problem_of_a_file_is_found_at_once_with_its_line_and_key() -> None:
    assert _problems(BROKEN) == [
        (4, "residency.budget.schema_token", "schema_tokens"),
        (5, "residency.minify", "compact"),
        (6, "residency.call_timeout", None),
        (7, "residency.colour", None),
    ]


def test_the_message_of_several_problems_counts_them_one_line_each() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(BROKEN, source="gateway.json")
    lines = str(raised.value).splitlines()
    assert lines[0] == "gateway.json: 4 problems:"
    assert lines[1] == (
        "  line 4, key 'residency.budget.schema_token': unknown key; did you mean 'schema_tokens'?"
    )
    assert lines[3] == "  line 6, key 'residency.call_timeout': expected a number"
    assert raised.value.where == "residency.budget.schema_token"


def test_one_problem_reads_as_one_line() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"mcpServers": {}, "mcpServer": {}}', source="g.json")
    assert str(raised.value) == "g.json: line 1, key 'mcpServer': unknown key; did you mean 'mcpServers'?"
    assert len(raised.value.problems) == 1


def test_problems_in_server_entries_and_the_residency_section_are_found_together() -> None:
    text = (
        '{"mcpServers": {\n "bad": {"comand": "x"},\n "r": {"url": "ftp://h"},\n'
        ' "e": {"command": "x", "env": {"K": "${NOT_SET_A}-${NOT_SET_B}"}},\n "none": {"args": []}},\n'
        ' "residency": {"delivery": "lists"}}'
    )
    assert _problems(text) == [
        (2, "mcpServers.bad.comand", "command"),
        (3, "mcpServers.r.url", None),
        (4, "mcpServers.e.env.K", None),
        (5, "mcpServers.none", None),
        (6, "residency.delivery", "list"),
    ]


def test_a_value_is_never_echoed_in_a_problem() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"mcpServers": {"a": {"command": "x", "env": {"K": ["hunter2-secret"]}}}}')
    assert "hunter2-secret" not in str(raised.value)
    assert [p.key for p in raised.value.problems] == ["mcpServers.a.env.K"]


def test_check_prints_every_error_and_ends_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text(BROKEN, encoding="utf-8")
    assert main(["config", "check", "--no-connect", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    errors = [line for line in lines if line.startswith("residency config check: error: ")]
    assert len(errors) == 4
    assert errors[0].endswith(
        f"{path}: line 4, key 'residency.budget.schema_token': unknown key; did you mean 'schema_tokens'?"
    )
    assert lines[-1] == f"residency config check: {path}: 4 errors, 0 warnings"
    assert captured.out == ""


def test_a_file_that_is_not_json_gets_one_error_and_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text('{"mcpServers": {,}}', encoding="utf-8")
    assert main(["config", "check", "--no-connect", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "line 1, column 17: not valid JSON" in lines[0]
    assert lines[-1] == f"residency config check: {path}: 1 error, 0 warnings"


def test_a_config_that_loads_but_serves_nothing_ends_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text('{"mcpServers": {},\n "residency": {"store": "sqlite:///rel.db"}}', encoding="utf-8")
    assert main(["config", "check", "--no-connect", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == f"residency config check: {path}: 1 error, 1 warning"
