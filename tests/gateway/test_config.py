"""Configuration files: the standard mcpServers shape, a strict residency section, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from residency import ConfigError
from residency._gateway import load_config, parse_config
from residency._gateway._config import INPUTS_HINT, VSCODE_HINT, HTTPServer, StdioServer, line_of

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
        ('{"mcpServers": {"a": {"comand": "x"}}}', "mcpServers.a.comand", 1),
        ('{"mcpServers": {"a": {"args": []}}}', "mcpServers.a", 1),
        (
            '{"mcpServers": {},\n "residency": {\n  "budget": {"schema_tokens": -5}}}',
            "residency.budget.schema_tokens",
            3,
        ),
        ('{"mcpServers": {},\n "residency": {"chains": "maybe"}}', "residency.chains", 2),
        ('{"mcpServers": {}, "residency": {"colour": "blue"}}', "residency.colour", 1),
        ('{"mcpServers": {"r": {"url": "ftp://host/mcp"}}}', "mcpServers.r.url", 1),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": 5}}}}', "mcpServers.a.env.K", 1),
        ('{"mcpServers": {}, "residency": {"store": "mysql://db"}}', "residency.store", 1),
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


def test_an_empty_mcp_servers_still_loads_so_serve_can_offer_its_meta_tools() -> None:
    # `residency config check` calls it an error; `serve` (and the demo config) keep working.
    assert parse_config('{"mcpServers": {}}').servers == {}
    assert parse_config("{}").servers == {}


def test_startup_timeout_and_ready_wait_default_and_validate() -> None:
    settings = parse_config('{"mcpServers": {}}').residency
    assert (settings.startup_timeout, settings.ready_wait) == (30.0, 5.0)
    relaxed = parse_config('{"residency": {"startup_timeout": 90, "ready_wait": 0}}').residency
    assert (relaxed.startup_timeout, relaxed.ready_wait) == (90.0, 0.0)
    for text, where in [
        ('{"residency": {"startup_timeout": 0}}', "residency.startup_timeout"),
        ('{"residency": {"ready_wait": -1}}', "residency.ready_wait"),
        ('{"residency": {"ready_wait": "soon"}}', "residency.ready_wait"),
    ]:
        with pytest.raises(ConfigError) as raised:
            parse_config(text)
        assert raised.value.where == where


def test_a_vs_code_servers_file_gets_a_hint_at_its_servers_line() -> None:
    text = '{\n  "servers": {"x": {"type": "stdio", "command": "x"}},\n  "inputs": []\n}'
    with pytest.raises(ConfigError) as raised:
        parse_config(text, source="mcp.json")
    assert raised.value.where == "servers"
    # Both VS Code keys are named in one run, each at its line.
    assert [str(p) for p in raised.value.problems] == [
        f"mcp.json: line 2, key 'servers': {VSCODE_HINT}",
        f"mcp.json: line 3, key 'inputs': {INPUTS_HINT}",
    ]


def test_vs_code_inputs_next_to_mcp_servers_get_a_hint() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"mcpServers": {},\n "inputs": [{"id": "k"}]}', source="g.json")
    assert raised.value.where == "inputs"
    assert str(raised.value) == f"g.json: line 2, key 'inputs': {INPUTS_HINT}"


def test_env_colon_references_expand_like_plain_ones() -> None:
    config = parse_config(
        '{"mcpServers": {"r": {"url": "http://127.0.0.1:9/mcp",'
        ' "headers": {"Authorization": "Bearer ${env:RESIDENCY_TEST_KEY}", "X": "${RESIDENCY_TEST_KEY}"}}}}',
        environ={"RESIDENCY_TEST_KEY": "k-123456"},
    )
    remote = config.servers["r"]
    assert isinstance(remote, HTTPServer)
    assert remote.headers["Authorization"].get_secret_value() == "Bearer k-123456"
    assert remote.headers["X"].get_secret_value() == "k-123456"


def test_a_vs_code_input_reference_is_an_error_at_its_key() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(
            '{"mcpServers": {"a": {"command": "x", "env": {"KEY": "${input:api-key}"}}}}', environ={}
        )
    assert raised.value.where == "mcpServers.a.env.KEY"


def test_an_empty_sqlite_path_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config('{"residency": {"store": "sqlite:///"}}')
    assert raised.value.where == "residency.store"


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        (("residency",), 2),
        (("residency", "pinned"), 3),
        (("residency", "pinned", "b"), 4),
        (("residency", "nowhere"), 2),
        (("absent",), None),
    ],
)
def test_line_of_finds_a_key_after_its_parents(loc: tuple[str, ...], line: int | None) -> None:
    text = '{"mcpServers": {"b": {"command": "b"}},\n "residency": {\n  "pinned": ["a",\n   "b"]}}'
    assert line_of(text, loc) == line
