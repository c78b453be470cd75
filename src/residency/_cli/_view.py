"""``residency view``: what the model sees now in one gateway session, read from its store.

Prints the tools the gateway lists for the session (by reference, the default delivery: its
pinned tools; by list: its resident tools; in the gateway's order, each with the tokens of its
shown, minified definition), the meta-tools with
their tokens (the same in every session), the total, and the tombstone lines (which the model
got in call results and ``residency://tombstones``, not in the list). Nothing in the store is
changed.

Gateway sessions are journaled as ``gateway/<key>``: the store id or the key is accepted, as
by ``inspect`` and ``admin`` (``_session_names``). How tools are shown depends on the gateway's
``minify`` level, delivery and pins, which the journal does not record: pass the ``--config``
the gateway was served with (no ``--config``: the demo's policy, as for ``residency serve``) or
``--minify``. An ``auto`` session is shown as by list with ``call_tool`` (whether it switched to
delivery by reference is not journaled).

The list is read from the journal alone: a resident tool that its upstream stopped offering
is shown here although the gateway leaves it out until it is offered again.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from residency._core._minify import MINIFY_ALIASES, MINIFY_LEVELS
from residency._errors import ConfigError, ResidencyError
from residency._text import printable
from residency._ui._reads import ServedWith, view

__all__ = ["ServedWith", "configure", "run", "view"]

_LEVELS = (*MINIFY_LEVELS, *MINIFY_ALIASES)


def add_store_argument(p: argparse.ArgumentParser) -> None:
    """``--store URL``, the store a reading command opens (``view``, ``ui``)."""
    p.add_argument(
        "--store",
        required=True,
        metavar="URL",
        help="sqlite:///path.db (or a path to a .db file) or postgresql://...",
    )


def add_served_arguments(p: argparse.ArgumentParser) -> None:
    """``--config`` and ``--minify``: how the gateway served its sessions (see :func:`_served_with`)."""
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the gateway's config, for its minify level, delivery and pins (default: the demo's policy)",
    )
    p.add_argument(
        "--minify",
        choices=_LEVELS,
        help="the gateway's minify level (overrides --config; lossless means full-text)",
    )


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Show the tool list a gateway session is served now, with each tool's tokens, "
        "the meta-tools, the total and the tombstone lines, read from the gateway's store without "
        "changing it. Exit codes: 0 shown, 2 bad usage, a missing or unreadable store or config, "
        "or an unknown session."
    )
    add_store_argument(p)
    p.add_argument(
        "--session",
        required=True,
        metavar="ID",
        help="the session key it was served under, or its store id as 'residency inspect' lists it",
    )
    add_served_arguments(p)
    p.add_argument("--json", action="store_true", help="print the view as JSON")
    p.set_defaults(run=run)


def _served_with(args: argparse.Namespace) -> ServedWith:
    """How the gateway served the session, from ``--config`` (or the demo's) and ``--minify``.

    Raises:
        ConfigError: the config file is missing or malformed.
    """
    from residency._gateway._config import load_config, parse_config
    from residency._gateway._run import DEMO_CONFIG

    config = load_config(args.config) if args.config else parse_config(DEMO_CONFIG, source="<demo>")
    level = MINIFY_ALIASES.get(args.minify, str(args.minify)) if args.minify is not None else None
    return ServedWith.of(config, level)


def run(args: argparse.Namespace) -> int:
    from residency._store import redact_url
    from residency._ui._names import find_session
    from residency._ui._reads import open_readonly, open_session

    try:
        served = _served_with(args)
        store = open_readonly(args.store)
    except ResidencyError as exc:
        print(f"residency view: {printable(str(exc))}", file=sys.stderr)
        return 2
    try:
        found = find_session(store.sessions(), args.session, where=redact_url(args.store))
        session = open_session(store, found, served)
        listed = view(session, offload=served.offload, delivery=served.delivery, pinned=served.pinned)
        shown = {"requested": args.session, **listed, "minify": served.minify}
    except (ConfigError, ResidencyError) as exc:
        print(f"residency view: {printable(str(exc))}", file=sys.stderr)
        return 2
    finally:
        store.close()
    if args.json:
        print(json.dumps(shown, indent=2))
    else:
        _print(shown)
    return 0


def _print(v: dict[str, Any]) -> None:
    # Names and tombstone lines come from upstreams through the journal: shown escaped.
    found = "" if v["session"] == v["requested"] else f" (found as {printable(v['session'])})"
    print(
        f"session {printable(v['requested'])}{found}: turn {v['turn']}, minify {v['minify']}, "
        f"delivery {v['delivery']}"
    )
    tools = [(printable(t["name"]), t["tokens"]) for t in v["tools"]]
    metas = [(printable(m["name"]), m["tokens"]) for m in v["meta_tools"]]
    width = max([len(name) for name, _ in (*tools, *metas)] + [len("total")])
    which = "pinned" if v["delivery"] == "reference" else "resident"
    print(f"listed tools ({len(tools)} {which} + {len(metas)} meta-tools):")
    for name, tokens in tools:
        print(f"  {name:<{width}}  {tokens:>6}")
    for name, tokens in metas:
        print(f"  {name:<{width}}  {tokens:>6}  (meta-tool)")
    print(f"  {'total':<{width}}  {v['total_tokens']:>6}  tokens ({v['tokenizer']})")
    print(f"tombstones ({len(v['tombstones'])}):")
    for line in v["tombstones"] or ["(none)"]:
        print(f"  {printable(line)}")
