"""residency: a typed lifecycle runtime for what an agent's context holds about tools.

Schemas and call arguments leave the context together, or a tombstone says why not; pruned
tools come back by re-expansion; every change is journaled.
"""

# The errors are imported at once (they are small); every other public name is imported from
# its module the first time it is asked for (PEP 562), so ``import residency`` and the command
# line's ``--help`` cost almost nothing, and ``PostgresStore`` needs psycopg only when used.

import importlib
import typing

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
    LocalModelUnavailable,
    NotFound,
    RateLimited,
    ResidencyError,
    SchemaError,
    SessionConflict,
    SessionLimitReached,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    SubscriptionLimitReached,
    ToolArchived,
    ToolNotResident,
    UnknownPhase,
    UnrecoverablePruneError,
    UnverifiedSummary,
    UpstreamFailure,
)

if typing.TYPE_CHECKING:
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
    from residency._core._tools import CallRecord, DeliveryRecord, ToolSpec, definition_hash, is_mutation
    from residency._runtime import Session, TurnPlan
    from residency._search import SearchHit
    from residency._store import open_store
    from residency._store._memory import MemoryStore
    from residency._store._postgres import PostgresStore
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
    "DeliveryRecord",
    "Event",
    "EventKind",
    "GhostToolError",
    "IllegalTransition",
    "IntegrityError",
    "InvalidInput",
    "JournalEntry",
    "Lifecycle",
    "LocalModelUnavailable",
    "MemoryStore",
    "MinifyLevel",
    "MinifyReport",
    "NotFound",
    "PRECONDITION_TAGS",
    "PostgresStore",
    "RateLimited",
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
    "SubscriptionLimitReached",
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

_LAZY: dict[str, str] = {
    "ChainRecord": "residency._core._chains",
    "ChainVerdict": "residency._core._chains",
    "Event": "residency._core._events",
    "EventKind": "residency._core._events",
    "SPAN_LIFECYCLE": "residency._core._lifecycle",
    "TOOL_LIFECYCLE": "residency._core._lifecycle",
    "Lifecycle": "residency._core._lifecycle",
    "SpanState": "residency._core._lifecycle",
    "ToolState": "residency._core._lifecycle",
    "Transition": "residency._core._lifecycle",
    "MinifyLevel": "residency._core._minify",
    "MinifyReport": "residency._core._minify",
    "minify_tool": "residency._core._minify",
    "minify_tool_with_report": "residency._core._minify",
    "Budget": "residency._core._planner",
    "PRECONDITION_TAGS": "residency._core._spans",
    "SpanRecord": "residency._core._spans",
    "WindowItem": "residency._core._spans",
    "WindowItemKind": "residency._core._spans",
    "CallRecord": "residency._core._tools",
    "DeliveryRecord": "residency._core._tools",
    "ToolSpec": "residency._core._tools",
    "definition_hash": "residency._core._tools",
    "is_mutation": "residency._core._tools",
    "Session": "residency._runtime",
    "TurnPlan": "residency._runtime",
    "SearchHit": "residency._search",
    "open_store": "residency._store",
    "MemoryStore": "residency._store._memory",
    "Clock": "residency._store._protocol",
    "JournalEntry": "residency._store._protocol",
    "Store": "residency._store._protocol",
    "SystemClock": "residency._store._protocol",
    "SQLiteStore": "residency._store._sqlite",
    "count_tokens": "residency._tokens",
    "tokenizer_name": "residency._tokens",
    "PostgresStore": "residency._store._postgres",
}
"""Public name -> the private module that defines it."""


def _report_public_home(obj: object, home: str = "residency") -> None:
    """A public class reports its public module (``home``: ``residency``, or ``residency.gateway``
    and ``residency.demo`` for theirs) as its module, as httpx and trio do, not a private one.

    Annotations are resolved first, in the module that defines them, so that
    ``typing.get_type_hints`` (and tools built on it) still works after the move.
    """
    if not isinstance(obj, type) or not obj.__module__.startswith("residency._"):
        return
    own = vars(obj).get("__annotations__")
    if own:
        try:
            hints = typing.get_type_hints(obj)
        except Exception:  # an annotation that does not resolve: left as it is
            pass
        else:
            obj.__annotations__ = {k: hints.get(k, v) for k, v in own.items()}
    obj.__module__ = home


for _name in __all__:
    if _name in globals():
        _report_public_home(globals()[_name])


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'residency' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    _report_public_home(value)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
