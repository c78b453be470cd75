"""What the store readers show: shared by ``residency view``, ``inspect``, ``admin`` and the dashboard.

Everything here reads, nothing writes: a store is opened without being created or upgraded
(``open_readonly``), a session is resumed from its journal (``open_session``) and only its
read methods are called. The commands print what these functions return; the dashboard renders
the same values as HTML, so the two never disagree about a session.

Gateway sessions are journaled as ``gateway/<key>`` (``_names``). How tools are shown depends on
the gateway's ``minify`` level, delivery and pins, which the journal does not record: the caller
says how the session was served (``ServedWith``).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from residency._core._events import Event, EventKind
from residency._errors import ConfigError, ResidencyError
from residency._store._protocol import DEFAULT_SCOPE, JournalEntry
from residency._ui._names import session_key_of

if TYPE_CHECKING:
    from residency._gateway._config import GatewayConfig
    from residency._runtime import Session
    from residency._store._protocol import Store

__all__ = [
    "CACHE_READ",
    "CACHE_WRITE",
    "IDENTITIES",
    "PlotPoint",
    "Readers",
    "ServedWith",
    "SessionPage",
    "SessionRow",
    "Turn",
    "archive",
    "identity_of",
    "last_entries",
    "open_readonly",
    "open_session",
    "plot_series",
    "session_rows",
    "timeline",
    "view",
]


def open_readonly(location: str) -> Store:
    """The store at ``location`` (a URL, or a path to a SQLite file), never created or upgraded.

    Raises:
        ConfigError: a SQLite path that names no file.
        ResidencyError: the store cannot be opened (``open_store``'s errors).
    """
    from residency._store import open_store

    url = location if "://" in location or location.startswith("memory:") else f"sqlite:///{location}"
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not path.is_file():
            raise ConfigError(f"{path}: no such store file", where="store")
    return open_store(url, create=False)


@dataclass(frozen=True)
class ServedWith:
    """What of the gateway's config decides the list it serves (the journal does not say)."""

    minify: str
    offload: bool = False
    """Results are recorded as spans (offloading or tag rules): ``read_span`` is listed."""
    delivery: str = "reference"
    pinned: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: GatewayConfig, minify: str | None = None) -> ServedWith:
        """How a gateway with ``config`` serves (``minify`` overrides its level)."""
        r = config.residency
        return cls(minify if minify is not None else r.minify, r.spans.recorded, r.delivery, tuple(r.pinned))


def open_session(store: Store, session_id: str, served: ServedWith) -> Session:
    """The session ``session_id`` resumed read-only-by-use: tools shown as the gateway shows them.

    Raises:
        ConfigError: an unknown minify level.
        ResidencyError: the journal cannot be read or replayed.
    """
    from residency._gateway._meta_tools import REEXPAND_TOOLS
    from residency._gateway._server import _minifier
    from residency._runtime import Session

    return Session(
        store,
        session_id=session_id,
        resume=True,
        minify=_minifier(served.minify),
        reexpand_tool=REEXPAND_TOOLS,
    )


def view(
    session: Session, *, offload: bool = False, delivery: str = "list", pinned: Collection[str] = ()
) -> dict[str, Any]:
    """What the model sees now in ``session``: listed tools and meta-tools with tokens, tombstones.

    ``offload``: the gateway records results as spans (offloading or tag rules; ``read_span``
    is listed then). ``delivery``: the gateway's; by reference only the ``pinned`` tools are
    listed, and ``call_tool`` is (as for ``auto``).
    """
    from residency._gateway._meta_tools import listed_meta_tools, meta_tool_definitions
    from residency._tokens import count_tokens, tokenizer_name

    tombstones = session.tombstones()
    resident = session.resident_tools()
    if delivery == "reference":
        resident = [n for n in resident if n in pinned]
    tools = [(n, session.tool(n).tokens) for n in resident]
    listed = listed_meta_tools(chains=bool(session.chains()), offload=offload, call_tool=delivery != "list")
    meta = [(str(d["name"]), count_tokens(d)) for d in meta_tool_definitions(listed)]
    tool_tokens = sum(t for _, t in tools)
    meta_tokens = sum(t for _, t in meta)
    return {
        "session": session.session_id,
        "turn": session.turn,
        "delivery": delivery,
        "tools": [{"name": n, "tokens": t} for n, t in tools],
        "meta_tools": [{"name": n, "tokens": t} for n, t in meta],
        "tool_tokens": tool_tokens,
        "meta_tool_tokens": meta_tokens,
        "total_tokens": tool_tokens + meta_tokens,
        "tokenizer": tokenizer_name(),
        "tombstones": tombstones,
    }


# -- the session list ---------------------------------------------------------------------------


