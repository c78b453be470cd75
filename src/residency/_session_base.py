"""The journal machinery every part of a Session shares.

A session's state is rebuilt from its journal: each public mutation validates against the
current state (raising, with nothing changed, if it may not happen), appends its journal
entries to the store in one atomic batch (write-ahead), and only then applies them. Opening a
session replays the journal through the same ``_apply_<op>`` methods, so a reopened session
equals the one that wrote it, and replaying twice gives what replaying once gives.

Parts of the session (tools, spans, chains) are mixins over ``SessionBase``: each adds its
state in ``_init_state`` (calling ``super()``), its ``_apply_<op>`` methods, and its part of
``snapshot()`` in ``_snapshot_parts``.

Checkpoints
-----------
Replaying costs about 15 us per entry, so a long session would reopen slowly. Every
``checkpoint_every`` entries (and on ``checkpoint()``) the session saves its state to the store
as a checkpoint; a reopen restores it and replays only the entries after it. The state saved is
every attribute ``_init_state`` creates (the *layout*), minus the caches a mixin names in
``_CHECKPOINT_CACHES``; a mixin may turn its state into plain data and back with
``_checkpoint_encode`` / ``_checkpoint_decode`` (e.g. to rebuild derived objects instead of
saving them). A checkpoint is derived data: if it is missing, of another version or layout,
damaged, refused by the decoder (see ``_store/_checkpoint.py`` for the trust model), or
disagrees with the journal after it, the session replays its whole journal instead, so opening
from a checkpoint never fails where a replay would succeed, and gives the same state. A restored
checkpoint must also pass the session's invariants (``_check_state``: no ghost tool, counts that
agree with the records they count, ids with no gaps, ...): a forged but well-formed checkpoint
that describes a state no journal can lead to is not used either.

Stored data
-----------
An entry read from the store that this version cannot apply (a missing key, a wrong type)
raises ``StoreError`` naming the entry, never a raw ``KeyError``: ``_replay`` translates it.

Two writers, two threads
------------------------
Each commit tells the store which entry it follows (``append(..., after=seq)``); if another
writer (another ``Session`` object on the same store and id, in this process or another)
appended first, the store refuses with ``StoreConflict``, the session catches up (applies the
other writer's entries) and raises ``SessionConflict``: the operation was checked against a
state that is gone, so it is not applied, and the caller may retry it. The journal never forks,
and ids (``c<n>``, ``s<n>``) are always counted from the caught-up state, so none is issued
twice. A store whose ``append`` takes no ``after`` cannot refuse; the session then only notices
afterwards (``_sole_writer``) and stops saving checkpoints.

One object used from two threads at once is a different fault: every operation that changes the
session holds a non-blocking guard (``exclusive``), and a second thread that enters while one
runs gets ``ConcurrentUse`` at once, with nothing changed.
"""

from __future__ import annotations

import functools
import gc
import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

from residency._core._events import Event, EventKind
from residency._errors import (
    ConcurrentUse,
    ConfigError,
    InvalidInput,
    NotFound,
    SessionConflict,
    StoreConflict,
    StoreError,
)
from residency._store._checkpoint import columns, decode_checkpoint, encode_checkpoint, from_columns
from residency._store._memory import MemoryStore
from residency._store._protocol import Clock, JournalEntry, Store, SystemClock

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "SessionBase", "exclusive"]

DEFAULT_CHECKPOINT_EVERY = 5_000
"""Journal entries between automatic checkpoints: reopening replays at most this many."""

logger = logging.getLogger("residency")

# Journal operations that never change what a session shows (see ``SessionBase.revision``).
_QUIET_OPS = frozenset({"call", "turn", "refuse"})


def new_session_id() -> str:
    """A fresh, unique session id (``session-`` and 16 hex digits)."""
    return f"session-{uuid.uuid4().hex[:16]}"


_STORE_METHODS = ("append", "load", "put_content", "get_content")

P = ParamSpec("P")
R = TypeVar("R")
B = TypeVar("B", bound="SessionBase")


def exclusive(method: Callable[Concatenate[B, P], R]) -> Callable[Concatenate[B, P], R]:
    """Run ``method`` holding the session's concurrent-use guard (see the module docs).

    The guard is re-entrant for the thread that holds it (an operation may call another, or a
    callback of it may), and refuses every other thread with ``ConcurrentUse``.
    """

    @functools.wraps(method)
    def guarded(self: B, /, *args: P.args, **kwargs: P.kwargs) -> R:
        claimed = self._claim()
        try:
            return method(self, *args, **kwargs)
        finally:
            if claimed:
                self._release()

    return guarded


