"""The PostgreSQL server the tests use: ``RESIDENCY_PG_URL``, one throwaway schema per test.

Without ``RESIDENCY_PG_URL`` the PostgreSQL tests skip with the reason; when ``CI`` is set they
fail instead (``.ci/run`` sets the URL and checks the server first).
"""

from __future__ import annotations

import os
import uuid
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
