"""The one place every MCP request passes before and after the gateway answers it: rate limits
(``_rate_limit``) and the audit log (``_audit``).

``RequestGate`` is a server middleware (``Server.middleware``, mcp 2.3.0): it sees each request
whatever the transport (stdio, streamable HTTP in either era, in-process) before its params are
validated, and sees the answer or the error after. So a limit holds the same everywhere, and
one request writes exactly one audit line, whatever the handler did inside (a call retried on
a ``SessionConflict`` is still one line).

Why a JSON-RPC error and not an HTTP 429. The HTTP front's own refusals (``_http_guard``:
connection, request and body caps per client address) come before MCP and know no method or
tool. A rate limit is per identity and tells upstream calls from lists, so it is decided
here: the caller gets the error table's answer for ``RateLimited`` (code ``RATE_LIMITED``,
``data.reason`` ``rate_limited``, ``data.retry_after`` in seconds), on stdio as over HTTP, and
the refusal is audited with its session and tool. A ``tools/call`` refused so gets a JSON-RPC
error, not an ``isError`` result: backing off is the host's business, not the model's.

Which requests. ``initialize``, ``ping``, ``server/discover`` and notifications are neither
limited nor audited (a client must be able to connect and learn the server). Every other
request takes a request token; a ``tools/call`` of an upstream tool (or ``call_tool``) also
takes a call token when ``calls_per_minute`` is set. ``tools/list``, ``tools/call`` and
``resources/read`` are audited; a limited request of any method is.

How a ``tools/call`` answer is told apart: a call the session admitted carries its call id in
``_meta["residency/call"]`` (``_calls``) and is ``forwarded``; an ``isError`` result without it,
or a JSON-RPC error, is ``refused`` (``denied`` when its reason is a policy's, see
``_audit.DENIED_REASONS``, or when the handler called ``_audit.note_denied``; a ``reexpand_tools``
that named a hidden tool is ``denied`` too), with the reason
of ``_meta["residency/error"]`` as its code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from pydantic import ValidationError

from residency._errors import InvalidInput, RateLimited
from residency._gateway import _meta_tools as meta
from residency._gateway._audit import DENIED_REASONS, PENDING, AuditLog, Decision, Note
from residency._gateway._calls import CALL_META_KEY
from residency._gateway._config import ResidencySettings, Secrets
from residency._gateway._connection import IDENTITY_STATE, PRINCIPAL_STATE, session_key
from residency._gateway._errors import ERROR_META_KEY, to_mcp_error
from residency._gateway._rate_limit import ANONYMOUS_IDENTITY, RateLimiter

__all__ = ["UNGATED", "Caller", "RequestGate", "caller_of", "request_gate"]

UNGATED = frozenset({"initialize", "ping", "server/discover"})
"""Methods neither limited nor audited."""

_AUDITED = frozenset({"tools/list", "tools/call", "resources/read"})

_DENIABLE: frozenset[Decision] = frozenset({"refused", "reexpanded"})
"""Decisions a handler's ``note_denied`` turns into ``denied``: a refused call, and a
``reexpand_tools`` that named a tool the caller's policy hides (its answer says "no tool named")."""
_META_DECISIONS: dict[str, Decision] = {
    meta.SEARCH_TOOLS: "searched",
    meta.REEXPAND_TOOLS: "reexpanded",
    meta.CHECK_CHAIN: "checked",
    meta.ARCHIVE_CHAIN: "archived",
    meta.READ_SPAN: "read",
}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request, as the HTTP front verified it.

    Attributes:
        identity: what limits and session keys are bound to (``oauth-…``, ``token-…``); None:
            anonymous.
        subject: an OAuth principal's ``sub``, or the static token's identity; None: anonymous.
    """

    identity: str | None
    subject: str | None


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller of a request (anonymous on stdio, in-process, and behind an open HTTP front)."""
    scope = getattr(ctx.request, "scope", None) if ctx.request is not None else None
    state = scope.get("state") if isinstance(scope, dict) else None
    if not isinstance(state, dict):
        return Caller(None, None)
    principal = state.get(PRINCIPAL_STATE)
    identity = state.get(IDENTITY_STATE)
    identity = identity if isinstance(identity, str) else None
    if principal is not None:
        # Only an OAuth front sets it, and that front has imported the module already.
        from residency._gateway._oauth import Principal

        if isinstance(principal, Principal):
            return Caller(identity or principal.identity, principal.subject)
    return Caller(identity, identity)


