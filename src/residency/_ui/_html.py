"""HTML for the dashboard: escaped text, the page frame, tables and inline SVG plots.

Rules:

- Every value is escaped (``esc``) where it enters the markup, attributes included: tool names,
  descriptions, tombstone lines, span sources and session keys come from upstreams and clients.
  Markup is built only from ``Html`` values (already safe); a plain ``str`` is always escaped,
  so forgetting to escape cannot happen by passing a string along.
- No inline script or style: the pages load ``/ui/static/app.js`` and ``app.css`` and are served
  with a Content-Security-Policy that forbids anything else (``CSP``), so even a value that
  escaped escaping could not run.
- Plots are SVG drawn here, with presentation attributes (no ``style``), no JavaScript.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

__all__ = ["CSP", "Html", "esc", "join", "page", "plot", "table", "when"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""What a dashboard page may load: its own script and stylesheet, nothing inline, no frames."""


_VOID = frozenset({"input", "meta", "link", "br"})


class Html(str):
    """Markup that is safe to emit as it is (built by this module from escaped parts)."""

    __slots__ = ()

    def __add__(self, other: str) -> Html:
        # Joining keeps the result markup, and plain text added to it is escaped.
        return Html(str.__add__(self, esc(other)))

    def __radd__(self, other: str) -> Html:
        return Html(str.__add__(esc(other), self))


def esc(value: object) -> Html:
    """``value`` as text in HTML (quotes escaped too, so it is safe in an attribute)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Html:
    """Parts joined, each escaped unless it is ``Html``."""
    return Html(esc(sep).join(esc(p) for p in parts))


def tag(name: str, body: object = "", /, **attrs: object) -> Html:
    """``<name attrs>body</name>``; attribute values escaped (``class_`` for ``class``)."""
    shown = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None
    )
    if name in _VOID:
        return Html(f"<{name}{shown}>")
    return Html(f"<{name}{shown}>{esc(body)}</{name}>")


def when(at: float) -> str:
    """A journal time as UTC text (empty for none)."""
    if not at:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, id: str | None = None) -> Html:
    """A table; each cell escaped unless ``Html``."""
    head = join(tag("th", h) for h in headers)
    body = join(tag("tr", join(tag("td", c) for c in row)) for row in rows)
    return tag("table", Html(f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"), id=id)


NAV = (
    ("sessions", "/ui/"),
    ("chain archive", "/ui/chains"),
    ("upstreams", "/ui/upstreams"),
)


def page(
    title: str, body: Html, *, stamp: str = "", mode: str = "store", where: str = "", live: bool = False
) -> Html:
    """A whole page: the frame, navigation, ``body``; ``stamp`` is what the live poll compares
    (``/ui/stamp`` answers the current one: the page reloads when they differ); ``live``: the
    store sends change notices, so the page asks only when ``/ui/events`` says something changed."""
    links = [(n, h) for n, h in NAV if mode == "gateway" or h != "/ui/upstreams"]
    nav = join(tag("a", n, href=h) for n, h in links)
    return Html("<!doctype html>") + tag(
        "html",
        tag(
            "head",
            Html('<meta charset="utf-8"><link rel="icon" href="data:,">')
            + tag("title", f"{title} - residency")
            + Html('<link rel="stylesheet" href="/ui/static/app.css">')
            + Html('<script src="/ui/static/app.js" defer></script>'),
        )
        + tag(
            "body",
            tag("header", tag("strong", "residency") + tag("nav", nav) + tag("span", where, class_="where"))
            + tag("main", tag("h1", title) + body, data_stamp=stamp, data_live="events" if live else None),
        ),
        lang="en",
    )


def plot(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 240,
) -> Html:
    """A line plot of named series of ``(x, y)`` points, as inline SVG with a legend."""
    pad_l, pad_r, pad_t, pad_b = 56, 16, 24, 40
    points = [p for _, s in series for p in s]
    if not points:
        return tag("p", f"{title}: nothing to plot yet", class_="empty")
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(max(p[1] for p in points), 1.0)
    span_x = (x1 - x0) or 1.0
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: float) -> float:
        return pad_l + (x - x0) / span_x * w

    def sy(y: float) -> float:
        return pad_t + h - y / y1 * h

    parts = [
        tag("title", title),
        Html(f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" stroke="#888"/>'),
        Html(f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" stroke="#888"/>'),
        tag("text", f"{y1:,.0f}", x=4, y=pad_t + 4, font_size=11),
        tag("text", "0", x=pad_l - 12, y=pad_t + h, font_size=11),
        tag("text", f"{x0:g}", x=pad_l, y=height - 22, font_size=11),
        tag("text", f"{x1:g}", x=pad_l + w - 16, y=height - 22, font_size=11),
        tag("text", x_label, x=pad_l, y=height - 6, font_size=11),
        tag("text", y_label, x=pad_l + 4, y=pad_t - 8, font_size=11),
    ]
    colours = ("#1f6feb", "#d73a49", "#2da44e", "#8250df")
    for i, (name, s) in enumerate(series):
        colour = colours[i % len(colours)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        parts.append(Html(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>'))
        parts += [Html(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>') for x, y in s]
        # The legend under the axis, right of the axis label: never over a line.
        parts.append(tag("text", name, x=pad_l + 90 + 150 * i, y=height - 6, fill=colour, font_size=12))
    return tag(
        "svg",
        join(parts),
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        role="img",
        aria_label=title,
        class_="plot",
    )
