"""The audit log: one JSON line per decision the gateway makes about a caller's request.

Off unless ``residency.audit`` is set; then every ``tools/list``, ``tools/call`` and
``resources/read`` the gateway answers, and every request a rate limit refuses, writes exactly
one line (``_gate`` decides which and writes it once the request is answered)::

    {"time": "2026-12-03T11:02:03.456Z", "decision": "forwarded", "subject": "alice",
     "identity": "oauth-…", "session": "oauth-…/desk", "tool": "query_logs",
     "outcome": "ok", "code": null}

Rules:

* ``decision`` is one of ``DECISIONS`` (see ``Decision``); ``outcome`` is ``ok`` or ``error``;
  ``code`` is the machine reason of an error (``tool_not_resident``, ``rate_limited``, ...), or
  the JSON-RPC code of one that has none; null when the outcome is ``ok``.
* ``subject`` is who the HTTP front authenticated: an OAuth principal's ``sub``, or a static
  token's identity (``token-<16 hex>``, a hash, never the token); null for an anonymous caller
  (stdio, an unauthenticated front). ``identity`` is the identity session keys and rate limits
  are bound to (``oauth-<32 hex>`` covers issuer, subject and client).
* No argument value is ever written. With ``arguments: "names"`` a call's line also lists its
  argument names, sorted. Hashed values are not offered: a hash of a short secret (a PIN, a
  one-word password) is reversed by guessing, and a salted one says nothing across restarts.
* Every string passes through ``Secrets.redact`` (a tool name or session key could hold a
  configured secret); JSON escapes every control character, so a line is one line.
* A line is written once the request is answered: a request cancelled before its answer
  (``notifications/cancelled``, the gateway stopping) has none.
* Writing: ``path`` is appended to (created if missing), one ``write`` per line under a lock,
  flushed at each line, so several writers in one process never interleave and a reader sees
  whole lines; ``-`` writes to stderr. A failed write is logged once and the gateway goes on
  serving (the audit is for operators, not a gate).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from residency._errors import ConfigError

__all__ = [
    "DECISIONS",
    "DENIED_REASONS",
    "PENDING",
    "STDERR",
    "AuditLog",
    "AuditSettings",
    "Decision",
    "Note",
    "note_denied",
]

logger = logging.getLogger("residency.gateway")

Decision = Literal[
    "listed",
    "searched",
    "reexpanded",
    "checked",
    "archived",
    "read",
    "forwarded",
    "refused",
    "denied",
    "limited",
]
"""What the gateway decided about one request.

``listed``: a ``tools/list`` answered. ``searched``, ``reexpanded``, ``checked``, ``archived``,
``read``: a meta-tool ran (``search_tools``, ``reexpand_tools``, ``check_chain``,
``archive_chain``, ``read_span``); ``read`` is also a ``resources/read``. ``forwarded``: a call
of an upstream tool was admitted and sent (``outcome`` ``error`` when the upstream answered an
error or failed). ``refused``: a call the gateway did not send (a withheld tool, invalid
arguments, a chain collision, an unknown tool). ``denied``: a call refused by a tool policy
(an error whose reason is in ``DENIED_REASONS``). ``limited``: a request refused by a rate limit.
"""

DECISIONS: tuple[str, ...] = get_args(Decision)

DENIED_REASONS: frozenset[str] = frozenset({"tool_denied"})
"""Error reasons (``_errors.Rule.reason``) that mean a tool policy refused the caller: such a
refusal is written ``denied`` rather than ``refused``.

