"""Chat Completions and Responses parameters for a residency session (OpenAI).

Theory of operation: the ``tools`` array depends on the session's catalog alone, so the cached
prompt prefix survives every turn plan; the turn plan enters only through ``tool_choice``.

- ``tools`` lists the re-expand tool, then every registered tool in registration order, as the
  session shows it (minified), as a function tool with ``strict: false`` (MCP schemas are not
  written for strict mode, and the Responses API defaults to strict).
- ``tool_choice`` is ``{"type": "allowed_tools", "mode": "auto", ...}`` naming the re-expand
  tool and the plan's resident tools: a withheld tool (tombstoned, evicted, archived) stays in
  ``tools`` but cannot be called until it is re-expanded and a new turn is planned.
- The plan's tombstone lines go in one trailing ``developer`` message, after the host's
  messages, so they reach the model every turn without touching the prefix (the host does
  not keep it in its transcript; the next request carries it again while it applies).

Pure functions: they read the session and plan, never change them, and make no request. The
return types are the ``openai`` package's request TypedDicts (imported for type checkers only;
install the ``adapters`` extra to get them).

Example:
    >>> from residency import Budget, Session
    >>> from residency.adapters import openai as adapter
    >>> s = Session()
    >>> s.register_tools([{"name": "ping", "inputSchema": {"type": "object"}}])
    ['ping']
    >>> plan = s.plan_turn(Budget(schema_tokens=1000, argument_tokens=1000))
    >>> params = adapter.chat_request(s, plan, model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    >>> [t["function"]["name"] for t in params["tools"]]
    ['reexpand_tools', 'ping']
    >>> [t["function"]["name"] for t in params["tool_choice"]["allowed_tools"]["tools"]]
    ['reexpand_tools', 'ping']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from residency._errors import InvalidInput
from residency._runtime import Session, TurnPlan
from residency.adapters import _common
from residency.adapters._common import REEXPAND_TOOL, reexpand_names

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionAllowedToolChoiceParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
    )
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses import FunctionToolParam, ResponseInputItemParam, ToolChoiceAllowedParam
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

__all__ = (
    "NoticeRole",
    "REEXPAND_TOOL",
    "chat_request",
    "chat_tool_choice",
    "chat_tools",
    "reexpand_names",
    "responses_request",
    "responses_tool_choice",
    "responses_tools",
)

NoticeRole = Literal["developer", "system"]
"""The role of the trailing tombstone message (``system`` for servers without ``developer``)."""


# -- Chat Completions ------------------------------------------------------------------------


def chat_tools(
    session: Session, *, reexpand_tool: str = REEXPAND_TOOL
) -> list[ChatCompletionFunctionToolParam]:
    """The Chat Completions ``tools`` array: the same bytes on every turn while the catalog is unchanged.

    Args:
        session: the session whose registered tools are listed.
        reexpand_tool: the re-expand tool's name; keep it equal to the session's
            ``reexpand_tool`` so tombstones name a tool the model has.

    Raises:
        InvalidInput: a tool name the API refuses, a name taken by the re-expand tool, or an
            input schema whose root is not an object.
    """
    out: list[ChatCompletionFunctionToolParam] = []
    for tool in _listed(session, reexpand_tool):
        function: ChatCompletionFunctionToolParam = {
            "type": "function",
            "function": {"name": tool.name, "parameters": tool.input_schema, "strict": False},
        }
        if tool.description is not None:
            function["function"]["description"] = tool.description
        out.append(function)
    return out


def chat_tool_choice(
    plan: TurnPlan, *, reexpand_tool: str = REEXPAND_TOOL
) -> ChatCompletionAllowedToolChoiceParam:
    """``tool_choice`` allowing the re-expand tool and the plan's resident tools, nothing else."""
    return {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [{"type": "function", "function": {"name": n}} for n in _allowed(plan, reexpand_tool)],
        },
    }


