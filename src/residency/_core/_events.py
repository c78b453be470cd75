"""The event log: what happened to tools, calls and spans, turn by turn.

Re-expansion requests are a first-class signal: each one means the pruner withheld a tool the
model then needed, so their rate measures how aggressive the schema budget is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Event", "EventKind"]


class EventKind(enum.Enum):
    """What an event records."""

    REGISTERED = "registered"
    REDEFINED = "redefined"
    CALLED = "called"
    ARGUMENTS_EVICTED = "arguments_evicted"
    PRUNED = "pruned"
    TOMBSTONED = "tombstoned"
    EVICTED = "evicted"
    REEXPANDED = "reexpanded"
    REFUSED = "refused"
    ARCHIVED = "archived"
    READMITTED = "readmitted"
    BUDGET_EXCEEDED = "budget_exceeded"
    SPAN = "span"
    CHAIN = "chain"


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the event log.

    Attributes:
        turn: the session turn it happened in.
        kind: what happened.
        subject: the tool name, call id, span id or chain digest concerned.
        detail: a short human-readable explanation.
        at: the time the journal entry was written (seconds since the epoch, from the clock).
    """

    turn: int
    kind: EventKind
    subject: str
    detail: str = ""
    at: float = 0.0
