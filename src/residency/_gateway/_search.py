"""``search_tools``: BM25 over tool names, descriptions and argument names.

Pure: the caller passes the documents (the withheld tools of one session) and gets ranked names.
Names and argument names are split on ``_``, ``-``, ``.``, ``/`` and camelCase, so
``updateIncident`` and ``update_incident`` both match "update incident". A term in the name
counts three times, an argument name twice: they say more about a tool than its prose.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SearchHit", "search", "tokenize"]

_WORD = re.compile(r"[A-Za-z][a-z]*|[0-9]+|[A-Z]+(?![a-z])")
_K1 = 1.2
_B = 0.75


@dataclass(frozen=True, slots=True)
class SearchHit:
    name: str
    summary: str
    score: float


def tokenize(text: str) -> list[str]:
    """Lower-case word pieces of ``text`` (camelCase and snake_case split)."""
    out: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", text):
        out.extend(m.group(0).lower() for m in _WORD.finditer(chunk))
    return out


def _argument_names(schema: Any, depth: int = 0) -> Iterable[str]:
    if not isinstance(schema, Mapping) or depth > 4:
        return
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            yield str(key)
            yield from _argument_names(sub, depth + 1)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _argument_names(items, depth + 1)


def _document(tool: Mapping[str, Any]) -> list[str]:
    name = str(tool.get("name", ""))
    description = tool.get("description")
    words = tokenize(name) * 3
    for arg in _argument_names(tool.get("inputSchema")):
        words += tokenize(arg) * 2
    if isinstance(description, str):
        words += tokenize(description)
    title = tool.get("title")
    if isinstance(title, str):
        words += tokenize(title)
    return words


def summary_line(tool: Mapping[str, Any], limit: int = 160) -> str:
    """The first line of a tool's description, cut at ``limit`` characters (never mid-word)."""
    text = tool.get("description")
    if not isinstance(text, str) or not text.strip():
        return ""
    line = text.strip().splitlines()[0].strip()
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."


def search(query: str, tools: Iterable[Mapping[str, Any]], limit: int = 5) -> list[SearchHit]:
    """Rank ``tools`` against ``query`` (BM25); tools with no matching term are left out."""
    docs = [(t, _document(t)) for t in tools]
    terms = set(tokenize(query))
    if not docs or not terms or limit <= 0:
        return []
    avg = sum(len(d) for _, d in docs) / len(docs) or 1.0
    df: Counter[str] = Counter()
    for _, words in docs:
        df.update(terms & set(words))
    n = len(docs)
    hits: list[SearchHit] = []
    for tool, words in docs:
        tf = Counter(w for w in words if w in terms)
        if not tf:
            continue
        score = 0.0
        for term, f in tf.items():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * len(words) / avg))
        hits.append(SearchHit(str(tool["name"]), summary_line(tool), round(score, 4)))
    hits.sort(key=lambda h: (-h.score, h.name))
    return hits[:limit]