def chat_request(
    session: Session,
    plan: TurnPlan,
    *,
    model: str,
    messages: Iterable[ChatCompletionMessageParam],
    notice_role: NoticeRole | None = "developer",
    reexpand_tool: str = REEXPAND_TOOL,
) -> CompletionCreateParamsNonStreaming:
    """Parameters for ``client.chat.completions.create(**params)`` for this turn.

    Args:
        session: the session whose catalog is listed.
        plan: this turn's plan from ``session.plan_turn``; plan again after re-expanding, so
            the re-expanded tools are allowed.
        model: the model name.
        messages: the conversation so far (copied into a new list, not changed).
        notice_role: the role of the trailing tombstone message, or None to leave it out.
        reexpand_tool: as for ``chat_tools``.

    Returns:
        A ``CompletionCreateParamsNonStreaming`` dict.

    Raises:
        InvalidInput: as for ``chat_tools``; a plan naming a tool the session does not know
            (a plan of another session); an unknown ``notice_role``.
    """
    listed = chat_tools(session, reexpand_tool=reexpand_tool)
    _check_plan(session, plan)
    conversation = list(messages)
    notice = _notice(plan, notice_role)
    if notice is not None:
        if notice_role == "system":
            conversation.append({"role": "system", "content": notice})
        else:
            conversation.append({"role": "developer", "content": notice})
    return {
        "model": model,
        "messages": conversation,
        "tools": listed,
        "tool_choice": chat_tool_choice(plan, reexpand_tool=reexpand_tool),
    }


# -- Responses -------------------------------------------------------------------------------


def responses_tools(session: Session, *, reexpand_tool: str = REEXPAND_TOOL) -> list[FunctionToolParam]:
    """The Responses ``tools`` array: the same bytes on every turn while the catalog is unchanged.

    Args and Raises: as for ``chat_tools``.
    """
    out: list[FunctionToolParam] = []
    for tool in _listed(session, reexpand_tool):
        function: FunctionToolParam = {
            "type": "function",
            "name": tool.name,
            "parameters": tool.input_schema,
            "strict": False,
        }
        if tool.description is not None:
            function["description"] = tool.description
        out.append(function)
    return out


def responses_tool_choice(plan: TurnPlan, *, reexpand_tool: str = REEXPAND_TOOL) -> ToolChoiceAllowedParam:
    """``tool_choice`` allowing the re-expand tool and the plan's resident tools, nothing else."""
    return {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": n} for n in _allowed(plan, reexpand_tool)],
    }


def responses_request(
    session: Session,
    plan: TurnPlan,
    *,
    model: str,
    input: str | Iterable[ResponseInputItemParam],
    notice_role: NoticeRole | None = "developer",
    reexpand_tool: str = REEXPAND_TOOL,
) -> ResponseCreateParamsNonStreaming:
    """Parameters for ``client.responses.create(**params)`` for this turn.

    Args:
        session, plan, model, notice_role, reexpand_tool: as for ``chat_request``.
        input: the input so far; a string is sent as one user message. A host that chains
            with ``previous_response_id`` stores whatever it sends, the tombstone notice
            included: pass ``notice_role=None`` there and send ``plan.tombstones`` once, when
            the plan's events show new ones.

    Returns:
        A ``ResponseCreateParamsNonStreaming`` dict.

    Raises:
        InvalidInput: as for ``chat_request``.
    """
    listed = responses_tools(session, reexpand_tool=reexpand_tool)
    _check_plan(session, plan)
    items: list[ResponseInputItemParam] = (
        [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
    )
    notice = _notice(plan, notice_role)
    if notice is not None:
        items.append({"role": "developer" if notice_role == "developer" else "system", "content": notice})
    return {
        "model": model,
        "input": items,
        "tools": listed,
        "tool_choice": responses_tool_choice(plan, reexpand_tool=reexpand_tool),
    }


# -- shared ----------------------------------------------------------------------------------


def _listed(session: Session, reexpand_tool: str) -> list[_common.CatalogTool]:
    _common.check_name(reexpand_tool, "reexpand_tool")
    reexpand = _common.CatalogTool(reexpand_tool, _common.REEXPAND_DESCRIPTION, _common.reexpand_schema())
    return [reexpand, *_common.catalog(session, reserved={reexpand_tool})]


def _allowed(plan: TurnPlan, reexpand_tool: str) -> list[str]:
    return list(dict.fromkeys([reexpand_tool, *plan.tool_names]))


def _check_plan(session: Session, plan: TurnPlan) -> None:
    if not isinstance(plan, TurnPlan):
        raise InvalidInput("plan: expected a TurnPlan from session.plan_turn", where="plan")
    known = frozenset(session.tools())
    strangers = [n for n in plan.tool_names if n not in known]
    if strangers:
        raise InvalidInput(
            f"plan: names tools this session does not know ({', '.join(strangers)}); "
            "pass the plan of the same session",
            where="plan",
        )


def _notice(plan: TurnPlan, role: NoticeRole | None) -> str | None:
    if role is not None and role not in ("developer", "system"):
        raise InvalidInput(
            f"notice_role: expected 'developer', 'system' or None, got {role!r}", where="notice_role"
        )
    if role is None or not plan.tombstones:
        return None
    return "\n".join(plan.tombstones)
