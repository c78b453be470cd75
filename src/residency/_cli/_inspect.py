"""``residency inspect``: what a store holds, read-only.

With no ``--session`` it lists the sessions in the store; with one (an id as listed, or the
key a gateway served it under: ``_session_names``), it shows that session's tools and their
states, its tombstones, spans, archived chains and latest events, as tables or (``--json``) as
the session's snapshot.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from residency._errors import ResidencyError
from residency._text import printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from residency._runtime import Session
    from residency._store._protocol import Store


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a residency store without changing it. Exit codes: 0 shown, 2 bad "
        "usage, a missing or unreadable store, or an unknown session."
    )
    p.add_argument(
        "store", metavar="STORE", help="sqlite:///path.db (or a path to a .db file), or postgresql://..."
    )
    p.add_argument(
        "--session",
        metavar="ID",
        help="the session to show: an id as listed, or the key it was served under (default: list sessions)",
    )
    p.add_argument("--events", type=int, default=20, metavar="N", help="latest events to show (default 20)")
    p.add_argument("--json", action="store_true", help="print the session snapshot as JSON")
    p.set_defaults(run=run)


def _open(location: str) -> Store:
    """The store at ``location``, never created or upgraded (``_reads.open_readonly``)."""
    from residency._ui._reads import open_readonly

    return open_readonly(location)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from residency._runtime import Session
    from residency._store import redact_url
    from residency._ui._names import find_session, session_key_of

    console = Console()
    try:
        store = _open(args.store)
    except ResidencyError as exc:
        print(f"residency inspect: {printable(str(exc))}", file=sys.stderr)
        return 2
    try:
        sessions = store.sessions()
        if args.session is None:
            if args.json:
                print(json.dumps({"sessions": sessions}))
            else:
                for sid in sessions:
                    key = session_key_of(sid)
                    console.print(_text(sid if key is None else f"{sid}  (key {key})"))
                if not sessions:
                    console.print("(no sessions)")
            return 0
        found = find_session(sessions, args.session, where=redact_url(args.store))
        session = Session(store, session_id=found)
        if args.json:
            print(json.dumps(session.snapshot(), indent=2, sort_keys=True, default=str))
        else:
            _show(console, session, args.events)
        return 0
    except ResidencyError as exc:
        print(f"residency inspect: {printable(str(exc))}", file=sys.stderr)
        return 2
    finally:
        store.close()


def _text(value: object, style: str = "") -> Text:
    """Stored text as rich shows it: escaped (``printable``), never read as console markup."""
    from rich.text import Text

    return Text(printable(str(value)), style=style)


def _show(console: Console, s: Session, events: int) -> None:
    from rich.table import Table
    from rich.text import Text

    # Everything but the column names comes from the journal, so from upstreams and sessions:
    # each cell is escaped text, not markup (``[`` in a stored string styles nothing).
    tools = Table(title=_text(f"session {s.session_id}: turn {s.turn}, tools"))
    for col in ("tool", "state", "tokens", "mutation", "arguments resident"):
        tools.add_column(col)
    for name in s.tools():
        spec = s.tool(name)
        resident = "yes" if s.arguments_resident(name) else ""
        tools.add_row(
            _text(name), s.state(name).value, str(spec.tokens), "yes" if spec.mutation else "", resident
        )
    console.print(tools)
    console.print("[bold]tombstones[/bold]")
    for line in s.tombstones() or ["(none)"]:
        console.print(Text.assemble("  ", _text(line)))
    spans = s.spans()
    if spans:
        table = Table(title="spans")
        for col in ("span", "state", "tags", "depth", "key"):
            table.add_column(col)
        for span in spans:
            table.add_row(
                _text(span.id),
                s.span_state(span.id).value,
                _text(",".join(sorted(span.tags))),
                str(span.derivation_depth),
                _text(span.key),
            )
        console.print(table)
    for chain in s.chains():
        console.print(
            Text.assemble(_text("archived chain", "bold"), _text(f" {chain.digest[:12]}: {chain.rule}"))
        )
    attempted = s.revocations()
    for ref in sorted({*attempted, *s.pending_revocations()}):
        if ref not in attempted:
            outcome = "not tried"
        else:
            outcome = "revoked" if attempted[ref] else "not revoked (last attempt failed)"
        console.print(Text.assemble(_text("credential", "bold"), _text(f" {ref}: {outcome}")))
    log = Table(title=f"latest {events} events")
    for col in ("turn", "event", "subject", "detail"):
        log.add_column(col)
    for e in s.events()[-events:] if events > 0 else []:
        log.add_row(str(e.turn), e.kind.value, _text(e.subject), _text(e.detail))
    console.print(log)
