"""The layers of DESIGN.md, checked on the source: every arrow points down.

- the core (``residency._core``) does no I/O: it imports no MCP, async, database or HTTP
  library, no clock, and nothing of the layers above it;
- the runtime (everything outside ``_gateway``, ``_ui``, ``_cli`` and ``_bench``, and the
  gateway's public faces ``gateway.py`` and ``demo.py``) never imports the gateway, nor the
  dashboard and store readers (``_ui``);
- the store readers and dashboard (``_ui``) sit beside the gateway, below the command line: they
  never import ``_cli``; outside ``_ui`` and ``_cli`` only the HTTP front (``_gateway/_http.py``)
  imports the dashboard's web side, in one place, so the gateway's other modules stay free of it;
- nothing imports the shipped benchmarks (``residency._bench``) but the command line, and
  nothing in the package imports the repository's (``benchmarks/``);
- the benchmarks, shipped and repository ones, use the gateway through its public names only
  (``residency._gateway.__all__``), never its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import residency
import residency._gateway

ROOT = Path(residency.__file__).parent
REPO_BENCHES = Path(__file__).resolve().parent.parent / "benchmarks" / "bench"
CORE_MAY_NOT = (
    "mcp",
    "mcp_types",
    "anyio",
    "asyncio",
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "httpx2",
    "time",
)
CORE_MAY_NOT_REACH = ("residency._gateway", "residency._store", "residency._runtime", "residency._cli")


def _modules(root: Path = ROOT) -> list[tuple[str, set[str]]]:
    """Each module under ``root`` and what it imports: modules, and ``module.name`` for each
    ``from`` import (so ``from residency._gateway import _server`` counts as
    ``residency._gateway._server``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found.append((path.relative_to(root).as_posix(), names))
    return found


MODULES = _modules()


def _ids(rows: list[tuple[str, set[str]]]) -> list[str]:
    return [name for name, _ in rows]


CORE = [m for m in MODULES if m[0].startswith("_core/")]
GATEWAY_FACES = ("gateway.py", "demo.py")
"""The public modules of the gateway layer (``residency.gateway``, ``residency.demo``)."""
RUNTIME = [
    m
    for m in MODULES
    if not m[0].startswith(("_gateway/", "_ui/", "_cli/", "_bench/")) and m[0] not in GATEWAY_FACES
]
UI = [m for m in MODULES if m[0].startswith("_ui/")]
BESIDE_UI = [m for m in MODULES if not m[0].startswith(("_ui/", "_cli/"))]
UI_WEB = ("residency._ui._app", "residency._ui._front", "residency._ui._pages", "residency._ui._html")
NOT_CLI = [m for m in MODULES if not m[0].startswith(("_cli/", "_bench/"))]
BENCH = [m for m in MODULES if m[0].startswith("_bench/")]
REPO_BENCH = [(f"benchmarks/bench/{name}", imports) for name, imports in _modules(REPO_BENCHES)]
GATEWAY_PUBLIC = {"residency._gateway", *(f"residency._gateway.{n}" for n in residency._gateway.__all__)}


@pytest.mark.parametrize(("module", "imports"), CORE, ids=_ids(CORE))
def test_the_core_does_no_io_and_imports_nothing_above_it(module: str, imports: set[str]) -> None:
    assert not {i for i in imports if i.split(".")[0] in CORE_MAY_NOT}
    assert not {i for i in imports if i.startswith(CORE_MAY_NOT_REACH)}


@pytest.mark.parametrize(("module", "imports"), RUNTIME, ids=_ids(RUNTIME))
def test_the_runtime_never_imports_the_gateway(module: str, imports: set[str]) -> None:
    assert not {i for i in imports if i.startswith("residency._gateway")}


@pytest.mark.parametrize(("module", "imports"), RUNTIME, ids=_ids(RUNTIME))
def test_the_runtime_never_imports_the_dashboard(module: str, imports: set[str]) -> None:
    assert not {i for i in imports if i.startswith("residency._ui")}


@pytest.mark.parametrize(("module", "imports"), UI, ids=_ids(UI))
def test_the_dashboard_never_imports_the_command_line(module: str, imports: set[str]) -> None:
    assert not {i for i in imports if i.startswith(("residency._cli", "residency._bench"))}


@pytest.mark.parametrize(("module", "imports"), BESIDE_UI, ids=_ids(BESIDE_UI))
def test_only_the_http_front_imports_the_dashboard(module: str, imports: set[str]) -> None:
    reached = {i for i in imports if i.startswith(UI_WEB)}
    if module == "_gateway/_http.py":
        assert reached <= {"residency._ui._front", "residency._ui._front.gateway_dashboard"}
    else:
        assert not reached, f"{module} imports the dashboard: {sorted(reached)}"


@pytest.mark.parametrize(("module", "imports"), NOT_CLI, ids=_ids(NOT_CLI))
def test_only_the_command_line_imports_the_benchmarks(module: str, imports: set[str]) -> None:
    assert not {i for i in imports if i.startswith("residency._bench")}


@pytest.mark.parametrize(("module", "imports"), MODULES, ids=_ids(MODULES))
def test_the_package_never_imports_the_repository_benchmarks(module: str, imports: set[str]) -> None:
    # They read the checkout's data: a wheel has neither them nor it.
    assert not {i for i in imports if i.split(".")[0] == "benchmarks"}


@pytest.mark.parametrize(("module", "imports"), BENCH + REPO_BENCH, ids=_ids(BENCH + REPO_BENCH))
def test_the_benchmarks_use_only_the_public_names_of_the_gateway(module: str, imports: set[str]) -> None:
    reached = {i for i in imports if i.startswith("residency._gateway")}
    assert reached <= GATEWAY_PUBLIC, f"{module} reaches into the gateway: {sorted(reached - GATEWAY_PUBLIC)}"


def test_the_check_sees_the_whole_package() -> None:
    names = _ids(MODULES)
    assert "_core/_lifecycle.py" in names and "_gateway/_server.py" in names and len(names) > 40
    assert "_ui/_app.py" in names and "_ui/_reads.py" in names
    assert BENCH, "no shipped benchmark module found"
    assert "benchmarks/bench/gateway.py" in _ids(REPO_BENCH), "no repository benchmark found"
