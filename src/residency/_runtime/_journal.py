"""The journal shell around a session's pure state: the store, the clock, checkpoints, two writers.

A session's state (``residency._core._state.SessionState``) is rebuilt from its journal. Each
public mutation validates against the current state (raising, with nothing changed, if it may
not happen), has ``Journal.commit`` append its entries to the store in one atomic batch
(write-ahead), and only then applies them to the state. Opening a session replays the journal
through the same ``SessionState.apply``, so a reopened session equals the one that wrote it,
and replaying twice gives what replaying once gives.

Checkpoints
-----------
Replaying costs about 15 us per entry, so a long session would reopen slowly. Every
``checkpoint_every`` entries (and on ``Session.checkpoint()``) the session saves its state to
the store as a checkpoint (the declared fields of ``residency._core._state_format``, framed by
``residency._store._checkpoint``); a reopen restores it and replays only the entries after it.
A checkpoint that falls due during ``plan_turn`` is not written inside the plan (a plan must
answer fast): it is saved by the next write that is not a plan, or by
``Session.checkpoint(only_if_due=True)``, which a host may call once it has answered.

A checkpoint is derived data: if it is missing, of another version or format, damaged, refused
by the decoder (see ``_store/_checkpoint.py`` for the trust model), or disagrees with the journal
after it, the session replays its whole journal instead, so opening from a checkpoint never
fails where a replay would succeed, and gives the same state. A restored state must also pass
the invariants (``residency._core._invariants``: no ghost tool, counts that agree with the
records they count, ids with no gaps, ...): a forged but well-formed checkpoint that describes
a state no journal can lead to is not used either.

Stored data
-----------
An entry read from the store that this version cannot apply (a missing key, a wrong type)
raises ``StoreError`` naming the entry, never a raw ``KeyError``: ``replay`` translates it.

Two writers, two threads
------------------------
Each commit tells the store which entry it follows (``append(..., after=seq)``); if another
writer (another ``Session`` object on the same store and id, in this process or another)
appended first, the store refuses with ``StoreConflict``, the session catches up (applies the
other writer's entries) and raises ``SessionConflict``: the operation was checked against a
state that is gone, so it is not applied, and the caller may retry it. The journal never forks,
and ids (``c<n>``, ``s<n>``) are always counted from the caught-up state, so none is issued
twice. A store whose ``append`` takes no ``after`` cannot refuse; the session then only notices
afterwards (``sole_writer``) and stops saving checkpoints.

A true conflict is one that catching up resolves: another writer only ever appends, so the
entries after this session's last one are there, numbered on from it, up to the entry the
store named as its last. Anything else is damage, and a retry could never succeed: a journal
that ends before an entry this session already applied (rows deleted, the store rolled back
or restored from an older backup), or entries that are missing, numbered twice or not whole
numbers (a damaged index). Those raise ``StoreError`` instead of ``SessionConflict``, with
nothing written and nothing applied; ``catch_up`` checks the numbering the same way.

One object used from two threads at once is a different fault: every operation that changes the
session holds a non-blocking guard (``claim``), and a second thread that enters while one runs
gets ``ConcurrentUse`` at once, with nothing changed.
"""

from __future__ import annotations

import gc
import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from residency._core._invariants import state_problem
from residency._core._state import QUIET_OPERATIONS, SessionState
from residency._core._state_format import state_data, state_from_data
from residency._errors import ConcurrentUse, SessionConflict, StoreConflict, StoreError
from residency._runtime._tool_cache import SpecSource
from residency._store._checkpoint import decode_checkpoint, encode_checkpoint
from residency._store._protocol import Clock, JournalEntry, Store

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "Item", "Journal", "new_session_id"]

DEFAULT_CHECKPOINT_EVERY = 5_000
"""Journal entries between automatic checkpoints: reopening replays at most this many."""

logger = logging.getLogger("residency")

Item = tuple[str, Mapping[str, Any]]
"""A journal entry before it is written: ``(op, data)``."""


def new_session_id() -> str:
    """A fresh, unique session id (``session-`` and 16 hex digits)."""
    return f"session-{uuid.uuid4().hex[:16]}"


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


