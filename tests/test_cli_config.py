"""``residency config check`` and the host samples (the config reference is tested in tests/docs)."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from residency import ConfigError
from residency._cli import build_parser, main
from residency._gateway import load_config
from residency._gateway._config import VSCODE_HINT
from tests._timing import scaled

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "examples" / "hosts"
PLACEHOLDER = "/path/to/residency"
DESK = {"command": sys.executable, "args": ["-m", "residency._gateway._desk_stdio"]}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def gateway_file(tmp_path: Path, servers: dict[str, Any], residency: dict[str, Any] | None = None) -> Path:
    body = {"mcpServers": servers, "residency": residency or {}}
    return write(tmp_path / "gateway.json", json.dumps(body, indent=2))


@dataclass(frozen=True)
class Checked:
    """What ``residency config check`` returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> Checked:
    """The command run in this process; the upstreams it starts are real (their stderr is piped
    and relayed through ``sys.stderr``, so capturing it is enough)."""
    capsys.readouterr()
    code = main(["config", "check", *argv])
    out, err = capsys.readouterr()
    return Checked(code, out, err)


def findings(err: str, severity: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"residency config check: {severity}: ")]


# -- the command ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_valid_config_with_a_real_upstream_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = gateway_file(
        tmp_path,
        {"desk": DESK},
        {"pinned": ["get_incident"], "phases": {"t": ["get_timeline"]}, "delivery": "list"},
    )
    done = check(capsys, str(path))
    assert done.returncode == 0, done.stderr
    assert findings(done.stderr, "warning") == [] and findings(done.stderr, "error") == []
    assert done.stdout.splitlines() == [f"{path}: OK: 1 server; desk: 14 tools; 0 warnings"]


@pytest.mark.slow
def test_tools_no_upstream_offers_are_warned_about_with_their_key_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desk_v2 = {**DESK, "args": [*DESK["args"], "--schema", "v2"]}
    path = gateway_file(
        tmp_path,
        {"desk-a": DESK, "desk-b": desk_v2},
        {
            "pinned": ["get_incident", "no_such_tool", "desk-a__list_incidents"],
            "phases": {"triage": ["ghost_tool"]},
            "read_only": ["desk-b__query_metrics"],
            "delivery": "list",  # phases by reference would draw a warning of their own
        },
    )
    done = check(capsys, str(path))
    assert done.returncode == 0, done.stderr
    warned = findings(done.stderr, "warning")
    text = path.read_text()
    pinned_line = text[: text.index('"no_such_tool"')].count("\n") + 1
    phase_line = text[: text.index('"ghost_tool"')].count("\n") + 1
    assert any(f"line {pinned_line}, key 'residency.pinned'" in w and "'no_such_tool'" in w for w in warned)
    assert any(
        f"line {phase_line}, key 'residency.phases.triage'" in w and "'ghost_tool'" in w for w in warned
    )
    # Both desks offer get_incident, so the gateway lists it namespaced; the warning says as what.
    (renamed,) = [w for w in warned if "'get_incident'" in w]
    assert "desk-a__get_incident" in renamed and "desk-b__get_incident" in renamed
    # Names the gateway does list draw no warning.
    assert not [w for w in warned if "desk-a__list_incidents" in w or "desk-b__query_metrics" in w]
    assert len(warned) == 3
    assert "desk-a: 14 tools, desk-b: 14 tools; 3 warnings" in done.stdout


@pytest.mark.slow
def test_an_upstream_that_does_not_start_is_named_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "no-such-server")
    path = gateway_file(tmp_path, {"desk": DESK, "broken": {"command": missing}}, {"pinned": ["gone"]})
    done = check(capsys, str(path))
    assert done.returncode == 1, done.stderr
    (error,) = findings(done.stderr, "error")
    assert "key 'mcpServers.broken'" in error and "did not start" in error
    assert done.stdout == ""
    (unknown,) = [w for w in findings(done.stderr, "warning") if "'gone'" in w]
    assert "broken" in unknown  # the tool may be one of the upstream that did not start


