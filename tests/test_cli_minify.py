"""``residency minify``: files in, tools out in order, reports, verification, bad input, exit codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from residency import minify_tool
from residency._cli import main
from tests._timing import TEST

TOOLS: list[dict[str, Any]] = [
    {
        "name": "zeta",
        "description": "Read a file. It returns text.",
        "inputSchema": {
            "type": "object",
            "title": "ZetaArgs",
            "properties": {"path": {"type": "string", "description": "Path to read. Must be absolute."}},
            "required": ["path"],
        },
    },
    {
        "name": "alpha",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
    },
]
BAD_REF = {"name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"$ref": "#/$defs/gone"}}}}


def write(tmp_path: Path, doc: object, name: str = "tools.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_tools_come_out_minified_in_the_same_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"tools": TOOLS, "nextCursor": None})
    assert main(["minify", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"tools": [minify_tool(t) for t in TOOLS]}
    assert [t["name"] for t in out["tools"]] == ["zeta", "alpha"]


def test_a_bare_list_and_a_level_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, TOOLS)
    assert main(["minify", str(path), "--level", "minimal"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"tools": [minify_tool(t, "minimal") for t in TOOLS]}


def test_output_goes_to_the_named_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.json"
    assert main(["minify", str(write(tmp_path, TOOLS)), "-o", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert [t["name"] for t in json.loads(target.read_text())["tools"]] == ["zeta", "alpha"]


def test_stdin_is_read_for_a_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"tools": TOOLS})))
    assert main(["minify", "-"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tools"]) == 2


def test_the_report_shows_tokens_per_tool_and_the_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["minify", str(write(tmp_path, TOOLS)), "--report"]) == 0
    err = capsys.readouterr().err
    assert "zeta" in err and "alpha" in err and "total (2 tools)" in err
    assert "cl100k_base" in err or "estimate-chars/4" in err
    assert "title x1" in err


def test_verify_passes_for_the_minifier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["minify", str(write(tmp_path, TOOLS)), "--verify"]) == 0
    assert "every verdict agreed" in capsys.readouterr().err


def test_verify_without_hypothesis_jsonschema_is_refused_with_the_install_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules is how Python itself makes an import fail: as if not installed.
    monkeypatch.setitem(sys.modules, "hypothesis_jsonschema", None)
    out = tmp_path / "minified.json"
    assert main(["minify", str(write(tmp_path, TOOLS)), "--verify", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pip install hypothesis-jsonschema" in err and "--verify" in err
    assert not out.exists()  # refused before anything is written
    # Without --verify the command needs no such package.
    assert main(["minify", str(write(tmp_path, TOOLS)), "-o", str(out)]) == 0


@pytest.mark.parametrize(
    "text",
    ["not json {", json.dumps({"server": "x"}), json.dumps({"tools": {"a": 1}}), json.dumps(3)],
    ids=["not JSON", "no tools", "tools not a list", "a number"],
)
def test_a_document_without_tools_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(text)
    target = tmp_path / "out.json"
    assert main(["minify", str(path), "-o", str(target)]) == 2
    assert str(path) in capsys.readouterr().err
    assert not target.exists()


def test_a_missing_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["minify", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_a_bad_tool_stops_everything_and_names_file_tool_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"tools": [TOOLS[0], BAD_REF]})
    target = tmp_path / "out.json"
    assert main(["minify", str(path), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'broken'" in err and "/tools/1/inputSchema/properties/x/$ref" in err
    assert not target.exists()


def test_keep_going_skips_bad_tools_and_processes_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "tools": [BAD_REF, TOOLS[0], {"description": "no name"}, {"name": "s", "inputSchema": "x"}, TOOLS[1]]
    }
    assert main(["minify", str(write(tmp_path, doc)), "--keep-going"]) == 1
    captured = capsys.readouterr()
    assert [t["name"] for t in json.loads(captured.out)["tools"]] == ["zeta", "alpha"]
    assert "/tools/0/inputSchema" in captured.err
    assert "/tools/2/name" in captured.err
    assert "/tools/3/inputSchema" in captured.err


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["minify", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "  2  bad usage or bad input" in out


def test_an_unknown_level_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["minify", str(write(tmp_path, TOOLS)), "--level", "tiny"])
    assert info.value.code == 2


@pytest.mark.slow
def test_the_command_runs_as_a_real_process(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "residency", "minify", "-", "--level", "full-text"],
        input=json.dumps({"tools": TOOLS}),
        capture_output=True,
        text=True,
        timeout=TEST,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tools": [minify_tool(t, "full-text") for t in TOOLS]}
