"""What sessions learn from their searches: a query followed by a successful call of a tool it found.

A session remembers its last few searches (``note_search``: the query and the names of its hits;
in memory, not journaled) for ``RECENT_SECONDS``. When a call succeeds (``call_succeeded``), the
tool is looked up among them: if a search found it, that search's query is a label for the tool,
and so is every search the session made since its last labelled call before that one (the
phrasings that did not find it: the labels that teach the most). Each (query, tool) pair is
learned once per session. Labels are written to the store under the session's archive scope
(``learn_searches``), where every session of the scope, on every replica, reads them.

A scope's labels are read once per process and shared by its sessions (:func:`scope_labels`),
refreshed with what was added since at most every ``REFRESH_SECONDS``, and read whole again
every ``RELOAD_SECONDS`` (so that an operator's reset reaches every replica within that time).
A session without an archive scope, or on a store without search labels, learns nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from residency._errors import ResidencyError
from residency._runtime._journal import Journal
from residency._search._learned import LearnedLabels, SearchLabel, labels_from_records
from residency._store._protocol import Store

__all__ = ["RECENT_SEARCHES", "RECENT_SECONDS", "RELOAD_SECONDS", "LearningPart", "scope_labels"]

RECENT_SEARCHES = 5
"""Searches a session remembers."""
RECENT_SECONDS = 600.0
"""How long a search may wait for the call it leads to."""
REFRESH_SECONDS = 1.0
RELOAD_SECONDS = 60.0

_log = logging.getLogger("residency.search")
_METHODS = ("learn_searches", "search_labels", "forget_search_labels")


def learns(store: Store) -> bool:
    """Whether ``store`` keeps search labels."""
    return all(callable(getattr(store, m, None)) for m in _METHODS)


@dataclass
class _Search:
    query: str
    hits: frozenset[str]
    at: float  # time.monotonic()


@dataclass
class _Scope:
    """One scope's labels as this process last read them."""

    after: int = 0
    labels: list[SearchLabel] = field(default_factory=list)
    learned: LearnedLabels | None = None
    read_at: float = float("-inf")
    loaded_at: float = float("-inf")
    lock: threading.Lock = field(default_factory=threading.Lock)


_scopes: weakref.WeakKeyDictionary[Store, dict[str, _Scope]] = weakref.WeakKeyDictionary()
_scopes_lock = threading.Lock()


def _scope(store: Store, scope: str) -> _Scope:
    with _scopes_lock:
        return _scopes.setdefault(store, {}).setdefault(scope, _Scope())


def scope_labels(store: Store, scope: str, *, now: float, fresh: bool = False) -> LearnedLabels | None:
    """The scope's labels, read from ``store`` as the module docstring says; None if it has none.

    ``now``: the time label weights are computed at. ``fresh``: read what was added now,
    whenever the last read was.

    Raises:
        StoreError: the store cannot be read, or a stored label is malformed.
    """
    held = _scope(store, scope)
    with held.lock:
        tick = time.monotonic()
        reload = tick - held.loaded_at >= RELOAD_SECONDS
        if fresh or reload or tick - held.read_at >= REFRESH_SECONDS:
            after = 0 if reload else held.after
            rows = store.search_labels(scope, after)  # type: ignore[attr-defined]
            try:
                added = labels_from_records([record for _, record in rows])
            except ValueError as exc:
                from residency._errors import StoreError

                raise StoreError(f"scope {scope!r}: {exc}") from None
            if reload:
                held.labels, held.loaded_at, held.learned = added, tick, None
            elif added:
                held.labels.extend(added)
                held.learned = None
            if reload:
                held.after = rows[-1][0] if rows else 0
            elif rows:
                held.after = rows[-1][0]
            held.read_at = tick
        if not held.labels:
            return None
        if held.learned is None:
            held.learned = LearnedLabels(held.labels, now=now)
        return held.learned


class LearningPart:
    """A session's recent searches, and the labels its successful calls make of them.

    Args:
        journal: the session's journal (its store, id and clock).
        scope: the session's archive scope; None: nothing is learned.
    """

    def __init__(self, journal: Journal, scope: str | None) -> None:
        self._journal = journal
        self._scope = scope if scope is not None and learns(journal.store) else None
        self._recent: deque[_Search] = deque(maxlen=RECENT_SEARCHES)
        self._labelled: set[tuple[str, str]] = set()
        self._since = float("-inf")  # when the last call that found its tool in a search succeeded
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether this session learns (an archive scope, on a store with search labels)."""
        return self._scope is not None

    def note_search(self, query: str, hits: Sequence[str]) -> None:
        """Remember a search and the names it found, for the calls that may follow."""
        if self._scope is None:
            return
        with self._lock:
            self._recent.append(_Search(query, frozenset(hits), time.monotonic()))

    def call_succeeded(self, tool: str) -> list[str]:
        """Learn from a successful call of ``tool``: the queries labelled with it (see the module
        docstring), written to the store. A store that fails is logged, never raised: learning
        is a side effect of a call that has already succeeded.
        """
        if self._scope is None:
            return []
        with self._lock:
            tick = time.monotonic()
            recent = [s for s in self._recent if tick - s.at <= RECENT_SECONDS]
            found = [i for i, s in enumerate(recent) if tool in s.hits]
            if not found:
                return []
            # The search that found it, and the ones before it since the last labelled call.
            last = found[-1]
            chosen = [x for x in recent[:last] if x.at > self._since] + [recent[last]]
            queries = []
            for search in chosen:
                if (search.query, tool) not in self._labelled:
                    self._labelled.add((search.query, tool))
                    queries.append(search.query)
            self._since = tick
        if not queries:
            return []
        now = self._journal.clock.now()
        session = self._journal.session_id
        records = [SearchLabel(q, tool, session, now).to_json() for q in dict.fromkeys(queries)]
        try:
            self._journal.store.learn_searches(self._scope, records)  # type: ignore[attr-defined]
        except ResidencyError as exc:
            _log.warning("tool search: could not keep what session %s learned (%s)", session, exc)
            return []
        forget_fresh(self._journal.store, self._scope)
        return queries

    def labels(self) -> LearnedLabels | None:
        """The labels of the session's scope (shared with the process's other sessions)."""
        if self._scope is None:
            return None
        try:
            return scope_labels(self._journal.store, self._scope, now=self._journal.clock.now())
        except ResidencyError as exc:  # search still answers, without what was learned
            _log.warning("tool search: could not read what the scope %r learned (%s)", self._scope, exc)
            return None


def forget_fresh(store: Store, scope: str) -> None:
    """Make the next read of the scope's labels read what was added, however recent the last."""
    held = _scope(store, scope)
    with held.lock:
        held.read_at = float("-inf")