class Journal:
    """One session's journal: its state, the store it is written to, and its checkpoints."""

    def __init__(
        self, store: Store, session_id: str, clock: Clock, checkpoint_every: int, specs: SpecSource
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.clock = clock
        self.specs = specs
        self.state = SessionState(specs.spec)
        self.seq = 0  # the last journal entry applied
        self.revision = 0  # see ``Session.revision``
        self.checkpoint_seq = 0  # the entry covered by the newest checkpoint this session knows
        self.restored_seq = 0  # the checkpoint this session was opened from (0: a full replay)
        self._every = checkpoint_every
        self._next_checkpoint = checkpoint_every  # the entry after which one is saved automatically
        self.sole_writer = True  # False once another writer appended to this session
        self._broken: str | None = None  # why the state can no longer follow the journal
        self._busy = threading.Lock()  # the concurrent-use guard (see ``claim``)
        self._owner: int | None = None  # the thread holding it
        relaxed = getattr(store, "append_relaxed", None)
        self._append_relaxed = relaxed if callable(relaxed) else store.append
        # Conditional appends need both paths to take ``after``; otherwise fall back to noticing.
        self._conditional = _takes_after(store.append) and _takes_after(self._append_relaxed)
        self.keeps_checkpoints = callable(getattr(store, "save_checkpoint", None)) and callable(
            getattr(store, "load_checkpoint", None)
        )

    # -- opening -----------------------------------------------------------------------------

    def open(self) -> None:
        """Restore the newest usable checkpoint and replay the journal after it."""
        # Replay builds many small long-lived objects; the cyclic collector would rescan them
        # over and over (about 30% of reopen time) and they hold no cycles worth collecting.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._open()
        finally:
            if collecting:
                gc.enable()

    def _open(self) -> None:
        restored = self._restore_checkpoint()
        if restored:
            try:
                tail = self.store.load(self.session_id, restored)
                if any(type(entry.seq) is not int for entry in tail):
                    raise StoreError("an entry after it is not numbered with a whole number")
                for entry in tail:
                    self.apply(entry)
            except Exception as exc:  # the checkpoint disagrees with the journal after it
                logger.warning(
                    "session %r: the journal after checkpoint %d does not apply to it (%s: %s); "
                    "replaying the whole journal",
                    self.session_id,
                    restored,
                    type(exc).__name__,
                    exc,
                )
                self.state = SessionState(self.specs.spec)
                self.checkpoint_seq = self.restored_seq = self._next_checkpoint = 0
            else:
                self.seq = (tail[-1].seq or restored + len(tail)) if tail else restored
                return
        self.seq = self.replay(self.store.load(self.session_id), 0)
        problem = state_problem(self.state)
        if problem is not None:
            # The journal is the source of truth: it is reported, not refused (refusing would
            # lock the session out for good). Only a damaged or forged journal gets here.
            logger.warning(
                "session %r: the journal leads to a state that breaks an invariant: %s",
                self.session_id,
                problem,
            )

    def replay(self, entries: Iterable[JournalEntry], seq: int) -> int:
        """Apply stored entries following entry ``seq``; the seq of the last one applied.

        Raises:
            StoreError: an entry this version cannot apply (unknown operation, missing key,
                wrong type), or one not numbered with a whole number; it names the entry.
        """
        for entry in entries:
            if type(entry.seq) is not int:
                raise StoreError(
                    f"session {self.session_id!r}: the journal entry after entry {seq} is numbered "
                    f"{entry.seq!r}, not with a whole number: the store is damaged; restore it from a backup"
                )
            seq = entry.seq or seq + 1
            try:
                self.apply(entry)
            except StoreError as exc:
                raise StoreError(f"session {self.session_id!r}: journal entry {seq}: {exc}") from None
            except Exception as exc:  # stored data that does not fit: whatever applying raised
                raise StoreError(
                    f"session {self.session_id!r}: journal entry {seq} ({entry.op!r}) is malformed "
                    f"({type(exc).__name__}: {exc}); the store is damaged: restore it from a backup"
                ) from None
        return seq

    def apply(self, entry: JournalEntry) -> None:
        self.state.apply(entry)
        if entry.op not in QUIET_OPERATIONS:
            self.revision += 1

    # -- writing -----------------------------------------------------------------------------

    def claim(self) -> bool:
        """Take the concurrent-use guard for this thread; False if it already holds it."""
        me = threading.get_ident()
        if self._owner == me:
            return False
        if not self._busy.acquire(blocking=False):
            raise ConcurrentUse(
                f"session {self.session_id!r} is in use by another thread; a Session is driven by "
                f"one thread at a time: serialize its callers, or give each thread its own session"
            )
        self._owner = me
        return True

    def release(self) -> None:
        self._owner = None
        self._busy.release()

    def commit(self, *items: Item, relaxed: bool = False, in_plan: bool = False) -> None:
        """Write ``(op, data)`` items ahead to the journal, then apply them.

        ``relaxed``: the items may be lost on a power loss until the next commit (see the Store
        protocol); only for items whose loss leaves a more cautious state. ``in_plan``: a
        checkpoint that falls due is left for the next write (see the module docs).

        Raises:
            SessionConflict: another writer appended first; nothing was written, the session
                has caught up.
            ConcurrentUse: another thread is inside an operation of this session.
        """
        claimed = self.claim()
        try:
            self._commit_held(items, relaxed)
            if not in_plan:
                self.checkpoint_if_due()
        finally:
            if claimed:
                self.release()

    def _commit_held(self, items: tuple[Item, ...], relaxed: bool) -> None:
        self.check_usable()
        at = self.clock.now()
        entries = [JournalEntry(op, data, at) for op, data in items]
        append = self._append_relaxed if relaxed else self.store.append
        if self._conditional:
            try:
                last = append(self.session_id, entries, after=self.seq)
            except StoreConflict as conflict:
                self._catch_up_after(conflict)
                raise SessionConflict(
                    f"session {self.session_id!r}: another writer changed this session first, so "
                    f"the operation was not applied (nothing was written). The session now holds the "
                    f"new state: retry the operation",
                    session_id=self.session_id,
                ) from None
        else:
            last = append(self.session_id, entries)
        expected = self.seq + len(entries)
        if isinstance(last, int) and last != expected:
            # Someone else appended to this session's journal: this object's state no longer
            # describes the journal's prefix, so it must never be saved as a checkpoint.
            self.sole_writer = False
            expected = last
        self.seq = expected
        for entry in entries:
            self.apply(entry)

    def check_usable(self) -> None:
        """Raise ``StoreError`` if an earlier catch-up left the state unable to follow the journal."""
        if self._broken is not None:
            raise StoreError(f"session {self.session_id!r}: {self._broken}; reopen the session")

    def catch_up(self) -> int:
        """Apply the entries other writers appended after this session's last one; how many.

        Raises:
            StoreError: the store cannot be read, the entries after this session's last one are
                not numbered on from it (missing, twice, not whole numbers: nothing is applied),
                or one cannot be applied (the session must then be reopened).
        """
        return self._apply_tail(self.store.load(self.session_id, self.seq))

    def _catch_up_after(self, conflict: StoreConflict) -> None:
        """Catch up after the store refused an append; raise ``StoreError`` if that cannot help.

        Another writer's entries are numbered on from this session's last one up to (at least)
        the entry the store named as its last, so catching up reaches it and a retry can
        succeed. If the journal ends before an entry this session applied, or the entries
        after it do not reach the named one, no retry ever can: the store is damaged.
        """
        behind, last = self.seq, conflict.last
        if isinstance(last, int) and not isinstance(last, bool) and 0 < last < behind:
            raise self._damaged(
                f"the store says its journal ends at entry {last}, but this session has already "
                f"applied entry {behind}: entries were removed, or the store was rolled back or "
                f"restored from an older backup"
            )
        tail = self.store.load(self.session_id, behind)
        reached = self._reach(tail)
        if not tail:
            raise self._damaged(
                f"the store refused an append after entry {behind} (its last entry is {last}), but "
                f"holds no entry after it: entries were removed, or its journal index is damaged"
            )
        if isinstance(last, int) and reached < last:
            raise self._damaged(
                f"the store refused an append after entry {behind} (its last entry is {last}), but "
                f"the entries after {behind} end at entry {reached}: its journal index is damaged"
            )
        self._apply_tail(tail)

    def _damaged(self, problem: str) -> StoreError:
        return StoreError(
            f"session {self.session_id!r}: {problem}. Nothing was written or applied, and retrying "
            f"cannot help: check the store (SQLite: PRAGMA integrity_check, and REINDEX rebuilds a "
            f"damaged index) or restore it from a backup, then reopen the session (for the gateway: "
            f"restart it): it continues from what the store holds"
        )

    def _reach(self, tail: list[JournalEntry]) -> int:
        """The entry ``tail`` ends at, once checked to follow this session's last one.

        Raises:
            StoreError: its entries are not numbered on from this session's last one.
        """
        numbered = [entry.seq for entry in tail]
        if not any(numbered):  # a store that does not number what it loads (residency's all do)
            return self.seq + len(tail)
        expected = list(range(self.seq + 1, self.seq + 1 + len(tail)))
        if numbered != expected or any(type(n) is not int for n in numbered):
            shown = ", ".join(repr(n) for n in numbered[:5]) + (", ..." if len(numbered) > 5 else "")
            raise self._damaged(
                f"the journal entries after entry {self.seq} are numbered {shown} instead of "
                f"{self.seq + 1}, {self.seq + 2}, ...: entries are missing, numbered twice, or "
                f"numbered with something other than whole numbers"
            )
        return expected[-1]

    def _apply_tail(self, tail: list[JournalEntry]) -> int:
        """Apply entries that follow this session's last one; how many (see ``catch_up``)."""
        if not tail:
            return 0
        self._reach(tail)
        try:
            self.seq = self.replay(tail, self.seq)
        except BaseException as exc:
            # Possibly applied in part: this object no longer describes a journal prefix.
            self._broken = f"catching up with another writer failed ({type(exc).__name__}: {exc})"
            raise
        # What the session shows may have changed, even through entries that leave the revision
        # alone when this object writes them (another writer's calls move the tools' recency):
        # drop view caches and steady-plan shortcuts.
        self.revision += 1
        return len(tail)

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        return bool(
            self._every and self.seq >= self._next_checkpoint and self.keeps_checkpoints and self.sole_writer
        )

    def checkpoint_if_due(self) -> None:
        """Save the automatic checkpoint if one is due; a failure is logged, not raised."""
        if not self.checkpoint_due():
            return
        try:
            self.save_checkpoint()
        except StoreError as exc:
            # The operation itself is durable and applied; a checkpoint only saves time.
            logger.warning(
                "session %r: automatic checkpoint failed, retrying after %d more entries: %s",
                self.session_id,
                self._every,
                exc,
            )
            self._next_checkpoint = self.seq + self._every

    def save_checkpoint(self) -> None:
        if not self.keeps_checkpoints:
            raise StoreError(f"{type(self.store).__name__} keeps no checkpoints")
        blob = encode_checkpoint(self.session_id, self.seq, state_data(self.state, self.specs.shown_by))
        self.store.save_checkpoint(self.session_id, self.seq, blob)
        self.checkpoint_seq = self.seq
        self._next_checkpoint = self.seq + self._every

    def _restore_checkpoint(self) -> int:
        """Restore the store's checkpoint if it is usable; the entry it covers, or 0."""
        found = self.store.load_checkpoint(self.session_id) if self.keeps_checkpoints else None
        if found is None:
            return 0
        seq, blob = found
        self._next_checkpoint = 0  # unless it is usable, a new one is due at the next write
        try:
            data = decode_checkpoint(blob, self.session_id, seq)
            if data is None:
                logger.info(
                    "session %r: checkpoint of another version; replaying the journal", self.session_id
                )
                return 0
            state = state_from_data(data, self.specs.spec, self.specs.restore, self.specs.shown_by)
            # Well-formed is not enough: a forged blob could describe a state no journal leads
            # to (a ghost tool, counts that disagree with the records they count).
            problem = state_problem(state)
            if problem is not None:
                raise StoreError(f"breaks an invariant: {problem}")
        except Exception as exc:  # a damaged or forged checkpoint: whatever decoding raised
            logger.warning(
                "session %r: checkpoint at entry %d not used (%s: %s); replaying the whole journal",
                self.session_id,
                seq,
                type(exc).__name__,
                exc,
            )
            return 0
        self.state = state
        self.checkpoint_seq = self.restored_seq = seq
        self._next_checkpoint = seq + self._every
        return int(seq)