def identity_of(session_id: str) -> str:
    """Who a session's key is bound to: ``token``, ``oauth``, ``none`` (a gateway session named
    without a token) or ``local`` (a session no gateway wrote)."""
    if not session_id.startswith("gateway/"):
        return "local"
    rest = session_id[len("gateway/") :]
    key = session_key_of(session_id)
    if key is not None and rest != key:
        return "oauth" if rest.startswith("oauth-") else "token"
    return "none"


@dataclass(frozen=True)
class SessionRow:
    """One line of the session list: read from the session's journal, not replayed."""

    id: str
    key: str | None
    identity: str
    entries: int
    turn: int
    last_at: float


@dataclass(frozen=True)
class SessionPage:
    """A page of the filtered session list."""

    rows: tuple[SessionRow, ...]
    matched: int
    total: int
    page: int
    pages: int


IDENTITIES = ("local", "none", "token", "oauth")


class Readers:
    """What a long-running reader (the dashboard) keeps between requests: the ``Session``
    objects of the sessions last viewed (caught up with ``Session.catch_up``, one indexed read
    of the tail, instead of replayed), at most ``sessions`` of them.

    Thread-safe: pages are read in worker threads. A session object is used by one thread at a
    time (its lock); a reader that fails leaves the entry out, so the next request reopens it.
    """

    def __init__(self, sessions: int = 64) -> None:
        self._lock = threading.Lock()
        self._sessions: OrderedDict[tuple[str, ServedWith], tuple[threading.Lock, Session]] = OrderedDict()
        self._limit = sessions

    @contextlib.contextmanager
    def session(self, store: Store, session_id: str, served: ServedWith) -> Iterator[Session]:
        """The session, caught up with its journal, for the duration of the block."""
        key = (session_id, served)
        with self._lock:
            held = self._sessions.pop(key, None)
        if held is None:
            held = (threading.Lock(), open_session(store, session_id, served))
        lock, session = held
        with lock:
            try:
                session.catch_up()
            except ResidencyError:  # an entry it cannot apply: reopened from the whole journal
                held = (threading.Lock(), open_session(store, session_id, served))
                lock, session = held
            yield session
        with self._lock:
            self._sessions[key] = held
            while len(self._sessions) > self._limit:
                self._sessions.popitem(last=False)


def last_entries(store: Store, session_ids: Sequence[str], op: str | None = None) -> dict[str, JournalEntry]:
    """Each listed session's last journal entry (its last ``op`` entry, if given): one read for
    all of them where the store has ``last_entries`` (SQLite, PostgreSQL), else one per session."""
    batched = getattr(store, "last_entries", None)
    if batched is not None:
        found: dict[str, JournalEntry] = batched(session_ids, op)
        return found
    found = {}
    for sid in session_ids:
        entries = [e for e in store.load(sid) if op is None or e.op == op]
        if entries:
            found[sid] = entries[-1]
    return found


