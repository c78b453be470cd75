"""The code blocks of a page and what each one is: run by a test, or marked as not runnable.

Every fenced block is one of:

- a snippet: its body is only ``--8<-- "PATH"`` lines (``pymdownx.snippets`` puts the file
  there), so it shows a file of the repository that a test runs or checks (``docs_src/``,
  ``examples/``);
- marked by an HTML comment on the line before its fence, ``<!-- docs: KIND ARGS -->``:

  ``run``        shell commands the fast tests run (``residency ...``, in-process); ``run exit=N``
                 expects exit status N
  ``slow``       shell commands the slow tests run, in page order, in a scratch directory
  ``serve``      a command that serves until stopped: the slow tests start it, wait for its
                 ready line, and stop it once the page's later blocks have run
  ``config``     a gateway config that ``residency config check --no-connect`` accepts
  ``json``       JSON that parses
  ``generated``  written by a generator from the code (``docs_gen.reference``)
  ``not-run``    not runnable (a reason follows: your own paths, a model's API key...);
                 ``not-run: output`` right after a ``slow`` block is what it prints, and the
                 slow tests compare the two

A block with neither is an error of the page (``unmarked``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ("KINDS", "Block", "blocks", "commands", "output_problem", "snippet_paths")

KINDS = ("run", "slow", "serve", "config", "json", "generated", "not-run", "snippet")

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,})(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!-- docs: (?P<kind>[a-z-]+)(?::)?(?P<args>[^>]*?)\s*-->\s*$")
_SNIPPET = re.compile(r'^\s*--8<-- "(?P<path>[^"]+)"\s*$')


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    source: str
    line: int
    language: str
    body: str
    kind: str | None
    args: str

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def blocks(markdown: str, source: str = "<page>") -> list[Block]:
    """The fenced blocks of ``markdown``, each with the kind its marker (or its body) gives it."""
    lines = markdown.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening.group("fence"), opening.group("indent")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{source}:{i + 1}: a code block that is never closed")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = _MARK.match(lines[k]) if k >= 0 else None
        text = "\n".join(body)
        kind, args = (mark.group("kind"), mark.group("args").strip()) if mark else (None, "")
        if kind is None and body and all(_SNIPPET.match(b) for b in body if b.strip()):
            kind = "snippet"
        found.append(Block(source, i + 1, opening.group("info").strip(), text, kind, args))
        i = j + 1
    return found


def snippet_paths(block: Block) -> list[str]:
    """The files a snippet block includes."""
    return [m.group("path") for m in map(_SNIPPET.match, block.body.splitlines()) if m]


def commands(block: Block) -> list[str]:
    """The shell commands of a block: each line, with ``\\`` continuations joined and comments
    after the command dropped only when the whole line is a comment."""
    out: list[str] = []
    pending = ""
    for raw in block.body.splitlines():
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def output_problem(shown: str, printed: str) -> str | None:
    """How ``printed`` differs from the output a page shows (``...`` in a shown line stands for
    anything), or None when it does not."""
    lines, expected = printed.splitlines(), shown.splitlines()
    if len(lines) != len(expected):
        return f"shows {len(expected)} lines, the command printed {len(lines)}:\n{printed}"
    for want, got in zip(expected, lines, strict=True):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        if not re.fullmatch(pattern, got):
            return f"shows {want!r}, the command printed {got!r}"
    return None


def pages(root: Path) -> list[Path]:
    """The Markdown pages of the docs tree under ``root``."""
    return sorted(root.rglob("*.md"))
