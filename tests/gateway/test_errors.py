"""The gateway's one error table covers every public error in both of the shapes a client
receives (an ``isError`` tool result, a JSON-RPC error), and nothing it sends leaks a secret."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp import MCPError

import residency._errors as domain
from residency._errors import UpstreamFailure
from residency._gateway._config import Secrets
from residency._gateway._errors import (
    ERROR_META_KEY,
    RULES,
    call_outcome,
    error_result,
    protocol_errors,
    refusals_as_results,
    rule_for,
    to_mcp_error,
)


def _instance(cls: type[BaseException]) -> BaseException:
    for kwargs in (
        {},
        {"tool": "t"},
        {"tool": "t", "path": "$.x"},
        {"tool": "t", "rule": "r", "expected_failure": "f"},
        {"span": "s1"},
        {"limit": 1},
        {"server": "up"},
        {"retry_after": 1.5},
    ):
        try:
            return cls("boom", **kwargs)
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls.__name__}")


@pytest.mark.parametrize("name", sorted(domain.__all__))
def test_every_public_error_has_its_own_rule(name: str) -> None:
    cls = getattr(domain, name)
    assert any(rule.error is cls for rule in RULES), f"{name} has no rule in the gateway's error table"
    found = rule_for(_instance(cls))
    assert found is not None and found.error is cls


def test_subclasses_come_before_their_bases_in_the_table() -> None:
    for i, earlier in enumerate(RULES):
        for later in RULES[i + 1 :]:
            assert not issubclass(later.error, earlier.error), f"{later.error.__name__} is shadowed"


def test_a_refusal_becomes_a_result_the_model_reads_with_its_machine_reason() -> None:
    result = call_outcome(
        domain.ArgumentsInvalid("update_incident: bad", tool="update_incident", path="$.notify"), Secrets()
    )
    assert result.is_error
    assert result.meta == {
        "residency/error": {
            "reason": "arguments_invalid",
            "type": "ArgumentsInvalid",
            "tool": "update_incident",
            "path": "$.notify",
        }
    }


def test_an_unknown_tool_and_a_broken_store_are_protocol_errors() -> None:
    with pytest.raises(MCPError) as unknown:
        call_outcome(domain.NotFound("unknown tool 'x'"), Secrets())
    assert unknown.value.code == types.INVALID_PARAMS
    with pytest.raises(MCPError) as broken:
        call_outcome(domain.IntegrityError("content does not match"), Secrets())
    assert broken.value.code == types.INTERNAL_ERROR
    assert (
        to_mcp_error(RuntimeError("password=hunter22"), Secrets()).error.message == "internal gateway error"
    )


def test_secret_values_are_scrubbed_from_every_text_sent() -> None:
    secrets = Secrets(["s3cr3t-token-value"])
    failure = UpstreamFailure("upstream 'x' refused 'y': token s3cr3t-token-value rejected", server="x")
    assert "s3cr3t" not in error_result(failure, secrets).model_dump_json()
    assert (
        "s3cr3t"
        not in to_mcp_error(domain.StoreError("cannot open s3cr3t-token-value.db"), secrets).error.message
    )


class _Handlers:
    """Two request handlers behind the gateway's boundaries, each raising the error it is given."""

    def __init__(self) -> None:
        self.secrets = Secrets(["hunter2-secret"])

    @protocol_errors
    async def call_tool(self, error: BaseException) -> types.CallToolResult:
        async def step() -> types.CallToolResult:
            raise error

        return await refusals_as_results(step(), self.secrets)

    @protocol_errors
    async def read_resource(self, error: BaseException) -> types.ReadResourceResult:
        raise error


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(domain.__all__))
async def test_every_public_error_reaches_the_client_in_the_shape_its_rule_says(name: str) -> None:
    cls = getattr(domain, name)
    rule = rule_for(_instance(cls))
    assert rule is not None
    handlers = _Handlers()
    # In a tools/call: a refusal the model reads, or a JSON-RPC error.
    if rule.as_result:
        result = await handlers.call_tool(_instance(cls))
        assert result.is_error
        assert (result.meta or {})[ERROR_META_KEY]["reason"] == rule.reason
        assert (result.meta or {})[ERROR_META_KEY]["type"] == name
    else:
        with pytest.raises(MCPError) as raised:
            await handlers.call_tool(_instance(cls))
        assert raised.value.code == rule.code
        assert raised.value.error.data["reason"] == rule.reason
    # Any other request: always a JSON-RPC error, with the same machine reason.
    with pytest.raises(MCPError) as protocol:
        await handlers.read_resource(_instance(cls))
    assert protocol.value.code == rule.code
    assert protocol.value.error.data["reason"] == rule.reason
    assert protocol.value.error.data["type"] == name


@pytest.mark.anyio
async def test_errors_that_are_not_residencys_pass_the_boundaries_unmapped() -> None:
    handlers = _Handlers()
    with pytest.raises(KeyError):
        await handlers.call_tool(KeyError("x"))
    with pytest.raises(KeyError):
        await handlers.read_resource(KeyError("x"))


@pytest.mark.anyio
async def test_a_meta_tool_refusal_also_carries_its_details_as_structured_content() -> None:
    refusal = domain.ArgumentsInvalid("bad $.query: hunter2-secret", tool="q", path="$.query")

    async def step() -> types.CallToolResult:
        raise refusal

    result = await refusals_as_results(step(), Secrets(["hunter2-secret"]), structured=True)
    assert result.is_error
    assert result.structured_content == {"error": (result.meta or {})[ERROR_META_KEY]}
    assert (result.structured_content or {})["error"]["path"] == "$.query"
    assert "hunter2" not in result.model_dump_json()
