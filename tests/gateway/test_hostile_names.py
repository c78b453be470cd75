"""Names no upstream can forge: an ``evil`` upstream offers ``good__echo``, meta-tool names and
names carrying newlines, terminal escapes, bidi and zero-width characters and 10 kB of text.

The real ``good`` server's ``echo`` is ``good__echo`` whichever server comes up first (or with
``good`` down, then arriving), policies keyed by that name bind to it, calls reach the upstream
that offers a tool under its own name, the model is listed valid names only, and neither the
log nor ``residency view``/``inspect``/``config check`` writes a control, bidi or invisible
character.
"""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from residency import Session, SQLiteStore, ToolState
from residency._cli import main
from residency._gateway._aggregate import gateway_names, name_owner, valid_tool_name
from residency._gateway._meta_tools import META_TOOLS
from residency._gateway._run import ServeOptions, startup_summary
from residency._gateway._sessions import store_id
from tests._timing import NOTICE, START
from tests.gateway import names_upstream
from tests.gateway.conftest import agent, running, text
from tests.gateway.names_upstream import FORGED_LINE, HOSTILE, LONG

SERVERS = ("evil", "good")
INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
"""Controls (newline included), format characters (bidi, zero-width), surrogates, private use,
unassigned code points, line and paragraph separators."""
EXPECTED = gateway_names(
    [("good", "echo"), *(("evil", n) for n in HOSTILE)], META_TOOLS, SERVERS
)  # both up from the start
FORGED = EXPECTED[("evil", "good__echo")]
POLICY = {
    # Both pinned, so either one's arrival changes the list (and the agent hears of it).
    "pinned": ["good__echo", FORGED],
    "mutating": ["good__echo"],
}


def hidden(text: str) -> list[str]:
    """The characters of ``text`` a terminal would not show as themselves (newlines split lines)."""
    return [ch for line in text.split("\n") for ch in line if unicodedata.category(ch) in INVISIBLE]


def test_the_expected_names_keep_each_server_in_its_own_namespace() -> None:
    assert EXPECTED[("good", "echo")] == "good__echo"
    assert FORGED == "evil__good__echo"
    assert all(valid_tool_name(n) for n in EXPECTED.values())
    assert all(name_owner(n, SERVERS) in (None, server) for (server, _), n in EXPECTED.items())


@pytest.mark.anyio
@pytest.mark.parametrize("late", [None, "good", "evil"])
async def test_the_real_tool_keeps_its_name_and_its_policies_whichever_server_is_up_first(
    late: str | None,
) -> None:
    gates = {label: anyio.Event() for label in SERVERS}
    calls: dict[str, list[str]] = {label: [] for label in SERVERS}
    for label, gate in gates.items():
        if label != late:
            gate.set()
    upstreams = {label: names_upstream.build(label, calls[label], gates[label]) for label in SERVERS}
    settings = {**POLICY, "ready_wait": 0.5 if late else START, "startup_timeout": 2 * START}
    with anyio.fail_after(2 * START):
        async with running(settings, upstreams=upstreams) as gw, agent(gw, "legacy") as a:
            if late is not None:
                assert gw.upstreams[late].status == "starting"
                names = set(await a.names())
                if late == "good":
                    # good is down: its namespace is still its own, and evil's forgery binds nothing.
                    assert "good__echo" not in gw.catalog and "good__echo" not in names
                    assert FORGED in names
                else:
                    # good's echo is unique until evil arrives (unique names are kept): nothing
                    # is good__echo yet, and certainly nothing of evil's.
                    assert gw.catalog.names() == ["echo"] and "good__echo" not in names
                gates[late].set()
                with anyio.fail_after(NOTICE):
                    await a.list_changed.wait()
            assert sorted(gw.catalog.names()) == sorted(EXPECTED.values())
            real, forged = gw.catalog.get("good__echo"), gw.catalog.get(FORGED)
            assert real is not None and (real.server, real.upstream_name) == ("good", "echo")
            assert forged is not None and (forged.server, forged.upstream_name) == ("evil", "good__echo")
            # The operator's policies bind to the real tool, not to the forgery.
            assert real.definition["annotations"]["readOnlyHint"] is False
            assert forged.definition["annotations"]["readOnlyHint"] is True
            session = gw.session(a.key)
            assert session.state("good__echo") is ToolState.RESIDENT
            assert session.tool("good__echo").hash == real.hash
            # Each call reaches the upstream that offers the tool, under that upstream's name.
            assert text(await a.use("good__echo", {})) == "good: echo"
            assert text(await a.use(FORGED, {})) == "evil: good__echo"
            assert text(await a.use(EXPECTED[("evil", "echo")], {})) == "evil: echo"
            assert calls == {"good": ["echo"], "evil": ["good__echo", "echo"]}


