"""``residency demo``: the ghost-tool scenario through the gateway, narrated.

Starts the gateway in-process on the demo incident desk, connects a real ``mcp.Client`` (the
handshake era, so list changes show), and plays an agent's turns: a mutation tool used early,
demoted by the schema budget while its arguments are still visible, refused with its tombstone
instead of being rebuilt from stale arguments, re-expanded, and called correctly; then the
desk migrates that tool's schema mid-session and the same thing happens for that reason.
"""

from __future__ import annotations

import argparse


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the gateway in-process on the demo incident desk and drive the ghost-tool "
        "scenario through a real MCP client: demotion, tombstone, refusal, re-expansion, migration."
    )
    p.add_argument("--budget", type=int, default=700, help="schema token budget per turn (default: 700)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from residency._cli._demo_play import play

    play(args.budget)
    return 0
