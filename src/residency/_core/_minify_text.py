"""Prose rules of the minifier: whitespace, sentence ends, and which descriptions carry facts.

Pure string functions. A sentence ends at ``.``, ``!`` or ``?`` followed by the end of the
text or by white space and something that starts a sentence (a capital, a digit, a quote, a
bracket, a list marker). It does not end inside "e.g. GitHub", "i.e.", "approx. 5", "v1.2"
or "file.txt": the first two are known abbreviations, the rest have no space after the dot.
A blank line or a line that starts a list item always ends a sentence.

A parameter description is worth its tokens when it says what the parameter's name and type
do not: a unit, a format, an indexing base, a range, a default, an obligation ("must",
"only", "do not"), an example. Otherwise (``"owner": "The repository owner"``) it goes.
"""

from __future__ import annotations

import inspect
import re

__all__ = [
    "normalize_prose",
    "opening",
    "parameter_note",
    "sentences",
]

# Abbreviations after which a dot does not end a sentence (lower case, without the final dot).
_ABBREVIATIONS = frozenset(
    {
        "e.g", "eg", "i.e", "ie", "etc", "vs", "cf", "approx", "incl", "excl", "no", "nos",
        "fig", "mr", "mrs", "ms", "dr", "st", "jr", "sr", "inc", "ltd", "co", "corp", "u.s",
        "a.m", "p.m", "est", "ex", "resp", "viz", "al", "ca", "ver", "v", "op", "max", "min",
        "avg", "dept", "misc", "ref", "refs", "sec", "esp", "aka", "a.k.a",
    }
)  # fmt: skip

_CANDIDATE_END = re.compile(r"[.!?]+[\"')\]`*]*(?=\s|$)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]\s|\d+[.)]\s|#{1,6}\s|\|)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")

# What makes a parameter description worth keeping (matched case-insensitively).
_CUES = re.compile(
    r"""
    \d                                                      # a number: a range, a limit, a unit
    | \b(?:ms|msec|millis\w*|seconds?|secs?|minutes?|hours?|days?|weeks?|months?|years?)\b
    | \b(?:bytes?|[kmg]i?b|px|pixels?|percent|utc|timezone|tokens?|characters?|chars|lines?)\b
    | %
    | \b(?:formats?|formatted|iso|rfc|yyyy|json|yaml|csv|base64|regexp?|regular\s+expression
         |glob|urls?|uris?|e-?mail|uuid|sha|hex|markdown|html|jql|cql|a1|syntax|encoded|escaped)\b
    | \b(?:e\.g|i\.e|for\s+example|such\s+as|like|example)\b
    | \b(?:owner/repo|[a-z]+/[a-z]+)\b
    | \b(?:comma|semicolon|space|newline)[-\s]separated\b | \bseparated\b
    | \b(?:case[-\s](?:in)?sensitive|prefix|suffix|absolute|relative|wildcards?)\b
    | \b(?:zero|one|0|1)[-\s]?(?:based|indexed)\b | \bindex(?:ed)?\b | \boffset\b | \bpage\b | \bcursor\b
    | \b(?:between|range|minimum|maximum|at\s+least|at\s+most|up\s+to|no\s+more\s+than
         |less\s+than|greater\s+than|limit|inclusive|exclusive)\b
    | \bdefaults?\b
    | \b(?:must|required|requires|only|cannot|can't|never|always|should|do\s+not|don't|exactly
         |either|unless|otherwise|overrides?|ignored|mutually|instead|deprecated|not|omit\w*)\b
    """,
    re.IGNORECASE | re.VERBOSE,
)

# Words that carry nothing beyond a parameter's name and type.
_FILLER = frozenset(
    {
        "a", "an", "the", "of", "to", "for", "in", "on", "at", "by", "with", "from", "and", "or", "is",
        "are", "be", "this", "that", "these", "it", "its", "as", "which", "what", "who", "whom", "whose",
        "will", "can", "may", "if", "when", "you", "your", "we", "our", "specified", "specific", "given",
        "provided", "optional", "value", "values", "parameter", "param", "field", "fields", "id", "ids",
        "name", "names", "number", "numbers", "string", "strings", "boolean", "integer", "array", "list",
        "object", "set", "get", "use", "used", "using", "want", "wish", "whether", "flag",
    }
)  # fmt: skip


