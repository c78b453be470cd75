"""The ``residency`` command line.

Each sub-command lives in its own module exposing ``add_parser(subparsers)``; the parser it
adds sets ``run`` (``args -> exit code``). Exit codes: 0 success, 1 the work found problems
(e.g. verification disagreements), 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Sub-command modules, in the order ``--help`` lists them.
_COMMANDS = (
    "residency._cli._serve",
    "residency._cli._config",
    "residency._cli._demo",
    "residency._cli._minify",
    "residency._cli._inspect",
    "residency._cli._admin",
    "residency._cli._view",
    "residency._cli._bench",
    "residency._cli._lifecycle",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="residency",
        description="A typed lifecycle runtime for tool schemas, call arguments, context spans "
        "and tool chains, with an MCP gateway.",
    )
    from residency import __version__

    parser.add_argument("--version", action="version", version=f"residency {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
