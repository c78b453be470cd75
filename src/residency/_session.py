"""``Session``: the embeddable runtime that binds the core, a store and a clock."""

from __future__ import annotations

from residency._chain_ops import ChainOps
from residency._span_ops import SpanOps
from residency._tool_ops import ToolOps

__all__ = ["Session"]


class Session(ChainOps, ToolOps, SpanOps):
    """One agent session's residency state, journaled to a store.

    Example:
        >>> from residency import Budget, Session
        >>> s = Session()
        >>> s.register_tools([{"name": "ping", "inputSchema": {"type": "object"}}])
        ['ping']
        >>> plan = s.plan_turn(Budget(schema_tokens=1000, argument_tokens=1000))
        >>> plan.tool_names
        ('ping',)

    Args:
        store: where the journal lives (``MemoryStore()`` when omitted).
        session_id: the session's id in the store. Omitted: a new session with a fresh id
            (``session_id`` tells it), so two Sessions on one store never share a journal by
            accident. Named: that session, resumed from its journal when the store holds one.
        resume: require the named session to exist in the store (``NotFound`` if it does not),
            for code that means to continue a session rather than start one.
        clock: where time is read (the wall clock when omitted).
        minify: how a resident tool is shown to the model (``minify_tool`` at the compact
            level when omitted: validation-equivalent, shorter prose).
        pinned: tools that always stay resident.
        phases: tool names per phase; ``plan_turn(phase=...)`` favours that phase's tools.
        reexpand_tool: the name tombstones tell the model to call.
        chain_policy: what ``authorize_call`` does with a call that would re-assemble an archived
            chain: ``"refuse"`` (default, raises ``ChainCollision``) or ``"warn"`` (logs an event).
        revoke: called once with each credential reference of an archived chain; returns True
            when it revoked the credential. Outcomes are journaled.
        checkpoint_every: save a checkpoint of the state every this many journal entries, so a
            reopen replays at most that many (default 5,000; 0: only on ``checkpoint()``).

    A Session is not thread-safe: drive it from one thread or task at a time.
    """
