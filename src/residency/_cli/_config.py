"""``residency config check``: find what is wrong with a gateway config before a host runs it.

A host (Claude Desktop, Cursor, VS Code) that starts ``residency serve`` with a broken config
shows little more than "server disconnected". This command says what is wrong and where: the
file is validated as ``serve`` would load it, then checked for what loads but will not work (no
upstream at all, a relative store path, a command not on PATH), then the upstreams are started
as ``serve`` starts them and every tool name the ``residency`` section mentions is looked up in
what they offer. Each finding names the file, the line and the key.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from residency._errors import ConfigError
from residency._text import printable

if TYPE_CHECKING:
    from residency._gateway._config import GatewayConfig, StdioServer

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2

_NAME_SHOWN = 80
"""Characters of an upstream's tool name a finding shows (a name may be 10 kB long)."""

_EPILOG = """\
checks:
  errors    the file does not load (not JSON, an unknown or mistyped key, a VS Code
            "servers" file, two servers whose tool prefixes coincide, such as a.b and
            a_b), it has no server under "mcpServers", or an entry runs 'residency
            serve' on this same file
  warnings  a pinned, phase, read_only, mutating or spans.tags tool no upstream offers
            (names as the gateway lists them: namespaced server__tool when two upstreams
            share a name), or that the gateway never lists (not a valid tool name, in the
            reserved residency__ namespace, in a disabled server's namespace); an upstream tool
            name the gateway renames (one in another server's namespace, a meta-tool's
            name, an invalid name); a malformed upstream tool, a relative sqlite store
            path, a stdio command not found on PATH, a cwd that does not exist, phases
            with delivery by reference
  upstreams each enabled upstream is started and listed (skipped with --no-connect)

output: findings on stderr, each with its line and key (and the key or value a near-miss
  was likely meant to be); every error of the file is reported in one run. The last line
  is a summary: on stdout when the file is usable ("FILE: OK: ..."), else on stderr
  ("FILE: N errors, M warnings").

exit codes:
  0  valid (warnings allowed)
  1  valid, but an upstream did not start or list its tools
  2  errors: the gateway would refuse the file or serve nothing
"""