@pytest.mark.anyio
async def test_hostile_names_reach_the_model_valid_and_the_log_escaped_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="residency")
    calls: dict[str, list[str]] = {label: [] for label in SERVERS}
    upstreams = {label: names_upstream.build(label, calls[label]) for label in SERVERS}
    # By list with room for every tool: the model is listed every name the gateway has.
    settings = {"delivery": "list", "budget": {"schema_tokens": 1_000_000}}
    with anyio.fail_after(2 * START):
        async with running(settings, upstreams=upstreams) as gw, agent(gw, "legacy") as a:
            listed = await a.names()
            assert set(EXPECTED.values()) <= set(listed)
            assert all(valid_tool_name(name) for name in listed)
            for upstream_name in (FORGED_LINE, LONG, "rtl\u202eohce", "search_tools"):
                name = EXPECTED[("evil", upstream_name)]
                assert text(await a.use(name, {})) == f"evil: {upstream_name}"
            assert calls["evil"] == [FORGED_LINE, LONG, "rtl\u202eohce", "search_tools"]
            # A client may send any name: refused, and no log line of it is raw.
            with pytest.raises(MCPError):
                await a.call("nope\nresidency: WARNING forged\x1b[2J", {})
            await gw.reload()
            await gw.reload("evil")
            renamed = gw.catalog.renamed()
    assert {(e.server, e.upstream_name) for e in renamed} == {("evil", n) for n in HOSTILE if n != "echo"}
    records = [r for r in caplog.records if r.name.startswith("residency")]
    for entry in renamed:  # once per (server, name), across two reloads
        said = [
            r for r in records if r.levelno == logging.WARNING and r.getMessage().endswith(f" {entry.name}")
        ]
        assert len(said) == 1, entry.name
    messages = [r.getMessage() for r in records]
    assert any("\\x0aresidency: WARNING upstream good" in m for m in messages)
    assert all("\n" not in m and hidden(m) == [] for m in messages)
    assert hidden(caplog.text) == []


@pytest.mark.anyio
async def test_the_startup_summary_says_which_names_were_renamed_escaped() -> None:
    upstreams = {label: names_upstream.build(label) for label in SERVERS}
    async with running(upstreams=upstreams) as gw:
        options = ServeOptions(config=gw.config)
        options.secrets = gw.config.secrets()
        summary = startup_summary(gw, options)
    assert hidden(summary) == []
    lines = summary.splitlines()
    assert all(line.startswith("residency: ") for line in lines)
    forged = "tool 'good__echo' is in the namespace of server 'good' (good__)"
    assert f"residency: upstream evil: {forged}; listed as {FORGED}" in lines
    assert any(
        line.startswith("residency: upstream evil: tool 'echo\\x0aresidency: WARNING") for line in lines
    )
    assert "residency: upstreams: 1 more tool names renamed (see the log)" in lines  # 11 renamed, 10 shown


# -- what the command line shows of a store ------------------------------------------------------


