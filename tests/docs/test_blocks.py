"""Every code block of the docs and the README is run by a test or marked as not runnable."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

from docs_gen.blocks import KINDS, Block, blocks, commands, output_problem, snippet_paths
from residency._cli import main
from tests.conftest import ROOT
from tests.docs._pages import DOCS_SRC, argv, every_block, scratch

BLOCKS = every_block()

SLOW_SNIPPETS = {"first_session.py", "embedded_gateway.py"}
"""docs_src scripts that start a process or a whole gateway: tests/docs/test_pages.py runs them
with the page that shows them (slow)."""


def by_kind(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.kind == kind]


def test_every_block_is_run_by_a_test_or_marked_not_runnable() -> None:
    unmarked = [b.where for b in BLOCKS if b.kind is None]
    assert not unmarked, f"code blocks with no '<!-- docs: KIND -->' marker: {unmarked}"
    unknown = [f"{b.where} ({b.kind})" for b in BLOCKS if b.kind not in KINDS]
    assert not unknown, f"unknown block kinds: {unknown}"


def test_not_runnable_blocks_say_why() -> None:
    silent = [b.where for b in by_kind("not-run") if not b.args]
    assert not silent, f"'not-run' blocks without a reason: {silent}"


def test_an_unmarked_block_is_caught() -> None:
    page = "Text.\n\n```sh\nresidency serve\n```\n\n<!-- docs: run -->\n```sh\nresidency --help\n```\n"
    first, second = blocks(page)
    assert first.kind is None and second.kind == "run"
    assert blocks('```json\n--8<-- "mcp.json"\n```\n')[0].kind == "snippet"


def test_every_snippet_exists_and_every_docs_src_file_is_shown() -> None:
    shown = {path for b in by_kind("snippet") for path in snippet_paths(b)}
    missing = sorted(p for p in shown if not (ROOT / p).is_file())
    assert not missing, f"snippets of files that do not exist: {missing}"
    unused = sorted(
        str(p.relative_to(ROOT))
        for p in DOCS_SRC.iterdir()
        if p.suffix == ".py" and str(p.relative_to(ROOT)) not in shown
    )
    assert not unused, f"docs_src files no page shows: {unused}"


SCRIPTS = sorted(p.name for p in DOCS_SRC.glob("*.py") if p.name not in SLOW_SNIPPETS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_docs_src_script_runs(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with scratch(tmp_path):
        runpy.run_path(str(DOCS_SRC / name), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_the_slow_scripts_are_shown_on_a_page_whose_commands_a_slow_test_runs() -> None:
    shown = {Path(path).name for b in by_kind("snippet") for path in snippet_paths(b)}
    assert shown >= SLOW_SNIPPETS
    assert {p.name for p in DOCS_SRC.glob("*.py")} >= SLOW_SNIPPETS


@pytest.mark.parametrize("block", by_kind("run"), ids=lambda b: b.where)
def test_a_run_block_runs(block: Block, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = re.search(r"exit=(\d+)", block.args)
    expected = int(found.group(1)) if found else 0
    if block.language == "python":
        with scratch(tmp_path):
            exec(compile(block.body, block.where, "exec"), {"__name__": "__main__"})
        assert capsys.readouterr().out.strip()
        return
    with scratch(tmp_path):
        for command in commands(block):
            try:
                code = main(argv(command))
            except SystemExit as exit:  # --help and usage errors leave through argparse
                code = exit.code if isinstance(exit.code, int) else 1
            assert code == expected, f"{block.where}: {command!r} exited {code}: {capsys.readouterr()}"


@pytest.mark.parametrize("block", by_kind("json") + by_kind("config"), ids=lambda b: b.where)
def test_a_json_block_parses(block: Block) -> None:
    json.loads(block.body)


@pytest.mark.parametrize("block", by_kind("config"), ids=lambda b: b.where)
def test_a_config_block_is_a_config_the_gateway_accepts(
    block: Block, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text(block.body, encoding="utf-8")
    assert main(["config", "check", "--no-connect", str(path)]) == 0, capsys.readouterr().err


def test_shown_output_is_compared_line_by_line_with_ellipses() -> None:
    assert output_problem("found: ['a']\nresult: {...}", "found: ['a']\nresult: {\"x\": 1}") is None
    assert output_problem("found: ['a']", "found: ['b']") is not None
    assert output_problem("one line", "one line\nand another") is not None
