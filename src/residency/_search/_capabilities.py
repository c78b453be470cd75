"""What a general-purpose tool can do, read off its definition: run commands, search the web,
fetch a page, drive a browser, read or write a file.

A task that needs a shell or a file seldom names the tool ("ping github.com to see if the
network is up", "... and save the report as a Markdown file"), and such tools describe
themselves in their own words (desktop-commander's pages of usage notes), so a topical tool
sharing one word with the task ranks above them. Each capability a definition shows adds a
small fixed vocabulary of task words to the tool's BM25 document (``_text.document_terms``).

Rules (``RULES``, one row per capability). A capability is read off the definition alone (its
input schema, annotations and words), never off a list of tool or server names. A tool has it
when all of these hold:

- it requires the capability's inputs (a command; a URL; a query; a file path), recognized by
  the property's name (``command``, ``cmd``, ``url``, ``path``, ``file_path``, ...), and has
  the others it needs (the content to write);
- every other input it requires is a knob (a number, a flag, a choice among listed values):
  a required name of something (a repository owner, a sheet, a pod) makes a tool topical, so
  GitHub's file writer and a pod's command runner are not general ones;
- its description uses one of the capability's words (a command runner says shell or
  terminal; a web search says web, internet or online), and its lead sentence one of the
  capability's verbs where the row names some (a reader's says read or contents);
- its annotations, where it has them, agree: a reader is not marked as writing, a writer is
  not marked read-only.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from residency._search._text import lead_sentence, tokenize

__all__ = ["RULES", "VOCABULARY", "Capability", "Input", "Rule", "capabilities", "vocabulary"]


class Capability(enum.StrEnum):
    """A general-purpose thing a tool does."""

    SHELL = "shell"
    BROWSER = "browser"
    WEB_PAGE = "web-page"
    WEB_SEARCH = "web-search"
    READ_FILE = "read-file"
    WRITE_FILE = "write-file"


class Input(enum.StrEnum):
    """A kind of input, known by the words of its property's name (see ``_INPUT_NAMES``)."""

    COMMAND = "command"
    URL = "url"
    QUERY = "query"
    PATH = "path"
    CONTENT = "content"


@dataclass(frozen=True, slots=True)
class Rule:
    """When a definition has ``capability`` (see the module docstring).

    ``requires``: inputs it must require; ``has``: inputs it must have, required or not;
    ``mentions``: words, one of which its description must use; ``leads``: words, one of which
    its lead sentence must use (empty: any); ``access``: what its annotations must not deny.
    """

    capability: Capability
    requires: tuple[Input, ...]
    mentions: str
    leads: str = ""
    has: tuple[Input, ...] = ()
    access: Literal["read", "write"] | None = None


# fmt: off
RULES: tuple[Rule, ...] = (
    #    capability             requires           the description says (one of)
    Rule(Capability.SHELL,      (Input.COMMAND,),  "shell terminal bash console repl"),
    Rule(Capability.BROWSER,    (Input.URL,),      "browser navigate click screenshot"),
    Rule(Capability.WEB_PAGE,   (Input.URL,),      "web internet website page html",
         leads="fetch extract download get retrieve read"),
    Rule(Capability.WEB_SEARCH, (Input.QUERY,),    "web internet online", leads="search"),
    Rule(Capability.READ_FILE,  (Input.PATH,),     "file", leads="read contents", access="read"),
    Rule(Capability.WRITE_FILE, (Input.PATH,),     "file", leads="write save create append",
         has=(Input.CONTENT,), access="write"),
)

_URL = "http https www"  # what a URL in a task gives
_FILE_TYPES = "txt md json yaml yml log csv xml env ini toml conf"  # and a file name

VOCABULARY: Mapping[Capability, str] = {
    Capability.SHELL:      "run execute shell terminal command line script program install build compile",
    Capability.BROWSER:    f"browse browser open website web page click navigate screenshot form {_URL}",
    Capability.WEB_PAGE:   f"fetch open read download web page website url link article html content {_URL}",
    Capability.WEB_SEARCH: "search web internet online look up google news facts information latest current",
    Capability.READ_FILE:  f"read open show view file content text local disk {_FILE_TYPES}",
    Capability.WRITE_FILE: f"save write file report markdown document text note disk local {_FILE_TYPES}",
}
# fmt: on
"""The task words each capability adds to a tool's document: what a task needing it says."""

