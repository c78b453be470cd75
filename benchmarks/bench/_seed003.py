"""The seed-003 schema pruner, re-implemented for comparison only. Do not use it.

It follows the note's documented behaviour, defects included, so the benchmark can show
what they cost on real tools:

- every top-level property keeps only ``type`` and ``enum`` (and a description that
  mentions "1-indexed", "format", "must" or "optional"): nested ``properties``, ``items``,
  ``format``, ``pattern``, bounds, ``anyOf``/``oneOf``, ``$ref``/``$defs`` and
  ``additionalProperties`` are dropped;
- a property without ``type`` gets ``"string"`` (a constraint it never had);
- the tool description is cut at its first ``"."``, wherever that is ("e.g.", "v1.2").

``seed003_prune`` returns an MCP-shaped tool (``name``, ``description``, ``inputSchema``) so
it can be compared with ``residency.minify_tool``; ``phase_subset`` is the note's
per-phase tool subsetting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["KEEP_DESCRIPTION_WORDS", "phase_subset", "seed003_prune"]

KEEP_DESCRIPTION_WORDS = ("1-indexed", "format", "must", "optional")


def seed003_prune(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Prune one tool the way the seed-003 sample does (lossy, for comparison only).

    Accepts an MCP tool (``inputSchema``) or an OpenAI-style one (``function.parameters``).
    """
    fn: Mapping[str, Any] = tool.get("function", tool)
    params: Mapping[str, Any] = fn.get("inputSchema", fn.get("parameters", {})) or {}
    clean: dict[str, Any] = {}
    for name, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        kept: dict[str, Any] = {"type": prop.get("type", "string")}
        if "enum" in prop:
            kept["enum"] = prop["enum"]
        text = prop.get("description")
        if isinstance(text, str) and any(word in text.lower() for word in KEEP_DESCRIPTION_WORDS):
            kept["description"] = text
        clean[name] = kept
    return {
        "name": fn["name"],
        "description": str(fn.get("description", "")).split(".")[0],
        "inputSchema": {"type": "object", "properties": clean, "required": list(params.get("required", []))},
    }


def phase_subset(
    tools: Iterable[Mapping[str, Any]], phases: Mapping[str, Sequence[str]], phase: str
) -> list[Mapping[str, Any]]:
    """The tools the note exposes in ``phase``: those named in ``phases[phase]``, in list order.

    An unknown phase exposes nothing (as the note's lookup table would).
    """
    wanted = set(phases.get(phase, ()))
    return [t for t in tools if t.get("name") in wanted]
