"""Configuration files: the standard mcpServers shape, a strict residency section, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from residency import ConfigError
from residency._gateway import load_config, parse_config
from residency._gateway._config import HTTPServer, StdioServer

GOOD = """{
  "mcpServers": {
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
           "env": {"API_KEY": "${RESIDENCY_TEST_KEY}"}, "autoApprove": ["read_file"]},
    "remote": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer abc123xyz"}}
  },
  "residency": {"budget": {"schema_tokens": 6000, "argument_tokens": 20000}, "pinned": ["read_file"],
                "phases": {"triage": ["read_file"]}, "minify": "compact", "store": "sqlite:///residency.db",
                "chains": "warn"}
}"""


def test_a_standard_config_with_a_residency_section_loads() -> None:
    config = parse_config(GOOD, environ={"RESIDENCY_TEST_KEY": "key-from-env"})
    fs, remote = config.servers["fs"], config.servers["remote"]
    assert isinstance(fs, StdioServer) and isinstance(remote, HTTPServer)
    assert fs.env["API_KEY"].get_secret_value() == "key-from-env"
    assert config.residency.budget.budget().schema_tokens == 6000
    assert config.residency.chains == "warn"
    assert "key-from-env" not in repr(config) and "abc123xyz" not in repr(config)


@pytest.mark.parametrize(
    ("text", "where", "line"),
    [
        ('{"mcpServers": {"a": {"comand": "x"}}}', "mcpServers.a", 1),
        (
            '{"mcpServers": {},\n "residency": {\n  "budget": {"schema_tokens": -5}}}',
            "residency.budget.schema_tokens",
            3,
        ),
        ('{"mcpServers": {},\n "residency": {"chains": "maybe"}}', "residency.chains", 2),
        ('{"mcpServers": {}, "residency": {"colour": "blue"}}', "residency.colour", 1),
        ('{"mcpServers": {"r": {"url": "ftp://host/mcp"}}}', "mcpServers.r.url", 1),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": 5}}}}', "mcpServers.a.env.K", 1),
        ('{"mcpServers": {}, "residency": {"store": "postgres://db"}}', "residency.store", 1),
        (
            '{"mcpServers": {}, "residency": {"read_only": ["a"],\n "mutating": ["a"]}}',
            "residency.mutating",
            2,
        ),
    ],
)
def test_a_malformed_config_names_the_file_key_and_line(text: str, where: str, line: int) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source="gateway.json")
    assert raised.value.where == where
    assert str(raised.value).startswith(f"gateway.json: line {line}, key '{where}'")


def test_invalid_json_names_the_line() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"mcpServers": {\n  "a": {"command": "x",}\n}}', source="bad.json")
    assert raised.value.where == "line 2"


def test_a_missing_environment_variable_names_its_key_but_no_value() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(
            '{"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "${NOT_SET_ANYWHERE}"}}}}', environ={}
        )
    assert raised.value.where == "mcpServers.a.env.TOKEN"


def test_a_wrong_value_in_env_is_named_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"mcpServers": {"a": {"command": "x", "env": {"K": ["hunter2-secret"]}}}}')
    assert "hunter2-secret" not in str(raised.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "nope.json")
    assert "nope.json" in str(raised.value)
