"""What the search ranks: the words of a tool definition, and of a query.

Pure. A tool's document is its name, title, server, argument names and argument descriptions,
and description, each split into lower-case word pieces (``updateIncident``, ``update_incident``
and ``update-incident`` all give ``update incident``), stop words dropped and suffixes stripped
(``restarting``, ``restarts``, ``restarted`` -> ``restart``), so a task phrased in the user's
words meets the tool's own. Fields that say more about a tool than its prose count more: the
name three times, the title, the description's lead sentence and argument names twice.

The text the semantic ranker embeds is shorter: the name's words, the title, the description's
opening and the argument names, which is what tells tools apart; the long tails of some
descriptions (usage notes, examples) only blur the vector. A query is embedded as the want it
expresses (``I want to`` before it, :func:`embedding_query`): phrased so, a task lands nearer
the tools that do it (see ``QUERY_PREFIX``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "document_terms",
    "embedding_query",
    "embedding_texts",
    "lead_sentence",
    "query_terms",
    "stem",
    "summary_line",
    "tokenize",
    "words",
]

_WORD = re.compile(r"[A-Z]?[a-z]+|[0-9]+|[A-Z]+(?![a-z])")
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)")

NAME_WEIGHT = 3
TITLE_WEIGHT = 2
ARGUMENT_WEIGHT = 2
LEAD_WEIGHT = 2
_MAX_DEPTH = 4
_EMBED_DESCRIPTION_CHARS = 400

QUERY_PREFIX = "I want to "
"""Put before a query when it is embedded. On the tune half of the labelled query set, eight
phrasings were compared (none, ``how to``, ``How do I ...?``, ``I need to``, ``I would like
to``, ``Can you ...?``, ``How can I ...?`` and this one, alone and in pairs): this one ranked
best with the fusion. With it (and the fusion's semantic weight moved from 2 to 2.5, chosen on
the same half) the fusion's MRR on the held-out half went from 0.669 to 0.720 (README, "Tool
search")."""

# Function words and the filler of task phrasing ("can you please show me ..."): they match
# every tool, so they only add noise to a ranking.
STOP_WORDS = frozenset(
    """
    a about above after again all also am an and any are as at be been before being both but by can
    could did do does doing done down during each either else etc for from further had has have
    having he her here hers him his how i if in into is it its itself just let lets may me might
    more most must my myself no nor not now of off on once one only or other our ours out over own
    please same she should so some such than that the their theirs them then there these they this
    those through to too under until up upon us use used using very via want was we were what when
    where which while who whom why will with would yet you your yours
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# Common shorthands in task phrasing, expanded to the words tool definitions use.
SYNONYMS: Mapping[str, tuple[str, ...]] = {
    "pr": ("pull", "request"),
    "prs": ("pull", "request"),
    "repo": ("repository",),
    "repos": ("repository",),
    "k8s": ("kubernetes",),
    "db": ("database",),
    "dir": ("directory",),
    "folder": ("directory",),
    "ticket": ("issue",),
    "tickets": ("issue",),
    "wiki": ("confluence", "page"),
    "spreadsheet": ("workbook", "sheet"),
    "spreadsheets": ("workbook", "sheet"),
}


def words(text: str) -> list[str]:
    """Lower-case word pieces of ``text``: camelCase, snake_case and kebab-case split."""
    return [m.group(0).lower() for m in _WORD.finditer(text)]


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light suffix stripper: plurals, ``-ing``, ``-ed`` and a final ``e``.

    Only the query and the documents have to agree, so a crude rule applied to both is enough
    (``create``, ``creates``, ``created``, ``creating`` -> ``creat``); words of three letters or
    fewer are left alone.
    """
    w = word
    if len(w) <= 3:
        return w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) > 5:
        w = w[:-3]
    elif w.endswith("ed") and len(w) > 4 and not w.endswith("eed"):
        w = w[:-2]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
        w = w[:-1]  # running -> runn -> run, stopped -> stopp -> stop
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


@functools.lru_cache(maxsize=1 << 14)
def _terms(text: str) -> tuple[str, ...]:
    # Cached: argument descriptions ("The owner of the repository") recur across tools.
    return tuple(stem(w) for w in words(text) if w not in STOP_WORDS)


def tokenize(text: str) -> list[str]:
    """The indexed terms of ``text``: word pieces without stop words, stemmed."""
    return list(_terms(text))


def query_terms(query: str) -> list[str]:
    """The terms of a query: ``tokenize`` plus the expansions of known shorthands."""
    out: list[str] = []
    for w in words(query):
        if w in STOP_WORDS:
            continue
        out.append(stem(w))
        out.extend(stem(x) for x in SYNONYMS.get(w, ()))
    return out


def _arguments(schema: Any, depth: int = 0) -> Iterable[tuple[str, str]]:
    """(name, description) of every property, nested ones included (to a small depth)."""
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            text = sub.get("description") if isinstance(sub, Mapping) else None
            yield str(key), text if isinstance(text, str) else ""
            yield from _arguments(sub, depth + 1)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _arguments(items, depth + 1)


def _text(tool: Mapping[str, Any], key: str) -> str:
    value = tool.get(key)
    return value if isinstance(value, str) else ""


def document_terms(tool: Mapping[str, Any], server: str = "") -> list[str]:
    """The terms BM25 indexes for one tool definition (weighted by repetition)."""
    terms = list(_terms(_text(tool, "name")) * NAME_WEIGHT)
    terms += _terms(_text(tool, "title")) * TITLE_WEIGHT
    terms += _terms(server)
    for name, description in _arguments(tool.get("inputSchema")):
        terms += _terms(name) * ARGUMENT_WEIGHT
        terms += _terms(description)
    description = _text(tool, "description")
    terms += _terms(lead_sentence(description)) * (LEAD_WEIGHT - 1)
    terms += _terms(description)
    return terms


def lead_sentence(text: str) -> str:
    """The first sentence of ``text`` (whitespace collapsed): what the tool does, usually."""
    text = " ".join(text.split())
    match = _SENTENCE.match(text)
    return match.group(1) if match else text


def embedding_texts(tool: Mapping[str, Any], server: str = "") -> tuple[str, str]:
    """The two texts the semantic ranker embeds for a tool; its vector is their mean.

    The first is short and says what the tool is (server, name, lead sentence); the second
    adds the title, more of the description and the argument names (see the module docstring).
    """
    name = " ".join(words(_text(tool, "name")))
    description = _text(tool, "description")
    short = f"{server} {name}: {lead_sentence(description)}".strip()
    parts = [name]
    title = _text(tool, "title").strip()
    if title and title.lower() != name:
        parts.append(title)
    description = " ".join(description.split())
    if len(description) > _EMBED_DESCRIPTION_CHARS:
        description = description[:_EMBED_DESCRIPTION_CHARS].rsplit(" ", 1)[0]
    if description:
        parts.append(description)
    arguments = [" ".join(words(n)) for n, _ in _arguments(tool.get("inputSchema"))]
    if arguments:
        parts.append("Arguments: " + ", ".join(dict.fromkeys(arguments)))
    return short, ". ".join(parts)


def embedding_query(query: str) -> str:
    """The text the semantic ranker embeds for ``query``: ``QUERY_PREFIX`` and the query."""
    return QUERY_PREFIX + " ".join(query.split())


def summary_line(tool: Mapping[str, Any], limit: int = 160) -> str:
    """The first line of a tool's description, cut at ``limit`` characters (never mid-word)."""
    text = tool.get("description")
    if not isinstance(text, str) or not text.strip():
        return ""
    line = text.strip().splitlines()[0].strip()
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."
