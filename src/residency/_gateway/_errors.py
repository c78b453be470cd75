"""The one table that turns domain errors into what an MCP client receives, and the boundaries
that apply it.

A refusal the model should read and act on (a tombstoned tool, invalid arguments, an upstream
that crashed) becomes an ``isError`` tool result whose text is the error's message and whose
``_meta["residency/error"]`` says what happened in machine terms (``reason``, ``type``, and
``tool``/``path``/``rule`` when the error has them). A meta-tool's refusal carries the same
details as its ``structuredContent["error"]`` too (meta-tool results are structured). A request
that is itself wrong (an unknown tool or resource, a malformed session key or phase) or a
failure of the gateway (a broken store) becomes a JSON-RPC error.

Rules are tried in order; the first whose type matches wins, so subclasses come before their
bases. Every text passes through ``Secrets.redact`` first, and so does every result an upstream
returns (``redact_result``): an upstream that quotes its own env or headers in a result, an
``isError`` one above all, must not hand them to the client.

The table is applied at two places only. Every request handler is wrapped in
``protocol_errors``: a ``ResidencyError`` that leaves it becomes a JSON-RPC error. Inside the
``tools/call`` handler, the step that runs the call (a meta-tool, or the forwarding of a call
upstream) goes through ``refusals_as_results``: an error whose rule says ``as_result`` becomes
the call's result, and the turn goes on (it is planned, its changes announced). Code between
the two raises domain errors and maps nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import mcp_types as types
from mcp import MCPError

from residency import _errors as domain
from residency._gateway._config import Secrets

__all__ = [
    "ERROR_META_KEY",
    "RATE_LIMITED",
    "RULES",
    "Rule",
    "call_outcome",
    "error_result",
    "protocol_errors",
    "redact_result",
    "refusals_as_results",
    "rule_for",
    "to_mcp_error",
]

ERROR_META_KEY = "residency/error"

RATE_LIMITED = -32029
"""The JSON-RPC error code of a request refused by a rate limit (server-error range; 429 as
in HTTP). Its ``data`` carries ``retry_after``, in seconds."""


@dataclass(frozen=True, slots=True)
class Rule:
    """How one error type reaches the client.

    Attributes:
        error: the exception type (subclasses match too, unless an earlier rule took them).
        reason: a stable machine name, sent in ``_meta["residency/error"]["reason"]``.
        as_result: an ``isError`` tool result (the model reads it) rather than a JSON-RPC error.
        code: the JSON-RPC error code when not ``as_result`` (and for non-tool requests).
    """

    error: type[BaseException]
    reason: str
    as_result: bool
    code: int = types.INTERNAL_ERROR


RULES: tuple[Rule, ...] = (
    Rule(domain.ToolNotResident, "tool_not_resident", True, types.INVALID_PARAMS),
    Rule(domain.ToolArchived, "tool_archived", True, types.INVALID_PARAMS),
    Rule(domain.ArgumentsInvalid, "arguments_invalid", True, types.INVALID_PARAMS),
    Rule(domain.ChainCollision, "chain_collision", True, types.INVALID_PARAMS),
    Rule(domain.CallRefused, "call_refused", True, types.INVALID_PARAMS),
    Rule(domain.UpstreamFailure, "upstream_failure", True),
    Rule(domain.GhostToolError, "ghost_tool", True, types.INVALID_PARAMS),
    Rule(domain.IllegalTransition, "illegal_transition", True, types.INVALID_PARAMS),
    Rule(domain.UnrecoverablePruneError, "unrecoverable_prune", True, types.INVALID_PARAMS),
    Rule(domain.UnverifiedSummary, "unverified_summary", True, types.INVALID_PARAMS),
    Rule(domain.SessionConflict, "session_conflict", False, types.INTERNAL_ERROR),
    Rule(domain.SessionLimitReached, "session_limit", False, types.INVALID_REQUEST),
    Rule(domain.SubscriptionLimitReached, "subscription_limit", False, types.INVALID_REQUEST),
    Rule(domain.RateLimited, "rate_limited", False, RATE_LIMITED),
    Rule(domain.ConcurrentUse, "concurrent_use", False, types.INTERNAL_ERROR),
    Rule(domain.NotFound, "not_found", False, types.INVALID_PARAMS),
    Rule(domain.SchemaError, "schema_error", True, types.INVALID_PARAMS),
    Rule(domain.ConfigError, "config_error", False, types.INVALID_PARAMS),
    Rule(domain.UnknownPhase, "unknown_phase", False, types.INVALID_PARAMS),
    Rule(domain.InvalidInput, "invalid_input", True, types.INVALID_PARAMS),
    Rule(domain.IntegrityError, "integrity_error", False, types.INTERNAL_ERROR),
    Rule(domain.StoreConflict, "store_conflict", False, types.INTERNAL_ERROR),
    Rule(domain.StoreUnavailable, "store_unavailable", False, types.INTERNAL_ERROR),
    Rule(domain.StoreError, "store_error", False, types.INTERNAL_ERROR),
    Rule(domain.LocalModelUnavailable, "local_model_unavailable", False, types.INTERNAL_ERROR),
    Rule(domain.ResidencyError, "residency_error", False, types.INTERNAL_ERROR),
)


def rule_for(error: BaseException) -> Rule | None:
    """The first rule matching ``error``, or None for errors that are not ours."""
    for rule in RULES:
        if isinstance(error, rule.error):
            return rule
    return None


def _details(error: BaseException, rule: Rule) -> dict[str, Any]:
    details: dict[str, Any] = {"reason": rule.reason, "type": type(error).__name__}
    for attr in (
        "tool",
        "path",
        "rule",
        "expected_failure",
        "server",
        "where",
        "timed_out",
        "phases",
        "limit",
        "retry_after",
    ):
        value = getattr(error, attr, None)
        if value not in (None, ""):
            details[attr] = list(value) if isinstance(value, tuple) else value
    return details


def error_result(error: BaseException, secrets: Secrets, *, structured: bool = False) -> types.CallToolResult:
    """The ``isError`` tool result for ``error`` (whatever its rule says: the caller decided).

    Args:
        error: the error; its message is the result's text.
        secrets: the values scrubbed from every text.
        structured: also give the details as ``structuredContent["error"]`` (a meta-tool's).
    """
    rule = rule_for(error) or Rule(type(error), "internal_error", True)
    text = secrets.redact(str(error))
    details = _scrub(_details(error, rule), secrets.redact)
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True, _meta={ERROR_META_KEY: details}
    )
    if structured:
        result.structured_content = {"error": details}
    return result


def to_mcp_error(error: BaseException, secrets: Secrets) -> MCPError:
    """The JSON-RPC error for ``error``; unknown errors say only that the gateway failed."""
    rule = rule_for(error)
    if rule is None:
        return MCPError(code=types.INTERNAL_ERROR, message="internal gateway error")
    details = _scrub(_details(error, rule), secrets.redact)
    return MCPError(code=rule.code, message=secrets.redact(str(error)), data=details)


def call_outcome(error: BaseException, secrets: Secrets) -> types.CallToolResult:
    """What a ``tools/call`` answers for ``error``: a result the model reads, or raise.

    Raises:
        MCPError: the rule says the request itself is wrong or the gateway failed.
    """
    rule = rule_for(error)
    if rule is not None and rule.as_result:
        return error_result(error, secrets)
    raise to_mcp_error(error, secrets)


async def refusals_as_results(
    step: Awaitable[types.CallToolResult], secrets: Secrets, *, structured: bool = False
) -> types.CallToolResult:
    """The result of a ``tools/call``'s call step, with its refusals as results the model reads.

    Args:
        step: the call step (a meta-tool, or a call forwarded upstream).
        secrets: the values scrubbed from every text.
        structured: the call is a meta-tool's (see ``error_result``).

    Raises:
        ResidencyError: one whose rule is not ``as_result``, for the handler's boundary
            (``protocol_errors``).
    """
    try:
        return await step
    except domain.ResidencyError as exc:
        rule = rule_for(exc)
        if rule is None or not rule.as_result:
            raise
        return error_result(exc, secrets, structured=structured)


class _HasSecrets(Protocol):
    secrets: Secrets


_O = TypeVar("_O", bound=_HasSecrets)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def protocol_errors(
    handler: Callable[Concatenate[_O, _P], Awaitable[_R]],
) -> Callable[Concatenate[_O, _P], Awaitable[_R]]:
    """A request handler's boundary: a ``ResidencyError`` that leaves it becomes a JSON-RPC error.

    For methods of an object with ``secrets`` (the gateway). Other exceptions pass (the SDK
    answers ``MCPError`` as it is, and anything else as an internal error).
    """

    @functools.wraps(handler)
    async def boundary(owner: _O, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await handler(owner, *args, **kwargs)
        except domain.ResidencyError as exc:
            raise to_mcp_error(exc, owner.secrets) from None

    return boundary


_J = TypeVar("_J")


def _scrub(value: _J, redact: Any) -> _J:
    """``value`` (JSON data) with every string, and every object key, passed through ``redact``."""
    if isinstance(value, str):
        out: Any = redact(value)
    elif isinstance(value, list):
        out = [_scrub(v, redact) for v in value]
    elif isinstance(value, dict):
        out = {redact(k): _scrub(v, redact) for k, v in value.items()}
    else:
        out = value
    return out  # type: ignore[no-any-return]


def redact_result(result: types.CallToolResult, secrets: Secrets) -> types.CallToolResult:
    """``result`` with every secret value in it replaced by ``***``.

    Every string counts: text content, resource text, structured content and ``_meta``, keys
    included. Cheap when nothing matches: with no secrets the result is returned as it is, and
    otherwise one JSON dump is searched before anything is rebuilt.

    Args:
        result: a tool result as an upstream sent it.
        secrets: the values to scrub.

    Returns:
        ``result`` itself when no secret appears in it, else a scrubbed copy.
    """
    if not secrets:
        return result
    if not secrets.found_in_json(result.model_dump_json(by_alias=True, exclude_unset=True)):
        return result
    data = result.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return types.CallToolResult.model_validate(_scrub(data, secrets.redact))
