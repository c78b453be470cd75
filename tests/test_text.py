"""``printable``: no control, bidi or invisible character reaches a log line or a terminal."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from residency._text import printable

HIDDEN = (
    [chr(c) for c in range(0x20)]
    + ["\x7f"]
    + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u061c", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2028", "\u2029", "\u2060", "\ufeff"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + ["\U000e0001", "\ud800"]
)


INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
"""Controls, format characters (bidi, zero-width), surrogates, private use, unassigned, separators."""


def hidden(text: str) -> list[str]:
    """The characters of ``text`` that a terminal would not show as themselves."""
    return [ch for ch in text if unicodedata.category(ch) in INVISIBLE]


@pytest.mark.parametrize("ch", HIDDEN, ids=lambda ch: f"U+{ord(ch):04X}")
def test_every_control_bidi_and_invisible_character_is_shown_as_an_escape(ch: str) -> None:
    shown = printable(f"a{ch}b")
    assert hidden(shown) == []
    assert shown in (f"a\\x{ord(ch):02x}b", f"a\\u{ord(ch):04x}b", f"a\\U{ord(ch):08x}b")


def test_visible_text_is_kept_as_it_is() -> None:
    for text in ("get_incident", "Grüße, 世界", "a b\u00a0c", "C:\\path", "[bold]x[/bold]"):
        assert printable(text) == text


def test_a_newline_cannot_forge_a_log_line() -> None:
    assert printable("x\nresidency: WARNING forged") == "x\\x0aresidency: WARNING forged"


def test_a_long_text_is_cut_and_says_how_long_it_was() -> None:
    assert printable("x" * 10_000, limit=8) == "xxxxxxxx... (10000 characters)"
    assert printable("\x1b" * 10, limit=2) == "\\x1b\\x1b... (10 characters)"
    assert printable("short", limit=8) == "short"


@given(st.text())
def test_nothing_hidden_survives_any_text(text: str) -> None:
    assert hidden(printable(text)) == []
