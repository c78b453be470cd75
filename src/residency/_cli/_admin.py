"""``residency admin``: operator changes to the sessions and archive scopes of a store.

``chains list``   the chains archived in a scope (``--scope``, default ``default``), oldest first
``learned list``  what tool search learned in a scope: per tool, the queries that led to its calls
``learned reset`` forget what a scope learned (``--tool TOOL``: only that tool's labels)
``readmit TOOL``  bring an archived tool back into a session's index (``--session``)
``mark-shared TOOL [TOOL ...]``  mark tools shared in a session: archiving never retires them
``revoke``        list a session's credential references not yet revoked; with ``--retry``, run
                  the configured revocation hook (``--config``) for each, journaling each outcome

Each change goes through the session's own operation, so it is journaled like any other (and
shown by ``residency inspect``). ``--session`` takes an id as ``inspect`` lists it or the key a
gateway served the session under, as ``inspect`` and ``view`` do. A refused change (unknown
session, unknown tool, a tool that is not archived) writes nothing and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from residency._cli._inspect import _open
from residency._errors import InvalidInput, ResidencyError
from residency._store._protocol import DEFAULT_SCOPE
from residency._text import printable

if TYPE_CHECKING:
    from residency._runtime import Session

__all__ = ["configure"]


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Change a residency store's sessions as an operator; every change is "
        "journaled. Exit codes: 0 done, 2 bad usage, a missing store, an unknown session or "
        "tool, or a refused change (nothing is written)."
    )
    p.add_argument(
        "store", metavar="STORE", help="sqlite:///path.db (or a path to a .db file), or postgresql://..."
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    chains = actions.add_parser("chains", help="archived chains")
    chains_actions = chains.add_subparsers(dest="chains_action", metavar="ACTION", required=True)
    listing = chains_actions.add_parser("list", help="list the chains archived in a scope")
    listing.add_argument(
        "--scope", default=DEFAULT_SCOPE, help=f"the archive scope (default {DEFAULT_SCOPE})"
    )
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    listing.set_defaults(run=_chains_list)

    learned = actions.add_parser("learned", help="what tool search learned from use")
    learned_actions = learned.add_subparsers(dest="learned_action", metavar="ACTION", required=True)
    for name, helptext, run in (
        ("list", "per tool, the queries that led to its successful calls", _learned_list),
        ("reset", "forget what the scope learned (every tool, or --tool)", _learned_reset),
    ):
        sub = learned_actions.add_parser(name, help=helptext)
        sub.add_argument(
            "--scope", default=DEFAULT_SCOPE, help=f"the archive scope (default {DEFAULT_SCOPE})"
        )
        if name == "list":
            sub.add_argument("--json", action="store_true", help="print the labels as JSON")
        sub.add_argument("--tool", metavar="TOOL", help="only this tool's labels")
        sub.set_defaults(run=run)

    readmit = actions.add_parser("readmit", help="bring an archived tool back into a session's index")
    readmit.add_argument("tool", metavar="TOOL")
    readmit.add_argument(
        "--session", required=True, metavar="ID", help="the session to change (its id or key)"
    )
    readmit.set_defaults(run=_readmit)

    shared = actions.add_parser("mark-shared", help="mark tools shared: archiving never retires them")
    shared.add_argument("tools", metavar="TOOL", nargs="+")
    shared.add_argument(
        "--session", required=True, metavar="ID", help="the session to change (its id or key)"
    )
    shared.set_defaults(run=_mark_shared)

    revoke = actions.add_parser("revoke", help="credential references of archived chains not yet revoked")
    revoke.add_argument("--session", required=True, metavar="ID", help="the session (its id or key)")
    revoke.add_argument("--retry", action="store_true", help="run the revocation hook for each of them")
    revoke.add_argument("--config", metavar="PATH", help="gateway config with residency.revoke_command")
    revoke.set_defaults(run=_revoke)


def _fail(message: object) -> int:
    print(f"residency admin: {printable(str(message))}", file=sys.stderr)
    return 2


def _say(text: str) -> None:
    """Print ``text`` (lines of stored names and rules, from upstreams), each line escaped."""
    print("\n".join(printable(line) for line in text.split("\n")))


def _chains_list(args: argparse.Namespace) -> int:
    from residency._core._chains import ChainRecord
    from residency._store import redact_url

    try:
        store = _open(args.store)
    except ResidencyError as exc:
        return _fail(exc)
    try:
        listed = getattr(store, "archived_chains", None)
        if not callable(listed):
            return _fail(f"{redact_url(args.store)}: this store keeps no archive scopes")
        records: list[dict[str, Any]] = [r for _, r in listed(args.scope)]
        if args.json:
            print(json.dumps({"scope": args.scope, "chains": records}, indent=2, sort_keys=True))
            return 0
        if not records:
            _say(f"(no chains archived in scope {args.scope!r})")
        for data in records:
            try:
                rule = ChainRecord.from_json(data).rule
            except (InvalidInput, KeyError, TypeError):
                rule = "(unreadable record)"
            print(printable(f"{str(data.get('digest'))[:12]}  {rule}"))  # one line, whatever the rule holds
        return 0
    except ResidencyError as exc:
        return _fail(exc)
    finally:
        store.close()


def _learned(args: argparse.Namespace, act: Any) -> int:
    from residency._runtime._learning import learns
    from residency._store import redact_url

    try:
        store = _open(args.store)
    except ResidencyError as exc:
        return _fail(exc)
    try:
        if not learns(store):
            return _fail(f"{redact_url(args.store)}: this store keeps no search labels")
        return int(act(store))
    except ResidencyError as exc:
        return _fail(exc)
    finally:
        store.close()


def _learned_list(args: argparse.Namespace) -> int:
    def listing(store: Any) -> int:
        labels = [r for _, r in store.search_labels(args.scope) if args.tool in (None, r.get("tool"))]
        if args.json:
            print(json.dumps({"scope": args.scope, "labels": labels}, indent=2, sort_keys=True))
            return 0
        if not labels:
            _say(f"(nothing learned in scope {args.scope!r})")
            return 0
        by_tool: dict[str, list[dict[str, Any]]] = {}
        for label in labels:
            by_tool.setdefault(str(label.get("tool")), []).append(label)
        for tool, held in sorted(by_tool.items(), key=lambda item: (-len(item[1]), item[0])):
            sessions = len({str(label.get("session")) for label in held})
            _say(f"{tool}: {len(held)} label(s) from {sessions} session(s)")
            for label in held[-5:]:  # the most recent
                _say(f"  {str(label.get('query'))[:100]!r}")
        _say(f"{len(labels)} label(s) over {len(by_tool)} tool(s) in scope {args.scope!r}")
        return 0

    return _learned(args, listing)


def _learned_reset(args: argparse.Namespace) -> int:
    def reset(store: Any) -> int:
        gone = store.forget_search_labels(args.scope, args.tool)
        which = f"of {args.tool} " if args.tool else ""
        _say(
            f"forgot {gone} label(s) {which}in scope {args.scope!r} (running gateways drop them "
            "within a minute)"
        )
        return 0

    return _learned(args, reset)


def _session_change(args: argparse.Namespace, change: Any, **options: Any) -> int:
    from residency._cli._session_names import find_session
    from residency._runtime import Session
    from residency._store import redact_url

    try:
        store = _open(args.store)
    except ResidencyError as exc:
        return _fail(exc)
    try:
        found = find_session(store.sessions(), args.session, where=redact_url(args.store))
        session = Session(store, session_id=found, resume=True, **options)
        text, code = change(session)
        _say(text)
        return int(code)
    except ResidencyError as exc:
        return _fail(exc)
    finally:
        store.close()


def _readmit(args: argparse.Namespace) -> int:
    def readmit(session: Session) -> tuple[str, int]:
        state = session.readmit(args.tool)
        return f"{args.tool}: re-admitted ({state.value}) in session {session.session_id}", 0

    return _session_change(args, readmit)


def _mark_shared(args: argparse.Namespace) -> int:
    def mark(session: Session) -> tuple[str, int]:
        session.mark_shared(*args.tools)
        return f"{', '.join(args.tools)}: marked shared in session {session.session_id}", 0

    return _session_change(args, mark)


def _revoke(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {}
    if args.retry:
        if args.config is None:
            return _fail(
                "revoke --retry needs --config PATH (a gateway config with residency.revoke_command)"
            )
        from residency._gateway._config import load_config

        try:
            config = load_config(args.config)
            revoker = config.residency.revoker(redact=config.secrets().redact)
        except ResidencyError as exc:
            return _fail(exc)
        if revoker is None:
            return _fail(f"{args.config}: no revocation hook is configured (residency.revoke_command)")
        options["revoke"] = revoker

    def revoke(session: Session) -> tuple[str, int]:
        if not args.retry:
            pending = session.pending_revocations()
            return "\n".join(map(printable, pending)) if pending else "(nothing to revoke)", 0
        outcomes = session.revoke_pending()
        if not outcomes:
            return "(nothing to revoke)", 0
        lines = [f"{printable(ref)}: {'revoked' if ok else 'failed'}" for ref, ok in sorted(outcomes.items())]
        return "\n".join(lines), 0 if all(outcomes.values()) else 1

    return _session_change(args, revoke, **options)
