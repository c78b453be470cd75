"""The concurrent-use guard of a ``Session``, and which of its public methods hold it.

A Session is driven by one thread or task at a time. Every public method that may write to the
journal or the store (``CHANGES``) runs holding a non-blocking guard (``exclusive``): a second
thread that enters while one runs gets ``ConcurrentUse`` at once, with nothing changed. Methods
that only read (``READS``) are not guarded. A test checks that the two lists cover the class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from residency._runtime._journal import Journal

__all__ = ["CHANGES", "READS", "exclusive", "same_doc"]

P = ParamSpec("P")
R = TypeVar("R")


class _Guarded(Protocol):
    _journal: Journal


def exclusive(method: Callable[Concatenate[_Guarded, P], R]) -> Callable[Concatenate[_Guarded, P], R]:
    """Run ``method`` holding the session's concurrent-use guard.

    The guard is re-entrant for the thread that holds it (an operation may call another, or a
    callback of it may), and refuses every other thread with ``ConcurrentUse``.
    """

    @functools.wraps(method)
    def guarded(self: _Guarded, /, *args: P.args, **kwargs: P.kwargs) -> R:
        claimed = self._journal.claim()
        try:
            return method(self, *args, **kwargs)
        finally:
            if claimed:
                self._journal.release()

    return guarded


def same_doc(source: Callable[..., Any]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Give a delegating method the docstring of the part's method it calls."""

    def give(method: Callable[P, R]) -> Callable[P, R]:
        method.__doc__ = source.__doc__
        return method

    return give


CHANGES = (
    "add_span",
    "admit_call",
    "archive",
    "archive_chain",
    "authorize_call",
    "call_succeeded",
    "catch_up",
    "checkpoint",
    "drop_deliveries",
    "evict",
    "evict_arguments",
    "evict_span",
    "externalize",
    "mark_shared",
    "note_search",
    "offload_span",
    "plan_turn",
    "prune",
    "readmit",
    "record_call",
    "record_delivery",
    "record_revocation",
    "reexpand",
    "register_tools",
    "reground",
    "restore",
    "withhold_uncarried",
    "revoke_pending",
    "summarize",
    "tombstone",
)
"""Public methods that may write to the journal or the store: they hold the concurrent-use guard."""

READS = (
    "archive_digest",
    "arguments_resident",
    "call",
    "carried",
    "chain",
    "chain_rules",
    "chains",
    "chains_digest",
    "check_chain",
    "check_invariants",
    "cold_copy",
    "deliveries",
    "delivery",
    "events",
    "externalized_copy",
    "is_pinned",
    "is_shared",
    "learned_labels",
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
