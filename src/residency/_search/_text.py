"""What the search ranks: the words of a tool definition, and of a query.

Pure. A tool's document is its name, title, server, argument names and argument descriptions,
and description, each split into lower-case word pieces (``updateIncident``, ``update_incident``
and ``update-incident`` all give ``update incident``), stop words dropped and suffixes stripped
(``restarting``, ``restarts``, ``restarted`` -> ``restart``), so a task phrased in the user's
words meets the tool's own. Fields that say more about a tool than its prose count more: the
name three times, the title, the description's lead sentence and argument names twice. A
general-purpose tool (a shell, a web search or page, a file reader or writer, as its definition
shows: ``_capabilities``) also gets its capabilities' task words, four times: its own prose
seldom uses the words of the tasks that need it, and is long enough to drown one mention.

Every script gives terms. Text is normalized (NFKC: full-width letters and digits, ligatures)
and case-folded, and accents are folded (``Zürich`` and ``zurich``, ``café`` and ``cafe`` meet).
Letters of any script make words, their combining marks included. Scripts written without
spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar; Korean too, whose words
carry their particles) give overlapping
character pairs instead (``获取天气`` -> ``获取 取天 天气``; a lone character stays as it is),
as CJK search engines index them: no dictionary to ship, and a query's pairs meet the same
pairs in a description. English stop words and suffix stripping apply to ASCII words only.
A query in German, Spanish, French, Portuguese, Chinese or Japanese also gets the English words
that a small glossary of the words tools are named with gives for its own (``_lexicon``).

The text the semantic ranker embeds is shorter: the name's words, the title, the description's
opening and the argument names, which is what tells tools apart; the long tails of some
descriptions (usage notes, examples) only blur the vector. A query is embedded as the want it
expresses (``I want to`` before it, :func:`embedding_query`): phrased so, a task lands nearer
the tools that do it (see ``QUERY_PREFIX``). A general-purpose tool's task words are embedded as
a third text: on the tune half that lifted the fusion on the tasks needing such tools (MRR 0.37
to 0.53), where a sentence saying the same (``Runs shell commands ...``) did not.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "EMBEDDING_VERSION",
    "document_terms",
    "embedding_query",
    "embedding_texts",
    "lead_sentence",
    "query_terms",
    "sentences",
    "stem",
    "summary_line",
    "tokenize",
    "words",
]

_WORD = re.compile(r"[A-Z]?[a-z]+|[0-9]+|[A-Z]+(?![a-z])")
# A stretch holding non-ASCII characters, with the ASCII letters and digits that touch them
# (``Zürich``, ``fileÄnderung``).
_MIXED = re.compile(r"[A-Za-z0-9]*(?:[^\x00-\x7f][A-Za-z0-9]*)+")
_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)")
_ASCII_RUN = re.compile(r"[!-~]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])")

NAME_WEIGHT = 3
TITLE_WEIGHT = 2
ARGUMENT_WEIGHT = 2
LEAD_WEIGHT = 2
CAPABILITY_WEIGHT = 4
_MAX_DEPTH = 4
_EMBED_DESCRIPTION_CHARS = 400

EMBEDDING_VERSION = 2
"""The version of :func:`embedding_texts`, part of a vector's cache key (``_index.vector_key``):
vectors cached on disk for older texts are not reused. 2: general-purpose tools' task words."""

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
    """Lower-case word pieces of ``text``: camelCase, snake_case and kebab-case split; in
    scripts without spaces, overlapping character pairs (see the module docstring)."""
    if text.isascii():
        return _ascii_words(text)
    # Only the stretches around non-ASCII characters take the slow path, character by character.
    text = unicodedata.normalize("NFKC", text)
    out: list[str] = []
    at = 0
    for match in _MIXED.finditer(text):
        out += _ascii_words(text[at : match.start()])
        for run, unspaced in _runs(match.group(0)):
            if unspaced:
                out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
            elif run.isascii():
                out += _ascii_words(run)
            else:
                out += [_fold(piece) for piece in _pieces(run)]
        at = match.end()
    out += _ascii_words(text[at:])
    return out


def _ascii_words(text: str) -> list[str]:
    return [m.group(0).lower() for m in _WORD.finditer(text)]


def _unspaced(char: str) -> bool:
    """Whether ``char`` belongs to a script written without spaces between words."""
    code = ord(char)
    return (
        0x2E80 <= code <= 0x9FFF  # CJK radicals, kana, bopomofo, Hangul jamo, CJK ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= code <= 0x3FFFF  # CJK extensions
        or 0x0E00 <= code <= 0x0EFF  # Thai, Lao
        or 0x1000 <= code <= 0x109F  # Myanmar
        or 0x1780 <= code <= 0x17FF  # Khmer
    )


def _runs(text: str) -> list[tuple[str, bool]]:
    """Maximal runs of word characters (letters, marks, digits) of ``text``, each with whether
    it is of a script without spaces; everything else separates runs."""
    runs: list[tuple[str, bool]] = []
    start, kind = 0, None
    for i, char in enumerate(text):
        category = unicodedata.category(char)[0]
        if category in "LMN" and char != "_":
            this = _unspaced(char) if category != "M" or kind is None else kind
        else:
            this = None
        if this != kind:
            if kind is not None:
                runs.append((text[start:i], kind))
            start, kind = i, this
    if kind is not None:
        runs.append((text[start:], kind))
    return runs