async def _journal(path: Path) -> str:
    """A gateway session with hostile upstreams, journaled to ``path``; returns its key."""
    upstreams = {label: names_upstream.build(label) for label in SERVERS}
    store = SQLiteStore(path)
    try:
        settings = {"delivery": "list", "budget": {"schema_tokens": 1_000_000}}
        async with running(settings, upstreams=upstreams, store=store) as gw, agent(gw, "legacy") as a:
            assert text(await a.use(EXPECTED[("evil", FORGED_LINE)], {})) == f"evil: {FORGED_LINE}"
            return a.key
    finally:
        store.close()


@pytest.fixture
def store_path(tmp_path: Path) -> tuple[Path, str]:
    """A SQLite store with a gateway session and an embedded host's session of raw hostile names
    (an embedded host registers what it likes; so did gateways before names were checked)."""
    path = tmp_path / "r.db"
    key = anyio.run(_journal, path)
    store = SQLiteStore(path)
    try:
        s = Session(store, session_id="embedded\x1b[31m")
        s.register_tools([{"name": n, "inputSchema": {"type": "object"}} for n in HOSTILE])
        s.record_call(FORGED_LINE, {})
        s.prune(FORGED_LINE)  # a tombstone line that quotes the name
        s.add_span("result", tags={"constraint", "tag\u202e"})
    finally:
        store.close()
    return path, key


@pytest.mark.parametrize("session", ["gateway", "embedded"])
def test_view_and_inspect_show_stored_names_escaped(
    session: str, store_path: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, key = store_path
    sid = store_id(key) if session == "gateway" else "embedded\x1b[31m"
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {}, "residency": {"delivery": "list"}}))
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 0
    assert main(["inspect", str(path), "--session", sid, "--events", "50"]) == 0
    assert main(["view", "--store", str(path), "--session", sid, "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert hidden(out) == [] and hidden(err) == []
    assert "embedded\\x1b[31m" in out
    if session == "embedded":
        assert "echo\\x0aresidency: WARNING upstream good: all clear" in out
        assert "rtl\\u202eohce" in out
    else:
        assert EXPECTED[("evil", FORGED_LINE)] in out


def test_config_check_names_a_policy_the_gateway_never_lists_without_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = {"good": {"command": "true"}, "off": {"command": "true", "disabled": True}}
    residency = {"pinned": ["residency__echo", "off__echo", "bad name\u202e", "good__echo"]}
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": servers, "residency": residency}, indent=2))
    capsys.readouterr()
    assert main(["config", "check", "--no-connect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert hidden(out) == [] and hidden(err) == []
    warnings = [line for line in err.splitlines() if "key 'residency.pinned'" in line]
    assert len(warnings) == 3
    assert not any("'good__echo'" in line for line in warnings)


def test_config_check_refuses_two_servers_with_one_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": {"a.b": {"command": "true"}, "a_b": {"command": "true"}}}))
    capsys.readouterr()
    assert main(["config", "check", "--no-connect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "'a.b'" in err and "'a_b'" in err


@pytest.mark.slow
def test_config_check_reports_renamed_upstream_names_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = str(Path(names_upstream.__file__))
    servers = {label: {"command": sys.executable, "args": [script, label]} for label in SERVERS}
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": servers, "residency": {"pinned": ["good__echo"]}}, indent=2))
    capsys.readouterr()
    assert main(["config", "check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert hidden(out) == [] and hidden(err) == []
    assert "good: 1 tool" in out and f"evil: {len(HOSTILE)} tools" in out
    renamed = [line for line in err.splitlines() if "key 'mcpServers.evil'" in line]
    assert len(renamed) == len(HOSTILE) - 1  # all but its echo, which only collides
    assert any(
        f"tool 'good__echo' is in the namespace of server 'good' (good__): it is listed as {FORGED}" in line
        for line in renamed
    )
    assert not any("residency.pinned" in line for line in err.splitlines())  # good__echo is good's
