"""Messages API parameters for a residency session (Anthropic).

Theory of operation: the ``tools`` block depends on the session's catalog alone, never on
which tools are resident this turn, so the cached prompt prefix survives every turn plan.

- Every registered tool is listed, in registration order, as the session shows it (minified),
  with ``defer_loading: true``: its definition stays out of the prompt prefix until the
  conversation loads it. Pinned tools (or the ``eager`` ones given) are listed without it.
- Two tools load the others, and are never deferred: a server-side tool-search tool (BM25 or
  regex over the deferred tools; optional), and the re-expand tool, a client tool the host
  answers. A re-expansion is answered with ``tool_reference`` blocks in the ``tool_result``
  (``reexpansion_result``): the model's context grows by appended blocks and the prefix never
  changes.
- What the model may call is enforced where calls arrive, by the session: a call to a withheld
  tool is refused with its tombstone, which names the re-expand tool. A tool loaded by the
  server-side search is a re-expansion too: report it (``searched_tools``) so the session agrees.

Pure functions: they read the session, never change it, and make no request. The return types
are the ``anthropic`` package's request TypedDicts (imported for type checkers only; install
the ``adapters`` extra to get them).

Example:
    >>> from residency import Budget, Session
    >>> from residency.adapters import anthropic as adapter
    >>> s = Session()
    >>> s.register_tools([{"name": "ping", "inputSchema": {"type": "object"}}])
    ['ping']
    >>> params = adapter.request(
    ...     s, model="claude-sonnet-5", max_tokens=1024, messages=[{"role": "user", "content": "hi"}]
    ... )
    >>> [t["name"] for t in params["tools"]]
    ['tool_search_tool_bm25', 'reexpand_tools', 'ping']
    >>> params["tools"][2]["defer_loading"]
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from residency._core._lifecycle import ToolState
from residency._errors import InvalidInput
from residency._runtime import Session
from residency.adapters import _common
from residency.adapters._common import REEXPAND_TOOL, reexpand_names

if TYPE_CHECKING:
    from anthropic.types import (
        MessageParam,
        TextBlockParam,
        ToolParam,
        ToolReferenceBlockParam,
        ToolResultBlockParam,
        ToolUnionParam,
    )
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

__all__ = (
    "REEXPAND_TOOL",
    "SEARCH_TOOL_NAMES",
    "Search",
    "reexpand_names",
    "reexpansion_result",
    "request",
    "searched_tools",
    "tool_references",
    "tools",
)

Search = Literal["bm25", "regex"]
"""Which server-side tool search to list: ``bm25`` (natural-language queries) or ``regex``."""

SEARCH_TOOL_NAMES: Mapping[str, str] = MappingProxyType(
    {"bm25": "tool_search_tool_bm25", "regex": "tool_search_tool_regex"}
)
"""The name each server-side tool search is listed (and called) under."""


def tools(
    session: Session,
    *,
    search: Search | None = "bm25",
    eager: Iterable[str] | None = None,
    reexpand_tool: str = REEXPAND_TOOL,
) -> list[ToolUnionParam]:
    """The ``tools`` block: the same bytes on every turn while the catalog is unchanged.

    Args:
        session: the session whose registered tools are listed.
        search: the server-side tool search to list first, or None for none (the model then
            loads deferred tools only through the re-expand tool).
        eager: tools listed without ``defer_loading`` (their definitions sit in the prefix);
            the session's pinned tools when omitted.
        reexpand_tool: the re-expand tool's name; keep it equal to the session's
            ``reexpand_tool`` so tombstones name a tool the model has.

    Returns:
        The search tool (if any), the re-expand tool, then every registered tool in
        registration order, archived and tombstoned ones included (a call to them is refused
        by the session; leaving them out would change the block and break earlier
        ``tool_reference`` blocks).

    Raises:
        InvalidInput: an unknown ``search``, a tool name the API refuses, a name taken by the
            search or re-expand tool, or an input schema whose root is not an object.
        NotFound: an ``eager`` name the session does not know.
    """
    if search is not None and search not in SEARCH_TOOL_NAMES:
        raise InvalidInput(f"search: expected 'bm25', 'regex' or None, got {search!r}", where="search")
    _common.check_name(reexpand_tool, "reexpand_tool")
    listed = _eager(session, eager)
    reserved = {reexpand_tool}
    block: list[ToolUnionParam] = []
    if search == "bm25":
        reserved.add(SEARCH_TOOL_NAMES["bm25"])
        block.append({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
    elif search == "regex":
        reserved.add(SEARCH_TOOL_NAMES["regex"])
        block.append({"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"})
    block.append(
        {
            "name": reexpand_tool,
            "description": _common.REEXPAND_DESCRIPTION,
            "input_schema": _common.reexpand_schema(),
        }
    )
    for tool in _common.catalog(session, reserved=reserved):
        entry: ToolParam = {"name": tool.name, "input_schema": tool.input_schema}
        if tool.description is not None:
            entry["description"] = tool.description
        if tool.name not in listed:
            entry["defer_loading"] = True
        block.append(entry)
    return block


def request(
    session: Session,
    *,
    model: str,
    max_tokens: int,
    messages: Iterable[MessageParam],
    system: str | Iterable[TextBlockParam] | None = None,
    search: Search | None = "bm25",
    eager: Iterable[str] | None = None,
    reexpand_tool: str = REEXPAND_TOOL,
) -> MessageCreateParamsNonStreaming:
    """Parameters for ``client.messages.create(**params)``.

    The turn plan does not enter the request: what a plan changes reaches the model through
    the conversation (``reexpansion_result`` blocks, refusals carrying tombstones, and the
    argument evictions the host applies), so ``tools`` and ``system`` stay a cacheable prefix.

    Args:
        session: the session whose catalog is listed.
        model: the model name.
        max_tokens: the most tokens to generate.
        messages: the conversation so far (copied into a new list, not changed).
        system: the system prompt, or None to send none.
        search, eager, reexpand_tool: as for ``tools``.

    Returns:
        A ``MessageCreateParamsNonStreaming`` dict.

    Raises:
        InvalidInput, NotFound: as for ``tools``.
    """
    params: MessageCreateParamsNonStreaming = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": list(messages),
        "tools": tools(session, search=search, eager=eager, reexpand_tool=reexpand_tool),
    }
    if system is not None:
        params["system"] = system if isinstance(system, str) else list(system)
    return params


def tool_references(names: Iterable[str]) -> list[ToolReferenceBlockParam]:
    """One ``tool_reference`` block per name, in order, without repeats.

    The API expands each into the tool's definition at that point of the conversation; the
    tool must be listed in ``tools`` with ``defer_loading``. ``reexpansion_result`` checks
    that for you.
    """
    return [{"type": "tool_reference", "tool_name": name} for name in dict.fromkeys(names)]


def reexpansion_result(
    session: Session,
    tool_use_id: str,
    names: Iterable[str],
    *,
    eager: Iterable[str] | None = None,
) -> ToolResultBlockParam:
    """The ``tool_result`` answering a re-expand call, once the host has re-expanded the tools.

    Call ``Session.reexpand`` for each name first (``reexpand_names`` reads them from the
    call's input); this only renders the outcome from the session's state.

    Returns:
        When every name is resident: ``tool_reference`` blocks for the deferred ones (a text
        line when all were already listed without deferral). Otherwise an ``is_error`` result
        whose text gives each refused name's tombstone (or says it is unknown) and no
        references, so a withheld schema never reaches the model by this path.

    Raises:
        InvalidInput: no names.
        NotFound: an ``eager`` name the session does not know.
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        raise InvalidInput("names: expected at least one tool name", where="names")
    listed = _eager(session, eager)
    known = frozenset(session.tools())
    refused: list[str] = []
    for name in wanted:
        if name not in known:
            refused.append(f"{name}: no tool of that name.")
        elif session.state(name) is not ToolState.RESIDENT:
            refused.append(session.tombstone_text(name))
    if refused:
        loaded = [n for n in wanted if n in known and session.state(n) is ToolState.RESIDENT]
        if loaded:
            refused.append(
                f"Re-expanded but not loaded by this call: {', '.join(loaded)}. "
                "Ask for them again without the refused names."
            )
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "is_error": True,
            "content": [{"type": "text", "text": "\n".join(refused)}],
        }
    deferred = [n for n in wanted if n not in listed]
    if not deferred:
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": [{"type": "text", "text": f"Already loaded and callable: {', '.join(wanted)}."}],
        }
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": [*tool_references(deferred)]}


def searched_tools(content: Iterable[object]) -> list[str]:
    """Names the server-side tool search loaded in a response, without repeats, in order.

    The model now sees these tools' full definitions, so each is a re-expansion: pass each to
    ``Session.reexpand`` before handling the response's tool calls.

    Args:
        content: a response's content blocks (``Message.content``), as SDK objects or dicts.
    """
    names: list[str] = []
    for block in content:
        if _field(block, "type") != "tool_search_tool_result":
            continue
        result = _field(block, "content")
        if _field(result, "type") != "tool_search_tool_search_result":
            continue
        references = _field(result, "tool_references")
        if not isinstance(references, Iterable):
            continue
        for reference in references:
            name = _field(reference, "tool_name")
            if isinstance(name, str):
                names.append(name)
    return list(dict.fromkeys(names))


def _field(obj: object, key: str) -> object:
    """A field of an SDK object or of its dict form."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _eager(session: Session, eager: Iterable[str] | None) -> frozenset[str]:
    if eager is None:
        return frozenset(n for n in session.tools() if session.is_pinned(n))
    if isinstance(eager, str):
        raise InvalidInput("eager: expected tool names, got one string", where="eager")
    return frozenset(_common.known_names(session, eager, "eager"))
