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
    StoreUnavailable,
    ToolArchived,
    ToolNotResident,
    UnknownPhase,
    UnrecoverablePruneError,
    UnverifiedSummary,
    UpstreamFailure,
)
from residency._runtime import Session, TurnPlan
from residency._search import SearchHit
from residency._store import open_store
from residency._store._memory import MemoryStore
from residency._store._protocol import Clock, JournalEntry, Store, SystemClock
from residency._store._sqlite import SQLiteStore
from residency._tokens import count_tokens, tokenizer_name

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
    "StoreUnavailable",
    "SystemClock",
    "TOOL_LIFECYCLE",
    "ToolArchived",
    "ToolNotResident",
    "ToolSpec",
    "ToolState",
    "Transition",
    "TurnPlan",
    "UnknownPhase",
    "UnrecoverablePruneError",
    "UnverifiedSummary",
    "UpstreamFailure",
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


def _report_public_home() -> None:
    """Public classes report ``residency`` as their module (as httpx and trio do), not a private one.

    Annotations are resolved first, in the module that defines them, so that
    ``typing.get_type_hints`` (and tools built on it) still works after the move.
    """
    import typing

    for name in __all__:
        obj = globals().get(name)
        if not isinstance(obj, type) or not obj.__module__.startswith("residency."):
            continue
        own = vars(obj).get("__annotations__")
        if own:
            try:
                hints = typing.get_type_hints(obj)
            except Exception:  # an annotation that does not resolve: left as it is
                pass
            else:
                obj.__annotations__ = {k: hints.get(k, v) for k, v in own.items()}
        obj.__module__ = "residency"


_report_public_home()


def __getattr__(name: str) -> object:
    # PostgresStore needs psycopg (the ``postgres`` extra): imported when first asked for.
    if name == "PostgresStore":
        from residency._store._postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'residency' has no attribute {name!r}")
