"""Stores: where sessions' journals and immutable content live.

``open_store`` picks one by URL. The PostgreSQL store is imported only when a URL names it, so
the SQLite and in-memory stores work without psycopg installed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from residency._errors import ConfigError, StoreError
from residency._store._protocol import Store

__all__ = ["open_store", "redact_url"]


def open_store(url: str, *, create: bool = True) -> Store:
    """Open a store by URL.

    ``memory:``, ``sqlite:///relative.db`` / ``sqlite:////abs.db``, or
    ``postgresql://user@host:port/database`` (also ``postgres://``; ``?schema=NAME`` picks the
    PostgreSQL schema, default ``residency``).

    Args:
        url: the store's URL.
        create: False opens only an existing, current PostgreSQL store and changes nothing
            (for read-only tools; the caller checks an SQLite file exists).

    Raises:
        ConfigError: an unknown scheme, an empty path or a malformed PostgreSQL URL. The
            message never shows a password.
        StoreError: the store cannot be opened (see ``SQLiteStore`` and ``PostgresStore``),
            or psycopg is not installed for a PostgreSQL URL.
    """
    if not isinstance(url, str):
        raise ConfigError("a store URL must be a string, e.g. 'sqlite:///residency.db'", where="store")
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from residency._store._postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(
                f"a PostgreSQL store needs psycopg ({exc.name or exc} is missing): "
                f"pip install 'residency[postgres]'"
            ) from None
        return PostgresStore(url, create=create)
    from residency._store._sqlite import open_sqlite

    store = open_sqlite(url)
    if store is not None:
        return store
    raise ConfigError(
        f"unknown store URL {redact_url(url)!r}: use 'memory:', 'sqlite:///path/to/file.db' (four slashes "
        f"for an absolute path) or 'postgresql://user@host/database'",
        where="store",
    )


def redact_url(url: str) -> str:
    """``url`` as it may be shown: a password (user part or ``password`` parameter) as ``***``.

    Everything else is kept as written (paths such as ``sqlite:///...`` included).
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<a malformed URL>"
    shown = url
    if password is not None:
        userinfo, _, host = parts.netloc.rpartition("@")
        shown = shown.replace(f"//{parts.netloc}", f"//{userinfo.split(':', 1)[0]}:***@{host}", 1)
    base, sep, query = shown.partition("?")
    if sep:
        items = [("password=***" if i.partition("=")[0] == "password" else i) for i in query.split("&")]
        shown = f"{base}?{'&'.join(items)}"
    return shown
