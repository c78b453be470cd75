"""The docs' pages run as written: each page's commands in order, in a scratch directory, with
the servers it starts kept up for the commands after them; and the site builds with --strict.

Slow: these start ``residency serve`` and other processes, as a reader following the page does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from docs_gen.blocks import Block, commands, output_problem, snippet_paths
from tests._timing import CLEANUP, SERVING, TEST
from tests.conftest import ROOT
from tests.docs._pages import all_pages, page_blocks
from tests.docs.test_blocks import SLOW_SNIPPETS

pytestmark = pytest.mark.slow

READY_LINES = ("residency: ready:", "residency: serving MCP at")
"""What ``residency serve`` prints once it serves (stdio; HTTP)."""


def runnable(page: Path) -> bool:
    return any(
        b.kind in ("slow", "serve")
        or (b.kind == "snippet" and any(Path(p).name in SLOW_SNIPPETS for p in snippet_paths(b)))
        for b in page_blocks(page)
    )


PAGES = [p for p in all_pages() if runnable(p)]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def shell(script: str, cwd: Path, where: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=TEST,
    )
    assert done.returncode == 0, (
        f"{where}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def check_output(shown: Block, printed: str) -> None:
    problem = output_problem(shown.body, printed)
    assert problem is None, f"{shown.where}: {problem}"


@contextmanager
def serving(command: str, cwd: Path, where: str) -> Iterator[None]:
    """``command`` started as the page says, up until the page's later blocks have run."""
    log = cwd / f"serve-{time.monotonic_ns()}.log"
    with log.open("w") as err:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=cwd,
            env=environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + SERVING
        while not any(line in log.read_text() for line in READY_LINES):
            assert process.poll() is None, f"{where}: {command!r} exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, (
                f"{where}: {command!r} never served: {log.read_text()[-3000:]}"
            )
            time.sleep(0.2)
        yield
    finally:
        assert process.stdin is not None
        process.stdin.close()  # a stdio gateway stops when its stdin closes
        process.terminate()  # an HTTP one on SIGTERM
        try:
            process.wait(timeout=CLEANUP)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


DOCUMENTED_PORT = "8765"
"""The HTTP port the pages use (the gateway's default); the tests serve on a free one instead,
so that two runs of the suite on one machine do not meet."""


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def run_block(
    block: Block, cwd: Path, stack: ExitStack, page_text: str, printed: str | None, port: str
) -> str | None:
    """Runs ``block``; returns what it printed, for an output block right after it."""
    if block.kind in ("run", "slow"):
        return shell("\n".join(commands(block)).replace(DOCUMENTED_PORT, port), cwd, block.where)
    if block.kind == "not-run" and block.args.startswith("output") and printed is not None:
        check_output(block, printed)
    elif block.kind == "serve":
        [command] = commands(block)
        stack.enter_context(serving(command.replace(DOCUMENTED_PORT, port), cwd, block.where))
    elif block.kind == "snippet":
        for path in snippet_paths(block):
            name = Path(path).name
            if name in SLOW_SNIPPETS and f"python {path}" not in page_text:
                shell(f"python {path}", cwd, block.where)
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    found = page_blocks(page)
    if any("curl " in b.body for b in found if b.kind == "slow") and shutil.which("curl") is None:
        pytest.skip("this page's commands use curl, which is not installed")
    for name in ("docs_src", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    text = page.read_text(encoding="utf-8")
    with ExitStack() as stack:
        printed, port = None, free_port()
        for block in found:
            printed = run_block(block, tmp_path, stack, text, printed, port)


def test_the_site_builds_with_strict_checks(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env={**environment(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=TEST,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()
