"""Live updates: the store's change notices pushed to the dashboard's pages as Server-Sent Events.

A PostgreSQL store sends ``NOTIFY`` on its schema's channel when a session's journal grows and
when an archive scope gains a chain (``residency._store._postgres``). A dashboard process holds
one ``LISTEN`` connection for all its browsers (``LiveUpdates``), opened when the first page
subscribes and closed ``LINGER_SECONDS`` after the last one leaves; it never writes. Each page
subscribes at ``/ui/events`` (behind the pages' own credentials) and gets ``change`` events: the
sessions whose journal grew (``null``: any may have, e.g. after the listener reconnected) and
whether the archive grew; the page then asks ``/ui/stamp`` whether what it shows changed.

A burst of notices is sent as one event, at most one per ``COALESCE_SECONDS`` a stream. Streams
are bounded: at most ``MAX_STREAMS`` at once (then 503, and the page polls), a comment every
``KEEPALIVE_SECONDS`` (proxies keep the connection, a dead client is found), and a stream with
no change for ``IDLE_SECONDS`` ends (the browser reconnects after ``RETRY_MS``). ``close`` ends
every stream and the listener at once: the server calls it as it begins to shut down, so no
stream holds the shutdown up.

A store that sends no notices (SQLite, memory) has no ``/ui/events``: the pages poll ``/ui/stamp``.
Notices are hints: a lost one costs a late reload, never a wrong page (the page reads the store).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from residency._store._protocol import Store

if TYPE_CHECKING:
    import uvicorn

    from residency._gateway._fanout import Fanout

__all__ = [
    "COALESCE_SECONDS",
    "CONNECT_WAIT_SECONDS",
    "IDLE_SECONDS",
    "KEEPALIVE_SECONDS",
    "LINGER_SECONDS",
    "MAX_STREAMS",
    "RETRY_MS",
    "LiveUpdates",
    "stopping_server",
]

logger = logging.getLogger("residency.ui")

MAX_STREAMS = 32
"""Event streams a dashboard process serves at once; more are refused (503) and those pages poll."""
KEEPALIVE_SECONDS = 15.0
"""A comment on a quiet stream this often."""
IDLE_SECONDS = 300.0
"""A stream with no change for this long ends; the browser opens a new one."""
COALESCE_SECONDS = 0.5
"""Notices arriving within this long of the first are sent as one event."""
LINGER_SECONDS = 30.0
"""The listening connection stays open this long after the last stream ends (a page that
reloads subscribes again at once)."""
CONNECT_WAIT_SECONDS = 10.0
"""The longest a new stream waits for the listener to be listening (a database that does not
answer: the stream opens anyway and the listener keeps trying)."""
RETRY_MS = 3000
"""How long a browser waits before reopening an ended or broken stream."""
_MOST_NAMED = 64  # more changed sessions than this in one event: sent as "any"
_HEADERS = {
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "x-accel-buffering": "no",  # a buffering proxy (nginx) would hold the events back
}


class _Stream:
    """One subscribed page: what changed since its last event, and its wake-up."""

    def __init__(self) -> None:
        self.sessions: set[str] | None = set()  # None: any session
        self.archive = False
        self.wake = anyio.Event()

    def journal(self, session_id: str) -> None:
        if self.sessions is not None:
            self.sessions.add(session_id)
            if not session_id or len(self.sessions) > _MOST_NAMED:
                self.sessions = None
        self.wake.set()

    def grew(self) -> None:
        self.archive = True
        self.wake.set()

    def take(self) -> str:
        """The pending change as an event, and nothing pending after it."""
        sessions = None if self.sessions is None else sorted(self.sessions)
        data = json.dumps({"sessions": sessions, "archive": self.archive}, separators=(",", ":"))
        self.sessions, self.archive, self.wake = set(), False, anyio.Event()
        return f"event: change\ndata: {data}\n\n"


def _fanout_of(store: Store) -> Fanout | None:
    try:
        from residency._gateway._fanout import fanout_for
    except ImportError:  # no psycopg: no PostgreSQL store either
        return None
    return fanout_for(store)


class LiveUpdates:
    """The change notices of one dashboard process's store, fanned out to its event streams.

    Args:
        max_streams: streams served at once (``MAX_STREAMS``).
        keepalive: seconds between comments on a quiet stream.
        idle: seconds without a change after which a stream ends.
        coalesce: seconds a stream gathers notices into one event.
        linger: seconds the listener outlives the last stream.
        connect_wait: seconds a new stream waits for the listener's connection before it opens.
        fanout: how the listener is made for a store (None: the store sends no notices).
    """

    def __init__(
        self,
        *,
        max_streams: int = MAX_STREAMS,
        keepalive: float = KEEPALIVE_SECONDS,
        idle: float = IDLE_SECONDS,
        coalesce: float = COALESCE_SECONDS,
        linger: float = LINGER_SECONDS,
        connect_wait: float = CONNECT_WAIT_SECONDS,
        fanout: Callable[[Store], Fanout | None] = _fanout_of,
    ) -> None:
        self._max = max_streams
        self._keepalive = keepalive
        self._idle = idle
        self._coalesce = coalesce
        self._linger = linger
        self._fanout = fanout
        self._connect_wait = connect_wait
        self._streams: set[_Stream] = set()
        self._listener: asyncio.Task[None] | None = None
        self._ready = anyio.Event()  # the listener's LISTEN is active (or its first try failed)
        self._left = 0.0  # when the last stream ended
        self._closed = False
        self._notifies: tuple[Store, bool] | None = None

    def notifies(self, store: Store) -> bool:
        """Whether ``store`` sends change notices (then pages subscribe instead of polling)."""
        known = self._notifies
        if known is None or known[0] is not store:  # a dashboard reads one store: asked once
            known = self._notifies = (store, self._fanout(store) is not None)
        return known[1]

    @property
    def streams(self) -> int:
        """Event streams open now."""
        return len(self._streams)

    @property
    def listening(self) -> bool:
        """Whether the listener runs (its connection is open or being reopened)."""
        return self._listener is not None and not self._listener.done()

    def response(self, store: Store) -> Response:
        """The ``/ui/events`` answer for a page reading ``store``."""
        if not self.notifies(store):
            return PlainTextResponse(
                "this store sends no change notices: the pages poll /ui/stamp", 404, headers=_HEADERS
            )
        return _EventStream(self, store)

    def close(self) -> None:
        """End every stream and the listener, and refuse new streams (the server is stopping)."""
        self._closed = True
        self._ready.set()
        for stream in self._streams:
            stream.wake.set()
        if self._listener is not None:
            self._listener.cancel()

    # -- the listener (one per process) ----------------------------------------------------

    def _listen(self, store: Store) -> None:
        if self._closed or self.listening:
            return
        fanout = self._fanout(store)
        if fanout is not None:
            self._ready = anyio.Event()
            # A task of the server's event loop, not of a request: it outlives the stream that
            # started it and serves every later one; ``close`` or the linger ends it.
            self._listener = asyncio.get_running_loop().create_task(self._run(fanout))

    async def _run(self, fanout: Fanout) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._lingering, tg.cancel_scope)
            await tg.start(_listening, fanout, self._journal, self._archive)
            self._ready.set()

    async def _lingering(self, scope: anyio.CancelScope) -> None:
        while True:
            await anyio.sleep(self._linger / 2)
            if not self._streams and time.monotonic() - self._left >= self._linger:
                self._listener = None  # ending: a stream that comes now starts a new one
                scope.cancel()
                return

    async def _journal(self, session_id: str) -> None:
        for stream in self._streams:
            stream.journal(session_id)

    async def _archive(self, scope: str) -> None:
        for stream in self._streams:
            stream.grew()

    # -- one stream ------------------------------------------------------------------------

    async def _serve(self, store: Store, scope: Scope, receive: Receive, send: Send) -> None:
        if self._closed or len(self._streams) >= self._max:
            busy = "the dashboard is stopping" if self._closed else "too many live pages open"
            refusal = PlainTextResponse(
                f"{busy}: the page polls instead", 503, headers={**_HEADERS, "retry-after": "30"}
            )
            await refusal(scope, receive, send)
            return
        stream = _Stream()
        self._streams.add(stream)
        try:
            self._listen(store)
            # The stream opens once the listener hears: a page that asks /ui/stamp when its
            # stream opens (as the script does) misses no change. Bounded by the connection
            # attempt (the listener is started after its first try either way).
            with anyio.move_on_after(self._connect_wait):
                await self._ready.wait()
            headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
            headers += [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_until_disconnected, receive, tg.cancel_scope)
                await self._events(stream, send)
                tg.cancel_scope.cancel()
        except OSError:
            pass  # the client went away mid-write
        finally:
            self._streams.discard(stream)
            if not self._streams:
                self._left = time.monotonic()

    async def _events(self, stream: _Stream, send: Send) -> None:
        async def event(text: str) -> None:
            await send({"type": "http.response.body", "body": text.encode(), "more_body": True})

        await event(f"retry: {RETRY_MS}\n: listening\n\n")
        changed = time.monotonic()
        while not self._closed:
            with anyio.move_on_after(self._keepalive):
                await stream.wake.wait()
            if self._closed:
                break
            if not stream.wake.is_set():
                if time.monotonic() - changed >= self._idle:
                    break
                await event(": keepalive\n\n")
                continue
            await anyio.sleep(self._coalesce)
            await event(stream.take())
            changed = time.monotonic()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _EventStream(Response):
    """The ``/ui/events`` stream (a response that runs as long as the page subscribes)."""

    def __init__(self, live: LiveUpdates, store: Store) -> None:
        super().__init__(media_type="text/event-stream")
        self._live = live
        self._store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._live._serve(self._store, scope, receive, send)


async def _listening(
    fanout: Fanout,
    on_journal: Callable[[str], Any],
    on_archive: Callable[[str], Any],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    # After a reconnect every session counts as changed (``EVERY_SESSION`` is "").
    await fanout.run(on_journal, on_archive, on_journal=on_journal, task_status=task_status)


async def _until_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def stopping_server(config: uvicorn.Config, live: LiveUpdates) -> uvicorn.Server:
    """A uvicorn server that closes ``live`` as it begins to shut down, before it waits for open
    responses (an event stream would otherwise hold the shutdown up until it timed out)."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            live.close()
            await super().shutdown(sockets)

    return _Server(config)
