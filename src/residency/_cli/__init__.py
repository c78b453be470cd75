"""The ``residency`` command line.

Each sub-command lives in its own module exposing ``configure(parser)``, which adds its options
and sets ``run`` (``args -> exit code``). A command's module is imported only when the command
is named (``LazyCommands``), and imports what its work needs inside ``run``: ``residency
--help`` and every ``--help`` below it answer without importing the gateway, the runtime or the
MCP SDK. Exit codes: 0 success, 1 the work found problems (e.g. verification disagreements), 2
bad usage or bad input.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

__all__ = ["Command", "LazyCommands", "entry", "main"]


class Command(NamedTuple):
    """A sub-command: its name, the module that configures it, and its one-line help."""

    name: str
    module: str
    help: str


# In the order ``--help`` lists them.
COMMANDS = (
    Command("serve", "residency._cli._serve", "run the MCP gateway (stdio or streamable HTTP)"),
    Command("config", "residency._cli._config", "check a gateway config file"),
    Command(
        "demo", "residency._cli._demo", "play the ghost-tool scenario through the gateway and narrate it"
    ),
    Command("minify", "residency._cli._minify", "minify tool schemas without losing a validation constraint"),
    Command(
        "inspect",
        "residency._cli._inspect",
        "show the sessions of a store, or one session's tools, tombstones, spans and events",
    ),
    Command(
        "admin",
        "residency._cli._admin",
        "operator changes: list archived chains, re-admit a tool, mark tools shared",
    ),
    Command(
        "view",
        "residency._cli._view",
        "show what the model sees now in a gateway session: listed tools, tokens, tombstones",
    ),
    Command(
        "ui",
        "residency._cli._ui",
        "serve the read-only operator dashboard for a store in a browser",
    ),
    Command(
        "bench",
        "residency._cli._bench",
        "measure what your tools cost per turn and what residency would save",
    ),
    Command(
        "lifecycle",
        "residency._cli._lifecycle",
        "print the lifecycle state diagrams (generated from the transition tables)",
    ),
)


class LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-parsers whose options are added only when their command is parsed.

    ``add_lazy`` registers a name with its help (what the parent's ``--help`` lists) and a
    ``configure(parser)`` that runs the first time the name is met on a command line; a
    ``--help`` after the name then shows that command's options, and nothing else is loaded.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, Callable[[argparse.ArgumentParser], None]] = {}

    def add_lazy(self, name: str, help: str, configure: Callable[[argparse.ArgumentParser], None]) -> None:
        self.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".")
        self._pending[name] = configure

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, Sequence) and values:
            configure = self._pending.pop(str(values[0]), None)
            if configure is not None:
                configure(self._name_parser_map[str(values[0])])
        super().__call__(parser, namespace, values, option_string)


def lazy_subparsers(parser: argparse.ArgumentParser, **kwargs: Any) -> LazyCommands:
    """``parser.add_subparsers(...)`` whose commands are configured when named."""
    action = parser.add_subparsers(action=LazyCommands, **kwargs)
    assert isinstance(action, LazyCommands)
    return action


def _configure_from(module: str) -> Callable[[argparse.ArgumentParser], None]:
    def configure(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(module).configure(parser)

    return configure


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="residency",
        description="A typed lifecycle runtime for tool schemas, call arguments, context spans "
        "and tool chains, with an MCP gateway.",
    )
    from residency import __version__

    parser.add_argument("--version", action="version", version=f"residency {__version__}")
    commands = lazy_subparsers(parser, dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        commands.add_lazy(command.name, command.help, _configure_from(command.module))
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


def entry() -> NoReturn:
    """The ``residency`` command (and ``python -m residency``): :func:`main`, then out.

    Leaves as the interpreter would (non-daemon threads joined, ``atexit`` handlers run, the
    standard streams flushed) but without freeing every module and object first: after a
    gateway that is 0.13-0.2 s of CPU (the ``mcp`` SDK's pydantic models alone cost 0.13 s),
    paid at every exit of a gateway a host starts per connection."""
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # logging's flush, weakref finalizers, coverage's save, ...
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
