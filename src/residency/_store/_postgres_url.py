"""How a PostgreSQL store URL is read: libpq's part, the store's own parameters, the secrets.

A store URL is a libpq URL plus parameters libpq does not know and the store reads itself
(``schema``, ``pool_size``, ``pool_timeout``). They are taken out of the query as text, so what
libpq reads is exactly what the user wrote. The password (plain and URL-encoded) is collected
so that every message can be scrubbed of it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from residency._errors import ConfigError
from residency._store import redact_url

__all__ = ["DEFAULT_SCHEMA", "scrub", "setting", "split_url"]

DEFAULT_SCHEMA = "residency"
"""The PostgreSQL schema a store uses when neither the URL nor the caller names one."""
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
_OWN_PARAMETERS = ("schema", "pool_size", "pool_timeout")  # read by the store, not passed to libpq


def split_url(
    url: str, schema: str | None
) -> tuple[str, str, str, tuple[str, ...], dict[str, Any], dict[str, str]]:
    """(libpq URL without our own parameters, schema, redacted URL, secrets to scrub, libpq
    parameters, our own parameters: ``schema``, ``pool_size``, ``pool_timeout``)."""
    shown = redact_url(url)
    try:
        urlsplit(url).port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise ConfigError(f"{shown}: not a valid PostgreSQL URL", where="store") from None
    # The query is filtered as text: decoding and re-encoding it would change what libpq reads
    # (it takes "+" literally, for one).
    base, _, query = url.partition("?")
    items = [item for item in query.split("&") if item]
    ours = {k: unquote(v) for k, _, v in (i.partition("=") for i in items) if k in _OWN_PARAMETERS}
    kept = [i for i in items if i.partition("=")[0] not in _OWN_PARAMETERS]
    rest = f"{base}?{'&'.join(kept)}" if kept else base
    if schema is None:
        schema = ours.get("schema", DEFAULT_SCHEMA)
    try:
        params = conninfo_to_dict(rest)
    except psycopg.Error as exc:
        raise ConfigError(f"{shown}: not a valid PostgreSQL URL: {exc}", where="store") from None
    password = params.get("password")
    secrets = (str(password), quote(str(password), safe="")) if password else ()
    message = scrub(f"{shown}: ", secrets)
    if not _IDENTIFIER.match(schema):
        raise ConfigError(
            f"{message}schema {schema!r} is not a plain PostgreSQL name "
            f"(lowercase letters, digits and '_', not starting with a digit)",
            where="schema",
        )
    return rest, schema, shown, secrets, params, ours


def setting(
    given: float | None, in_url: str | None, default: float, name: str, kind: type[int] | type[float]
) -> Any:
    """A pool setting: the keyword argument, else the URL's parameter, else the default."""
    value: Any = given if given is not None else in_url if in_url not in (None, "") else default
    if isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            value = None
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0
    if kind is int and not isinstance(value, int):
        ok = False
    if not ok:
        what = "a positive integer" if kind is int else "a positive number of seconds"
        raise ConfigError(
            f"{name} must be {what}, not {given if given is not None else in_url!r}", where=name
        )
    return kind(value)


def scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
