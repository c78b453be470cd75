"""The README is a landing page: short, its example runs as shown, its commands are what CI runs."""

from __future__ import annotations

import re

from docs_gen.benchmarks import savings_table
from docs_gen.blocks import blocks
from tests.conftest import ROOT
from tests.docs._pages import DOCS_SRC, README, all_pages

TEXT = README.read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(TEXT.splitlines()) <= 250


def test_the_readme_example_is_the_embedding_page_s_snippet() -> None:
    [example] = [b for b in blocks(TEXT, "README.md") if b.language == "python"]
    assert example.kind == "run"  # run by tests/docs/test_blocks.py, as shown
    assert example.body.strip() == (DOCS_SRC / "embed.py").read_text(encoding="utf-8").strip()
    assert "residency._" not in example.body  # public names only


def test_the_readme_commands_are_the_ones_ci_runs() -> None:
    [commands] = [b for b in blocks(TEXT, "README.md") if b.language == "sh"]
    assert "residency serve" in commands.body
    assert 'pip install -e ".[test]" && pytest -n auto ' in commands.body
    assert "pytest --run-slow" in commands.body
    # .ci/run installs the test extras (with the docs extra, in the same install; by uv's pip
    # interface, which takes the same requirements) and runs the full tier with --run-slow.
    assert re.search(r'^(?:uv )?pip install [^\n]*-e "\.\[test[,\]]', CI, re.M)
    assert re.search(r"^pytest [^\n]*--run-slow", CI, re.M)


def test_the_readme_savings_table_is_the_one_the_results_give() -> None:
    assert savings_table() in TEXT


def test_the_readme_links_to_pages_that_exist() -> None:
    for target in re.findall(r"\]\(((?:docs/)[^)#]+)", TEXT):
        assert (ROOT / target).is_file(), target
    assert {p.relative_to(ROOT).as_posix() for p in all_pages()} >= {
        "docs/getting-started.md",
        "docs/reference/config.md",
    }


def test_user_facing_text_holds_no_verdicts_of_targets_nor_issue_numbers() -> None:
    for page in [README, *all_pages()]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bMISSED\b|\btarget (?:is )?not met\b", text), page
        assert not re.search(r"(?<![\w/])#\d{2,}\b", text), page
