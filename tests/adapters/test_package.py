"""The adapters package: its public names, its examples, and no runtime need of the SDKs."""

from __future__ import annotations

import doctest
import subprocess
import sys
import types

import pytest

import residency.adapters
from residency.adapters import anthropic, openai
from tests._timing import TEST

MODULES = (residency.adapters, anthropic, openai)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_is_a_sorted_tuple_of_existing_names_and_covers_the_public_ones(module: types.ModuleType) -> None:
    names = module.__all__
    assert isinstance(names, tuple)
    assert list(names) == sorted(names)
    for name in names:
        assert hasattr(module, name), name
    public = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and not isinstance(v, types.ModuleType)
        and getattr(v, "__module__", module.__name__) in (module.__name__, "residency.adapters._common")
    }
    assert public <= set(names) | {"annotations", "TYPE_CHECKING"}


@pytest.mark.parametrize("module", (anthropic, openai), ids=lambda m: m.__name__)
def test_the_module_example_runs(module: types.ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_adapters_import_and_run_without_the_provider_packages() -> None:
    script = (
        "import sys\n"
        "sys.modules['anthropic'] = None\n"
        "sys.modules['openai'] = None\n"
        "from residency import Budget, Session\n"
        "from residency.adapters import anthropic, openai\n"
        "s = Session()\n"
        "s.register_tools([{'name': 'ping', 'inputSchema': {'type': 'object'}}])\n"
        "plan = s.plan_turn(Budget(schema_tokens=100, argument_tokens=100))\n"
        "anthropic.request(s, model='m', max_tokens=1, messages=[])\n"
        "openai.chat_request(s, plan, model='m', messages=[])\n"
        "openai.responses_request(s, plan, model='m', input='hi')\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=TEST, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
