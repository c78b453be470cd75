"""The public API: complete, sorted, and nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil

import residency
from residency import _errors


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
