"""``residency bench cost``: what a catalog costs per turn, and what residency would save.

The tools come from a gateway config (its upstreams are started and their ``tools/list`` read,
as ``residency serve`` would), a ``tools/list`` JSON file, or the bundled demo desk; the budget,
pins, phases, minify level and delivery come from the config (or its defaults), and options
override them. The session replayed is a trace (``--trace``, the format of ``_trace``) or, without
one, ``--turns`` turns of a user message and no tool call: that prices the tool block alone.

Every strategy is replayed by the session simulator (``_simulate``, ``_strategies``) and priced by
the cost model (``_pricing``), under every pricing profile: ``all-full`` (every tool, full schema,
every request: the baseline, in the same run), ``minify`` (every tool at the minify level),
``residency by list`` and ``residency by reference``. Costs are in units of one uncached input
token and given as ratios to the baseline. Nothing here needs a checkout: it runs from a wheel.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from residency._bench._pricing import DEFAULT_PROFILE, PROFILES, summarize
from residency._bench._report import BenchReport
from residency._bench._simulate import Minifier, model_view, replay
from residency._bench._strategies import make_strategy
from residency._bench._trace import Toolset, Trace, TraceTurn, bind, load_trace
from residency._core._minify import LEVELS, MinifyLevel, minify_tool
from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import ConfigError, InvalidInput
from residency._text import printable
from residency._tokens import count_tokens, tokenizer_name

if TYPE_CHECKING:
    from rich.console import Console

    from residency._gateway import GatewayConfig

__all__ = ["DEMO", "SMALL_ARGS", "Settings", "add_arguments", "catalog_cost", "read_tools_file", "run"]

SMALL_ARGS: list[str] = []

DEMO = "incident-desk"
DELIVERIES = ("list", "reference")
# The strategies replayed, as (key in the report, strategy of ``make_strategy``, label):
# every tool with its full schema; every tool minified; residency, by list and by reference.
_STRATEGIES = (
    ("all-full", "all-full", "all-full (baseline)"),
    ("minify", "minify", "minified"),
    ("list", "residency", "residency by list"),
    ("reference", "residency-reference", "residency by reference"),
)
# What the user says each turn of the call-free session.
_SAY = "Next, please look into the next item on my list and tell me what you find."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a gateway config: its upstreams are started to read their tools, and its budget, "
        "pinned tools, phases, minify level and delivery are used",
    )
    source.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help='a tools/list result as JSON ({"tools": [...]}, a list of tools, or '
        '{"server": NAME, "tools": [...]})',
    )
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="a session trace to replay (its servers are the config's upstream names, the tools "
        f"file's server or file name, or {DEMO!r}); default: --turns turns without tool calls",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=20,
        metavar="N",
        help="turns of the session without a trace (default 20)",
    )
    parser.add_argument("--schema-budget", type=int, metavar="TOKENS", help="schema tokens per turn")
    parser.add_argument(
        "--delivery", choices=DELIVERIES, help="how residency delivers withheld tools (default: the config's)"
    )
    parser.add_argument(
        "--minify", choices=("none", *LEVELS), help="how listed tools are shown (default: the config's)"
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=DEFAULT_PROFILE,
        help=f"the pricing profile of the summary figures (default {DEFAULT_PROFILE}); "
        "every profile is printed",
    )


@dataclass(frozen=True, slots=True)
class Settings:
    """What residency is configured to do: the config's ``residency`` section, overridden."""

    budget: Budget
    pinned: tuple[str, ...]
    phases: dict[str, tuple[str, ...]]
    minify: str
    delivery: str


def run(args: argparse.Namespace) -> BenchReport:
    """The ``residency bench cost`` entry point (see the module docstring)."""
    from rich.console import Console

    err = Console(stderr=True)
    try:
        if args.turns < 1:
            raise InvalidInput("must be at least 1", where="--turns")
        if args.schema_budget is not None and args.schema_budget < 0:
            raise InvalidInput("must be a non-negative token count", where="--schema-budget")
        config = _config(args.config)
        if args.config is not None:
            source = str(args.config)
            servers = _started_tools(config, err)
        elif args.tools is not None:
            source = str(args.tools)
            servers = read_tools_file(args.tools)
        else:
            from residency._gateway import desk_tools

            source, servers = f"the demo desk ({DEMO})", {DEMO: desk_tools()}
        settings = _settings(config, args)
        trace = load_trace(args.trace) if args.trace is not None else None
        data = catalog_cost(servers, settings, trace=trace, turns=args.turns)
    except (InvalidInput, ConfigError) as exc:
        err.print(f"[red]residency bench cost: {printable(str(exc))}[/red]", highlight=False)
        raise SystemExit(2) from None
    data["source"] = source
    report = BenchReport("cost", data=data)
    _figures(report, data, args.profile)
    out = Console()
    _print(data, args.profile, out if out.is_terminal else Console(width=110))
    return report


