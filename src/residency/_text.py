"""Text from upstreams and stored sessions, made safe to write to a log or a terminal.

An upstream chooses its tool names, error messages and results; a journal holds what sessions
were sent. Written raw, a newline forges a log line, ESC drives the operator's terminal, and
bidi or zero-width characters make one name read as another. ``printable`` shows every such
character as a visible escape instead: C0 and C1 controls (newline and tab included) and DEL
as ``\\xNN``, other non-printable characters (bidi controls, zero-width and other format
characters, line and paragraph separators, lone surrogates, private-use and unassigned code
points) as ``\\uXXXX`` or ``\\UXXXXXXXX``. Spaces of any width stay as they are. A backslash
is not escaped: the result is for reading, not for parsing back.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable", "printable_lines"]


def printable(text: str, *, limit: int | None = None) -> str:
    """``text`` with every control, bidi and invisible character shown as a visible escape.

    Args:
        text: any text, such as an upstream's tool name.
        limit: at most this many characters of ``text`` are shown (then ``...`` and its length).

    Returns:
        Text with no control, bidi or zero-width character in it.
    """
    cut = limit is not None and len(text) > limit
    shown = text[:limit] if cut else text
    if not shown.isprintable():
        shown = "".join(
            ch if ch.isprintable() or unicodedata.category(ch) == "Zs" else _escape(ch) for ch in shown
        )
    return f"{shown}... ({len(text)} characters)" if cut else shown


def printable_lines(text: str) -> str:
    """``text`` with its line breaks kept and each line made ``printable`` (for a message or a
    traceback written whole)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
