"""``python -m benchmarks minify`` reports the issue's figures, measured in one run."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from benchmarks.bench import minify
from tests.conftest import CORPUS, load_corpus


def test_the_bench_reports_every_level_and_the_seed_pruner(tmp_path: Path) -> None:
    load_corpus()  # skips when the corpus is absent
    for name in ("git.json", "time.json"):
        shutil.copy(CORPUS / name, tmp_path / name)
    (tmp_path / "variants").mkdir()
    shutil.copy(CORPUS / "fetch.json", tmp_path / "variants" / "fetch.json")  # not top level: ignored
    parser = argparse.ArgumentParser()
    minify.add_arguments(parser)
    report = minify.run(parser.parse_args(["--corpus", str(tmp_path), "--examples", "0", "--quiet"]))
    figures = {f.name: f for f in report.figures}
    for level in ("full-text", "compact", "minimal"):
        assert figures[f"{level} constraints lost"].value == 0
        assert figures[f"{level} verdict disagreements"].value == 0
    assert figures["seed-003 constraints lost"].value > 0
    assert figures["minimal token cut"].value > figures["full-text token cut"].value > 0
    assert figures["minify time vs json round trip"].unit == "x"
    assert report.data["tools"] == 14 and report.data["files"] == 2