# The words of a property's name that make it an input of a kind (``file_path`` -> ``file
# path``: a path), as ``tokenize`` gives them.
_INPUT_NAMES: Mapping[Input, frozenset[str]] = {
    kind: frozenset(tokenize(names))
    for kind, names in {
        Input.COMMAND: "command cmd script code",
        Input.URL: "url urls uri href link links",
        Input.QUERY: "query q question search",
        Input.PATH: "path paths",
        Input.CONTENT: "content contents text body",
    }.items()
}
_KNOBS = frozenset({"number", "integer", "boolean"})


def capabilities(definition: Mapping[str, Any]) -> frozenset[Capability]:
    """The general-purpose capabilities ``definition`` (a ``tools/list`` entry) shows.

    Args:
        definition: a tool definition.

    Returns:
        Every capability whose rule (``RULES``) the definition meets; empty for a topical tool.
    """
    schema = definition.get("inputSchema")
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return frozenset()
    properties: Mapping[str, Any] = schema["properties"]
    listed = schema.get("required")
    required = {str(n) for n in listed if n in properties} if isinstance(listed, list) else set()
    if not required:
        return frozenset()  # a tool that needs nothing is told nothing to act on
    kinds = {str(name): _kinds(str(name), sub) for name, sub in properties.items()}
    taken = {kind for name in required for kind in kinds[name]}
    present = {kind for found in kinds.values() for kind in found}
    access = _access(definition.get("annotations"))
    # The schema first: most tools fail there, and their words need not be read.
    candidates = [
        (rule, mentions, leads)
        for rule, mentions, leads in _RULES
        if taken >= set(rule.requires)
        and present >= set(rule.has)
        # Every other required input only tunes the call: none names a thing.
        and all(kinds[n] & {*rule.requires, *rule.has} or _knob(properties[n]) for n in required)
        and (rule.access is None or access is None or access == rule.access)
    ]
    if not candidates:
        return frozenset()
    description = _text(definition, "description")
    said, lead = set(tokenize(description)), set(tokenize(lead_sentence(description)))
    found = set()
    for rule, mentions, leads in candidates:
        if said & mentions and (not leads or lead & leads):
            found.add(rule.capability)
    return frozenset(found)


def vocabulary(found: Iterable[Capability]) -> str:
    """The task words of ``found`` (``VOCABULARY``), in ``RULES`` order; empty for none."""
    chosen = set(found)
    return " ".join(VOCABULARY[rule.capability] for rule in RULES if rule.capability in chosen)


def _kinds(name: str, schema: Any) -> frozenset[Input]:
    kinds = _named_kinds(name)
    if isinstance(schema, Mapping) and schema.get("format") in ("uri", "url"):
        return kinds | {Input.URL}
    return kinds


@functools.lru_cache(maxsize=1 << 12)
def _named_kinds(name: str) -> frozenset[Input]:
    # Cached: property names (``owner``, ``repo``, ``path``) recur across tools.
    pieces = set(tokenize(name))
    return frozenset(kind for kind, names in _INPUT_NAMES.items() if pieces & names)


def _knob(schema: Any) -> bool:
    """Whether an input only tunes the call (a number, a flag, one of listed values)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    types = set(kind) if isinstance(kind, list) else {kind}
    return (bool(types) and types <= _KNOBS) or isinstance(schema.get("enum"), list)


def _access(annotations: Any) -> Literal["read", "write"] | None:
    """``read`` or ``write`` as the tool's annotations say (None: they do not say)."""
    if not isinstance(annotations, Mapping):
        return None
    if annotations.get("readOnlyHint") is True:
        return "read"
    if annotations.get("readOnlyHint") is False or annotations.get("destructiveHint") is True:
        return "write"
    return None


def _text(definition: Mapping[str, Any], key: str) -> str:
    value = definition.get(key)
    return value if isinstance(value, str) else ""


# Each rule with its words as a definition's are tokenized.
_RULES = tuple((rule, frozenset(tokenize(rule.mentions)), frozenset(tokenize(rule.leads))) for rule in RULES)