def _pieces(run: str) -> list[str]:
    """``run`` split where camelCase and digits change, as ``_WORD`` splits ASCII."""
    pieces: list[str] = []
    start = 0
    for i in range(1, len(run)):
        before, char = run[i - 1], run[i]
        if unicodedata.category(char)[0] == "M":
            continue  # a mark stays with its letter
        after = run[i + 1] if i + 1 < len(run) else ""
        if (
            before.isdigit() != char.isdigit()
            or (before.islower() and char.isupper())
            or (before.isupper() and char.isupper() and after.islower())
        ):
            pieces.append(run[start:i])
            start = i
    pieces.append(run[start:])
    return pieces


@functools.lru_cache(maxsize=1 << 14)
def _fold(word: str) -> str:
    """``word`` case-folded, with the accents of Latin and Greek letters removed (``é`` -> ``e``;
    Cyrillic ``й`` stays a letter of its own)."""
    kept: list[str] = []
    base = 0
    for char in unicodedata.normalize("NFD", word.casefold()):
        code = ord(char)
        if 0x0300 <= code <= 0x036F and (base < 0x0250 or 0x0370 <= base <= 0x03FF):
            continue
        if unicodedata.category(char)[0] != "M":
            base = code
        kept.append(char)
    return unicodedata.normalize("NFC", "".join(kept))


def _stem(word: str) -> str:
    return stem(word) if word.isascii() else word


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
    return tuple(_stem(w) for w in words(text) if w not in STOP_WORDS)


def tokenize(text: str) -> list[str]:
    """The indexed terms of ``text``: word pieces without stop words, stemmed."""
    return list(_terms(text))


def query_terms(query: str) -> list[str]:
    """The terms of a query: ``tokenize`` plus the expansions of known shorthands, and the
    English words of the glossary that its words of other languages say (``_lexicon``)."""
    out: list[str] = []
    for w in words(query):
        if w in STOP_WORDS:
            continue
        out.append(_stem(w))
        out.extend(stem(x) for x in SYNONYMS.get(w, ()))
    from residency._search._lexicon import glosses  # imported here: it reads this module's words

    for gloss in glosses(query):
        out += _terms(gloss)
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
    # Imported here: the capability rules read definitions with this module's words.
    from residency._search._capabilities import capabilities, vocabulary

    terms += _terms(vocabulary(capabilities(tool))) * CAPABILITY_WEIGHT
    return terms


def lead_sentence(text: str) -> str:
    """The first sentence of ``text`` (whitespace collapsed): what the tool does, usually."""
    text = " ".join(text.split())
    match = _SENTENCE.match(text)
    return match.group(1) if match else text


def embedding_texts(tool: Mapping[str, Any], server: str = "") -> tuple[str, ...]:
    """The texts the semantic ranker embeds for a tool; its vector is their mean.

    The first is short and says what the tool is (server, name, lead sentence); the second
    adds the title, more of the description and the argument names (see the module docstring);
    a general-purpose tool has a third, its capabilities' task words (``_capabilities``).
    Whatever changes them must change ``EMBEDDING_VERSION``.
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
    from residency._search._capabilities import capabilities, vocabulary  # see document_terms

    tasks = vocabulary(capabilities(tool))
    return (short, ". ".join(parts), tasks) if tasks else (short, ". ".join(parts))


def sentences(query: str) -> list[str]:
    """The requests of a query written as several sentences, each of three words or more (or
    12 characters, in scripts without spaces); one sentence gives ``[query]``."""
    parts = [p.strip() for p in _SENTENCE_END.split(query)]
    kept = [p for p in parts if len(p.split()) >= 3 or (len(p) >= 12 and not p.isascii())]
    return kept if len(kept) > 1 else [query]


def embedding_query(query: str) -> str:
    """The text the semantic ranker embeds for ``query``: ``QUERY_PREFIX`` and the query.

    The model reads English only. A query in another language that the glossary reads
    (``_lexicon``) is followed by the English words it says, in brackets; one in Chinese or
    Japanese is replaced by them and its ASCII words (names, paths, numbers), since the model
    makes nothing of its characters. On the tune half of the non-English queries this took
    the fusion's R@5 from 0.54 (glossary in BM25 alone) to 0.72.
    """
    from residency._search._lexicon import glosses  # see query_terms

    text = " ".join(query.split())
    found = " ".join(dict.fromkeys(glosses(text)))
    if not found:
        return QUERY_PREFIX + text
    normalized = unicodedata.normalize("NFKC", text)
    if any(_unspaced(ch) for ch in normalized):
        return QUERY_PREFIX + " ".join([found, *_ASCII_RUN.findall(normalized)])
    return f"{QUERY_PREFIX}{text} ({found})"


def summary_line(tool: Mapping[str, Any], limit: int = 160) -> str:
    """The first line of a tool's description, cut at ``limit`` characters (never mid-word)."""
    text = tool.get("description")
    if not isinstance(text, str) or not text.strip():
        return ""
    line = text.strip().splitlines()[0].strip()
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."
