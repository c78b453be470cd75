"""``Session``: the embeddable runtime that binds the core, a store and a clock."""

from __future__ import annotations

from residency._chain_ops import ChainOps
from residency._errors import StoreError
from residency._invariants import chain_problem, span_problem, tool_problem
from residency._session_base import exclusive
from residency._span_ops import SpanOps
from residency._tool_ops import ToolOps

__all__ = ["Session"]

CHANGES = (
    "add_span",
    "admit_call",
    "archive",
    "archive_chain",
    "authorize_call",
    "catch_up",
    "checkpoint",
    "evict",
    "evict_arguments",
    "evict_span",
    "externalize",
    "mark_shared",
    "offload_span",
    "plan_turn",
    "prune",
    "readmit",
    "record_call",
    "reexpand",
    "register_tools",
    "reground",
    "restore",
    "revoke_pending",
    "summarize",
    "tombstone",
)
"""Public methods that may write to the journal or the store: they hold the concurrent-use guard."""

READS = (
    "archive_digest",
    "arguments_resident",
    "call",
    "chain",
    "chain_rules",
    "chains",
    "check_chain",
    "cold_copy",
    "events",
    "externalized_copy",
    "is_pinned",
    "is_shared",
    "may_justify",
    "pending_revocations",
    "require_verified",
    "resident_calls",
    "resident_tools",
    "revocations",
    "search",
    "snapshot",
    "span",
    "span_state",
    "spans",
    "state",
    "tombstone_text",
    "tombstones",
    "tool",
    "tools",
    "unresolved_provenance",
    "window",
)
"""Public methods that only read (the tests check that every public method is in one list)."""


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

    Raises:
        InvalidInput: a parameter of the wrong kind (``where`` names it): e.g. a store that is
            not a ``Store``, ``pinned`` or ``phases`` that are not lists of tool names, a
            ``minify`` or ``revoke`` that cannot be called. Nothing is written.
        NotFound: ``resume=True`` and the store holds no such session.
        StoreError: the store cannot be read, or the session's journal is malformed.

    A Session is driven by one thread or task at a time. An operation that changes it, called
    from a second thread while one runs, raises ``ConcurrentUse`` and changes nothing (reads
    are not guarded). Several Session objects may share one session id in one store (several
    processes, or gateways given one session key): a write based on a state another writer has
    changed raises ``SessionConflict`` and is not applied; the session has caught up, and the
    operation may be retried.
    """

    def _check_state(self) -> None:
        super()._check_state()
        problem = tool_problem(self) or span_problem(self) or chain_problem(self)
        if problem is not None:
            raise StoreError(f"breaks an invariant: {problem}")


for _name in CHANGES:
    setattr(Session, _name, exclusive(getattr(Session, _name)))
del _name
