"""The docs' pages, as written and as generated, for the tests of this package."""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from docs_gen import render
from docs_gen.blocks import Block, blocks, pages
from tests.conftest import ROOT

DOCS = ROOT / "docs"
DOCS_SRC = ROOT / "docs_src"
README = ROOT / "README.md"


@functools.cache
def rendered(page: Path) -> str:
    """A page as the site shows it: generated parts in place."""
    return render(page.read_text(encoding="utf-8"))


def all_pages() -> list[Path]:
    return pages(DOCS)


def page_blocks(page: Path) -> list[Block]:
    return blocks(rendered(page), str(page.relative_to(ROOT)))


def every_block() -> list[Block]:
    found = [b for page in all_pages() for b in page_blocks(page)]
    return found + blocks(README.read_text(encoding="utf-8"), "README.md")


@contextmanager
def scratch(tmp: Path) -> Iterator[Path]:
    """A scratch working directory where the docs' relative paths (``docs_src/``, ``examples/``)
    resolve as they do from the repository's root."""
    for name in ("docs_src", "examples"):
        (tmp / name).symlink_to(ROOT / name)
    before = Path.cwd()
    os.chdir(tmp)
    try:
        yield tmp
    finally:
        os.chdir(before)


def argv(command: str) -> list[str]:
    """A ``residency ...`` command line as the arguments of ``residency._cli.main``."""
    words = shlex.split(command, comments=True)
    if not words or words[0] != "residency":
        raise ValueError(f"a 'run' block runs residency commands only (in-process): {command!r}")
    return words[1:]
