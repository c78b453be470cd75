"""The public API: complete, sorted, and nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import residency
from residency import _errors

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_a_sorted_tuple_of_unique_names() -> None:
    assert isinstance(residency.__all__, tuple)
    assert list(residency.__all__) == sorted(residency.__all__)
    assert len(set(residency.__all__)) == len(residency.__all__)


def test_every_name_in_all_exists() -> None:
    for name in residency.__all__:
        assert hasattr(residency, name), name


def test_every_public_name_of_the_package_is_in_all() -> None:
    public = {n for n in vars(residency) if not n.startswith("_")}
    modules = {n for n, v in vars(residency).items() if type(v) is type(residency)}
    assert public - modules <= set(residency.__all__)


def test_every_error_is_exported_and_derives_from_residency_error() -> None:
    for name in _errors.__all__:
        cls = getattr(_errors, name)
        assert name in residency.__all__
        assert issubclass(cls, residency.ResidencyError)
        assert cls.__doc__, f"{name} needs a docstring saying when it is raised"


def test_every_module_imports() -> None:
    for info in pkgutil.walk_packages(residency.__path__, "residency."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)


# -- the public modules beside the top level ---------------------------------------------------

PUBLIC_MODULES = ("residency.gateway", "residency.demo", "residency.local_model")
EXPECTED = {
    "residency.gateway": (
        "Gateway",
        "GatewayConfig",
        "load_config",
        "parse_config",
        "serve_http",
        "serve_stdio",
    ),
    "residency.demo": ("IncidentDesk", "desk_tools"),
    "residency.local_model": ("CHAT_TEMPLATE", "LocalModel", "local_model", "model_file"),
}


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_a_public_module_exports_a_sorted_tuple_of_names_that_exist(name: str) -> None:
    module = importlib.import_module(name)
    assert isinstance(module.__all__, tuple)
    assert list(module.__all__) == sorted(module.__all__)
    assert module.__all__ == EXPECTED[name]
    for export in module.__all__:
        value = getattr(module, export)
        assert value.__doc__, f"{name}.{export} needs a docstring"
        if isinstance(value, type):
            assert value.__module__ == name  # as shown in reprs, docs and errors


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_residency_name_of_a_public_module_is_in_all(name: str) -> None:
    module = importlib.import_module(name)
    ours = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and type(v) is not type(module)
        and str(getattr(v, "__module__", "")).startswith("residency")
    }
    assert ours <= set(module.__all__)


def test_the_public_modules_are_not_re_exported_by_the_top_level() -> None:
    # They import the MCP SDK; ``import residency`` stays light.
    assert not set(residency.__all__) & {n for names in EXPECTED.values() for n in names}


def test_the_examples_use_only_public_names() -> None:
    shipped = [
        *ROOT.glob("examples/*.py"),
        *ROOT.glob("examples/**/*.json"),
        *ROOT.glob("examples/clients/*.sh"),
        *ROOT.glob("examples/clients/*.mjs"),
        ROOT / "mcp.json",
    ]
    shipped = [p for p in shipped if "node_modules" not in p.parts and p.name != "package-lock.json"]
    assert len(shipped) >= 8
    for path in shipped:
        text = path.read_text(encoding="utf-8")
        assert re.search(r"residency\._", text) is None, f"{path.name} names a private module"
        assert "/path/to" not in text, f"{path.name} holds a placeholder that fails as written"