How a tool policy gets its ``denied`` lines, either way: give its error a rule in
``_errors.RULES`` whose reason is here (``tool_denied``) and raise it as any refusal; or, when the
caller must not learn that the tool exists (it is answered as an unknown tool), call
``note_denied()`` while handling the request. The gate (``_gate``) writes the request's one line.
A handler never calls ``AuditLog.record`` itself: the request would have two lines."""


@dataclass(slots=True)
class Note:
    """What a handler says about the request being handled, for its audit line (``note_denied``)."""

    denied: str | None = None


PENDING: ContextVar[Note | None] = ContextVar("residency_audit_note", default=None)
"""The note of the request the gate is handling in this task (None: no audit, or no request)."""


def note_denied(code: str = "tool_denied") -> None:
    """Mark the request being handled as refused by a tool policy: its audit line says
    ``denied`` with ``code``, whatever the caller was answered (an unknown tool, say, so that it
    learns nothing of the tools it may not see). Costs nothing when the audit log is off."""
    note = PENDING.get()
    if note is not None:
        note.denied = code


STDERR = "-"
"""The ``path`` that writes the audit log to stderr."""


class AuditSettings(BaseModel):
    """The audit log (``residency.audit``; absent: off).

    Attributes:
        path: the file lines are appended to (``-``: stderr).
        arguments: ``none`` (the default): no word of a call's arguments; ``names``: their names.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    arguments: Literal["none", "names"] = "none"


class AuditLog:
    """Writes audit lines (see the module docstring).

    A context manager: entering opens the file (so a path that cannot be written fails the
    start), leaving closes it. A record made outside opens it on demand.

    Args:
        settings: where to write, and whether argument names are written.
        redact: scrubs secrets from every string of a line (``Secrets.redact``).
    """

    def __init__(self, settings: AuditSettings, redact: Callable[[str], str] = str) -> None:
        self.settings = settings
        self._redact = redact
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._failed = False

    def __enter__(self) -> AuditLog:
        with self._lock:
            self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> IO[str]:
        """The stream lines go to (under the lock).

        Raises:
            ConfigError: the file cannot be opened for appending.
        """
        if self.settings.path == STDERR:
            return sys.stderr
        if self._file is None:
            try:
                # Line-buffered append: each line reaches the file whole, after what others wrote.
                self._file = open(self.settings.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise ConfigError(
                    f"audit log: cannot append to {self.settings.path}: {exc.strerror}", where="audit.path"
                ) from None
        return self._file

    @property
    def argument_names(self) -> bool:
        """Whether a call's line lists its argument names."""
        return self.settings.arguments == "names"

    def record(
        self,
        decision: Decision,
        *,
        subject: str | None,
        session: str | None,
        tool: str | None,
        outcome: Literal["ok", "error"],
        code: str | None = None,
        identity: str | None = None,
        resource: str | None = None,
        retry_after: float | None = None,
        arguments: Iterable[str] | None = None,
    ) -> None:
        """Write one line.

        Args:
            decision: what was decided (``Decision``).
            subject: the authenticated subject (None: anonymous).
            session: the session key the request acted on (None: an anonymous caller's
                throwaway session, or none could be told).
            tool: the tool the request named (None: a list or a resource read).
            outcome: ``ok`` or ``error``.
            code: the error's machine reason (or JSON-RPC code), for an ``error``.
            identity: the identity limits and sessions are bound to (None: anonymous).
            resource: the URI of a ``resources/read``.
            retry_after: seconds until a ``limited`` request may be made again.
            arguments: a call's argument names; written only with ``arguments: "names"``.
        """
        line: dict[str, object] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "decision": decision,
            "subject": subject,
            "identity": identity,
            "session": session,
            "tool": tool,
            "outcome": outcome,
            "code": code,
        }
        if resource is not None:
            line["resource"] = resource
        if retry_after is not None:
            line["retry_after"] = round(retry_after, 3)
        if arguments is not None and self.argument_names:
            line["arguments"] = sorted(arguments)
        self._write(json.dumps(_scrubbed(line, self._redact), ensure_ascii=False, separators=(",", ":")))

    def _write(self, text: str) -> None:
        try:
            with self._lock:
                out = self._open()
                out.write(text + "\n")
                if out is sys.stderr:
                    out.flush()
        except (OSError, ValueError, ConfigError) as exc:
            if not self._failed:
                self._failed = True
                logger.warning("audit log: cannot write to %s: %s", self.settings.path, exc)

    def close(self) -> None:
        """Close the file (stderr is left open); a later record opens it again."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _scrubbed(line: dict[str, object], redact: Callable[[str], str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in line.items():
        if isinstance(value, str):
            out[key] = redact(value)
        elif isinstance(value, list):
            out[key] = [redact(v) if isinstance(v, str) else v for v in value]
        else:
            out[key] = value
    return out
