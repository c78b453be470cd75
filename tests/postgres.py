"""The PostgreSQL server the tests use: ``RESIDENCY_PG_URL``, one throwaway schema per test.

Without ``RESIDENCY_PG_URL`` the PostgreSQL tests skip with the reason; when ``CI`` is set they
fail instead (``.ci/run`` sets the URL and checks the server first). Outages are made two ways,
neither needing root: ``terminate`` kills a replica's server connections, and a ``Relay`` (a TCP
relay the replica connects through) is cut and restored like a network link.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

PG_URL = os.environ.get("RESIDENCY_PG_URL", "")
SCHEMA_PREFIX = "residency_test_"


def pg_url() -> str:
    """``RESIDENCY_PG_URL``, or skip (fail under CI) when it is not set."""
    if not PG_URL:
        reason = (
            "RESIDENCY_PG_URL is not set: PostgreSQL tests need a server, e.g. "
            "RESIDENCY_PG_URL=postgresql://postgres@127.0.0.1:5432/test (.ci/run sets it)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so a missing PostgreSQL is a failure, not a skip")
        pytest.skip(reason)
    return PG_URL


def new_schema() -> str:
    """A schema name no other test (or test run) uses."""
    return SCHEMA_PREFIX + uuid.uuid4().hex[:16]


def with_params(url: str, **params: str) -> str:
    """``url`` with query parameters added (or replaced)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in its user part (trust auth ignores it; it must never show)."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def drop_schema(url: str, schema: str) -> None:
    """Remove a test's schema and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def schema_url() -> Iterator[str]:
    """A store URL on a throwaway schema of its own, dropped on exit (skips without a server)."""
    base = pg_url()
    schema = new_schema()
    try:
        yield with_params(base, schema=schema)
    finally:
        drop_schema(base, schema)


def terminate(url: str, application_name: str) -> int:
    """``pg_terminate_backend`` every connection named ``application_name``; how many there were.

    Returns once each of those server processes has exited (or 30 s have passed): a termination
    is a signal, and a connection used while its process is still dying can fail mid-request
    instead of at its start, which is another test.
    """
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


class Relay:
    """A TCP relay in front of PostgreSQL that a test cuts and restores: a network outage
    without root. ``cut`` drops every relayed connection and refuses new ones (the port stays
    reserved by nobody for the moment); ``restore`` listens on the same port again.

    Args:
        url: the real server's URL; ``url_via`` rewrites a URL to go through the relay.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.port = 0
        self._scope: Any = None
        self._tg: Any = None
        self.relayed = 0  # connections relayed so far

    def url_via(self, url: str) -> str:
        """``url`` with its host and port replaced by the relay's."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def __aenter__(self) -> Relay:
        import anyio

        self._tg = await anyio.create_task_group().__aenter__()
        await self.restore()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    async def restore(self) -> None:
        """Accept (and relay) connections again, on the same port."""
        await self._tg.start(self._serve)

    def cut(self) -> None:
        """Drop every relayed connection now and refuse new ones until ``restore``."""
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _serve(self, *, task_status: Any) -> None:
        import anyio
        from anyio.abc import SocketAttribute

        with anyio.CancelScope() as scope:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
            async with listener:
                self.port = listener.extra(SocketAttribute.local_port)
                self._scope = scope
                task_status.started()
                await listener.serve(self._relay)

    async def _relay(self, client: Any) -> None:
        import anyio

        self.relayed += 1
        async with client:
            try:
                server = await anyio.connect_tcp(*self._target)
            except OSError:
                return
            async with server, anyio.create_task_group() as tg:

                async def pump(source: Any, sink: Any) -> None:
                    try:
                        async for chunk in source:
                            await sink.send(chunk)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        pass
                    finally:
                        tg.cancel_scope.cancel()

                tg.start_soon(pump, client, server)
                tg.start_soon(pump, server, client)
