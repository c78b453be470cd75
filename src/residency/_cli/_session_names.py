"""How the store-reading commands find the session a user named: ``residency._ui._names``
(shared with the dashboard, which resolves names the same way)."""

from __future__ import annotations

from residency._ui._names import find_session, session_key_of

__all__ = ["find_session", "session_key_of"]