def configure(p: argparse.ArgumentParser) -> None:
    p.description = "Work with gateway config files (the 'mcpServers' shape plus a 'residency' section)."
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="validate a gateway config and try its upstreams",
        description="Validate a gateway config as 'residency serve' loads it, start its upstreams, "
        "and check that every tool the 'residency' section names is offered by one of them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", metavar="FILE", help="the gateway config (JSON)")
    check.add_argument(
        "--no-connect", action="store_true", help="do not start the upstreams (checks the file alone)"
    )
    check.set_defaults(run=run_check)


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a config, at a key (and a line when it can be found)."""

    severity: Literal["error", "warning"]
    key: str
    message: str
    line: int | None = None

    def render(self, source: str) -> str:
        where = f"line {self.line}, " if self.line else ""
        return f"{self.severity}: {source}: {where}key '{self.key}': {self.message}"


def _at(
    severity: Literal["error", "warning"], text: str, loc: tuple[str, ...], message: str, *, value: str = ""
) -> Finding:
    """A finding at the key ``loc``; on the line of ``value`` (a string in the key's list) if given."""
    from residency._gateway._config import line_of

    line = line_of(text, (*loc, value) if value else loc)
    return Finding(severity, ".".join(loc), message, line)


def _say(message: str) -> None:
    print(f"residency config check: {printable(message)}", file=sys.stderr)


def run_check(args: argparse.Namespace) -> int:
    import anyio

    from residency._gateway._config import load_config

    try:
        config = load_config(args.file)
    except ConfigError as exc:
        # Every problem of the file, each at its line and key (one when it is not JSON at all).
        problems = [str(p) for p in exc.problems] or [str(exc)]
        for problem in problems:
            _say(f"error: {problem}")
        _say(_tally(args.file, len(problems), 0))
        return EXIT_BAD_INPUT
    # load_config has read it once already; the text only places findings on lines.
    text = Path(args.file).read_text(encoding="utf-8")
    findings = review(config, text)
    if any(f.severity == "error" for f in findings):
        _report(findings, config.source)
        return EXIT_BAD_INPUT
    servers: list[str] = []
    started = True
    if not args.no_connect:
        found, servers, started = anyio.run(_try_upstreams, config, text)
        findings += found
    if not started:
        # The file is fine; an upstream is not (its errors say why): 1, not 2.
        _report(findings, config.source)
        return EXIT_PROBLEMS
    for finding in findings:
        _say(finding.render(config.source))
    warnings = sum(f.severity == "warning" for f in findings)
    enabled = len(config.enabled_servers)
    disabled = len(config.servers) - enabled
    parts = [f"{enabled} server{'s' * (enabled != 1)}" + (f" ({disabled} disabled)" if disabled else "")]
    parts.append(", ".join(servers) if servers else "upstreams not started (--no-connect)")
    parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    print(printable(f"{config.source}: OK: " + "; ".join(parts)))
    return EXIT_OK


def _tally(source: str, errors: int, warnings: int) -> str:
    return f"{source}: {errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"


def _report(findings: list[Finding], source: str) -> None:
    """The findings of a check that failed, then its summary line (on stderr: the file is not usable)."""
    for finding in findings:
        _say(finding.render(source))
    errors = sum(f.severity == "error" for f in findings)
    _say(_tally(source, errors, len(findings) - errors))


def review(config: GatewayConfig, text: str) -> list[Finding]:
    """What a config that loads gets wrong without starting anything.

    Args:
        config: the loaded config.
        text: its text, to place findings on lines.

    Returns:
        The findings, errors first.
    """
    from residency._gateway._config import StdioServer

    found: list[Finding] = []
    if not config.servers:
        found.append(
            _at(
                "error",
                text,
                ("mcpServers",),
                'no upstream server: add one under "mcpServers" (with none, the gateway serves '
                "only its meta-tools)",
            )
        )
    elif not config.enabled_servers:
        found.append(
            _at("warning", text, ("mcpServers",), "every server is disabled: no tool will be served")
        )
    store = config.residency.store
    if store.startswith("sqlite:///") and not Path(store.removeprefix("sqlite:///")).is_absolute():
        found.append(
            _at(
                "warning",
                text,
                ("residency", "store"),
                "a relative path is resolved in the directory the host starts the gateway in "
                "(often / or your home): use sqlite:////absolute/path.db",
            )
        )
    if config.residency.phases and config.residency.delivery == "reference":
        found.append(
            _at(
                "warning",
                text,
                ("residency", "phases"),
                "phases choose what a changing tool list shows; delivered by reference (the "
                'default) the list is fixed and phases change nothing: set "delivery" to "list" '
                'or "auto" to use them',
            )
        )
    found += _unlisted_names(config, text)
    for name, entry in config.enabled_servers.items():
        if not isinstance(entry, StdioServer):
            continue
        env_path = entry.env.get("PATH")
        path = env_path.get_secret_value() if env_path is not None else None
        if _is_path(entry.command):
            # A command with a slash is run as it is, relative to the upstream's cwd.
            if not Path(entry.cwd or ".", entry.command).is_file():
                found.append(_at("warning", text, ("mcpServers", name, "command"), "no such file"))
        elif shutil.which(entry.command, path=path) is None:
            found.append(
                _at(
                    "warning",
                    text,
                    ("mcpServers", name, "command"),
                    f"{entry.command!r} is not found on PATH here; hosts often start servers with a "
                    "shorter PATH than your shell: use an absolute path",
                )
            )
        if _starts_this_config(entry, config.source):
            found.append(
                _at(
                    "error",
                    text,
                    ("mcpServers", name),
                    "this entry runs 'residency serve' on this same file: the gateway would start "
                    "itself without end (a host's config points at the gateway; the gateway's "
                    "config lists the upstreams)",
                )
            )
        if entry.cwd is not None and not Path(entry.cwd).is_dir():
            found.append(_at("warning", text, ("mcpServers", name, "cwd"), "no such directory"))
    return found


def _unlisted_names(config: GatewayConfig, text: str) -> list[Finding]:
    """Tool names the residency section gives that the gateway never lists, whatever upstreams offer."""
    found: list[Finding] = []
    for key, tool in _named_tools(config):
        why = _never_listed(config, tool)
        if why is not None:
            message = f"{tool!r} {why}: the gateway lists no tool of that name"
            found.append(_at("warning", text, key, message, value=tool))
    return found


def _never_listed(config: GatewayConfig, tool: str) -> str | None:
    """Why the gateway never lists a tool named ``tool`` under this config; None if it may."""
    from residency._gateway._aggregate import SEPARATOR, name_owner, valid_tool_name

    if not valid_tool_name(tool):
        return "is not a valid tool name (1-128 characters of A-Z a-z 0-9 _ . -)"
    owner = name_owner(tool, config.servers)
    if owner is not None and owner.endswith(SEPARATOR):
        return f"is in the namespace {owner} the gateway keeps for itself"
    if owner is not None and config.servers[owner].disabled:
        return f"is in the namespace of server {owner!r}, which is disabled"
    return None


def _starts_this_config(entry: StdioServer, source: str) -> bool:
    args = list(entry.args)
    if "serve" not in args:
        return False
    named = [b for a, b in pairwise(args) if a == "--config"]
    named += [a.removeprefix("--config=") for a in args if a.startswith("--config=")]
    here = Path(source).resolve()
    return any(Path(entry.cwd or ".", n).resolve() == here for n in named)


def _is_path(command: str) -> bool:
    return "/" in command or os.sep in command


def _named_tools(config: GatewayConfig) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every tool name the residency section mentions, with the key that lists it."""
    settings = config.residency
    for name in settings.pinned:
        yield ("residency", "pinned"), name
    for phase, names in settings.phases.items():
        for name in names:
            yield ("residency", "phases", phase), name
    for name in settings.read_only:
        yield ("residency", "read_only"), name
    for name in settings.mutating:
        yield ("residency", "mutating"), name
    for name in settings.spans.tags:
        yield ("residency", "spans", "tags"), name


@contextmanager
def _quiet_gateway() -> Iterator[None]:
    """Keep the gateway's own log lines out: each thing they say is reported as a finding."""
    log = logging.getLogger("residency.gateway")
    handler = logging.NullHandler()
    saved = log.propagate
    log.addHandler(handler)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = saved


async def _try_upstreams(config: GatewayConfig, text: str) -> tuple[list[Finding], list[str], bool]:
    """Start the upstreams as ``serve`` does; returns findings, per-server counts, all started."""
    import anyio

    from residency._gateway._aggregate import name_owner
    from residency._gateway._meta_tools import META_TOOLS
    from residency._gateway._server import Gateway
    from residency._store._memory import MemoryStore

    settings = config.residency
    # Wait until every upstream has started or failed (serve would start serving after
    # ready_wait; a start fails after startup_timeout, so wait a little longer than that), and
    # keep sessions in memory: a check must not create the configured store. It searches
    # nothing, so it does not wait for search vectors.
    patient = settings.model_copy(
        update={"ready_wait": max(settings.ready_wait, settings.startup_timeout + 10), "search_wait": 0}
    )
    gateway = Gateway(config.model_copy(update={"residency": patient}), store=MemoryStore())
    secrets = config.secrets()
    found: list[Finding] = []
    counts: list[str] = []
    failed: list[str] = []
    limit = settings.startup_timeout + 40
    with _quiet_gateway(), anyio.move_on_after(limit) as waited:
        async with gateway:
            catalog = gateway.catalog
            for name, upstream in gateway.upstreams.items():
                loc = ("mcpServers", name)
                if not upstream.connected:
                    failed.append(name)
                    why = printable(secrets.redact(upstream.last_error)) or "still starting"
                    found.append(_at("error", text, loc, f"upstream ({upstream.kind}) did not start: {why}"))
                    continue
                served = {e.upstream_name for e in catalog.entries() if e.server == name}
                counts.append(f"{printable(name)}: {len(served)} tool{'s' * (len(served) != 1)}")
                for offered in upstream.tools:
                    if str(offered.get("name")) not in served:
                        shown = printable(secrets.redact(str(offered.get("name"))), limit=_NAME_SHOWN)
                        found.append(
                            _at(
                                "warning",
                                text,
                                loc,
                                f"tool '{shown}' is malformed (not a valid tool or JSON Schema) and is not "
                                "served",
                            )
                        )
                for moved in catalog.renamed():
                    if moved.server == name:
                        shown = printable(secrets.redact(moved.upstream_name), limit=_NAME_SHOWN)
                        message = f"tool '{shown}' {moved.renamed}: it is listed as {moved.name}"
                        found.append(_at("warning", text, loc, message))
    if waited.cancelled_caught:
        # Only if the gateway's own startup bound failed: report, never hang a host's setup.
        where = _at("error", text, ("mcpServers",), f"the upstreams did not start within {limit:g} s")
        return [where], [], False
    for key, tool in _named_tools(config):
        if tool in catalog or _never_listed(config, tool) is not None:
            continue  # listed, or review() said why it never is
        owner = name_owner(tool, config.servers)
        if tool in META_TOOLS:
            message = f"{tool!r} is a meta-tool: the gateway always lists it"
        else:
            others = [e for e in catalog.entries() if e.upstream_name == tool]
            message = (
                f"no tool is listed as {tool!r}" if others else f"no upstream offers a tool named {tool!r}"
            )
            for other in others:
                why = other.renamed or "more than one upstream offers it"
                message += f"; server {other.server!r}'s tool of that name is listed as {other.name} ({why})"
            if owner is not None and owner in failed:
                message += f" (it is in the namespace of server {owner!r}, which did not start)"
            elif not others and failed:
                message += f" (not started, so not checked: {', '.join(failed)})"
        found.append(_at("warning", text, key, message, value=tool))
    return found, counts, not failed
