"""``Session``: the embeddable runtime that binds the pure state, a store and a clock.

A ``Session`` holds a ``Journal`` (the state, the store, checkpoints, the concurrent-use guard)
and five parts that each own one concern: tools and calls (``ToolPart``), schemas delivered in
results (``DeliveryPart``), turn plans (``PlanPart``), spans (``SpanPart``) and archived chains
(``ChainPart``). Its public methods
delegate to them; nothing is inherited. Where parts meet, the session says so: registering
tools and planning a turn first adopt the archive scope's chains, and the chain guard is one of
the tool part's call guards.

Every public method is in ``CHANGES`` (it may write, and holds the concurrent-use guard) or in
``READS`` (it only reads); a test checks that the two lists cover the class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from residency._core._chains import ChainRecord, ChainVerdict
from residency._core._events import Event, EventKind
from residency._core._invariants import state_problem
from residency._core._lifecycle import SpanState, ToolState
from residency._core._minify import minify_tool
from residency._core._planner import Budget
from residency._core._spans import SpanRecord, WindowItem
from residency._core._tools import CallRecord, DeliveryRecord, JSONObject, ToolSpec
from residency._errors import ConfigError, InvalidInput, NotFound, StoreError
from residency._runtime._chains import ChainPart, ChainPolicy
from residency._runtime._deliveries import DeliveryPart
from residency._runtime._guard import CHANGES, READS, exclusive, same_doc
from residency._runtime._inputs import callable_param, name_set, phase_map
from residency._runtime._journal import DEFAULT_CHECKPOINT_EVERY, Journal, new_session_id
from residency._runtime._learning import LearningPart
from residency._runtime._plans import PlanPart, TurnPlan
from residency._runtime._spans import SpanPart
from residency._runtime._tool_cache import SpecSource
from residency._runtime._tools import ToolPart
from residency._search import SearchHit
from residency._search._learned import LearnedLabels
from residency._store._memory import MemoryStore
from residency._store._protocol import DEFAULT_SCOPE, Clock, Store, SystemClock, check_scope

__all__ = ["CHANGES", "READS", "Session"]

_STORE_METHODS = ("append", "load", "put_content", "get_content")


class Session:
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
        archive_scope: the archive scope shared with the other sessions of the store
            (``"default"``); None keeps the archive to this session.
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

    _STEADY_PLANS = True
    """Whether a turn after a steady one is planned in O(1) (tests turn it off to compare)."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        session_id: str | None = None,
        resume: bool = False,
        clock: Clock | None = None,
        minify: Callable[[JSONObject], JSONObject] | None = None,
        pinned: Iterable[str] = (),
        phases: Mapping[str, Iterable[str]] | None = None,
        reexpand_tool: str = "reexpand_tools",
        chain_policy: ChainPolicy = "refuse",
        revoke: Callable[[str], bool] | None = None,
        archive_scope: str | None = DEFAULT_SCOPE,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    ) -> None:
        # Every parameter is checked before anything is built: a wrong one raises naming it.
        if archive_scope is not None:
            check_scope(archive_scope)
        if chain_policy not in ("refuse", "warn"):
            raise InvalidInput(
                f"chain_policy must be 'refuse' or 'warn', not {chain_policy!r}", where="chain_policy"
            )
        if revoke is not None and not callable(revoke):
            raise InvalidInput("revoke must be a callable taking a credential reference", where="revoke")
        shown_as = (
            minify_tool
            if minify is None
            else callable_param(minify, "minify", "a function from a tool definition to what is shown")
        )
        pinned_names = name_set(pinned, "pinned")
        phase_tools = phase_map(phases)
        if not isinstance(reexpand_tool, str) or not reexpand_tool:
            raise InvalidInput("reexpand_tool must be a non-empty tool name", where="reexpand_tool")
        if resume and session_id is None:
            raise InvalidInput("resume=True needs the session_id to resume", where="session_id")
        if session_id is None:
            # No id: a new session. Resuming one is always explicit (its id is named).
            session_id = new_session_id()
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("session_id must be a non-empty string", where="session_id")
        if store is not None and not all(callable(getattr(store, m, None)) for m in _STORE_METHODS):
            hint = " (a URL? open it with residency.open_store(url))" if isinstance(store, str) else ""
            raise InvalidInput(
                f"store must be a Store such as MemoryStore() or SQLiteStore(path), "
                f"not {type(store).__name__}{hint}",
                where="store",
            )
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise InvalidInput(
                f"clock must have a now() method returning seconds, not {type(clock).__name__}",
                where="clock",
            )
        if (
            isinstance(checkpoint_every, bool)
            or not isinstance(checkpoint_every, int)
            or checkpoint_every < 0
        ):
            raise ConfigError(
                f"checkpoint_every must be a whole number of journal entries (0 disables automatic "
                f"checkpoints), not {checkpoint_every!r}",
                where="checkpoint_every",
            )
        self._journal = Journal(
            store if store is not None else MemoryStore(),
            session_id,
            clock if clock is not None else SystemClock(),
            checkpoint_every,
            SpecSource(shown_as),
        )
        self._tools = ToolPart(self._journal, pinned=pinned_names, reexpand_tool=reexpand_tool)
        self._deliveries = DeliveryPart(self._journal, self._tools)
        self._plans = PlanPart(self._journal, self._tools, phase_tools, steady_plans=self._STEADY_PLANS)
        self._spans = SpanPart(self._journal)
        self._chains = ChainPart(
            self._journal, self._tools, chain_policy=chain_policy, revoke=revoke, archive_scope=archive_scope
        )
        self._learning = LearningPart(self._journal, archive_scope)
        self._journal.open()
        if resume and self._journal.seq == 0:
            raise NotFound(f"the store holds no session {session_id!r} to resume")

    # -- the session -------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The id this session is stored under."""
        return self._journal.session_id

    @property
    def store(self) -> Store:
        """The store this session journals to."""
        return self._journal.store

    @property
    def revision(self) -> int:
        """A number that changes whenever what the session shows may have changed.

        Tool registrations and states, tombstones and spans: any journaled change but four,
        which leave it alone: recording a call (only a resident tool can be called), opening a
        turn that changes nothing, refusing a call, and recording a delivery (the tools it
        makes resident are state changes of their own). A host can keep its rendered tool list
        while the revision stays the same. It counts from 0 each time the session is opened.
        """
        return self._journal.revision

    @property
    def phase(self) -> str | None:
        """The phase the current turn was planned in (None: no phase)."""
        return self._journal.state.phase

    @property
    def turn(self) -> int:
        """The current turn (0 before the first ``plan_turn``)."""
        return self._journal.state.turn

    @property
    def seq(self) -> int:
        """The journal entry this session's state is at (0: an empty journal)."""
        return self._journal.seq

    @property
    def restored_from(self) -> int:
        """The journal entry of the checkpoint this session was opened from (0: a full replay)."""
        return self._journal.restored_seq

    @property
    def reexpand_tool(self) -> str:
        """The name tombstones tell the model to call to get a withheld schema back."""
        return self._tools.reexpand_tool

    def events(self, kind: EventKind | None = None) -> list[Event]:
        """The event log, oldest first, optionally of one kind."""
        events = self._journal.state.events
        if kind is None:
            return list(events)
        return [e for e in events if e.kind is kind]

    def catch_up(self) -> int:
        """Apply the journal entries other writers appended since this session last read it.

        A session shared by several writers (gateway replicas on one PostgreSQL or SQLite
        store, each holding its own ``Session`` of one id) calls it before it acts, so that it
        answers from the journal's current state rather than from its own last one. It is one
        indexed read of the journal's tail; when nothing is new it changes nothing, and
        ``revision`` stays the same. Writes never need it first: a write based on a stale
        state raises ``SessionConflict`` and catches up by itself.

        Returns:
            How many entries were applied (0: the session was up to date).

        Raises:
            StoreError: the store cannot be read, an entry cannot be applied (the session must
                then be reopened), or an earlier catch-up failed that way.
            ConcurrentUse: another thread is inside an operation of this session.
        """
        self._journal.check_usable()
        return self._journal.catch_up()

    def checkpoint(self, *, only_if_due: bool = False) -> int:
        """Save the session's state to the store now, so a reopen replays only what follows.

        Sessions also save one automatically every ``checkpoint_every`` journal entries, at
        the first write after they fall due that is not ``plan_turn`` (a plan never writes
        one). A host that wants it saved sooner calls ``checkpoint(only_if_due=True)`` once it
        has answered the turn.

        Args:
            only_if_due: save only an automatic checkpoint that is due; a failure is logged,
                not raised.

        Returns:
            The journal entry the checkpoint covers (0 for an empty journal: nothing is saved).

        Raises:
            StoreError: the store keeps no checkpoints, another writer appended to this
                session's journal since it was opened (reopen it first), or the store cannot
                be written.
        """
        journal = self._journal
        if only_if_due:
            journal.checkpoint_if_due()
            return journal.checkpoint_seq
        if not journal.sole_writer:
            raise StoreError(
                f"session {journal.session_id!r}: another writer appended to its journal since it was "
                f"opened; reopen the session to checkpoint it"
            )
        if journal.seq and journal.seq != journal.checkpoint_seq:
            journal.save_checkpoint()
        return journal.seq

    def check_invariants(self) -> None:
        """Check the state against the invariants a reopened session is checked against.

        Raises:
            StoreError: an invariant is broken (the message names it); only a damaged or
                forged journal leads there.
        """
        problem = state_problem(self._journal.state)
        if problem is not None:
            raise StoreError(f"breaks an invariant: {problem}")

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data: equal snapshots mean equal sessions."""
        state = self._journal.state
        parts: dict[str, Any] = {
            "turn": state.turn,
            "phase": state.phase,
            "events": [(e.turn, e.kind.value, e.subject, e.detail) for e in state.events],
        }
        self._tools.snapshot_parts(parts)
        self._deliveries.snapshot_parts(parts)
        self._spans.snapshot_parts(parts)
        self._chains.snapshot_parts(parts)
        return parts

    # -- tools -------------------------------------------------------------------------------

    @same_doc(ToolPart.register)
    def register_tools(self, tools: Iterable[Mapping[str, Any]]) -> list[str]:
        names = self._tools.register(tools)
        self._chains.adopt_scope()  # chains waiting for these tools now apply
        return names

    @same_doc(ToolPart.state)
    def state(self, name: str) -> ToolState:
        return self._tools.state(name)

    @same_doc(ToolPart.spec)
    def tool(self, name: str) -> ToolSpec:
        return self._tools.spec(name)

    @same_doc(ToolPart.names)
    def tools(self, state: ToolState | None = None) -> list[str]:
        return self._tools.names(state)

    @same_doc(ToolPart.call)
    def call(self, call_id: str) -> CallRecord:
        return self._tools.call(call_id)

    @same_doc(ToolPart.resident_calls)
    def resident_calls(self) -> list[CallRecord]:
        return self._tools.resident_calls()

    @same_doc(ToolPart.arguments_resident)
    def arguments_resident(self, name: str) -> bool:
        return self._tools.arguments_resident(name)

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        """The withheld tools (tombstoned or evicted; never archived) that best match ``query``.

        One index per distinct set of definitions is shared by every session of the process;
        with the ``search`` extra installed, BM25 is fused with an offline embedding ranker.
        Queries that led to successful calls in the session's archive scope rank as one more
        signal (see :meth:`call_succeeded`), and this search is remembered for the calls that
        may follow it.

        Returns:
            At most ``limit`` hits, best first.
        """
        hits = self._tools.search(query, limit, learned=self._learning.labels())
        self._learning.note_search(query, [h.name for h in hits])
        return hits

    def note_search(self, query: str, hits: Iterable[str]) -> None:
        """Remember a search made outside :meth:`search` (a host's own index) and the tools it
        found, so that a successful call of one of them teaches the scope (see
        :meth:`call_succeeded`). In memory only: nothing is journaled."""
        self._learning.note_search(query, list(hits))

    def call_succeeded(self, name: str) -> list[str]:
        """Learn from a successful call of ``name``: if one of the session's recent searches
        found it, that query (and the searches before it since the last call learned from, the
        phrasings that did not find it) becomes a label of the tool, kept in the store under the
        session's archive scope and ranked by every session of the scope. Each query is learned
        once per tool and session; nothing is learned without an archive scope or on a store
        without search labels.

        Returns:
            The queries learned (none, usually).
        """
        return self._learning.call_succeeded(name)

    def learned_labels(self) -> LearnedLabels | None:
        """What the session's archive scope has learned from searches, for a host that ranks
        with its own index (``ToolIndex.search(..., learned=...)``); None if nothing."""
        return self._learning.labels()

    def is_pinned(self, name: str) -> bool:
        """Whether the tool is pinned (always resident)."""
        return name in self._tools.pinned

    @same_doc(ToolPart.tombstone_text)
    def tombstone_text(self, name: str) -> str:
        return self._tools.tombstone_text(name)

    @same_doc(ToolPart.tombstones)
    def tombstones(self) -> list[str]:
        return self._tools.tombstones()

    @same_doc(ToolPart.authorize)
    def authorize_call(self, name: str, arguments: Mapping[str, Any]) -> None:
        self._tools.authorize(name, arguments)

    @same_doc(ToolPart.record_call)
    def record_call(self, name: str, arguments: Mapping[str, Any], *, via: str = "") -> CallRecord:
        return self._tools.record_call(name, arguments, via=via)

    @same_doc(ToolPart.admit_call)
    def admit_call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        reexpand_evicted: bool = False,
        show_schema: bool = False,
        via: str = "",
    ) -> CallRecord:
        return self._tools.admit_call(
            name, arguments, reexpand_evicted=reexpand_evicted, show_schema=show_schema, via=via
        )

    @same_doc(ToolPart.evict_arguments)
    def evict_arguments(self, *call_ids: str) -> None:
        self._tools.evict_arguments(*call_ids)

    def prune(self, name: str) -> ToolState:
        """Take the tool out of schema residency the safe way.

        Returns:
            ``EVICTED`` if no arguments of it are resident, else ``TOMBSTONED``.

        Raises:
            NotFound: unknown tool.
            IllegalTransition: the tool is not resident.
        """
        return self._tools.transition(name, "prune", "pruned")

    def tombstone(self, name: str) -> ToolState:
        """Withhold the tool's schema and show a tombstone line instead."""
        return self._tools.transition(name, "tombstone")

    def evict(self, name: str) -> ToolState:
        """Withhold the tool's schema with no tombstone.

        Raises:
            GhostToolError: arguments of an earlier call are resident; nothing changes.
            IllegalTransition: not allowed from the current state.
        """
        return self._tools.transition(name, "evict")

    @same_doc(ToolPart.reexpand)
    def reexpand(self, name: str) -> JSONObject:
        return self._tools.reexpand(name)

    def archive(self, name: str, reason: str = "archived") -> ToolState:
        """Take the tool out of the active index: not searchable, not callable."""
        return self._tools.transition(name, "archive", reason)

    def readmit(self, name: str) -> ToolState:
        """Operator action: bring an archived tool back to the index (evicted or tombstoned)."""
        return self._tools.transition(name, "readmit", "re-admitted by operator")

    # -- schemas delivered in results ---------------------------------------------------------

    @same_doc(DeliveryPart.record_delivery)
    def record_delivery(self, names: Iterable[str]) -> DeliveryRecord:
        return self._deliveries.record_delivery(names)

    @same_doc(DeliveryPart.drop_deliveries)
    def drop_deliveries(self, *delivery_ids: str) -> None:
        self._deliveries.drop_deliveries(*delivery_ids)

    @same_doc(DeliveryPart.withhold_uncarried)
    def withhold_uncarried(self) -> list[str]:
        return self._deliveries.withhold_uncarried()

    @same_doc(DeliveryPart.delivery)
    def delivery(self, delivery_id: str) -> DeliveryRecord:
        return self._deliveries.delivery(delivery_id)

    @same_doc(DeliveryPart.deliveries)
    def deliveries(self) -> list[DeliveryRecord]:
        return self._deliveries.deliveries()

    @same_doc(DeliveryPart.carried)
    def carried(self, name: str) -> bool:
        return self._deliveries.carried(name)

    # -- turn plans --------------------------------------------------------------------------

    @same_doc(PlanPart.plan_turn)
    def plan_turn(self, budget: Budget, *, phase: str | None = None, by_reference: bool = False) -> TurnPlan:
        self._chains.adopt_scope()
        return self._plans.plan_turn(budget, phase, by_reference=by_reference)

    @same_doc(PlanPart.resident_tools)
    def resident_tools(self) -> list[str]:
        return self._plans.resident_tools()

    # -- spans -------------------------------------------------------------------------------

    @same_doc(SpanPart.span)
    def span(self, span_id: str) -> SpanRecord:
        return self._spans.span(span_id)

    @same_doc(SpanPart.spans)
    def spans(self, state: SpanState | None = None) -> list[SpanRecord]:
        return self._spans.spans(state)

    @same_doc(SpanPart.span_state)
    def span_state(self, span_id: str) -> SpanState:
        return self._spans.span_state(span_id)

    @same_doc(SpanPart.externalized_copy)
    def externalized_copy(self, span_id: str) -> bool:
        return self._spans.externalized_copy(span_id)

    @same_doc(SpanPart.window)
    def window(self) -> list[WindowItem]:
        return self._spans.window()

    @same_doc(SpanPart.add_span)
    def add_span(self, text: str, tags: Iterable[str] = (), source: str = "") -> SpanRecord:
        return self._spans.add_span(text, tags, source)

    @same_doc(SpanPart.offload_span)
    def offload_span(
        self, text: str, tags: Iterable[str] = (), source: str = "", *, tokens: int | None = None
    ) -> SpanRecord:
        return self._spans.offload_span(text, tags, source, tokens=tokens)

    @same_doc(SpanPart.externalize)
    def externalize(self, span_id: str) -> str:
        return self._spans.externalize(span_id)

    @same_doc(SpanPart.evict_span)
    def evict_span(self, *span_ids: str) -> None:
        self._spans.evict_span(*span_ids)

    @same_doc(SpanPart.restore)
    def restore(self, span_id: str) -> str:
        return self._spans.restore(span_id)

    @same_doc(SpanPart.reground)
    def reground(self, span_id: str) -> dict[str, str]:
        return self._spans.reground(span_id)

    @same_doc(SpanPart.summarize)
    def summarize(
        self, span_ids: Iterable[str], text: str, *, tags: Iterable[str] = (), source: str = ""
    ) -> SpanRecord:
        return self._spans.summarize(span_ids, text, tags=tags, source=source)

    @same_doc(SpanPart.unresolved_provenance)
    def unresolved_provenance(self, span_id: str) -> tuple[str, ...] | None:
        return self._spans.unresolved_provenance(span_id)

    @same_doc(SpanPart.may_justify)
    def may_justify(self, span_id: str) -> bool:
        return self._spans.may_justify(span_id)

    @same_doc(SpanPart.require_verified)
    def require_verified(self, span_id: str) -> SpanRecord:
        return self._spans.require_verified(span_id)

    # -- chains ------------------------------------------------------------------------------

    @same_doc(ChainPart.archive_chain)
    def archive_chain(
        self,
        topology: Sequence[str],
        failure: str,
        constraint: Mapping[str, object],
        credentials: Iterable[str] = (),
        deterministic: bool = True,
        logs: object = None,
    ) -> ChainRecord:
        return self._chains.archive_chain(topology, failure, constraint, credentials, deterministic, logs)

    @same_doc(ChainPart.mark_shared)
    def mark_shared(self, *names: str) -> None:
        self._chains.mark_shared(*names)

    @same_doc(ChainPart.is_shared)
    def is_shared(self, name: str) -> bool:
        return self._chains.is_shared(name)

    @same_doc(ChainPart.chains)
    def chains(self) -> list[ChainRecord]:
        return self._chains.chains()

    @same_doc(ChainPart.chain)
    def chain(self, digest: str) -> ChainRecord:
        return self._chains.chain(digest)

    @same_doc(ChainPart.cold_copy)
    def cold_copy(self, digest: str) -> JSONObject:
        return self._chains.cold_copy(digest)

    @same_doc(ChainPart.archive_digest)
    def archive_digest(self) -> str:
        return self._chains.archive_digest()

    @same_doc(ChainPart.chain_rules)
    def chain_rules(self, name: str) -> list[str]:
        return self._chains.chain_rules(name)

    @same_doc(ChainPart.check_chain)
    def check_chain(
        self, sequence: Sequence[str], arguments: Sequence[Mapping[str, Any] | None] | None = None
    ) -> ChainVerdict:
        return self._chains.check_chain(sequence, arguments)

    @same_doc(ChainPart.chains_digest)
    def chains_digest(self) -> str:
        return self._chains.chains_digest()

    @same_doc(ChainPart.pending_revocations)
    def pending_revocations(self) -> list[str]:
        return self._chains.pending_revocations()

    @same_doc(ChainPart.revocations)
    def revocations(self) -> dict[str, bool]:
        return self._chains.revocations()

    @same_doc(ChainPart.revoke_pending)
    def revoke_pending(self) -> dict[str, bool]:
        return self._chains.revoke_pending()

    @same_doc(ChainPart.record_revocation)
    def record_revocation(self, reference: str, revoked: bool, error: str = "") -> None:
        self._chains.record_revocation(reference, revoked, error)


for _name in CHANGES:
    setattr(Session, _name, exclusive(getattr(Session, _name)))
del _name
