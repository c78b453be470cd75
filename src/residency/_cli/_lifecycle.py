"""``residency lifecycle``: print the lifecycle tables as diagrams or tables."""

from __future__ import annotations

import argparse
from typing import Any

from residency._core._lifecycle import SPAN_LIFECYCLE, TOOL_LIFECYCLE, Lifecycle

_KINDS: dict[str, Lifecycle[Any]] = {"tool": TOOL_LIFECYCLE, "span": SPAN_LIFECYCLE}


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Print a lifecycle's transition table as a Mermaid state diagram or a "
        "plain table. The same table drives the state machine and its tests."
    )
    p.add_argument("--kind", choices=[*_KINDS, "all"], default="tool", help="which lifecycle (default: tool)")
    p.add_argument(
        "--format", choices=["mermaid", "table"], default="mermaid", help="output format (default: mermaid)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    kinds = list(_KINDS) if args.kind == "all" else [args.kind]
    for i, kind in enumerate(kinds):
        lifecycle = _KINDS[kind]
        if i:
            print()
        if args.format == "mermaid":
            print(lifecycle.mermaid())
        else:
            print(f"{kind} lifecycle: trigger, source -> dest [guard]")
            for t in lifecycle.table:
                guard = f" [{t.guard_label}]" if t.guard_label else ""
                print(f"  {t.trigger:<12} {t.source.value:>12} -> {t.dest.value}{guard}")
    return 0
