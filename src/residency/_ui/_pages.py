"""The dashboard's pages, from what ``_reads`` returns to HTML (``_html``); no I/O here.

Each page is a pure function of the values the store readers return, so what a page shows is
what ``residency view`` and ``residency inspect`` print for the same store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from residency._core._events import EventKind
from residency._ui._html import Html, esc, join, page, plot, table, tag, when
from residency._ui._reads import IDENTITIES, PlotPoint, SessionPage, Turn

__all__ = ["chains_page", "login_page", "session_page", "sessions_page", "upstreams_page"]

_KIND_CLASS = {
    EventKind.TOMBSTONED: "leave",
    EventKind.EVICTED: "leave",
    EventKind.ARCHIVED: "leave",
    EventKind.PRUNED: "leave",
    EventKind.REFUSED: "refused",
    EventKind.REEXPANDED: "back",
    EventKind.READMITTED: "back",
    EventKind.BUDGET_EXCEEDED: "refused",
}


def session_href(session_id: str) -> str:
    """The URL path of a session's page (the id is percent-encoded, ``/`` included)."""
    return "/ui/session/" + quote(session_id, safe="")


def sessions_page(
    found: SessionPage, *, text: str, identity: str, stamp: str, mode: str, where: str, live: bool = False
) -> Html:
    """The session list with its filters (``text`` in the id, the identity the key is bound to)."""
    options = join(
        tag("option", label or "any", value=value, selected="selected" if value == identity else None)
        for value, label in [("", ""), *((i, i) for i in IDENTITIES)]
    )
    form = tag(
        "form",
        tag("label", Html("id contains ") + tag("input", name="q", value=text, type="search"))
        + tag("label", Html(" identity ") + tag("select", options, name="identity"))
        + tag("button", "filter", type="submit"),
        method="get",
        action="/ui/",
        class_="filters",
    )
    rows = [
        (
            tag("a", r.id, href=session_href(r.id)),
            r.key if r.key is not None else "",
            r.identity,
            r.turn,
            r.entries,
            when(r.last_at),
        )
        for r in found.rows
    ]
    summary = tag(
        "p",
        f"{found.matched} of {found.total} sessions match; page {found.page} of {found.pages}",
        class_="summary",
    )
    pager = []
    for label, number in (("previous", found.page - 1), ("next", found.page + 1)):
        if 1 <= number <= found.pages:
            query = urlencode({"q": text, "identity": identity, "page": number})
            pager.append(tag("a", label, href=f"/ui/?{query}", rel=label[:4]))
    body = (
        form
        + summary
        + table(
            ("session", "key", "identity", "turn", "journal entries", "last write (UTC)"), rows, id="sessions"
        )
    )
    pages = tag("nav", join(pager, " "), class_="pager")
    return page("Sessions", body + pages, stamp=stamp, mode=mode, where=where, live=live)


def _event_row(e: Any) -> Html:
    return tag(
        "li",
        tag("span", e.kind.value, class_="kind")
        + Html(" ")
        + tag("code", e.subject)
        + (Html(": ") + esc(e.detail) if e.detail else Html("")),
        class_=_KIND_CLASS.get(e.kind, "other"),
    )


def _turn_block(t: Turn) -> Html:
    parts = [tag("h3", f"turn {t.turn}")]
    if t.events:
        parts.append(tag("ul", join(_event_row(e) for e in t.events), class_="events"))
    for tools in t.deliveries:
        parts.append(tag("p", Html("result delivered schemas of: ") + join(tag("code", n) for n in tools)))
    for query, tool in t.searches:
        parts.append(tag("p", Html("search ") + tag("q", query) + Html(" found ") + tag("code", tool)))
    listed = join((tag("code", n) for n in t.resident), ", ") if t.resident else esc("(none)")
    parts.append(tag("p", Html(f"resident after the turn ({len(t.resident)}): ") + listed, class_="resident"))
    return tag("section", join(parts), class_="turn", data_turn=t.turn)


