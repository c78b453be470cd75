"""Shared fixtures. Tests run under anyio's own pytest plugin (``@pytest.mark.anyio``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "dev"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def load_corpus() -> dict[str, list[dict[str, Any]]]:
    """The dev corpus: server name -> tools. Skips if the corpus is not beside the checkout."""
    if not CORPUS.is_dir():
        pytest.skip(f"dev corpus not found at {CORPUS}")
    out = {}
    for path in sorted(CORPUS.glob("*.json")):
        data = json.loads(path.read_text())
        out[path.stem] = data["tools"]
    return out
