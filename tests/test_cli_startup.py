"""The command line answers ``--help`` without loading the gateway, the runtime or the MCP SDK.

One interpreter, started once: what it imports is the subject (a test process has long since
imported everything). How long ``--help`` takes is measured by ``benchmarks/cli_startup.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, cast

from residency._cli import COMMANDS
from residency._cli._bench import BENCHES
from tests._timing import START

HEAVY = ("mcp", "mcp_types", "residency._runtime", "residency._gateway", "jsonschema", "pydantic", "tiktoken")

_PROBE = """
import contextlib, io, json, sys
from residency._cli import main
loaded = {}
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    loaded[" ".join(argv)] = sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)
print(json.dumps(loaded))
"""


def test_no_help_loads_the_gateway_the_runtime_or_the_sdk() -> None:
    commands = [[], *([c.name] for c in COMMANDS), ["config", "check"]]
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=START,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert loaded == {" ".join(c): [] for c in commands}


def test_bench_help_lists_every_bench_without_importing_one() -> None:
    probe = (
        "import contextlib, io, sys\n"
        "from residency._cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['bench', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('residency._bench.')))\n"
        "print(out.getvalue())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=START, check=True
    )
    imported, _, help_text = done.stdout.partition("\n")
    assert imported == "[]"
    for name, bench in BENCHES.items():
        assert name in help_text
        assert bench.summary.split()[0] in help_text


def test_the_startup_bench_times_serve_answering_a_host() -> None:
    """One round of the bench's ``serve`` figures: a spawned ``residency serve`` (the demo desk)
    answers ``initialize`` and then its first ``tools/list``; each figure is a real wait."""
    from benchmarks.cli_startup import ROOT, measure_serve

    result = measure_serve(1, {"this tree": ROOT})
    (row,) = cast("list[dict[str, Any]]", result["rows"])
    assert row["revision"] == "this tree"
    assert 0 < row["initialize_s"] <= row["tools_list_s"] < START
    assert 0 < cast("float", result["import_mcp_s"]) < START


_LEAVING = """
import atexit, sys, threading, time
from residency import _cli
def late():
    time.sleep(0.2)
    print("a non-daemon thread finished")
threading.Thread(target=late).start()
atexit.register(lambda: print("an atexit handler ran"))
print("buffered, not flushed")  # stdout is a pipe: block-buffered
_cli.main = lambda: 3
_cli.entry()
print("never reached")
"""


def test_the_command_leaves_as_the_interpreter_would_with_its_exit_status() -> None:
    """``entry`` skips the interpreter's teardown, not what comes before it: threads joined,
    ``atexit`` handlers run, buffered output written, the status kept."""
    done = subprocess.run([sys.executable, "-c", _LEAVING], capture_output=True, text=True, timeout=START)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        "buffered, not flushed",
        "a non-daemon thread finished",
        "an atexit handler ran",
    ]
    assert done.stderr == ""