def session_page(
    listed: Mapping[str, Any],
    turns: Sequence[Turn],
    series: Sequence[PlotPoint],
    spans: Sequence[Mapping[str, Any]],
    chains: Sequence[Mapping[str, Any]],
    *,
    minify: str,
    stamp: str,
    mode: str,
    where: str,
    live: bool = False,
) -> Html:
    """One session: what the model sees now (``view``), the plot, the timeline, spans, chains."""
    sid = listed["session"]
    head = tag(
        "p",
        f"turn {listed['turn']}, delivery {listed['delivery']}, minify {minify}; "
        f"{listed['total_tokens']} tokens listed ({listed['tokenizer']})",
        class_="summary",
    )
    tools = table(
        ("listed tool", "tokens"),
        [(t["name"], t["tokens"]) for t in listed["tools"]]
        + [(Html(f"{esc(m['name'])} <em>(meta-tool)</em>"), m["tokens"]) for m in listed["meta_tools"]],
        id="listed",
    )
    tombstones = tag(
        "ul", join(tag("li", line) for line in listed["tombstones"]) or tag("li", "(none)"), id="tombstones"
    )
    plots = plot(
        [
            ("resident tools", [(p.turn, p.shown_tokens) for p in series]),
            ("showing every tool", [(p.turn, p.all_tokens) for p in series]),
        ],
        title="tool tokens per turn",
        x_label="turn",
        y_label="tokens",
    ) + plot(
        [
            ("resident tools", [(p.turn, p.shown_cost) for p in series]),
            ("showing every tool", [(p.turn, p.all_cost) for p in series]),
        ],
        title="cached cost of the tool block, cumulative (uncached input token = 1)",
        x_label="turn",
        y_label="cost",
    )
    timeline = join(_turn_block(t) for t in turns) or tag("p", "(no events)")
    span_rows = [
        (
            s["id"],
            s["state"],
            ", ".join(s["tags"]),
            s["source"],
            ", ".join(s["provenance"]) or "(original)",
            s["depth"],
            "yes" if s["verified"] else "no",
            "yes" if s["grounded"] else "no",
            s["turn"],
            s["tokens"],
        )
        for s in spans
    ]
    chain_rows = [(c["digest"][:12], c["rule"], " > ".join(c["topology"]), c["failure"]) for c in chains]
    body = join(
        [
            head,
            tag("h2", "listed now"),
            tools,
            tag("h2", "tombstones"),
            tombstones,
            tag("h2", "tokens"),
            tag("div", plots, class_="plots"),
            tag("h2", "timeline"),
            tag("div", timeline, id="timeline"),
            tag("h2", "spans"),
            table(
                (
                    "span",
                    "state",
                    "tags",
                    "source",
                    "provenance",
                    "depth",
                    "verified",
                    "grounded",
                    "turn",
                    "tokens",
                ),
                span_rows,
                id="spans",
            ),
            tag("h2", "archived chains"),
            table(("chain", "rule", "pipeline", "failure"), chain_rows, id="chains"),
        ]
    )
    return page(f"Session {sid}", body, stamp=stamp, mode=mode, where=where, live=live)


def chains_page(
    records: Sequence[Mapping[str, Any]], *, stamp: str, mode: str, where: str, live: bool = False
) -> Html:
    """The store's chain archive (the default scope), as every session sharing it inherits it."""
    rows = [
        (
            str(r.get("digest", ""))[:12],
            " > ".join(str(t) for t in r.get("topology", ())),
            r.get("failure", ""),
            ", ".join(str(c) for c in r.get("credentials", ())),
        )
        for r in records
    ]
    body = tag("p", f"{len(rows)} archived chains", class_="summary") + table(
        ("chain", "pipeline", "failure", "credentials (references)"), rows, id="archive"
    )
    return page("Chain archive", body, stamp=stamp, mode=mode, where=where, live=live)


def upstreams_page(entries: Sequence[Mapping[str, Any]], *, stamp: str, where: str) -> Html:
    """The gateway's upstreams as ``/healthz`` reports them (errors redacted)."""
    rows = [
        (
            e["name"],
            e["kind"],
            tag("span", e["status"], class_=f"status-{e['status']}"),
            e["tools"],
            e["protocol_version"] or "",
            e["starts"],
            e["last_error"],
        )
        for e in entries
    ]
    body = table(
        ("upstream", "kind", "status", "tools", "protocol", "starts", "last error"), rows, id="upstreams"
    )
    return page("Upstreams", body, stamp=stamp, mode="gateway", where=where)


def login_page(*, failed: bool = False) -> Html:
    """The form a browser sends the bearer token with once (see ``_app``)."""
    note = tag("p", "That is not the gateway's token.", class_="refused") if failed else Html("")
    form = tag(
        "form",
        tag("label", Html("bearer token ") + tag("input", name="token", type="password", autocomplete="off"))
        + tag("button", "open the dashboard", type="submit"),
        method="post",
        action="/ui/login",
    )
    text = tag(
        "p",
        "The dashboard needs the gateway's bearer token. It is sent once and exchanged for a "
        "cookie that opens only the dashboard's pages.",
    )
    return page("Sign in", note + text + form, mode="login")
