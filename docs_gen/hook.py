"""The mkdocs hook (``hooks:`` in mkdocs.yml): generated parts of each page, made at build time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads a hook by its path, not as a package
    sys.path.insert(0, str(ROOT))

from docs_gen import render  # noqa: E402


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