@pytest.mark.slow
def test_an_upstream_that_never_answers_fails_after_startup_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mute = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    # Long enough for the desk, a real interpreter, to start on a loaded machine (only mute may
    # fail), and waited out in full by mute.
    settings = {"startup_timeout": scaled(10), "ready_wait": 0}
    path = gateway_file(tmp_path, {"desk": DESK, "mute": mute}, settings)
    done = check(capsys, str(path))
    assert done.returncode == 1, done.stderr
    (error,) = findings(done.stderr, "error")
    assert "key 'mcpServers.mute'" in error and "did not start" in error


def test_an_upstream_error_never_shows_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cret-v4lue-in-env"
    broken = {"command": str(tmp_path / "absent"), "args": [secret], "env": {"TOKEN": secret}}
    path = gateway_file(tmp_path, {"broken": broken})
    done = check(capsys, str(path))
    assert done.returncode == 1
    # In a process of its own, a library's warning would reach stderr: here pytest keeps it.
    assert secret not in done.stderr + done.stdout + caplog.text


def test_no_connect_checks_the_file_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gateway_file(
        tmp_path, {"never": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}
    )
    assert main(["config", "check", "--no-connect", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == f"{path}: OK: 1 server; upstreams not started (--no-connect); 0 warnings\n"


@pytest.mark.parametrize("text", ['{"mcpServers": {}}', '{\n  "residency": {"pinned": ["a"]}\n}'])
def test_a_config_with_no_upstream_is_an_error(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "empty.json", text)
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    (error,) = findings(captured.err, "error")
    assert f"{path}: " in error and "key 'mcpServers'" in error
    assert captured.out == ""


def test_a_vs_code_file_gets_the_mcp_servers_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "mcp.json", (HOSTS / "vscode-mcp.json").read_text())
    assert main(["config", "check", "--no-connect", str(path)]) == 2
    (error,) = findings(capsys.readouterr().err, "error")
    assert error.endswith(f"{path}: line 2, key 'servers': {VSCODE_HINT}")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            '{"mcpServers": {"a": {"command": "x"}},\n "residency": {\n  "minify": "tiny"}}',
            "line 3, key 'residency.minify'",
        ),
        (
            '{"mcpServers": {"a": {"command": "x"}},\n "residency": {"budget": {"schema_tokns": 1}}}',
            "line 2, key 'residency.budget.schema_tokns'",
        ),
        ('{"mcpServers": {\n  "a": {"command": "x",}\n}}', "line 2, column 24"),
        ('{"mcpServers": {"a": {"command": "x"}},\n "colour": "blue"}', "line 2, key 'colour'"),
    ],
)
def test_a_malformed_file_exits_2_naming_file_line_and_key(
    text: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "gateway.json", text)
    assert main(["config", "check", str(path)]) == 2
    (error,) = findings(capsys.readouterr().err, "error")
    assert f"{path}: {where}" in error


def test_a_missing_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_what_hosts_get_wrong_is_warned_about_without_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = {
        "bare": {"command": "surely-not-an-installed-command-xyz"},
        "gone": {"command": str(tmp_path / "absent")},
        "where": {"command": sys.executable, "cwd": str(tmp_path / "no-dir")},
        "off": {"command": "surely-not-an-installed-command-xyz", "disabled": True},
    }
    path = gateway_file(tmp_path, servers, {"store": "sqlite:///relative.db", "pinned": ["search_tools"]})
    assert main(["config", "check", "--no-connect", str(path)]) == 0
    captured = capsys.readouterr()
    keys = sorted(re.findall(r"key '([^']+)'", "\n".join(findings(captured.err, "warning"))))
    assert keys == [
        "mcpServers.bare.command",
        "mcpServers.gone.command",
        "mcpServers.where.cwd",
        "residency.store",
    ]
    assert "3 servers (1 disabled)" in captured.out and "4 warnings" in captured.out
    assert not (tmp_path / "relative.db").exists() and not (ROOT / "relative.db").exists()


