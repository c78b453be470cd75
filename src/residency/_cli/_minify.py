"""``residency minify``: minify a ``tools/list`` result without losing a constraint."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from residency._core._minify import DEFAULT_LEVEL, LEVELS, MinifyReport, minify_tool_with_report, model_view
from residency._errors import InvalidInput
from residency._text import printable

if TYPE_CHECKING:
    from rich.table import Table

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2
_PROGRESS_FROM = 100  # tools (or 20 with --verify): below that, progress is noise

_EPILOG = """\
input:  a tools/list result, {"tools": [...]}, or a bare list of tools; "-" reads stdin.
output: {"tools": [...]} (compact JSON), the tools in the same order.

exit codes:
  0  every tool minified (and, with --verify, every verdict agreed)
  1  --verify found a disagreement, or --keep-going skipped a bad tool
  2  bad usage or bad input (not JSON, no tools, a bad tool without --keep-going,
     an unwritable output, --verify without hypothesis-jsonschema installed); nothing
     is written
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Minify the tools of a tools/list result. Every level keeps every "
        "validation constraint; levels differ only in prose. Token figures count name, "
        "description and inputSchema (what a model is sent)."
    )
    p.epilog = _EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("file", metavar="FILE", help='the tools/list JSON file, or "-" for stdin')
    p.add_argument(
        "--level",
        choices=LEVELS,
        default=DEFAULT_LEVEL,
        help=f"full-text: decoration only; compact: informative prose only; minimal: no "
        f"descriptions inside schemas (default: {DEFAULT_LEVEL})",
    )
    p.add_argument("-o", "--output", metavar="OUT", type=Path, help="write here instead of stdout")
    p.add_argument("--report", action="store_true", help="print tokens before/after per tool to stderr")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check that the original and minified schemas give generated instances the same verdicts",
    )
    p.add_argument("--keep-going", action="store_true", help="skip bad tools (reported) instead of stopping")
    p.set_defaults(run=run)


def _say(message: str) -> None:
    """One plain line on stderr (never wrapped, so it stays greppable)."""
    print(f"residency minify: {printable(message)}", file=sys.stderr)


def _fail(message: str) -> int:
    _say(f"error: {message}")
    return EXIT_BAD_INPUT


def _read(file: str) -> tuple[str, object]:
    """The document's label and its parsed JSON. Raises InvalidInput naming the file."""
    label = "<stdin>" if file == "-" else file
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{label}: cannot read: {exc}", where=label) from exc
    try:
        return label, json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{label}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", where=label
        ) from exc


def _tools(label: str, doc: object) -> tuple[str, Sequence[object]]:
    """The JSON Pointer prefix of the tools and the tools. Raises InvalidInput."""
    if isinstance(doc, list):
        return "", doc
    if isinstance(doc, Mapping) and isinstance(doc.get("tools"), list):
        return "/tools", doc["tools"]
    if isinstance(doc, Mapping) and "tools" in doc:
        raise InvalidInput(f"{label}: /tools must be a list of tools", where="/tools")
    raise InvalidInput(f'{label}: expected {{"tools": [...]}} or a list of tools', where="/")


def _table(rows: list[tuple[str, int, int, str]], level: str) -> Table:
    from rich.table import Table
    from rich.text import Text

    from residency._tokens import tokenizer_name

    table = Table(
        title=f"residency minify --level {level}",
        caption=f"tokens of name+description+inputSchema, counted with {tokenizer_name()}",
    )
    for col in ("tool", "before", "after", "cut", "removed"):
        table.add_column(
            col, justify="right" if col in ("before", "after", "cut") else "left", overflow="fold"
        )
    for name, before, after, removed in rows:
        # Names come from the tools file (often an upstream's list): escaped, never markup.
        shown, summary = Text(printable(name)), Text(printable(removed))
        table.add_row(shown, f"{before:,}", f"{after:,}", _pct(before, after), summary)
    total_before = sum(r[1] for r in rows)
    total_after = sum(r[2] for r in rows)
    table.add_section()
    table.add_row(
        f"total ({len(rows)} tools)",
        f"{total_before:,}",
        f"{total_after:,}",
        _pct(total_before, total_after),
        "",
    )
    return table


VERIFY_INSTALL = "pip install hypothesis-jsonschema"
"""How to get what ``--verify`` draws instances with."""


def _verifier_missing() -> str | None:
    """Why ``--verify`` cannot run here (its instance generator is not installed), or None.

    Without it only targeted mutations would be checked, far from the drawn instances the
    verification promises: the command refuses rather than pass on less.
    """
    import importlib

    try:
        importlib.import_module("hypothesis_jsonschema")
    except ImportError as exc:
        return (
            f"--verify needs hypothesis-jsonschema, which cannot be imported here ({exc}); "
            f"install it ({VERIFY_INSTALL}) or leave out --verify"
        )
    return None


def _pct(before: int, after: int) -> str:
    return f"{100 * (before - after) / before:.1f}%" if before else "-"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    err = Console(stderr=True, soft_wrap=False)
    try:
        label, doc = _read(args.file)
        prefix, tools = _tools(label, doc)
    except InvalidInput as exc:
        return _fail(str(exc))
    verify = None
    if args.verify:
        missing = _verifier_missing()
        if missing is not None:
            return _fail(missing)
        from residency._verify import verify_tool

        verify = verify_tool
    out: list[dict[str, Any]] = []
    rows: list[tuple[str, int, int, str]] = []
    problems = 0
    threshold = 20 if args.verify else _PROGRESS_FROM
    with Progress(
        console=err, transient=True, disable=len(tools) < threshold or not err.is_terminal
    ) as progress:
        task = progress.add_task(f"minifying {label}", total=len(tools))
        for i, tool in enumerate(tools):
            where = f"{prefix}/{i}"
            try:
                if not isinstance(tool, Mapping):
                    raise InvalidInput(f"{where}: a tool must be a JSON object", where=where)
                minified, report = minify_tool_with_report(tool, args.level, where=where)
            except InvalidInput as exc:
                if not args.keep_going:
                    return _fail(f"{label}: {exc}")
                _say(f"skipped: {label}: {exc}")
                problems += 1
                progress.advance(task)
                continue
            out.append(minified)
            if args.report:
                rows.append(_row(tool, minified, report))
            if verify is not None:
                result = verify(tool, minified)
                for d in result.disagreements:
                    problems += 1
                    verdicts = (
                        f"original {'accepts' if d.original_valid else 'rejects'}, "
                        f"minified {'accepts' if d.minified_valid else 'rejects'}"
                    )
                    _say(
                        f"disagreement: {label}: tool {d.tool!r} at {d.path or '/'} ({d.kind}): "
                        f"{verdicts}: {json.dumps(d.instance)[:200]}"
                    )
                if "mutations only" in result.generator:
                    _say(f"note: {label}: tool {result.tool!r}: {result.generator}")
            progress.advance(task)
    text = json.dumps({"tools": out}, separators=(",", ":"), ensure_ascii=False) + "\n"
    try:
        if args.output is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        return _fail(f"{args.output}: cannot write: {exc}")
    if args.report:
        err.print(_table(rows, args.level))
    if args.verify:
        verdict = "every verdict agreed" if not problems else f"{problems} problem(s)"
        _say(f"verified {len(out)} tool(s): {verdict}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _row(
    tool: Mapping[str, Any], minified: Mapping[str, Any], report: MinifyReport
) -> tuple[str, int, int, str]:
    from residency._tokens import count_tokens

    return report.tool, count_tokens(model_view(tool)), count_tokens(model_view(minified)), report.summary()
