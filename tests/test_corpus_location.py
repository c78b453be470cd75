"""The tests find the dev corpus where ``$RESIDENCY_CORPUS`` says, as the benchmarks do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CORPUS_ENV, ROOT, corpus_dir, load_corpus


def test_residency_corpus_names_the_folder_the_tests_read(tmp_path: Path) -> None:
    tools = [{"name": "echo", "inputSchema": {"type": "object"}}]
    (tmp_path / "elsewhere.json").write_text(json.dumps({"server": "elsewhere", "tools": tools}))
    found = corpus_dir({CORPUS_ENV: str(tmp_path)})
    assert found == tmp_path
    assert load_corpus(found) == {"elsewhere": tools}


def test_without_it_the_corpus_is_beside_the_checkout() -> None:
    assert corpus_dir({}) == ROOT.parent / "shared" / "corpora" / "dev"
    assert corpus_dir({CORPUS_ENV: ""}) == corpus_dir({})


def test_a_missing_corpus_skips_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match=CORPUS_ENV):
        load_corpus(tmp_path / "absent")
