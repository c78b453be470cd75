"""How the store readers (``inspect``, ``view``, ``admin``, the dashboard) find a named session.

A gateway journals the session of key ``K`` as ``gateway/K``, and a key a request named under a
bearer token as ``gateway/token-<16 hex>/K`` (under an OAuth principal,
``gateway/oauth-<32 hex>/K``). ``inspect`` lists those store ids; a user knows the key (what
they passed to ``residency serve --session``, or sent as ``Residency-Session``).
Every command accepts either, first match wins:

1. the store id itself (what ``inspect`` lists);
2. ``gateway/<given>`` (a key served without a token, or ``token-<hex>/<key>``);
3. a gateway session whose key, under any token or OAuth identity, is ``given``, if only one is.

Otherwise the lookup fails with ``NotFound``, naming the matches when there are several and
the nearest ids when there are none.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from residency._errors import NotFound

__all__ = ["find_session", "session_key_of"]

_GATEWAY = "gateway/"
_UNDER_TOKEN = re.compile(r"^(?:token-[0-9a-f]{16}|oauth-[0-9a-f]{32})/")
_SHOWN = 10  # ids named in an error at most


def session_key_of(session_id: str) -> str | None:
    """The key a gateway session was named by (None for a session no gateway wrote)."""
    if not session_id.startswith(_GATEWAY):
        return None
    key = session_id[len(_GATEWAY) :]
    return _UNDER_TOKEN.sub("", key, count=1)


def _listing(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def find_session(known: Sequence[str], given: str, *, where: str) -> str:
    """The store id of the session ``given`` names among ``known`` (see the module docstring).

    Args:
        known: the store's session ids (``Store.sessions()``).
        given: what the user typed: a store id or a gateway session key.
        where: the store as shown to the user (credentials redacted), for the error.

    Raises:
        NotFound: no session, or several, answer to ``given``.
    """
    ids = list(known)
    present = set(ids)
    for candidate in (given, _GATEWAY + given):
        if candidate in present:
            return candidate
    by_key = [sid for sid in ids if session_key_of(sid) == given]
    if len(by_key) == 1:
        return by_key[0]
    if by_key:
        raise NotFound(
            f"session key {given!r} is ambiguous in {where}: it names {_listing(by_key)} "
            "(sessions named under different tokens); pass one of these ids"
        )
    names = {sid: sid for sid in ids}
    for sid in ids:
        key = session_key_of(sid)
        if key is not None:
            names.setdefault(key, sid)
    near = list(dict.fromkeys(names[n] for n in difflib.get_close_matches(given, list(names), n=5)))
    hint = f"; did you mean {_listing(near)}?" if near else ""
    listed = f"; known sessions: {_listing(ids)}" if ids else "; the store holds no sessions"
    raise NotFound(f"no session {given!r} (nor {_GATEWAY + given!r}) in {where}{hint}{listed}")