def session_rows(
    store: Store,
    *,
    text: str = "",
    identity: str = "",
    page: int = 1,
    per_page: int = 50,
) -> SessionPage:
    """The store's sessions whose id contains ``text`` and whose key is bound to ``identity``
    (empty: any), ``per_page`` at a time, in id order.

    Only ids are filtered (no journal is read for that), and the rows shown are read together
    (each session's last entry and last turn, two reads for the whole page), so the page costs
    the same with 10 or 10,000 sessions in the store and however long their journals are.
    """
    ids = store.sessions()
    needle = text.casefold()
    matched = [
        sid
        for sid in ids
        if (not needle or needle in sid.casefold()) and (not identity or identity_of(sid) == identity)
    ]
    pages = max(1, -(-len(matched) // per_page))
    page = min(max(1, page), pages)
    shown = matched[(page - 1) * per_page : page * per_page]
    last = last_entries(store, shown)
    turns = last_entries(store, shown, "turn")
    rows = []
    for sid in shown:
        entry, turn = last.get(sid), turns.get(sid)
        rows.append(
            SessionRow(
                sid,
                session_key_of(sid),
                identity_of(sid),
                entry.seq if entry is not None else 0,
                int(turn.data.get("turn", 0)) if turn is not None else 0,
                entry.at if entry is not None else 0.0,
            )
        )
    return SessionPage(tuple(rows), len(matched), len(ids), page, pages)


# -- one session's timeline ---------------------------------------------------------------------

_LEAVES = frozenset({EventKind.PRUNED, EventKind.TOMBSTONED, EventKind.EVICTED, EventKind.ARCHIVED})
_RETURNS = frozenset({EventKind.REGISTERED, EventKind.REEXPANDED, EventKind.READMITTED})


@dataclass(frozen=True)
class Turn:
    """What happened in one turn of a session, from its event log and records.

    Attributes:
        turn: the turn's number.
        events: its events in journal order (tombstoned, evicted, archived, refused, ...).
        resident: the tools resident at the end of the turn (what a gateway delivering by list
            showed next), from the event log.
        deliveries: the tool lists of results delivered in the turn (search and re-expand
            results that carried schemas).
        searches: ``(query, tool)`` of searches in the turn that led to a successful call.
    """

    turn: int
    events: tuple[Event, ...]
    resident: tuple[str, ...]
    deliveries: tuple[tuple[str, ...], ...] = ()
    searches: tuple[tuple[str, str], ...] = field(default=())


def _labels(store: Store, session_id: str) -> list[dict[str, Any]]:
    reader = getattr(store, "search_labels", None)
    if reader is None:
        return []
    return [r for _, r in reader(DEFAULT_SCOPE) if r.get("session") == session_id]


def timeline(session: Session) -> list[Turn]:
    """``session``'s turns, oldest first (see ``Turn``).

    A search is journaled only when it led to a successful call (a search label, kept by the
    store's archive scope); the others leave no trace in the store.
    """
    events = session.events()
    by_turn: dict[int, list[Event]] = {}
    for e in events:
        by_turn.setdefault(e.turn, []).append(e)
    deliveries: dict[int, list[tuple[str, ...]]] = {}
    for d in session.deliveries():
        deliveries.setdefault(d.turn, []).append(d.tools)
    searches: dict[int, list[tuple[str, str]]] = {}
    labels = _labels(session.store, session.session_id)
    turn_at = _turn_starts(session.store, session.session_id)
    for label in labels:
        at = float(label.get("at", 0.0))
        turn = max((t for t, start in turn_at if start <= at), default=0)
        searches.setdefault(turn, []).append((str(label["query"]), str(label["tool"])))
    resident: dict[str, None] = {}
    turns = []
    for number in sorted({*by_turn, *deliveries, *searches}):
        for e in by_turn.get(number, []):
            if e.kind in _RETURNS:
                resident[e.subject] = None
            elif e.kind in _LEAVES:
                resident.pop(e.subject, None)
        turns.append(
            Turn(
                number,
                tuple(by_turn.get(number, [])),
                tuple(resident),
                tuple(deliveries.get(number, [])),
                tuple(searches.get(number, [])),
            )
        )
    return turns


def _turn_starts(store: Store, session_id: str) -> list[tuple[int, float]]:
    return [(int(e.data.get("turn", 0)), e.at) for e in store.load(session_id) if e.op == "turn"]


CACHE_WRITE = 1.25
"""The price of a tool-block token written to the prompt cache, an uncached input token being 1
(Anthropic's 5-minute cache: ``residency bench cost``'s default ``anthropic-5m`` profile)."""
CACHE_READ = 0.1
"""The price of a tool-block token read from the prompt cache (the same profile)."""


@dataclass(frozen=True)
class PlotPoint:
    """One turn of a session's plots: what the tool block held and cost, against showing every
    registered tool (each tool at its current definition's tokens).

    ``shown_cost``/``all_cost``: the tool block's cached cost up to this turn, in uncached input
    tokens: a turn whose block equals the turn before's reads it from the cache (``CACHE_READ``),
    a turn whose block changed writes it again (``CACHE_WRITE``). Showing everything writes once
    and then reads; a list that changes often pays writes each time it changes.
    """

    turn: int
    shown_tokens: int
    all_tokens: int
    shown_cost: float
    all_cost: float


def plot_series(session: Session, turns: Sequence[Turn]) -> list[PlotPoint]:
    """The points of ``session``'s plots, one per turn of ``turns`` (see ``PlotPoint``)."""
    tokens = {name: session.tool(name).tokens for name in session.tools()}
    everything = sum(tokens.values())
    points = []
    shown_cost = all_cost = 0.0
    previous: tuple[str, ...] | None = None
    for i, t in enumerate(turns):
        shown = sum(tokens.get(n, 0) for n in t.resident)
        shown_cost += shown * (CACHE_READ if t.resident == previous else CACHE_WRITE)
        all_cost += everything * (CACHE_WRITE if i == 0 else CACHE_READ)
        previous = t.resident
        points.append(PlotPoint(t.turn, shown, everything, round(shown_cost, 1), round(all_cost, 1)))
    return points


# -- the chain archive --------------------------------------------------------------------------


def archive(store: Store, scope: str = DEFAULT_SCOPE) -> list[dict[str, Any]]:
    """The scope's archived chain records, oldest first (empty for a store without scopes)."""
    reader = getattr(store, "archived_chains", None)
    if reader is None:
        return []
    return [record for _, record in reader(scope)]
