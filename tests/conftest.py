"""Shared fixtures and the two tiers. Tests run under anyio's own pytest plugin (``@pytest.mark.anyio``).

``pytest`` runs the fast tier: every test not marked ``slow``, and the property-based tests with
fewer examples (``tests/_tiers.py``). ``pytest --run-slow`` runs every test at full strength, as
CI does; a ``-m`` expression of your own also runs what it selects at full strength.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests import _tiers

ROOT = Path(__file__).resolve().parent.parent
CORPUS_ENV = "RESIDENCY_CORPUS"


def corpus_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The dev corpus: ``$RESIDENCY_CORPUS`` when set, else ``../shared/corpora/dev`` beside the
    checkout (the benchmarks' rule, ``benchmarks/bench/_corpus.py``)."""
    given = environ.get(CORPUS_ENV)
    return Path(given) if given else ROOT.parent / "shared" / "corpora" / "dev"


CORPUS = corpus_dir()

RAM_TMP_MIN_FREE = 4 << 30
"""The room /dev/shm must have for the tests' temporary files to go there."""


def _use_ram_for_temporary_files() -> None:
    """Put every temporary file of the run (``tmp_path``, ``tempfile``, the processes the tests
    start) in RAM, on Linux's /dev/shm, unless ``TMPDIR`` already says where they go.

    The suite commits to SQLite files thousands of times, and each commit waits for ``fsync``:
    on a shared disk that was four fifths of opening a gateway session (9 ms against 2 ms in
    RAM). No test is about surviving a power loss (the crash tests kill processes, whose writes
    the page cache keeps), so the disk's wait tells nothing. Set ``TMPDIR`` to keep them on disk.
    """
    if "TMPDIR" in os.environ or not os.path.isdir("/dev/shm"):
        return
    if shutil.disk_usage("/dev/shm").free < RAM_TMP_MIN_FREE:
        return
    where = Path("/dev/shm") / f"residency-tests-{os.getuid()}"
    where.mkdir(exist_ok=True)
    # As /tmp is: other users may enter it (a private PostgreSQL server runs as ``postgres`` in
    # a directory of its own here), each directory below keeps its own mode (``mkdtemp``: 0700).
    where.chmod(0o1777)
    os.environ["TMPDIR"] = str(where)
    tempfile.tempdir = str(where)


_use_ram_for_temporary_files()

SEARCH_RANKER_ENV = "RESIDENCY_SEARCH_RANKER"  # residency._search.RANKER_ENV, not imported this early


def _rank_by_bm25_unless_a_test_asks() -> None:
    """Run every gateway of the suite, in process or started by a test, with ``search_tools``
    ranked by BM25 alone (``RESIDENCY_SEARCH_RANKER=bm25``), unless ``RESIDENCY_SEARCH_RANKER``
    is already set.

    With the embedding model installed, a gateway loads it and embeds its catalog in the
    background: 1.5 to 7 s of CPU per gateway here, about a third of the suite's time, and a search then
    answers by BM25 or by fusion depending on how far that got. A test whose subject is not the
    semantic ranking pays nothing for it and gets one ranker every time. A test that is about
    the model is marked ``embeddings`` and runs with the variable unset, as users run (the first
    run of ``residency serve`` among them); ``RESIDENCY_SEARCH_RANKER=auto pytest`` runs every
    test that way.
    """
    os.environ.setdefault(SEARCH_RANKER_ENV, "bm25")


_rank_by_bm25_unless_a_test_asks()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        help="run the whole suite: also the tests marked slow (processes, real peers, whole corpora), "
        "and the property-based tests with all their examples, as CI does",
    )


def pytest_configure(config: pytest.Config) -> None:
    _tiers.FULL = bool(config.getoption("--run-slow") or config.option.markexpr)
    # Properties that set no example count of their own run Hypothesis' default in the full tier.
    settings.register_profile("fast", max_examples=_tiers.examples(100))
    if not _tiers.FULL:
        settings.load_profile("fast")


def pytest_report_header(config: pytest.Config) -> str:
    if _tiers.FULL:
        return "tier: full (every selected test, property-based tests at full strength)"
    return (
        "tier: fast (tests marked slow are left out, properties run a tenth of their examples; "
        "--run-slow runs all)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _tiers.FULL:
        # The slow tests first (in their own order), so parallel workers start on the long ones
        # and finish on short ones instead of waiting on a long test picked up last.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
        config.hook.pytest_deselected(items=slow)


@pytest.fixture(autouse=True)
def _embeddings_as_users_get_them(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``embeddings`` runs with ``RESIDENCY_SEARCH_RANKER`` unset: the gateway's
    default ranking, the embedding model's where it is installed (``_rank_by_bm25_unless_a_test_asks``)."""
    if request.node.get_closest_marker("embeddings") is not None:
        monkeypatch.delenv(SEARCH_RANKER_ENV, raising=False)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def load_corpus(corpus: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The dev corpus (``CORPUS`` unless given): server name -> tools. Skips if it is absent."""
    corpus = CORPUS if corpus is None else corpus
    if not corpus.is_dir():
        pytest.skip(f"dev corpus not found at {corpus} (set {CORPUS_ENV} to its folder)")
    out = {}
    for path in sorted(corpus.glob("*.json")):
        data = json.loads(path.read_text())
        out[path.stem] = data["tools"]
    return out


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``serve`` configures the process's logging (``configure_logging``): put it back afterwards."""
    from residency._cli._serve import QUIET_LOGGERS

    root = logging.getLogger()
    names = ("residency", *QUIET_LOGGERS, "transitions.core")
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in names})
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)
