"""The MCP Inspector CLI runs the scripted tasks through ``residency serve``, in every era it speaks.

The Inspector CLI (``@modelcontextprotocol/inspector``, ``--protocol-era legacy|auto|modern``)
is one process per request, so each step is a new MCP connection. They share one gateway
session the way a user of the CLI would: over streamable HTTP one ``residency serve`` process
(the module's shared one, ``conftest.py``) and a ``Residency-Session`` header on every
invocation; over stdio every invocation starts its own gateway, which resumes the session by
``--session`` from a shared SQLite store.

The Inspector calls only tools that ``tools/list`` returned (otherwise it exits 5 with
``tool_not_found``, without sending the call). After the scenario's re-expansion pushes the
tombstoned and the evicted tool out of the session's list, it therefore stops those steps on its
own side: these tests record that as the client's behaviour, and check that such a call never
reached the gateway. The list_changed the gateway sends is not observable from a one-shot CLI
process; its next ``tools/list`` shows the change instead. That is the list scenario
(``scenario.STEPS``, delivered by list).

By reference (``scenario.REFERENCE_STEPS``, the gateway's default delivery) the Inspector runs
the whole task on its defaults: its list is the pinned tool and the meta-tools at every
invocation, so ``search_tools`` and ``call_tool`` are always callable; a search hit carries the
tool's schema, and ``--tool-name call_tool --tool-arg name=TOOL --tool-arg arguments=JSON`` (a
``--tool-arg`` value is parsed as JSON when it is JSON) reaches a tool the list never showed.
``--tool-metadata KEY=JSON`` puts ``_meta`` on the call, so the CLI can also report a result its
user dropped (``residency/dropped_results``): the rebuilt call is then refused until
``reexpand_tools``. A call whose result has ``isError`` exits 5, the result still on stdout.

The npm packages come from ``tests/peers/package.json`` (``.ci/run`` installs them); without
node or them these tests skip locally and fail when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from residency._gateway._demo import desk_tools
from tests._timing import SERVING, START
from tests.clients import scenario
from tests.clients._serve import ROOT, Ran, Served, run_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INSPECTOR = ROOT / "tests" / "peers" / "node_modules" / ".bin" / "mcp-inspector"
CONNECT_TIMEOUT = SERVING
"""Seconds an Inspector run may wait for its connection: over stdio, a gateway starting and serving
once its desk is up (the Inspector's default is 30 s)."""
RUN_TIMEOUT = START + CONNECT_TIMEOUT
"""Seconds one Inspector run may take (node, and over stdio a gateway and its desk)."""

SERVER_INFO = "io.modelcontextprotocol/serverInfo"

NOT_FOUND_EXIT = 5
"""The Inspector's exit status when asked to call a tool its tools/list did not return."""
TOOL_ERROR_EXIT = 5
"""Its exit status when the call's result has ``isError`` (the result is printed all the same)."""

ERAS = pytest.mark.parametrize("era", ["legacy", "auto", "modern"])
TRANSPORTS = pytest.mark.parametrize("transport", ["stdio", "http"])

PREVENTED = {scenario.STEPS[i][0] for i in (3, 4, 5)}
"""The steps the Inspector stops itself: the tombstoned and the evicted tool are not listed."""


def _missing(what: str) -> NoReturn:
    reason = f"{what} is not installed (run `npm install` in tests/peers; .ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so a missing client is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture
def inspector_env(tmp_path: Path) -> dict[str, str]:
    """The Inspector's environment: node present, a private HOME (it writes a catalog there)."""
    if shutil.which("node") is None:
        _missing("node")
    if not INSPECTOR.exists():
        _missing(str(INSPECTOR.relative_to(ROOT)))
    home = tmp_path / "home"
    home.mkdir()
    return {
        **os.environ,
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "NO_COLOR": "1",
        "NODE_NO_WARNINGS": "1",
    }


# -- driving the Inspector ------------------------------------------------------------------------


@dataclass
class Outcome:
    """One Inspector run: the result it printed, the error envelope it exited with, or both (a
    result with ``isError``)."""

    ran: Ran
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def is_error(self) -> bool:
        assert self.result is not None, self.ran.explain()
        return self.result.get("isError") is True

    @property
    def text(self) -> str:
        assert self.result is not None, self.ran.explain()
        return "\n".join(b["text"] for b in self.result.get("content", []) if b.get("type") == "text")

    @property
    def reason(self) -> str | None:
        assert self.result is not None, self.ran.explain()
        details = (self.result.get("_meta") or {}).get("residency/error")
        return details.get("reason") if isinstance(details, dict) else None

    @property
    def prevented(self) -> bool:
        """The Inspector refused to send the call: the tool was not in its tools/list."""
        return self.error is not None and self.error.get("code") == "tool_not_found"

    def check_exit(self) -> None:
        """A result came back, and the Inspector exited as that result says (0, or 5 on isError)."""
        assert self.result is not None, self.ran.explain()
        if self.is_error:
            assert self.ran.returncode == TOOL_ERROR_EXIT, self.ran.explain()
            assert self.error is not None and self.error.get("code") == "tool_is_error", self.ran.explain()
        else:
            assert self.ran.returncode == 0 and self.error is None, self.ran.explain()


@dataclass
class Inspector:
    """The Inspector CLI pointed at one gateway session in one protocol era."""

    target: tuple[str, ...]
    era: str
    env: dict[str, str]
    runs: list[Ran] = field(default_factory=list)

    async def run(self, *method: str) -> Outcome:
        argv = [str(INSPECTOR), "--cli", *self.target, "--protocol-era", self.era, *method]
        ran = await run_client([*argv, "--format", "json", "-q"], env=self.env, timeout=RUN_TIMEOUT)
        self.runs.append(ran)
        if ran.returncode == 0:
            envelope = json.loads(ran.stdout)
            assert "result" in envelope, ran.explain()
            return Outcome(ran, result=envelope["result"])
        # Under -q the error envelope is the last JSON line on stderr; a result with isError is
        # on stdout all the same.
        lines = [line for line in ran.stderr.splitlines() if line.startswith("{")]
        assert lines, ran.explain()
        result = json.loads(ran.stdout).get("result") if ran.stdout.startswith("{") else None
        return Outcome(ran, result=result, error=json.loads(lines[-1])["error"])

    async def tools(self) -> dict[str, dict[str, Any]]:
        listed = await self.run("--method", "tools/list")
        assert listed.result is not None, listed.ran.explain()
        return {t["name"]: t for t in listed.result["tools"]}

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        return await self.run(
            "--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(arguments)
        )

    async def events(self) -> list[dict[str, Any]]:
        """The session's event log (``resources/read`` of ``residency://events``)."""
        read = await self.run("--method", "resources/read", "--uri", "residency://events")
        assert read.result is not None, read.ran.explain()
        (contents,) = read.result["contents"]
        events: list[dict[str, Any]] = json.loads(contents["text"])
        return events

    async def names(self) -> list[str]:
        """The names ``tools/list`` returns, in its order."""
        return list(await self.tools())

    async def call_through(
        self, name: str, arguments: dict[str, Any], dropped: list[str] | None = None
    ) -> Outcome:
        """``call_tool(name, arguments)`` as a user of the CLI types it: one ``--tool-arg`` per
        argument (the JSON one parsed), and ``dropped`` as ``residency/dropped_results`` in the
        call's ``_meta`` (``--tool-metadata``)."""
        method = ["--method", "tools/call", "--tool-name", "call_tool"]
        method += ["--tool-arg", f"name={name}", "--tool-arg", f"arguments={json.dumps(arguments)}"]
        if dropped is not None:
            method += ["--tool-metadata", f"residency/dropped_results={json.dumps(dropped)}"]
        return await self.run(*method)


def over_http(served: Served, key: str, era: str, env: dict[str, str]) -> Inspector:
    """The Inspector on session ``key`` of the HTTP gateway ``served``."""
    return Inspector((served.url, "--header", f"Residency-Session: {key}"), era, env)


def over_stdio(
    key: str, era: str, tmp_path: Path, env: dict[str, str], config: Path | None = None
) -> Inspector:
    """The Inspector starting a gateway per run, each resuming session ``key`` from one store;
    ``config``: the gateway's (default ``scenario.config()``, serving once its desk is up)."""
    config = scenario.write_config(tmp_path) if config is None else config
    # The server command goes through a catalog file: on the Inspector's command line, options
    # such as --config would be read as its own.
    store = f"sqlite:///{(tmp_path / 'sessions.db').resolve()}"
    serve = scenario.serve_command(config, "--session", key, "--store", store)
    catalog = tmp_path / "inspector.json"
    connect = round(CONNECT_TIMEOUT * 1000)
    entry = {"command": serve[0], "args": serve[1:], "cwd": str(ROOT), "connectionTimeout": connect}
    catalog.write_text(json.dumps({"mcpServers": {"residency": entry}}))
    return Inspector(("--config", str(catalog), "--server", "residency"), era, env)


# -- expectations per step ------------------------------------------------------------------------


def full_schema(name: str) -> dict[str, Any]:
    (tool,) = [t for t in desk_tools() if t["name"] == name]
    schema: dict[str, Any] = tool["inputSchema"]
    return schema


def check_step(index: int, outcome: Outcome) -> None:
    """What the gateway must answer at ``scenario.STEPS[index]`` (``scenario.check_outcomes``)."""
    text = outcome.text
    if index == 0:  # a resident tool
        assert not outcome.is_error and "RB-1" in text
    elif index in (1, 7):  # the mutation tool, while resident
        assert not outcome.is_error and json.loads(text)["incident_id"] == "INC-7"
    elif index in (2, 6):  # reexpand_tools: the full definitions come back in the result
        assert not outcome.is_error
        assert outcome.result is not None
        (tool,) = outcome.result["structuredContent"]["tools"]
        assert tool["name"] == scenario.STEPS[index][2]["names"][0]
    elif index == 3:  # the tombstoned tool
        assert outcome.is_error and outcome.reason == "tool_not_resident"
        assert text.startswith(f"{scenario.TOMBSTONED_TOOL}: mutation tool schema withheld")
        assert "reexpand_tools" in text
    elif index == 4:  # the evicted tool, invalid arguments
        assert outcome.is_error and outcome.reason == "arguments_invalid"
        start = text.find("{")
        assert start >= 0, text
        assert json.JSONDecoder().raw_decode(text[start:])[0] == full_schema(scenario.EVICTED_TOOL)
    elif index == 5:  # the evicted tool, valid arguments: implicit re-expansion, forwarded
        assert not outcome.is_error and json.loads(text)["status"] == "resolved"


# -- the task -------------------------------------------------------------------------------------


@ERAS
@TRANSPORTS
async def test_the_inspector_runs_the_scripted_task_one_process_per_step(
    transport: str,
    era: str,
    tmp_path: Path,
    session_key: str,
    request: pytest.FixtureRequest,
    inspector_env: dict[str, str],
) -> None:
    assert len(scenario.STEPS) == 8, "check_step and PREVENTED follow the scenario's eight steps"
    served: Served | None = None
    if transport == "http":
        served = request.getfixturevalue("gateway")  # its log() holds only this test's lines
        cli = over_http(served, session_key, era, inspector_env)
    else:
        cli = over_stdio(session_key, era, tmp_path, inspector_env)
    listed = await cli.tools()
    assert set(listed) == {*scenario.INITIAL_TOOLS, *scenario.META_TOOLS}

    prevented: set[str] = set()
    for index, (label, tool, arguments) in enumerate(scenario.STEPS):
        outcome = await cli.call(tool, arguments)
        if tool == "reexpand_tools":
            # The CLI does not say which era it negotiated, and hides ttlMs; the wire does:
            # a 2026-07-28 result carries the server's identity in _meta, a handshake one not.
            assert outcome.result is not None, outcome.ran.explain()
            stamped = SERVER_INFO in (outcome.result.get("_meta") or {})
            assert stamped is (era != "legacy"), outcome.result
        if outcome.prevented:
            # The Inspector's own check: it only calls what the session lists.
            assert tool not in listed, outcome.ran.explain()
            assert outcome.ran.returncode == NOT_FOUND_EXIT, outcome.ran.explain()
            prevented.add(label)
        else:
            assert outcome.error is None, outcome.ran.explain()
            check_step(index, outcome)
        if tool == "reexpand_tools":
            listed = await cli.tools()
            if index == 2:  # pushed out: the tombstone came in the result, not in the list
                assert scenario.TOMBSTONED_TOOL not in listed
                assert scenario.EVICTED_TOOL not in listed
                assert scenario.TOMBSTONED_TOOL not in listed["reexpand_tools"]["description"]
                assert f"{scenario.TOMBSTONED_TOOL}: mutation tool schema withheld" in outcome.text
            else:
                assert scenario.TOMBSTONED_TOOL in listed

    assert prevented == PREVENTED
    if served is not None:
        # The calls the Inspector stopped never reached the gateway.
        log = served.log()
        assert "call refused" not in log, log
        assert re.search(rf"\btool={scenario.EVICTED_TOOL}\b", log) is None, log


@ERAS
@TRANSPORTS
async def test_the_inspector_runs_the_reference_task_one_process_per_step(
    transport: str,
    era: str,
    tmp_path: Path,
    session_key: str,
    request: pytest.FixtureRequest,
    inspector_env: dict[str, str],
) -> None:
    """The by-reference task, then the report of the dropped search result: one process a step."""
    if transport == "http":
        served: Served = request.getfixturevalue("reference_gateway")
        cli = over_http(served, session_key, era, inspector_env)
    else:
        config = scenario.write_reference_config(tmp_path)
        cli = over_stdio(session_key, era, tmp_path, inspector_env, config)

    # The list: the pinned tool and the meta-tools (call_tool among them), at every invocation.
    assert await cli.names() == list(scenario.REFERENCE_FIRST_LIST)
    outcomes: list[Outcome] = []
    for _, tool, arguments in scenario.REFERENCE_STEPS:
        if tool == "call_tool":
            outcome = await cli.call_through(arguments["name"], arguments["arguments"])
        else:
            outcome = await cli.call(tool, arguments)
        outcome.check_exit()
        outcomes.append(outcome)
    scenario.check_reference_outcomes([{"is_error": o.is_error, "text": o.text} for o in outcomes])
    runbook, found, note, invalid, closed = outcomes
    # The CLI does not say which era it negotiated; a 2026-07-28 result carries the server's
    # identity in _meta, a handshake one not.
    assert (SERVER_INFO in (runbook.result or {}).get("_meta", {})) is (era != "legacy")
    # A search hit with its schema, and the id of the result that delivered it.
    assert found.result is not None
    (hit, *_) = found.result["structuredContent"]["tools"]
    assert hit["name"] == scenario.TOMBSTONED_TOOL
    assert hit["definition"]["inputSchema"]["required"] == ["incident_id", "note"]
    delivery = found.result["_meta"]["residency/result"]
    # The found tool and the unseen one reached the desk through call_tool.
    assert (note.result or {})["structuredContent"]["incident_id"] == "INC-7"
    assert invalid.reason == "arguments_invalid"
    start = invalid.text.find("{")
    assert json.JSONDecoder().raw_decode(invalid.text[start:])[0] == full_schema(scenario.EVICTED_TOOL)
    # (its result carries the schema too, in a text block of its own: it was implicitly re-expanded)
    assert (closed.result or {})["structuredContent"]["status"] == "resolved"
    assert await cli.names() == list(scenario.REFERENCE_FIRST_LIST)

    # The host report: the search result is dropped, and the call rebuilt from the first note's
    # arguments (still in view) is refused; re-expanded, the tool is called again.
    ghost = await cli.call_through(scenario.TOMBSTONED_TOOL, dict(scenario.FIRST_NOTE), dropped=[delivery])
    ghost.check_exit()
    assert ghost.is_error and ghost.reason == "tool_not_resident", ghost.ran.explain()
    assert ghost.text.startswith(f"{scenario.TOMBSTONED_TOOL}: mutation tool schema withheld")
    assert "reexpand_tools" in ghost.text
    reexpanded = await cli.call("reexpand_tools", {"names": [scenario.TOMBSTONED_TOOL]})
    reexpanded.check_exit()
    again = await cli.call_through(scenario.TOMBSTONED_TOOL, dict(scenario.FIRST_NOTE))
    again.check_exit()
    assert (again.result or {})["structuredContent"]["incident_id"] == "INC-7"
    assert await cli.names() == list(scenario.REFERENCE_FIRST_LIST)

    # The session's event log (over stdio kept in the store every run resumes): the report
    # tombstoned the note tool, the rebuilt call was refused and never admitted; the calls
    # admitted (then forwarded) through call_tool are the task's two and the retry.
    events = await cli.events()
    kinds = [(e["kind"], e["subject"]) for e in events]
    assert ("tombstoned", scenario.TOMBSTONED_TOOL) in kinds
    assert ("refused", scenario.TOMBSTONED_TOOL) in kinds
    assert scenario.calls_through_call_tool(events) == [
        scenario.TOMBSTONED_TOOL,
        scenario.EVICTED_TOOL,
        scenario.TOMBSTONED_TOOL,
    ]
    assert scenario.forwarded_ghosts(events) == 0
