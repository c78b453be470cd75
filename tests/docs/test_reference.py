"""The generated reference pages say what the code does: every config key with its default and
values, every command, meta-tool, resource and error reason, and the current lifecycle diagrams."""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from docs_gen import render
from docs_gen.reference import config_keys, config_table, shown_default
from residency import SPAN_LIFECYCLE, TOOL_LIFECYCLE
from residency._cli import COMMANDS
from residency._gateway._errors import RULES
from residency._gateway._meta_tools import META_TOOLS
from residency._gateway._resources import resource_templates, resources
from tests.docs._pages import DOCS, rendered


def _literals(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [v for a in typing.get_args(annotation) for v in _literals(a)]


def rows(table: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in config_table(table).splitlines():
        key = re.match(r"\| `([^`]+)` \|", line)
        if key:
            assert key.group(1) not in found, f"{key.group(1)} is documented twice"
            found[key.group(1)] = line
    return found


@pytest.mark.parametrize("table", ["top", "stdio", "http", "residency"])
def test_the_config_reference_documents_every_key_with_its_default_and_values(table: str) -> None:
    documented = rows(table)
    keys = config_keys()[table]
    assert set(documented) == {key for key, _ in keys}
    for key, field in keys:
        row = documented[key]
        if field.is_required():
            assert "required" in row, row
        elif not isinstance(field.default, BaseModel):
            assert shown_default(field.default) in row, row
        for value in _literals(field.annotation):
            assert f'"{value}"' in row, f"{key}: accepted value {value!r} not in: {row}"


def test_the_config_reference_covers_the_keys_users_write() -> None:
    keys = {key for table in config_keys().values() for key, _ in table}
    assert keys >= {"mcpServers", "command", "url", "budget.idle_turns", "ready_wait", "http.max_requests"}
    page = rendered(DOCS / "reference" / "config.md")
    assert all(f"| `{key}` |" in page for key in keys)


def test_a_config_key_without_a_meaning_breaks_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from docs_gen import config_keys as meanings

    monkeypatch.delitem(meanings.MEANINGS["residency"], "ready_wait")
    with pytest.raises(KeyError, match="ready_wait"):
        render("<!-- gen: config residency -->")


def test_the_cli_reference_shows_every_command_s_help() -> None:
    page = rendered(DOCS / "reference" / "cli.md")
    for command in COMMANDS:
        assert f"`residency {command.name}`" in page
        assert f"usage: residency {command.name}" in page
    assert "usage: residency config check" in page


def test_the_meta_tool_reference_shows_every_meta_tool() -> None:
    page = rendered(DOCS / "reference" / "meta-tools.md")
    for name in META_TOOLS:
        assert f'"name": "{name}"' in page


def test_the_resource_reference_lists_every_resource() -> None:
    page = rendered(DOCS / "reference" / "resources.md")
    for resource in resources():
        assert f"`{resource.uri}`" in page
    for template in resource_templates():
        assert f"`{template.uri_template}`" in page


def test_the_error_reference_lists_every_reason_of_the_gateway_s_table() -> None:
    page = rendered(DOCS / "reference" / "errors.md")
    for rule in RULES:
        assert f"| `{rule.reason}` | `{rule.error.__name__}` |" in page
    assert "ResidencyError" in page and "StoreUnavailable" in page


def test_the_docs_show_the_current_lifecycle_diagrams() -> None:
    page = rendered(DOCS / "explanation" / "lifecycles.md")
    for lifecycle in (TOOL_LIFECYCLE, SPAN_LIFECYCLE):
        assert f"```mermaid\n{lifecycle.mermaid()}\n```" in page


def test_an_unknown_generator_is_an_error() -> None:
    with pytest.raises(KeyError, match="no docs generator"):
        render("<!-- gen: nothing -->")


@pytest.mark.parametrize("name", ["search", "chains", "offload", "fleet"])
def test_benchmark_tables_show_figures_not_verdicts_nor_earlier_implementations(name: str) -> None:
    from docs_gen.benchmarks import bench_figures

    table = bench_figures(name)
    assert table.count("\n|") >= 3
    assert not re.search(r"\bmeets\b|\bold\b|MISSED|\|\s*(True|False)\s*\|", table)