# -- the tools and the settings ----------------------------------------------------------------


def _config(path: Path | None) -> GatewayConfig:
    from residency._gateway import load_config, parse_config

    return load_config(path) if path is not None else parse_config("{}", source="<defaults>")


def _settings(config: GatewayConfig, args: argparse.Namespace) -> Settings:
    r = config.residency
    budget = r.budget.budget()
    if args.schema_budget is not None:
        budget = Budget(
            args.schema_budget,
            budget.argument_tokens,
            idle_turns=budget.idle_turns,
            planner=budget.planner,
            high_water=budget.high_water,
            low_water=budget.low_water,
        )
    # ``auto`` delivers by list while the client sees list changes: by list, for the estimate.
    delivery = args.delivery or ("reference" if r.delivery == "reference" else "list")
    return Settings(budget, tuple(r.pinned), dict(r.phases), args.minify or r.minify, delivery)


def read_tools_file(path: Path) -> dict[str, list[JSONObject]]:
    """The tools of a ``tools/list`` JSON file, keyed by their server's name.

    Accepts ``{"tools": [...]}`` (a ``tools/list`` result, or one inside a JSON-RPC response's
    ``result``), a bare list of tools, or ``{"server": NAME, "tools": [...]}``. The server is
    named by ``server`` when given, else by the file's stem.

    Raises:
        InvalidInput: the file is not readable JSON of that shape, or a tool has no name.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path}: not readable JSON: {exc}", where="--tools") from None
    server = path.stem
    if isinstance(raw, dict) and isinstance(raw.get("result"), dict):
        raw = raw["result"]
    if isinstance(raw, dict):
        if isinstance(raw.get("server"), str) and raw["server"]:
            server = raw["server"]
        raw = raw.get("tools")
    if not isinstance(raw, list) or not raw:
        raise InvalidInput(f'{path}: expected {{"tools": [...]}} or a list of tools', where="--tools")
    for i, tool in enumerate(raw):
        if not (isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"]):
            raise InvalidInput(f"{path}: tool {i} is not an object with a 'name'", where="--tools")
        schema = tool.get("inputSchema", tool.get("parameters", {}))
        if not isinstance(schema, dict):
            raise InvalidInput(
                f"{path}: tool {tool['name']!r}: its input schema is not an object", where="--tools"
            )
    return {server: list(raw)}


def _started_tools(config: GatewayConfig, err: Console) -> dict[str, list[JSONObject]]:
    """Start the config's upstreams as ``residency serve`` does and read their tools, as the
    gateway lists them (names included). An upstream that does not start is reported and left out.

    Raises:
        InvalidInput: no upstream started.
    """
    import anyio

    return anyio.run(_read_upstreams, config, err)


async def _read_upstreams(config: GatewayConfig, err: Console) -> dict[str, list[JSONObject]]:
    import logging

    import anyio

    from residency._gateway import Gateway
    from residency._store._memory import MemoryStore

    if not config.enabled_servers:
        raise InvalidInput(f"{config.source}: no enabled server in mcpServers", where="--config")
    settings = config.residency
    # Wait until every upstream has started or failed; keep sessions in memory (a bench must not
    # create the configured store) and search nothing (no wait for search vectors).
    patient = settings.model_copy(
        update={"ready_wait": max(settings.ready_wait, settings.startup_timeout + 10), "search_wait": 0}
    )
    gateway = Gateway(config.model_copy(update={"residency": patient}), store=MemoryStore())
    servers: dict[str, list[JSONObject]] = {}
    log = logging.getLogger("residency.gateway")
    quiet, saved = logging.NullHandler(), log.propagate
    log.addHandler(quiet)
    log.propagate = False
    try:
        with anyio.move_on_after(settings.startup_timeout + 40):
            async with gateway:
                secrets = config.secrets()
                for name, upstream in gateway.upstreams.items():
                    if not upstream.connected:
                        why = printable(secrets.redact(upstream.last_error)) or "still starting"
                        err.print(f"upstream {printable(name)!r} did not start: {why}", highlight=False)
                for entry in gateway.catalog.entries():
                    servers.setdefault(entry.server, []).append(dict(entry.definition))
    finally:
        log.removeHandler(quiet)
        log.propagate = saved
    if not servers:
        raise InvalidInput(f"{config.source}: no upstream started, so there are no tools", where="--config")
    return servers


# -- the figures -----------------------------------------------------------------------------------


def _minifier(level: str) -> Minifier:
    if level == "none":
        return dict
    return functools.partial(minify_tool, level=cast("MinifyLevel", level))


def _call_free_trace(servers: Mapping[str, list[JSONObject]], settings: Settings, turns: int) -> Trace:
    names = {str(t["name"]) for tools in servers.values() for t in tools}
    return Trace(
        name="call-free",
        description=f"{turns} turns of a user message and no tool call",
        servers=tuple(servers),
        budget=settings.budget,
        pinned=tuple(n for n in settings.pinned if n in names),
        phases={k: tuple(n for n in v if n in names) for k, v in settings.phases.items()},
        overrides={},
        turns=tuple(TraceTurn(phase=None, calls=(), say=_SAY) for _ in range(turns)),
    )


def catalog_cost(
    servers: Mapping[str, list[JSONObject]],
    settings: Settings,
    *,
    trace: Trace | None = None,
    turns: int = 20,
) -> JSONObject:
    """Every figure of ``residency bench cost`` for these tools, as JSON.

    Args:
        servers: server name -> its tools (``tools/list`` entries).
        settings: residency's budget, pins, phases, minify level and delivery.
        trace: the session to replay; None: ``turns`` turns without a tool call.
        turns: the length of the call-free session.

    Raises:
        InvalidInput: the trace names a server or tool these tools do not have, or a call its
            schema rejects.
    """
    if trace is None:
        trace = _call_free_trace(servers, settings, turns)
    else:
        # The budget is residency's setting; pins and phases are the trace's (its turns name them).
        trace = Trace(
            trace.name,
            trace.description,
            trace.servers,
            settings.budget,
            trace.pinned,
            trace.phases,
            trace.overrides,
            trace.turns,
        )
    toolset: Toolset = bind(trace, servers)
    minify = _minifier(settings.minify)
    full = [model_view(t) for t in toolset.initial.values()]
    full_tokens = count_tokens(full) if full else 0
    levels: JSONObject = {}
    for level in LEVELS:
        tokens = count_tokens([model_view(_minifier(level)(t)) for t in toolset.initial.values()])
        levels[level] = {"tokens": tokens, "vs_full": round(tokens / full_tokens, 4) if full_tokens else 0.0}
    strategies: JSONObject = {}
    for key, name, label in _STRATEGIES:
        strategy = make_strategy(name, toolset, trace, minify=minify, prune=minify)
        tally = replay(trace, toolset, strategy)
        bill = summarize(strategy.prompt.requests, PROFILES)
        strategies[key] = {
            "label": label,
            "listed_per_turn": list(tally.listed_per_turn),
            "tool_tokens_per_turn": list(tally.per_turn_tokens),
            "reexpansions": tally.reexpansions,
            "searches": tally.searches,
            "failed_calls": tally.failed_calls,
            **bill,
        }
    base = strategies["all-full"]["effective_cost"]
    for figures in strategies.values():
        figures["cost_vs_all_full"] = {
            p: round(v / base[p], 4) if base[p] else 0.0 for p, v in figures["effective_cost"].items()
        }
    return {
        "tokenizer": tokenizer_name(),
        "servers": {name: len(tools) for name, tools in servers.items()},
        "tools": len(toolset.initial),
        "full_tokens_per_turn": full_tokens,
        "minified_tokens_per_turn": levels,
        "settings": {
            "schema_tokens": settings.budget.schema_tokens,
            "argument_tokens": settings.budget.argument_tokens,
            "pinned": list(trace.pinned),
            "minify": settings.minify,
            "delivery": settings.delivery,
        },
        "session": {
            "trace": trace.name,
            "description": trace.description,
            "turns": len(trace.turns),
            "calls": trace.calls,
        },
        "profiles": {p: {"write": v.write, "read": v.read, "model": v.model} for p, v in PROFILES.items()},
        "strategies": strategies,
    }


def _figures(report: BenchReport, data: Mapping[str, Any], profile: str) -> None:
    report.add("tools", data["tools"], "")
    report.add("full schemas, tokens per turn", data["full_tokens_per_turn"], "tokens")
    for level, f in data["minified_tokens_per_turn"].items():
        report.add(f"minified {level} / full", f["vs_full"], "x")
    for key in DELIVERIES:
        s = data["strategies"][key]
        report.add(f"residency by {key}: tools listed, turn 1", s["listed_per_turn"][0], "")
        report.add(
            f"residency by {key}: tool tokens per turn, mean", _mean(s["tool_tokens_per_turn"]), "tokens"
        )
    for key, _, _ in _STRATEGIES[1:]:
        report.add(
            f"{key} cost / all-full, {profile}", data["strategies"][key]["cost_vs_all_full"][profile], "x"
        )


def _mean(values: list[int]) -> float:
    return round(statistics.fmean(values), 1) if values else 0.0


def _print(data: Mapping[str, Any], profile: str, console: Console) -> None:
    from rich import box
    from rich.table import Table

    settings, session = data["settings"], data["session"]
    console.print(
        f"[bold]{data['tools']} tools[/bold] from {printable(data['source'])}; tokens counted with "
        f"{data['tokenizer']}; schema budget {settings['schema_tokens']:,}, minify {settings['minify']}, "
        f"delivery {settings['delivery']}",
        highlight=False,
    )
    full = data["full_tokens_per_turn"]
    sizes = Table(title="What the tool list costs on every request", box=box.SIMPLE_HEAD)
    for col in ("shown as", "tokens per turn", "vs full"):
        sizes.add_column(col, justify="left" if col == "shown as" else "right")
    sizes.add_row("full schemas", f"{full:,}", "1.00x")
    for level, f in data["minified_tokens_per_turn"].items():
        sizes.add_row(f"minified: {level}", f"{f['tokens']:,}", f"{f['vs_full']:.2f}x")
    console.print(sizes)
    what = (
        f"trace {session['trace']}: {session['turns']} turns, {session['calls']} calls"
        if session["calls"]
        else f"{session['turns']} turns without a tool call: the tool block alone"
    )
    listed = Table(title=f"What each way lists per turn ({what})", box=box.SIMPLE_HEAD)
    for col in ("way", "tools listed", "tool tokens per turn", "re-expansions", "searches", "list changes"):
        listed.add_column(col, justify="left" if col == "way" else "right")
    for key, s in data["strategies"].items():
        mark = " *" if key == settings["delivery"] else ""
        counts = s["listed_per_turn"]
        shown = f"{min(counts)}-{max(counts)}" if min(counts) != max(counts) else str(counts[0])
        listed.add_row(
            s["label"] + mark,
            shown,
            f"{_mean(s['tool_tokens_per_turn']):,.0f}",
            str(s["reexpansions"]),
            str(s["searches"]),
            str(s["list_changes"]),
        )
    console.print(listed)
    bill = Table(
        title="Input cost of the session with prompt caching (uncached input token = 1; vs the baseline)",
        box=box.SIMPLE_HEAD,
    )
    bill.add_column("way")
    for p in data["profiles"]:
        bill.add_column(p + (" *" if p == profile else ""), justify="right")
    for key, s in data["strategies"].items():
        cells = [f"{s['effective_cost'][p]:,.0f} ({s['cost_vs_all_full'][p]:.2f}x)" for p in data["profiles"]]
        bill.add_row(s["label"] + (" *" if key == settings["delivery"] else ""), *cells)
    console.print(bill)
    prices = ", ".join(f"{p} (write {v['write']:g}, read {v['read']:g})" for p, v in data["profiles"].items())
    console.print(
        f"*: the configured delivery ({settings['delivery']}) and the profile of the summary figures "
        f"({profile}). Profiles: {prices}.",
        highlight=False,
    )
    if not session["calls"]:
        console.print(
            "Without --trace the session makes no tool call: schemas fetched on demand, results and "
            "re-expansions are not priced. Replay a session of yours with --trace FILE.",
            highlight=False,
        )
