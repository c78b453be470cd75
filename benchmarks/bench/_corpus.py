"""Finding and loading a corpus of real MCP tool lists (``{"server", "tools": [...]}`` files)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["default_corpus", "load_servers", "numbered_tools"]


def default_corpus() -> Path:
    """The dev corpus: ``$RESIDENCY_CORPUS``, else ``../shared/corpora/dev`` from here or the repo."""
    env = os.environ.get("RESIDENCY_CORPUS")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), repo):
        candidate = base.parent / "shared" / "corpora" / "dev"
        if candidate.is_dir():
            return candidate
    return Path("../shared/corpora/dev")


def load_servers(corpus: Path) -> dict[str, list[dict[str, Any]]]:
    """Server name -> tools for every top-level ``*.json`` file of ``corpus`` (not ``variants/``)."""
    if not corpus.is_dir():
        raise FileNotFoundError(
            f"corpus folder not found: {corpus} (pass --corpus DIR or set RESIDENCY_CORPUS)"
        )
    servers: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(corpus.glob("*.json")):
        data = json.loads(path.read_text())
        servers[str(data.get("server") or path.stem)] = list(data["tools"])
    return servers


def numbered_tools(n: int, corpus: Path | None = None, *, name: str = "{name}_{i}") -> list[dict[str, Any]]:
    """``n`` real tool definitions with unique names, cycling through the corpus.

    Falls back to one synthetic tool when no corpus is found. ``name`` formats each name from
    the original ``name`` and the index ``i``.
    """
    if n <= 0:
        return []
    try:
        real = [t for tools in load_servers(corpus or default_corpus()).values() for t in tools]
    except FileNotFoundError:
        real = []
    if not real:
        real = [
            {
                "name": "tool",
                "description": "A tool that does one thing to a resource. " * 4,
                "inputSchema": {
                    "type": "object",
                    "properties": {f"p{i}": {"type": "string"} for i in range(6)},
                },
            }
        ]
    out = []
    for i in range(n):
        tool = dict(real[i % len(real)])
        tool["name"] = name.format(name=tool["name"], i=i)[:64]
        out.append(tool)
    return out