class RequestGate:
    """The gateway's server middleware (see the module docstring).

    Args:
        secrets: scrubbed from error texts.
        default_session: the gateway's default session key (for the audited session key).
        limiter: the rate limits, or None.
        audit: the audit log, or None.
        clock: seconds of a monotonic clock (the limiter's ``now``).
    """

    def __init__(
        self,
        secrets: Secrets,
        *,
        default_session: str | None,
        limiter: RateLimiter | None = None,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.secrets = secrets
        self.limiter = limiter
        self.audit = audit
        self._default = default_session
        self._clock = clock

    def opened(self) -> AbstractContextManager[object]:
        """For as long as the gateway runs: the audit file is closed on leaving."""
        return self.audit if self.audit is not None else nullcontext()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if ctx.request_id is None or method in UNGATED:
            return await call_next(ctx)
        params: Mapping[str, Any] = ctx.params if isinstance(ctx.params, Mapping) else {}
        tool, upstream, arguments = _target(method, params)
        caller = caller_of(ctx)
        if self.limiter is not None:
            over = self.limiter.take(caller.identity or ANONYMOUS_IDENTITY, call=upstream, now=self._clock())
            if over is not None:
                wait = math.ceil(over.retry_after * 1000) / 1000
                what = "upstream calls" if over.limit == "calls" else "requests"
                error = RateLimited(
                    f"rate limit: at most {over.per_minute:g} {what} per minute for this caller; "
                    f"retry after {wait:g} s",
                    retry_after=wait,
                    limit=over.limit,
                )
                if self.audit is not None:
                    self._record(
                        ctx,
                        caller,
                        "limited",
                        tool,
                        "error",
                        "rate_limited",
                        retry_after=wait,
                        arguments=arguments,
                    )
                raise to_mcp_error(error, self.secrets)
        if self.audit is None or method not in _AUDITED:
            return await call_next(ctx)
        note = Note()
        noting = PENDING.set(note)
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            data = exc.error.data
            reason = data.get("reason") if isinstance(data, dict) else None
            code = reason if isinstance(reason, str) else str(exc.error.code)
            decision = _failed(method, tool, code)
            if note.denied is not None and decision in _DENIABLE:
                decision, code = "denied", note.denied
            self._record(ctx, caller, decision, tool, "error", code, arguments=arguments)
            raise
        except ValidationError:
            # Params the SDK could not read (it answers -32602): recorded as what they are.
            self._record(
                ctx, caller, _failed(method, tool, "invalid_params"), tool, "error", "invalid_params"
            )
            raise
        except Exception:
            self._record(
                ctx, caller, _failed(method, tool, "internal_error"), tool, "error", "internal_error"
            )
            raise
        finally:
            PENDING.reset(noting)
        decision, outcome, answer_code = _answered(method, tool, result)
        if note.denied is not None and decision in _DENIABLE:
            decision, answer_code = "denied", note.denied
        resource = params.get("uri") if method == "resources/read" else None
        self._record(
            ctx,
            caller,
            decision,
            tool,
            outcome,
            answer_code,
            resource=resource if isinstance(resource, str) else None,
            arguments=arguments,
        )
        return result

    def _record(
        self,
        ctx: ServerRequestContext[Any, Any],
        caller: Caller,
        decision: Decision,
        tool: str | None,
        outcome: Literal["ok", "error"],
        code: str | None,
        *,
        resource: str | None = None,
        retry_after: float | None = None,
        arguments: list[str] | None = None,
    ) -> None:
        assert self.audit is not None
        try:
            session = session_key(ctx, self._default)
        except InvalidInput:
            session = None  # a malformed key: the request was refused for it
        self.audit.record(
            decision,
            subject=caller.subject,
            identity=caller.identity,
            session=session,
            tool=tool,
            outcome=outcome,
            code=code,
            resource=resource,
            retry_after=retry_after,
            arguments=arguments,
        )


def _target(method: str, params: Mapping[str, Any]) -> tuple[str | None, bool, list[str] | None]:
    """The tool a request names (``call_tool``'s target for a proxied call), whether it goes
    upstream, and its argument names."""
    if method != "tools/call":
        return None, False, None
    name = params.get("name")
    if not isinstance(name, str):
        return None, False, None
    arguments = params.get("arguments")
    if name == meta.CALL_TOOL and isinstance(arguments, Mapping):
        target, inner = arguments.get("name"), arguments.get("arguments")
        names = [str(k) for k in inner] if isinstance(inner, Mapping) else None
        return (target if isinstance(target, str) else name), True, names
    names = [str(k) for k in arguments] if isinstance(arguments, Mapping) else None
    return name, name not in meta.META_TOOLS or name == meta.CALL_TOOL, names


def _decision(method: str, tool: str | None) -> Decision | None:
    if method == "tools/list":
        return "listed"
    if method == "resources/read":
        return "read"
    return _META_DECISIONS.get(tool or "")


def _failed(method: str, tool: str | None, code: str) -> Decision:
    """The decision of a request answered with a JSON-RPC error."""
    decision = _decision(method, tool)
    if decision is not None:
        return decision
    return "denied" if code in DENIED_REASONS else "refused"


def _answered(
    method: str, tool: str | None, result: HandlerResult
) -> tuple[Decision, Literal["ok", "error"], str | None]:
    """The decision, outcome and code of a request answered with a result (a wire dict)."""
    body: Mapping[str, Any] = result if isinstance(result, Mapping) else {}
    failed = body.get("isError") is True
    meta_ = body.get("_meta")
    meta_ = meta_ if isinstance(meta_, Mapping) else {}
    error = meta_.get(ERROR_META_KEY)
    reason = error.get("reason") if isinstance(error, Mapping) else None
    code = reason if isinstance(reason, str) else ("error" if failed else None)
    outcome: Literal["ok", "error"] = "error" if failed else "ok"
    decision = _decision(method, tool)
    if decision is None:
        if CALL_META_KEY in meta_ or not failed:
            decision = "forwarded"
        else:
            decision = "denied" if code in DENIED_REASONS else "refused"
    return decision, outcome, code if failed else None


def request_gate(
    settings: ResidencySettings,
    secrets: Secrets,
    *,
    default_session: str | None,
    clock: Callable[[], float] | None = None,
) -> RequestGate | None:
    """The gate a config asks for, or None when it sets neither ``rate_limit`` nor ``audit``
    (then nothing runs per request)."""
    if settings.rate_limit is None and settings.audit is None:
        return None
    return RequestGate(
        secrets,
        default_session=default_session,
        limiter=RateLimiter(settings.rate_limit) if settings.rate_limit is not None else None,
        audit=AuditLog(settings.audit, secrets.redact) if settings.audit is not None else None,
        clock=clock if clock is not None else time.monotonic,
    )
