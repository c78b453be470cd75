"""The chain half of a Session: the archive of abandoned chains, the live guard, revocation.

Archiving writes the chain's cold copy (its tools' full definitions and logs) to the content
store first, then journals the record with its pointer, together with the lifecycle
transitions of the prefix tools it takes out of the active index, in one batch. The rules
(what a record must hold, what collides) live in the pure core, ``_core/_chains.py``.

A prefix tool leaves the active index (``archived``) unless it is *reused elsewhere*: the
operator pinned it or marked it shared (``mark_shared``), or this session's call record holds
a call to it outside every archived chain's run (a run of calls matching a chain's fatal prefix,
followed by its terminal tool or ending the record). A tool that stays resident is guarded
instead: ``authorize_call`` refuses (or, with ``chain_policy="warn"``, only logs) a call that
completes a fatal run, or that is the fatal step right after one.

Archive scopes: a session names a scope (``archive_scope``; by default one per store) and every
chain it archives is also added to the store's record of that scope, before the session journals
it. A session adopts the scope's chains it does not hold yet when it registers tools, plans a
turn or authorizes a call (opening a session only reads): once every tool a chain names is
registered, the chain is journaled into the session (``archive_chain`` with ``"scope"``), with
the retirement of its prefix tools, so a successor session starts with the archive its
predecessors left. The scope is append-only and its digest is order-independent, so every
session of the scope ends with the same digest.
``check_chain`` and ``chains`` also see scope chains not adopted yet (e.g. chains naming tools
this session lacks).

Credentials are references (names), never values. Each reference is passed to the revocation
callback at most once automatically; its outcome is journaled, so replaying or reopening the
session never calls it again. ``revoke_pending`` retries the ones not yet revoked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, Literal

from residency._core._chains import ChainArchive, ChainRecord, ChainVerdict, build_chain, cold_record
from residency._core._events import EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._planner import Budget
from residency._core._tools import JSONObject
from residency._errors import ChainCollision, InvalidInput, NotFound, SessionConflict, StoreError
from residency._store._protocol import DEFAULT_SCOPE, check_scope
from residency._tool_ops import ToolOps, TurnPlan

__all__ = ["ChainOps", "ChainPolicy"]

logger = logging.getLogger("residency")

ChainPolicy = Literal["refuse", "warn"]
"""What the live guard does with a call that would re-assemble an archived chain."""


class ChainOps(ToolOps):
    """The archive of abandoned tool chains, its live guard, and credential revocation.

    Args:
        chain_policy: ``"refuse"`` (default) raises ``ChainCollision`` from ``authorize_call``;
            ``"warn"`` lets the call through and logs a ``CHAIN`` event.
        revoke: called with each credential reference of an archived chain; returns True when
            the credential was revoked. Exceptions count as a failed revocation.
        archive_scope: the archive scope shared with other sessions of the store
            (``"default"``); None keeps the archive to this session. Stores without archive
            scopes keep it to the session too.
    """

    def __init__(
        self,
        *args: Any,
        chain_policy: ChainPolicy = "refuse",
        revoke: Callable[[str], bool] | None = None,
        archive_scope: str | None = DEFAULT_SCOPE,
        **kwargs: Any,
    ) -> None:
        if archive_scope is not None:
            check_scope(archive_scope)
        # Set before the journal is replayed, so they are not session state: the scope's records
        # seen so far are a cache of the store, rebuilt from position 0 by every new object.
        self._scope = archive_scope
        self._scope_after = 0
        self._scope_pending: dict[str, ChainRecord] = {}
        if chain_policy not in ("refuse", "warn"):
            raise InvalidInput(
                f"chain_policy must be 'refuse' or 'warn', not {chain_policy!r}", where="chain_policy"
            )
        if revoke is not None and not callable(revoke):
            raise InvalidInput("revoke must be a callable taking a credential reference", where="revoke")
        self._chain_policy: ChainPolicy = chain_policy
        self._revoke = revoke
        super().__init__(*args, **kwargs)
        self._guards.append(self._chain_guard)
        store = self._store
        if not (
            callable(getattr(store, "archive_chain", None))
            and callable(getattr(store, "archived_chains", None))
        ):
            self._scope = None
        # Not adopted here: opening a session (``residency inspect`` does) never writes to it.

    def _init_state(self) -> None:
        super()._init_state()
        self._archive = ChainArchive()
        self._shared: set[str] = set()
        self._revocations: dict[str, bool] = {}  # reference -> revoked at its last attempt

    # -- archiving ---------------------------------------------------------------------------

    def archive_chain(
        self,
        topology: Sequence[str],
        failure: str,
        constraint: Mapping[str, object],
        credentials: Iterable[str] = (),
        deterministic: bool = True,
        logs: object = None,
    ) -> ChainRecord:
        """Archive an abandoned chain that failed deterministically at its last step.

        Prefix tools not reused elsewhere leave the active index (``ToolState.ARCHIVED``) in the
        same journal batch. Then each new credential reference is passed to the revocation
        callback, once. Archiving the same chain again returns the archived record.

        Args:
            topology: the pipeline's tool names in order (at least two; all registered).
            failure: the terminal failure signature of the last step.
            constraint: the negative constraint as JSON data; ``{"all": []}`` when the topology
                alone is fatal. See ``residency._core._constraints`` for the language.
            credentials: references (names) of credentials the chain used, to revoke.
            deterministic: must be True; transient failures are not archived.
            logs: JSON data kept with the cold copy for audit (never shown to the model).

        Returns:
            The record, with its digest and cold-storage pointer.

        Raises:
            InvalidInput: a transient failure, a malformed topology, failure, constraint,
                credential reference or logs; nothing is archived.
            NotFound: a topology tool that is not registered.
        """
        if not isinstance(topology, Sequence) or isinstance(topology, str | bytes):
            raise InvalidInput("topology must be a list of tool names", where="topology")
        known_tools = [n for n in topology if isinstance(n, str) and n in self._tools]
        schemas = {n: self._tools[n].input_schema for n in known_tools}
        record = build_chain(topology, failure, constraint, credentials, deterministic, schemas)
        for i, name in enumerate(record.topology):
            if name not in self._tools:
                raise NotFound(f"topology[{i}]: unknown tool {name!r} (register it first)")
        self._adopt_scope()
        known = self._archive.get(record.digest)
        if known is not None:
            return known
        definitions = {n: self._tools[n].definition for n in record.topology}
        blob = cold_record(record, definitions, logs)
        retire = self._retired_by(record)
        record = replace(record, pointer=self._store.put_content(blob))
        if self._scope is not None:
            # The scope first: a crash before the journal leaves the chain for adoption.
            self._store.archive_chain(self._scope, record.to_json())  # type: ignore[attr-defined]
        items: list[tuple[str, Mapping[str, Any]]] = [("archive_chain", {"chain": record.to_json()})]
        items += self._retirements(retire, record)
        self._commit(*items)
        self._revoke_each(record.credentials)
        return self._archive.get(record.digest) or record

    def _retirements(self, names: Iterable[str], record: ChainRecord) -> list[tuple[str, Mapping[str, Any]]]:
        reason = f"only used by archived chain {record.digest[:12]}"
        items: list[tuple[str, Mapping[str, Any]]] = []
        for name in names:
            dest = TOOL_LIFECYCLE.fire(self._states[name], "archive", record=name, facts=self._facts(name))
            change = {"tool": name, "trigger": "archive", "dest": dest.value, "reason": reason}
            items.append(("transition", change))
        return items

    def _retired_by(self, *records: ChainRecord) -> list[str]:
        """The prefix tools the new chains take out of the active index."""
        trial = ChainArchive([*self._archive, *records])
        tools = [c.tool for c in self._calls.values()]
        covered = trial.covered_calls(tools)
        elsewhere = {t for t, inside in zip(tools, covered, strict=True) if not inside}
        return [
            name
            for name in dict.fromkeys(n for r in records for n in r.prefix)
            if name not in elsewhere
            and name not in self._shared
            and not self.is_pinned(name)
            and self._states[name] is not ToolState.ARCHIVED
        ]

    # -- the archive scope -------------------------------------------------------------------

    def _read_scope(self) -> None:
        """Read the scope's records added since the last read into the (unjournaled) cache."""
        if self._scope is None:
            return
        rows = self._store.archived_chains(self._scope, self._scope_after)  # type: ignore[attr-defined]
        for pos, data in rows:
            self._scope_after = max(self._scope_after, int(pos))
            try:
                record = ChainRecord.from_json(data)
            except (InvalidInput, KeyError, TypeError) as exc:
                # One damaged record must not lock every session of the scope out.
                logger.warning(
                    "archive scope %r: record %s is unreadable (%s); skipped", self._scope, pos, exc
                )
                continue
            if record.digest not in self._archive:
                self._scope_pending[record.digest] = record

    def _adopt_scope(self) -> None:
        """Journal the scope's chains whose tools are all registered, with their retirements.

        Another writer of this session (a gateway replica) may adopt the same chains first:
        the session then catches up and looks again, once; a second conflict leaves the
        adoption to the next occasion rather than failing the operation that asked for it.
        """
        if self._scope is None:
            return
        for _ in range(2):
            try:
                self._adopt_scope_once()
                return
            except SessionConflict:
                continue

    def _adopt_scope_once(self) -> None:
        self._read_scope()
        for digest in [d for d in self._scope_pending if d in self._archive]:
            del self._scope_pending[digest]
        ready = [r for r in self._scope_pending.values() if all(n in self._tools for n in r.topology)]
        if not ready:
            return
        items: list[tuple[str, Mapping[str, Any]]] = []
        retired: set[str] = set()
        for i, record in enumerate(ready):
            items.append(("archive_chain", {"chain": record.to_json(), "scope": self._scope}))
            # Each chain retires what the chains before it in this batch left active.
            names = [n for n in self._retired_by(*ready[: i + 1]) if n not in retired and n in record.prefix]
            retired.update(names)
            items += self._retirements(names, record)
        self._commit(*items)
        for record in ready:
            self._scope_pending.pop(record.digest, None)

    def register_tools(self, tools: Iterable[Mapping[str, Any]]) -> list[str]:
        names = super().register_tools(tools)
        self._adopt_scope()  # chains waiting for these tools now apply
        return names

    register_tools.__doc__ = ToolOps.register_tools.__doc__

    def plan_turn(self, budget: Budget, *, phase: str | None = None) -> TurnPlan:
        self._adopt_scope()  # the plan leaves out what chains of the scope retired
        return super().plan_turn(budget, phase=phase)

    plan_turn.__doc__ = ToolOps.plan_turn.__doc__

    def _apply_archive_chain(self, data: Mapping[str, Any]) -> None:
        try:
            record = ChainRecord.from_json(data["chain"])
        except (InvalidInput, KeyError, TypeError) as exc:
            raise StoreError(
                f"session {self._session_id!r}: a journaled chain record is corrupt ({exc})"
            ) from None
        self._archive.add(record)
        pending = sum(1 for c in record.credentials if not self._revocations.get(c))
        self._event(
            EventKind.CHAIN,
            record.digest,
            f"archived: {record.rule}; {pending} credential reference(s) to revoke",
        )

    def mark_shared(self, *names: str) -> None:
        """Operator action: these tools serve other chains; archiving never retires them.

        Raises:
            NotFound: an unknown tool (nothing is marked).
        """
        for name in names:
            self._spec(name)
        new = [n for n in dict.fromkeys(names) if n not in self._shared]
        if new:
            self._commit(("share_tools", {"tools": new}))

    def _apply_share_tools(self, data: Mapping[str, Any]) -> None:
        for name in data["tools"]:
            self._shared.add(name)
            self._event(EventKind.CHAIN, name, "marked shared by an operator: never retired with a chain")

    def is_shared(self, name: str) -> bool:
        """Whether an operator marked the tool shared. Raises ``NotFound`` for an unknown tool."""
        self._spec(name)
        return name in self._shared

    # -- reading -----------------------------------------------------------------------------

    def chains(self) -> list[ChainRecord]:
        """Archived chains, in the order they were archived, then the scope's chains this
        session has not adopted yet (they name tools it has not registered)."""
        self._read_scope()
        return [*self._archive, *(r for r in self._scope_pending.values() if r.digest not in self._archive)]

    def chain(self, digest: str) -> ChainRecord:
        """The archived chain with that digest. Raises ``NotFound`` if there is none."""
        record = self._archive.get(digest) if isinstance(digest, str) else None
        if record is None:
            raise NotFound(f"no archived chain with digest {digest!r}")
        return record

    def cold_copy(self, digest: str) -> JSONObject:
        """The chain's cold copy (record, full tool definitions, logs), read and verified.

        Raises:
            NotFound: no such chain, or its cold copy is missing from the store.
            IntegrityError: the stored copy does not match its key.
        """
        data: JSONObject = json.loads(self._store.get_content(self.chain(digest).pointer))
        return data

    def archive_digest(self) -> str:
        """sha256 over the archived chains' digests; the order of archiving does not matter."""
        return self._archive.digest()

    def chain_rules(self, name: str) -> list[str]:
        """Rules of archived chains whose fatal prefix uses the tool, for where tools are chosen.

        Raises:
            NotFound: unknown tool.
        """
        self._spec(name)
        return [r.rule for r in self._archive.with_prefix_tool(name)]

    def check_chain(
        self, sequence: Sequence[str], arguments: Sequence[Mapping[str, Any] | None] | None = None
    ) -> ChainVerdict:
        """Whether a planned sequence re-assembles an archived chain's fatal prefix, anywhere.

        Args:
            sequence: tool names in the order they would run.
            arguments: per step, its arguments or None if unknown. A constraint that needs
                unknown arguments fails closed (``verdict.conclusive`` is False).

        Raises:
            InvalidInput: a malformed sequence or arguments list.
        """
        self._read_scope()
        extra = [r for r in self._scope_pending.values() if r.digest not in self._archive]
        archive = ChainArchive([*self._archive, *extra]) if extra else self._archive
        return archive.check(sequence, arguments)

    # -- the live guard ----------------------------------------------------------------------

    def _chain_guard(self, name: str, arguments: JSONObject) -> None:
        self._adopt_scope()  # chains archived by other sessions of the scope since the last call
        if not len(self._archive):
            return
        tail = list(islice(reversed(self._calls.values()), self._archive.longest_run))[::-1]
        verdict = self._archive.check_next(
            [c.tool for c in tail], [c.arguments for c in tail], name, arguments
        )
        if verdict.safe:
            return
        if self._chain_policy == "warn":
            digest = verdict.chain.digest if verdict.chain is not None else ""
            self._commit(("chain_warning", {"tool": name, "chain": digest, "reason": verdict.reason}))
            return
        raise ChainCollision(
            f"{name}: refused: {verdict.reason}. Choose another route to the goal.",
            tool=name,
            rule=verdict.rule,
            expected_failure=verdict.expected_failure,
        )

    def _apply_chain_warning(self, data: Mapping[str, Any]) -> None:
        self._event(EventKind.CHAIN, data["tool"], f"warning (policy warn): {data['reason']}")

    # -- credentials -------------------------------------------------------------------------

    def pending_revocations(self) -> list[str]:
        """Credential references of archived chains not yet revoked, sorted."""
        refs = {c for r in self._archive for c in r.credentials}
        return sorted(c for c in refs if not self._revocations.get(c))

    def revocations(self) -> dict[str, bool]:
        """Every attempted reference and whether its last attempt revoked it."""
        return dict(self._revocations)

    def revoke_pending(self) -> dict[str, bool]:
        """Pass every reference not yet revoked to the callback (again, if it failed before).

        Returns:
            Reference -> revoked, for the references tried now.

        Raises:
            InvalidInput: no revocation callback is configured.
        """
        if self._revoke is None:
            raise InvalidInput("no revocation callback is configured (Session(revoke=...))", where="revoke")
        pending = self.pending_revocations()
        self._revoke_each(pending, retry=True)
        return {ref: self._revocations[ref] for ref in pending if ref in self._revocations}

    def _revoke_each(self, refs: Iterable[str], *, retry: bool = False) -> None:
        if self._revoke is None:
            return
        for ref in refs:
            if ref in self._revocations and not (retry and not self._revocations[ref]):
                continue
            error = ""
            try:
                revoked = self._revoke(ref) is True
            except Exception as exc:  # the callback's own failure; its message may hold a secret
                revoked, error = False, type(exc).__name__
            if not revoked and not error:
                error = "callback did not return True"
            self._commit(("revocation", {"credential": ref, "revoked": revoked, "error": error}))

    def _apply_revocation(self, data: Mapping[str, Any]) -> None:
        ref, revoked = data["credential"], bool(data["revoked"])
        self._revocations[ref] = revoked
        detail = "credential revoked" if revoked else f"revocation failed: {data.get('error') or 'unknown'}"
        self._event(EventKind.CHAIN, ref, detail)

    # -- checkpoints -------------------------------------------------------------------------

    def _checkpoint_encode(self, state: dict[str, Any]) -> None:
        # The archive's index is rebuilt from the records, as a replay builds it.
        state["_archive"] = [r.to_json() for r in state["_archive"]]
        super()._checkpoint_encode(state)

    def _checkpoint_decode(self, state: dict[str, Any]) -> None:
        super()._checkpoint_decode(state)
        state["_archive"] = ChainArchive(ChainRecord.from_json(r) for r in state["_archive"])

    # -- comparison --------------------------------------------------------------------------

    def _snapshot_parts(self, parts: dict[str, Any]) -> None:
        super()._snapshot_parts(parts)
        parts["chains"] = [r.to_json() for r in self._archive]
        parts["archive_digest"] = self._archive.digest()
        parts["shared"] = sorted(self._shared)
        parts["revocations"] = dict(sorted(self._revocations.items()))
