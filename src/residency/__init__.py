"""residency: a typed lifecycle runtime for what an agent's context holds about tools.

Schemas and call arguments leave the context together, or a tombstone says why not; pruned
tools come back by re-expansion; every change is journaled.
"""

from residency._core._chains import ChainRecord, ChainVerdict
from residency._core._events import Event, EventKind
from residency._core._lifecycle import (
    SPAN_LIFECYCLE,
    TOOL_LIFECYCLE,
    Lifecycle,
    SpanState,
    ToolState,
    Transition,
)
from residency._core._minify import MinifyLevel, MinifyReport, minify_tool, minify_tool_with_report
from residency._core._planner import Budget
from residency._core._spans import PRECONDITION_TAGS, SpanRecord, WindowItem, WindowItemKind
from residency._core._tools import CallRecord, ToolSpec, definition_hash, is_mutation
from residency._errors import (
    ArgumentsInvalid,
    CallRefused,
    ChainCollision,
    ConcurrentUse,
    ConfigError,
    GhostToolError,
    IllegalTransition,
    IntegrityError,
    InvalidInput,
    NotFound,
    ResidencyError,
    SchemaError,
    SessionConflict,
    SessionLimitReached,
    StoreConflict,
    StoreError,
    ToolArchived,
    ToolNotResident,
    UnrecoverablePruneError,
    UnverifiedSummary,
)
from residency._search import SearchHit
from residency._session import Session
from residency._store import open_store
from residency._store._memory import MemoryStore
from residency._store._protocol import Clock, JournalEntry, Store, SystemClock
from residency._store._sqlite import SQLiteStore
from residency._tokens import count_tokens, tokenizer_name
from residency._tool_ops import TurnPlan

__version__ = "0.1.0"

__all__ = (
    "ArgumentsInvalid",
    "Budget",
    "CallRecord",
    "CallRefused",
    "ChainCollision",
    "ChainRecord",
    "ChainVerdict",
    "Clock",
    "ConcurrentUse",
    "ConfigError",
    "Event",
    "EventKind",
    "GhostToolError",
    "IllegalTransition",
    "IntegrityError",
    "InvalidInput",
    "JournalEntry",
    "Lifecycle",
    "MemoryStore",
    "MinifyLevel",
    "MinifyReport",
    "NotFound",
    "PRECONDITION_TAGS",
    "PostgresStore",
    "ResidencyError",
    "SPAN_LIFECYCLE",
    "SQLiteStore",
    "SchemaError",
    "SearchHit",
    "Session",
    "SessionConflict",
    "SessionLimitReached",
    "SpanRecord",
    "SpanState",
    "Store",
    "StoreConflict",
    "StoreError",
    "SystemClock",
    "TOOL_LIFECYCLE",
    "ToolArchived",
    "ToolNotResident",
    "ToolSpec",
    "ToolState",
    "Transition",
    "TurnPlan",
    "UnrecoverablePruneError",
    "UnverifiedSummary",
    "WindowItem",
    "WindowItemKind",
    "__version__",
    "count_tokens",
    "definition_hash",
    "is_mutation",
    "minify_tool",
    "minify_tool_with_report",
    "open_store",
    "tokenizer_name",
)


def __getattr__(name: str) -> object:
    # PostgresStore needs psycopg (the ``postgres`` extra): imported when first asked for.
    if name == "PostgresStore":
        from residency._store._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'residency' has no attribute {name!r}")
