"""The gateway's one error table covers every public error, and nothing it sends leaks a secret."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp import MCPError

import residency._errors as domain
from residency._gateway._config import Secrets
from residency._gateway._errors import RULES, call_outcome, error_result, rule_for, to_mcp_error
from residency._gateway._upstream import UpstreamFailure


def _instance(cls: type[BaseException]) -> BaseException:
    for kwargs in (
        {},
        {"tool": "t"},
        {"tool": "t", "path": "$.x"},
        {"tool": "t", "rule": "r", "expected_failure": "f"},
        {"span": "s1"},
        {"limit": 1},
    ):
        try:
            return cls("boom", **kwargs)  # type: ignore[call-arg]
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls.__name__}")


@pytest.mark.parametrize("name", sorted(domain.__all__))
def test_every_public_error_has_its_own_rule(name: str) -> None:
    cls = getattr(domain, name)
    assert any(rule.error is cls for rule in RULES), f"{name} has no rule in the gateway's error table"
    assert rule_for(_instance(cls)).error is cls  # type: ignore[union-attr]


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
