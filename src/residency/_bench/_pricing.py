"""The session benchmark's cost model: what each model request sends, and what it costs.

Theory of operation
-------------------
A host sends the model one request per step: one before each tool call the model makes (the
trace's calls, and ``search_tools``/``reexpand_tools`` calls), and one that closes the turn
(the model's answer once the last result is in). Every request is a **prompt**: the tool block,
then the transcript, in Anthropic's render order (tools, then system, then messages; the
system prompt is left out: it is the same for every strategy). The transcript holds, oldest
first: the user's words, each call's arguments (``{"name", "input"}`` as compact JSON) and its
result, and each meta-tool call with its result. Tokens are cl100k (``residency._tokens``); a
call's result has the size the trace gives it, times the result scale.

The prompt cache works on prefixes. A request's **cached prefix** is the longest prefix
identical to the previous request's prompt: with the tool block unchanged, that is the block
plus the transcript as the previous request sent it, so only what was appended since is new;
with the tool block changed, nothing is cached and the whole prompt is written again. A
transcript edit (the host compacting its transcript, or applying a planner's argument
eviction) likewise breaks the prefix at the first segment that left. The tool block counts as
changed when its content differs, compared as the exact JSON the model is sent (never by token
count: two different blocks of equal size are a change). Each request costs
``read * cached + write * (total - cached)``, in units of one uncached input token (1.0):

- ``anthropic-5m``: write 1.25, read 0.10; ``anthropic-1h``: write 2.0, read 0.10. The host is
  assumed to put a cache breakpoint at the end of every request (automatic caching), so every
  uncached token is written.
- ``openai``: no write premium (1.0), read at the cached fraction OpenAI documents for the
  GPT-5 family before GPT-5.6 (0.10).
- ``none``: every token at 1.0, so the cost equals the raw input tokens.

Prices are data (``pricing.json`` beside this module, with their sources). Assumptions, all the
same for every strategy: the turns of a trace come less than 5 minutes apart, so a cache entry
never expires between two requests; a request hits only the previous request's prefix (an
older prefix still alive in the cache is not looked for, which is conservative for a tool
block that returns to an earlier state); the provider's minimum cacheable length (1,024
tokens for most models), OpenAI's 128-token granularity, Anthropic's 20-block lookback (each
request here appends at most a few blocks) and output tokens are not modelled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from residency._core._tools import JSONObject
from residency._tokens import count_tokens

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "Profile",
    "Prompt",
    "Request",
    "block_key",
    "call_tokens",
    "cost",
    "load_profiles",
    "summarize",
]

DEFAULT_PROFILE = "anthropic-5m"


@dataclass(frozen=True, slots=True)
class Profile:
    """What a provider charges per input token, relative to an uncached input token (1.0).

    Attributes:
        name: the profile's name (``anthropic-5m``, ``openai``, ...).
        write: the price of a token not read from the cache.
        read: the price of a token read from the cache.
        model: which model's figures these are.
        sources: where the figures are documented.
        note: what else the sources say that bears on the figures.
    """

    name: str
    write: float
    read: float
    model: str = ""
    sources: tuple[str, ...] = ()
    note: str = ""


def load_profiles(data: Mapping[str, Any] | None = None) -> dict[str, Profile]:
    """The pricing profiles of ``pricing.json`` (or of ``data``, decoded from such a file).

    Raises:
        ValueError: a profile without numeric ``write`` and ``read`` prices.
    """
    if data is None:
        data = json.loads(resources.files("residency._bench").joinpath("pricing.json").read_text())
    profiles = {}
    for name, p in data["profiles"].items():
        write, read = p.get("write"), p.get("read")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in (write, read)):
            raise ValueError(f"pricing profile {name!r} needs non-negative numbers 'write' and 'read'")
        profiles[name] = Profile(
            name,
            float(write),
            float(read),
            p.get("model", ""),
            tuple(p.get("sources", ())),
            p.get("note", ""),
        )
    return profiles


PROFILES = load_profiles()


@dataclass(frozen=True, slots=True)
class Request:
    """One model request, as the cost model sees it.

    Attributes:
        turn: the trace turn it belongs to (0-based).
        tool_tokens: tokens of the tool block.
        total_tokens: tokens of the whole prompt (tool block + transcript).
        cached_tokens: tokens of the longest prefix identical to the previous request's prompt.
        list_changed: the tool block differs from the previous request's.
    """

    turn: int
    tool_tokens: int
    total_tokens: int
    cached_tokens: int
    list_changed: bool


def cost(requests: Iterable[Request], profile: Profile) -> float:
    """The effective input cost of ``requests`` under ``profile`` (uncached input token = 1.0)."""
    return sum(
        profile.read * r.cached_tokens + profile.write * (r.total_tokens - r.cached_tokens) for r in requests
    )


def block_key(block: Sequence[Mapping[str, Any]]) -> str:
    """A digest of a tool block as the model is sent it: equal digests mean identical blocks."""
    text = json.dumps(list(block), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def call_tokens(tool: str, arguments: Mapping[str, Any]) -> int:
    """Tokens of a tool call in the transcript: its name and arguments, as compact JSON."""
    return count_tokens({"name": tool, "input": arguments})


@dataclass(slots=True)
class _Segment:
    id: int
    tokens: int
    kind: str  # "user", "call" (arguments), "result", "meta" (a whole exchange)
    ref: Hashable = None
    tool: str = ""
    arguments: JSONObject = field(default_factory=dict)


class Prompt:
    """What a host sends the model on each request: a tool block, then the transcript.

    Segments are appended as the session goes; ``request`` records one request with its cached
    prefix. Call arguments and results are separate segments, so arguments can leave while the
    result stays (a planner's argument eviction).
    """

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._ids = 0
        self._block: str | None = None
        self._block_tokens = 0
        self._sent: tuple[str | None, list[int]] = (None, [])
        self._turn = -1
        self.requests: list[Request] = []

    # -- what the prompt holds -------------------------------------------------------------------

    def set_block(self, key: str, tokens: int) -> None:
        """The tool block of the coming requests: its ``block_key`` and its tokens."""
        self._block, self._block_tokens = key, tokens

    def next_turn(self) -> None:
        self._turn += 1

    def _add(
        self, tokens: int, kind: str, ref: Hashable = None, tool: str = "", arguments: Any = None
    ) -> int:
        self._ids += 1
        self._segments.append(_Segment(self._ids, tokens, kind, ref, tool, arguments or {}))
        return self._ids

    def say(self, tokens: int) -> None:
        """The user's words."""
        self._add(tokens, "user")

    def call(self, tool: str, arguments: JSONObject, ref: Hashable) -> None:
        """A call the model made (its arguments); ``ref`` names it for ``result`` and evictions."""
        self._add(call_tokens(tool, arguments), "call", ref, tool, arguments)

    def result(self, ref: Hashable, tokens: int) -> None:
        """The result of call ``ref``."""
        self._add(tokens, "result", ref)

    def meta(self, tokens: int) -> int:
        """A whole exchange that is not a forwarded call (a meta-tool call or a refused call).

        Returns:
            A handle for ``holds``.
        """
        return self._add(tokens, "meta")

    def holds(self, handle: int) -> bool:
        """Whether the segment ``handle`` (from ``meta``) is still in the transcript."""
        return any(s.id == handle for s in self._segments)

    def calls(self) -> list[tuple[Hashable, str, JSONObject]]:
        """The calls whose arguments are in the transcript, oldest first: ``(ref, tool, arguments)``."""
        return [(s.ref, s.tool, s.arguments) for s in self._segments if s.kind == "call"]

    def drop_arguments(self, refs: Iterable[Hashable]) -> None:
        """The host removes these calls' arguments from the transcript; their results stay."""
        gone = set(refs)
        self._segments = [s for s in self._segments if not (s.kind == "call" and s.ref in gone)]

    def compact(self, n: int) -> list[Hashable]:
        """The host drops its oldest tool exchanges, up to its ``n``-th oldest call with arguments.

        Everything but the user's words goes, up to and including that call and its result.

        Returns:
            The refs of the calls whose arguments left, oldest first.
        """
        calls = [i for i, s in enumerate(self._segments) if s.kind == "call"]
        if n <= 0 or not calls:
            return []
        last = calls[min(n, len(calls)) - 1]
        cut = self._segments[last].ref
        dropped = [s.ref for s in self._segments[: last + 1] if s.kind == "call"]
        self._segments = [
            s
            for i, s in enumerate(self._segments)
            if s.kind == "user" or (i > last and not (s.kind == "result" and s.ref == cut))
        ]
        return dropped

    # -- requests --------------------------------------------------------------------------------

    def request(self) -> Request:
        """Record one request of the current prompt, with its cached prefix."""
        if self._block is None:
            raise RuntimeError("set_block before the first request")
        sent_block, sent_ids = self._sent
        ids = [s.id for s in self._segments]
        total = self._block_tokens + sum(s.tokens for s in self._segments)
        cached = 0
        if sent_block == self._block:
            cached = self._block_tokens
            for sent, s in zip(sent_ids, self._segments, strict=False):
                if sent != s.id:
                    break
                cached += s.tokens
        changed = sent_block is not None and sent_block != self._block
        request = Request(max(self._turn, 0), self._block_tokens, total, cached, changed)
        self.requests.append(request)
        self._sent = (self._block, ids)
        return request


def summarize(
    requests: Sequence[Request], profiles: Mapping[str, Profile], *, per_turn: Profile | None = None
) -> JSONObject:
    """The cost model's figures for one strategy's requests.

    Args:
        requests: the requests, in order.
        profiles: the profiles to price them under.
        per_turn: also give the cost of each turn under this profile (for plots).
    """
    out: JSONObject = {
        "requests": len(requests),
        "raw_input_tokens": sum(r.total_tokens for r in requests),
        "cached_tokens": sum(r.cached_tokens for r in requests),
        "raw_tool_block_tokens": sum(r.tool_tokens for r in requests),
        "peak_context_tokens": max((r.total_tokens for r in requests), default=0),
        "list_changes": sum(r.list_changed for r in requests),
        "list_change_turns": sorted({r.turn for r in requests if r.list_changed}),
        "effective_cost": {name: round(cost(requests, p), 2) for name, p in profiles.items()},
    }
    if per_turn is not None:
        turns = max((r.turn for r in requests), default=-1) + 1
        series = [0.0] * turns
        for r in requests:
            series[r.turn] += cost((r,), per_turn)
        out["per_turn_cost"] = [round(v, 2) for v in series]
    return out