@pytest.mark.parametrize("delivery", [None, "reference", "list", "auto"])
def test_phases_delivered_by_reference_are_pointed_out(
    delivery: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    residency: dict[str, Any] = {"phases": {"t": ["get_timeline"]}}
    if delivery is not None:
        residency["delivery"] = delivery
    path = gateway_file(tmp_path, {"desk": DESK}, residency)
    assert main(["config", "check", "--no-connect", str(path)]) == 0
    warnings = findings(capsys.readouterr().err, "warning")
    if delivery in (None, "reference"):  # the default delivers by reference
        (warning,) = warnings
        assert "key 'residency.phases'" in warning and '"delivery" to "list" or "auto"' in warning
    else:
        assert warnings == []


@pytest.mark.slow
def test_a_pinned_meta_tool_is_pointed_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gateway_file(tmp_path, {"desk": DESK}, {"pinned": ["search_tools"]})
    done = check(capsys, str(path))
    assert done.returncode == 0, done.stderr
    (warning,) = findings(done.stderr, "warning")
    assert "key 'residency.pinned'" in warning and "meta-tool" in warning


def test_an_entry_that_serves_this_same_file_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.json"
    gateway_file(tmp_path, {"me": {"command": "residency", "args": ["serve", "--config", str(path)]}})
    assert main(["config", "check", str(path)]) == 2
    (error,) = findings(capsys.readouterr().err, "error")
    assert "key 'mcpServers.me'" in error
    other = write(tmp_path / "other.json", path.read_text())  # another gateway's config: fine
    assert main(["config", "check", "--no-connect", str(other)]) == 0


@pytest.mark.slow
def test_a_check_does_not_create_the_configured_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "sessions.db"
    path = gateway_file(tmp_path, {"desk": DESK}, {"store": f"sqlite:///{db}"})
    done = check(capsys, str(path))
    assert done.returncode == 0, done.stderr
    assert not db.exists()


# -- host samples --------------------------------------------------------------------------------


def gateway_entry(servers: dict[str, Any]) -> dict[str, Any]:
    """The sample's ``residency`` entry: the gateway as installed (on the host's PATH), serving
    with options the command line accepts."""
    entry = dict(servers["residency"])
    assert entry["command"] == "residency" and entry["args"][0] == "serve"
    parsed = build_parser().parse_args(entry["args"])
    assert parsed.run is not None
    return entry


@pytest.mark.parametrize("sample", ["claude_desktop_config.json", "cursor-mcp.json"])
def test_mcp_servers_host_samples_start_the_gateway_as_written(sample: str) -> None:
    data = json.loads((HOSTS / sample).read_text())
    assert set(data) == {"mcpServers"}
    gateway_entry(data["mcpServers"])
    assert PLACEHOLDER not in (HOSTS / sample).read_text()
    load_config(HOSTS / sample)  # the hosts' shape is the gateway's shape


def test_the_sample_gateway_config_checks_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--no-connect", str(HOSTS / "gateway.json")]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "0 warnings" in captured.out


@pytest.mark.slow
def test_the_sample_gateway_config_serves_its_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    # The desk entry is `python -m residency.demo`: run where `python` is this environment's, as
    # from the activated venv the docs' check runs in.
    bin_dir = str(Path(sys.executable).parent)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
        done = check(capsys, str(HOSTS / "gateway.json"))
    assert done.returncode == 0, done.stderr
    assert "desk: 14 tools; 0 warnings" in done.stdout


def test_the_vs_code_sample_has_the_vs_code_shape() -> None:
    data = json.loads((HOSTS / "vscode-mcp.json").read_text())
    assert set(data) == {"servers"}
    entry = gateway_entry(data["servers"])
    assert entry["type"] == "stdio"
    with pytest.raises(ConfigError) as raised:  # and is not mistaken for a gateway config
        load_config(HOSTS / "vscode-mcp.json")
    assert raised.value.where == "servers"
    claude = json.loads((HOSTS / "claude_desktop_config.json").read_text())["mcpServers"]["residency"]
    assert {k: v for k, v in entry.items() if k != "type"} == claude


def test_the_http_samples_reach_what_serve_listens_on() -> None:
    serve = build_parser().parse_args(["serve", "--transport", "http"])
    url = f"http://{serve.host}:{serve.port}/mcp"
    cursor = json.loads((HOSTS / "cursor-mcp-http.json").read_text())["mcpServers"]["residency"]
    assert cursor == {"url": url, "headers": {"Authorization": "Bearer ${env:RESIDENCY_TOKEN}"}}
    vscode = json.loads((HOSTS / "vscode-mcp-http.json").read_text())
    entry = vscode["servers"]["residency"]
    assert (entry["type"], entry["url"]) == ("http", url)
    (prompt,) = vscode["inputs"]
    assert entry["headers"]["Authorization"] == f"Bearer ${{input:{prompt['id']}}}"
    assert prompt["type"] == "promptString" and prompt["password"] is True
