"""``residency lifecycle`` prints the diagrams generated from the tables (tests/docs checks the docs)."""

from __future__ import annotations

import pytest

from residency import TOOL_LIFECYCLE
from residency._cli import main


def test_the_mermaid_output_is_generated_from_the_tool_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.strip() == TOOL_LIFECYCLE.mermaid()


def test_the_table_format_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--kind", "all", "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert out.count("->") >= len(TOOL_LIFECYCLE.table)


def test_an_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["lifecycle", "--kind", "nope"])
    assert info.value.code == 2
