"""``residency lifecycle`` prints the diagram the README shows."""

from __future__ import annotations

import pytest

from residency import SPAN_LIFECYCLE, TOOL_LIFECYCLE
from residency._cli import main
from tests.conftest import ROOT


def test_the_mermaid_output_is_generated_from_the_tool_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.strip() == TOOL_LIFECYCLE.mermaid()


def test_the_readme_shows_the_current_diagrams() -> None:
    readme = (ROOT / "README.md").read_text()
    for lifecycle in (TOOL_LIFECYCLE, SPAN_LIFECYCLE):
        assert f"```mermaid\n{lifecycle.mermaid()}\n```" in readme


def test_the_table_format_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--kind", "all", "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert out.count("->") >= len(TOOL_LIFECYCLE.table)


def test_an_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["lifecycle", "--kind", "nope"])
    assert info.value.code == 2