def _takes_after(append: Callable[..., Any]) -> bool:
    """Whether a store's append accepts ``after=`` (stores written before it existed do not)."""
    try:
        parameters = inspect.signature(append).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "after" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in parameters
    )


class SessionBase:
    """Journal, clock, turn counter and event log. Not used on its own: see ``Session``."""

    _CHECKPOINT_CACHES: ClassVar[frozenset[str]] = frozenset()
    """State attributes (of this class) that are caches: not saved in checkpoints."""

    def __init__(
        self,
        store: Store | None = None,
        *,
        session_id: str | None = None,
        clock: Clock | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        resume: bool = False,
    ) -> None:
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
        self._store: Store = store if store is not None else MemoryStore()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._session_id = session_id
        self._checkpoint_every = checkpoint_every
        before = set(vars(self))
        self._init_state()
        caches = self._checkpoint_caches()
        self._layout = tuple(name for name in vars(self) if name not in before and name not in caches)
        self._seq = 0  # the last journal entry applied
        self._revision = 0  # see ``revision``
        self._checkpoint_seq = 0  # the entry covered by the newest checkpoint this session knows
        self._restored_seq = 0  # the checkpoint this session was opened from (0: a full replay)
        self._next_checkpoint = checkpoint_every  # the entry after which one is saved automatically
        self._sole_writer = True  # False once another writer appended to this session
        self._broken: str | None = None  # why the state can no longer follow the journal
        self._busy = threading.Lock()  # the concurrent-use guard (see ``exclusive``)
        self._owner: int | None = None  # the thread holding it
        relaxed = getattr(self._store, "append_relaxed", None)
        self._append_relaxed = relaxed if callable(relaxed) else self._store.append
        # Conditional appends need both paths to take ``after``; otherwise fall back to noticing.
        self._conditional = _takes_after(self._store.append) and _takes_after(self._append_relaxed)
        self._keeps_checkpoints = callable(getattr(self._store, "save_checkpoint", None)) and callable(
            getattr(self._store, "load_checkpoint", None)
        )
        self._replaying = True
        # Replay builds many small long-lived objects; the cyclic collector would rescan them
        # over and over (about 30% of reopen time) and they hold no cycles worth collecting.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._open()
        finally:
            self._replaying = False
            if collecting:
                gc.enable()
        if resume and self._seq == 0:
            raise NotFound(f"the store holds no session {session_id!r} to resume")

    def _open(self) -> None:
        restored = self._restore_checkpoint()
        if restored:
            try:
                tail = self._store.load(self._session_id, restored)
                for entry in tail:
                    self._apply(entry)
            except Exception as exc:  # the checkpoint disagrees with the journal after it
                logger.warning(
                    "session %r: the journal after checkpoint %d does not apply to it (%s: %s); "
                    "replaying the whole journal",
                    self._session_id,
                    restored,
                    type(exc).__name__,
                    exc,
                )
                self._init_state()
                self._checkpoint_seq = self._restored_seq = self._next_checkpoint = 0
            else:
                self._seq = (tail[-1].seq or restored + len(tail)) if tail else restored
                return
        self._seq = self._replay(self._store.load(self._session_id), 0)
        try:
            self._check_state()
        except Exception as exc:
            # The journal is the source of truth: it is reported, not refused (refusing would
            # lock the session out for good). Only a damaged or forged journal gets here.
            logger.warning("session %r: the journal leads to a state that %s", self._session_id, exc)

    def _replay(self, entries: Iterable[JournalEntry], seq: int) -> int:
        """Apply stored entries following entry ``seq``; the seq of the last one applied.

        Raises:
            StoreError: an entry this version cannot apply (unknown operation, missing key,
                wrong type); it names the entry.
        """
        for entry in entries:
            seq = entry.seq or seq + 1
            try:
                self._apply(entry)
            except StoreError:
                raise
            except Exception as exc:  # stored data that does not fit: whatever applying raised
                raise StoreError(
                    f"session {self._session_id!r}: journal entry {seq} ({entry.op!r}) is malformed "
                    f"({type(exc).__name__}: {exc}); the store is damaged: restore it from a backup"
                ) from None
        return seq

    def _check_state(self) -> None:
        """Check the state's invariants; raise ``StoreError`` naming the first one broken.

        Parts override it (calling ``super()``). Run after every open: a restored checkpoint
        that fails it is not used.
        """
        if isinstance(self._turn, bool) or not isinstance(self._turn, int) or self._turn < 0:
            raise StoreError(f"turn {self._turn!r} is not a turn number")

    # -- state -------------------------------------------------------------------------------

    def _init_state(self) -> None:
        self._turn = 0
        self._phase: str | None = None
        self._events: list[Event] = []
        self._at = 0.0

    @property
    def session_id(self) -> str:
        """The id this session is stored under."""
        return self._session_id

    @property
    def store(self) -> Store:
        """The store this session journals to."""
        return self._store

    @property
    def revision(self) -> int:
        """A number that changes whenever what the session shows may have changed.

        Tool registrations and states, tombstones and spans: any journaled change but three,
        which leave it alone: recording a call (only a resident tool can be called), opening a
        turn that changes nothing, and refusing a call. A host can keep its rendered tool list
        while the revision stays the same. It counts from 0 each time the session is opened.
        """
        return self._revision

    @property
    def phase(self) -> str | None:
        """The phase the current turn was planned in (None: no phase)."""
        return self._phase

    @property
    def turn(self) -> int:
        """The current turn (0 before the first ``plan_turn``)."""
        return self._turn

    def events(self, kind: EventKind | None = None) -> list[Event]:
        """The event log, oldest first, optionally of one kind."""
        if kind is None:
            return list(self._events)
        return [e for e in self._events if e.kind is kind]

    # -- journal -----------------------------------------------------------------------------

    def _claim(self) -> bool:
        """Take the concurrent-use guard for this thread; False if it already holds it."""
        me = threading.get_ident()
        if self._owner == me:
            return False
        if not self._busy.acquire(blocking=False):
            raise ConcurrentUse(
                f"session {self._session_id!r} is in use by another thread; a Session is driven by "
                f"one thread at a time: serialize its callers, or give each thread its own session"
            )
        self._owner = me
        return True

    def _release(self) -> None:
        self._owner = None
        self._busy.release()

    def _commit(self, *items: tuple[str, Mapping[str, Any]], relaxed: bool = False) -> None:
        """Write ``(op, data)`` items ahead to the journal, then apply them.

        ``relaxed``: the items may be lost on a power loss until the next commit (see the Store
        protocol); only for items whose loss leaves a more cautious state.

        Raises:
            SessionConflict: another writer appended first; nothing was written, the session
                has caught up.
            ConcurrentUse: another thread is inside an operation of this session.
        """
        claimed = self._claim()
        try:
            self._commit_held(items, relaxed)
        finally:
            if claimed:
                self._release()

    def _commit_held(self, items: tuple[tuple[str, Mapping[str, Any]], ...], relaxed: bool) -> None:
        if self._broken is not None:
            raise StoreError(f"session {self._session_id!r}: {self._broken}; reopen the session")
        at = self._clock.now()
        entries = [JournalEntry(op, data, at) for op, data in items]
        append = self._append_relaxed if relaxed else self._store.append
        if self._conditional:
            try:
                last = append(self._session_id, entries, after=self._seq)
            except StoreConflict:
                self._catch_up()
                raise SessionConflict(
                    f"session {self._session_id!r}: another writer changed this session first, so "
                    f"the operation was not applied (nothing was written). The session now holds the "
                    f"new state: retry the operation",
                    session_id=self._session_id,
                ) from None
        else:
            last = append(self._session_id, entries)
        expected = self._seq + len(entries)
        if isinstance(last, int) and last != expected:
            # Someone else appended to this session's journal: this object's state no longer
            # describes the journal's prefix, so it must never be saved as a checkpoint.
            self._sole_writer = False
            expected = last
        self._seq = expected
        for entry in entries:
            self._apply(entry)
        every = self._checkpoint_every
        if every and self._seq >= self._next_checkpoint and self._keeps_checkpoints and self._sole_writer:
            try:
                self._save_checkpoint()
            except StoreError as exc:
                # The operation itself is durable and applied; a checkpoint only saves time.
                logger.warning(
                    "session %r: automatic checkpoint failed, retrying after %d more entries: %s",
                    self._session_id,
                    every,
                    exc,
                )
                self._next_checkpoint = self._seq + every

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
        if self._broken is not None:
            raise StoreError(f"session {self._session_id!r}: {self._broken}; reopen the session")
        return self._catch_up()

    def _catch_up(self) -> int:
        """Apply the entries other writers appended after this session's last one; how many."""
        tail = self._store.load(self._session_id, self._seq)
        if not tail:
            return 0
        try:
            self._seq = self._replay(tail, self._seq)
        except BaseException as exc:
            # Possibly applied in part: this object no longer describes a journal prefix.
            self._broken = f"catching up with another writer failed ({type(exc).__name__}: {exc})"
            raise
        # What the session shows may have changed, even through entries that leave the revision
        # alone when this object writes them (another writer's calls move the tools' recency):
        # drop view caches and steady-plan shortcuts.
        self._revision += 1
        return len(tail)

    def _apply(self, entry: JournalEntry) -> None:
        handler = getattr(self, f"_apply_{entry.op}", None)
        if handler is None:
            raise StoreError(
                f"session {self._session_id!r}: journal has an unknown operation {entry.op!r} "
                f"(written by a newer version?)"
            )
        self._at = entry.at
        handler(entry.data)
        if entry.op not in _QUIET_OPS:
            self._revision += 1

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint(self) -> int:
        """Save the session's state to the store now, so a reopen replays only what follows.

        Sessions also save one automatically every ``checkpoint_every`` journal entries.

        Returns:
            The journal entry the checkpoint covers (0 for an empty journal: nothing is saved).

        Raises:
            StoreError: the store keeps no checkpoints, another writer appended to this
                session's journal since it was opened (reopen it first), or the store cannot
                be written.
        """
        if not self._sole_writer:
            raise StoreError(
                f"session {self._session_id!r}: another writer appended to its journal since it was "
                f"opened; reopen the session to checkpoint it"
            )
        if self._seq and self._seq != self._checkpoint_seq:
            self._save_checkpoint()
        return self._seq

    def _save_checkpoint(self) -> None:
        if not self._keeps_checkpoints:
            raise StoreError(f"{type(self._store).__name__} keeps no checkpoints")
        state = {name: getattr(self, name) for name in self._layout}
        self._checkpoint_encode(state)
        blob = encode_checkpoint(self._session_id, self._seq, self._layout, state)
        self._store.save_checkpoint(self._session_id, self._seq, blob)
        self._checkpoint_seq = self._seq
        self._next_checkpoint = self._seq + self._checkpoint_every

    def _restore_checkpoint(self) -> int:
        """Restore the store's checkpoint if it is usable; the entry it covers, or 0."""
        found = self._store.load_checkpoint(self._session_id) if self._keeps_checkpoints else None
        if found is None:
            return 0
        seq, blob = found
        self._next_checkpoint = 0  # unless it is usable, a new one is due at the next write
        try:
            state = decode_checkpoint(blob, self._session_id, seq, self._layout)
            if state is None:
                logger.info(
                    "session %r: checkpoint of another version; replaying the journal", self._session_id
                )
                return 0
            self._checkpoint_decode(state)
            fresh = vars(self)
            for name, value in state.items():
                if fresh[name] is not None and type(value) is not type(fresh[name]):
                    raise StoreError(
                        f"{name} is a {type(value).__name__}, not a {type(fresh[name]).__name__}"
                    )
            for name, value in state.items():
                setattr(self, name, value)
            # Well-formed is not enough: a forged blob could describe a state no journal leads
            # to (a ghost tool, counts that disagree with the records they count).
            self._check_state()
        except Exception as exc:  # a damaged or forged checkpoint: whatever decoding raised
            logger.warning(
                "session %r: checkpoint at entry %d not used (%s: %s); replaying the whole journal",
                self._session_id,
                seq,
                type(exc).__name__,
                exc,
            )
            self._init_state()
            return 0
        self._checkpoint_seq = self._restored_seq = seq
        self._next_checkpoint = seq + self._checkpoint_every
        return int(seq)

    def _checkpoint_caches(self) -> frozenset[str]:
        names: set[str] = set()
        for cls in type(self).__mro__:
            names |= cls.__dict__.get("_CHECKPOINT_CACHES", frozenset())
        return frozenset(names)

    def _checkpoint_encode(self, state: dict[str, Any]) -> None:
        """Turn state values into what a checkpoint holds (in place). Mixins call ``super()``."""
        state["_events"] = columns(state["_events"], Event, shared=("detail",))

    def _checkpoint_decode(self, state: dict[str, Any]) -> None:
        """Undo ``_checkpoint_encode`` on a restored state (in place). Mixins call ``super()``."""
        state["_events"] = list(from_columns(Event, state["_events"]))

    def _event(self, kind: EventKind, subject: str, detail: str = "") -> Event:
        event = Event(self._turn, kind, subject, detail, self._at)
        self._events.append(event)
        return event

    def _apply_turn(self, data: Mapping[str, Any]) -> None:
        self._turn = int(data["turn"])
        phase = data.get("phase")
        self._phase = phase if isinstance(phase, str) else None

    # -- comparison --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data: equal snapshots mean equal sessions."""
        parts: dict[str, Any] = {}
        self._snapshot_parts(parts)
        return parts

    def _snapshot_parts(self, parts: dict[str, Any]) -> None:
        parts["turn"] = self._turn
        parts["phase"] = self._phase
        parts["events"] = [(e.turn, e.kind.value, e.subject, e.detail) for e in self._events]