def normalize_prose(text: str) -> str:
    """Strip layout only: common indentation, trailing spaces, surplus blank lines.

    The words, their order and the line structure (lists, paragraphs) are unchanged.
    """
    cleaned = inspect.cleandoc(text.expandtabs(4))
    lines = [line.rstrip() for line in cleaned.split("\n")]
    out: list[str] = []
    for line in lines:
        if not line and out and not out[-1]:
            continue
        out.append(line)
    return "\n".join(out).strip()


def _paragraphs(text: str) -> list[str]:
    """Split at blank lines and list items; join the remaining line breaks with spaces."""
    paragraphs: list[list[str]] = [[]]
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            paragraphs.append([])
            continue
        if _LIST_ITEM.match(line) and paragraphs[-1]:
            paragraphs.append([])
        paragraphs[-1].append(stripped)
    return [" ".join(p) for p in paragraphs if p]


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    rest = text[match.end() :].lstrip()
    if not rest:
        return True
    punct = match.group()
    if punct[0] == "." and len(punct.rstrip("\"')]`*")) == 1:
        before = re.search(r"(\S+)$", text[: match.start()])
        word = before.group(1).lstrip("(\"'`[*").lower() if before else ""
        if word in _ABBREVIATIONS:
            return False
        if len(word) == 1 and word.isalpha():  # an initial, "A. Smith"
            return False
    nxt = rest[0]
    return not nxt.islower()


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, each with its closing punctuation, in order."""
    out: list[str] = []
    for paragraph in _paragraphs(text):
        start = 0
        for match in _CANDIDATE_END.finditer(paragraph):
            if _ends_sentence(paragraph, match):
                piece = paragraph[start : match.end()].strip()
                if piece:
                    out.append(piece)
                start = match.end()
        tail = paragraph[start:].strip()
        if tail:
            out.append(tail)
    return out


def opening(text: str, *, min_chars: int = 30) -> str:
    """A description's informative opening: the first sentence of its first paragraph.

    Two sentences when the first is shorter than ``min_chars`` and the paragraph goes on;
    headings (``# ...``) before the first paragraph are skipped.
    """
    for paragraph in _paragraphs(normalize_prose(text)):
        if paragraph.startswith("#"):
            continue
        parts = sentences(paragraph)
        if len(parts[0]) < min_chars and len(parts) > 1:
            return f"{parts[0]} {parts[1]}"
        return parts[0]
    return ""


def _name_words(name: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return {_stem(w) for w in _WORD.findall(spaced.lower())}


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _new_words(sentence: str, known: set[str]) -> int:
    words = {_stem(w) for w in _WORD.findall(sentence.lower())}
    return len({w for w in words if w not in known and w not in _FILLER and len(w) > 2})


def _has_cue(sentence: str, known: set[str]) -> bool:
    """A cue that is not just the parameter's own name ("line" says nothing about ``line``)."""
    return any(_stem(m.group().lower()) not in known for m in _CUES.finditer(sentence))


def parameter_note(text: str, name: str, *, max_sentences: int = 1, min_new_words: int = 4) -> str | None:
    """What of a parameter description is worth keeping, or None if nothing is.

    Keeps the first ``max_sentences`` sentences, in their original order, that carry a cue
    (unit, format, index base, range, default, obligation, example); the first sentence also
    counts when it has ``min_new_words`` words that the name does not say. Sentences are cut
    at real sentence ends only.
    """
    parts = sentences(normalize_prose(text))
    known = _name_words(name)
    kept: list[str] = []
    for i, sentence in enumerate(parts):
        if _has_cue(sentence, known) or (i == 0 and _new_words(sentence, known) >= min_new_words):
            kept.append(sentence)
            if len(kept) >= max_sentences:
                break
    return " ".join(kept) if kept else None
