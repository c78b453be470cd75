"""The chain part of a session: the archive of abandoned chains, the live guard, revocation.

Archiving writes the chain's cold copy (its tools' full definitions and logs) to the content
store first, then journals the record with its pointer, together with the lifecycle
transitions of the prefix tools it takes out of the active index, in one batch. The rules
(what a record must hold, what collides) live in the pure core, ``_core/_chains.py``.

A prefix tool leaves the active index (``archived``) unless it is *reused elsewhere*: the
operator pinned it or marked it shared (``mark_shared``), or a call record of the scope holds a
call to it outside every archived chain's run (a run of calls matching a chain's fatal prefix,
followed by its terminal tool or ending the record). The records looked at are this session's
whole record and, with an archive scope, the most recent ``REUSE_WINDOW`` calls of the scope's
other sessions (each session's calls a record of its own; a run never spans two). A tool that
stays resident is guarded
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
this session lacks). ``check_chain`` indexes them with the archive once and grows that index as
the scope and the archive grow; ``chains_digest`` is the digest of what it checks against.

Credentials are references (names), never values. Each reference is passed to the revocation
callback at most once automatically; its outcome is journaled, so replaying or reopening the
session never calls it again. ``revoke_pending`` retries the ones not yet revoked.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, Literal

from residency._core._chains import ChainArchive, ChainRecord, ChainVerdict, build_chain, cold_record
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._state import SessionState
from residency._core._tools import JSONObject
from residency._errors import ChainCollision, InvalidInput, NotFound, SessionConflict
from residency._runtime._journal import Item, Journal
from residency._runtime._tools import ToolPart

__all__ = ["REUSE_WINDOW", "ChainPart", "ChainPolicy"]

logger = logging.getLogger("residency")

REUSE_WINDOW = 10_000
"""How many of the scope's most recent calls (other sessions') count as uses elsewhere."""

ChainPolicy = Literal["refuse", "warn"]
"""What the live guard does with a call that would re-assemble an archived chain."""


class ChainPart:
    """The archive of abandoned tool chains, its live guard, and credential revocation.

    Args:
        journal: the session's journal.
        tools: the session's tool part (the guard is added to its call guards).
        chain_policy: ``"refuse"`` raises ``ChainCollision`` from ``authorize_call``; ``"warn"``
            lets the call through and logs a ``CHAIN`` event.
        revoke: called with each credential reference of an archived chain; returns True when
            the credential was revoked. Exceptions count as a failed revocation.
        archive_scope: the archive scope shared with other sessions of the store; None keeps
            the archive to this session. Stores without archive scopes keep it to the session.
    """

    def __init__(
        self,
        journal: Journal,
        tools: ToolPart,
        *,
        chain_policy: ChainPolicy,
        revoke: Callable[[str], bool] | None,
        archive_scope: str | None,
    ) -> None:
        self._journal = journal
        self._tools = tools
        self._chain_policy: ChainPolicy = chain_policy
        self._revoke = revoke
        store = journal.store
        if not (
            callable(getattr(store, "archive_chain", None))
            and callable(getattr(store, "archived_chains", None))
        ):
            archive_scope = None
        # Not journaled: the scope's records seen so far are a cache of the store, rebuilt from
        # position 0 by every new object. Not adopted here: opening a session (``residency
        # inspect`` does) never writes to it.
        self._scope = archive_scope
        self._scope_after = 0
        self._joined = False  # whether the store knows this session is one of the scope's
        self._scope_pending: dict[str, ChainRecord] = {}
        # What ``check_chain`` checks against while scope chains are pending: the session's
        # archive and those chains in one index, built once and grown (see ``_checked_archive``).
        self._checked: ChainArchive | None = None
        self._checked_base: ChainArchive | None = None
        self._checked_size = 0
        # Pending chains wait for tools; registered tools are never removed, so a look that
        # found none ready holds until the tools, the archive or the pending chains change.
        self._pending_added = 0
        self._unready_at: tuple[object, object, tuple[int, int, int]] | None = None
        tools.guards.append(self._chain_guard)

    @property
    def _s(self) -> SessionState:
        return self._journal.state

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
                alone is fatal. See ``residency._core._predicates`` for the language.
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
        known_tools = [n for n in topology if isinstance(n, str) and n in self._s.tools]
        schemas = {n: self._s.tools[n].input_schema for n in known_tools}
        record = build_chain(topology, failure, constraint, credentials, deterministic, schemas)
        for i, name in enumerate(record.topology):
            if name not in self._s.tools:
                raise NotFound(f"topology[{i}]: unknown tool {name!r} (register it first)")
        self.adopt_scope()
        known = self._s.archive.get(record.digest)
        if known is not None:
            return known
        definitions = {n: self._s.tools[n].definition for n in record.topology}
        blob = cold_record(record, definitions, logs)
        retire = self._retired_in_turn([record])[0]
        record = replace(record, pointer=self._journal.store.put_content(blob))
        if self._scope is not None:
            # The scope first: a crash before the journal leaves the chain for adoption.
            self._journal.store.archive_chain(self._scope, record.to_json())  # type: ignore[attr-defined]
        items: list[Item] = [("archive_chain", {"chain": record.to_json()})]
        items += self._retirements(retire, record)
        self._journal.commit(*items)
        self._revoke_each(record.credentials)
        return self._s.archive.get(record.digest) or record

    def _retirements(self, names: Iterable[str], record: ChainRecord) -> list[Item]:
        reason = f"only used by archived chain {record.digest[:12]}"
        items: list[Item] = []
        for name in names:
            dest = TOOL_LIFECYCLE.fire(
                self._s.states[name], "archive", record=name, facts=self._s.facts(name)
            )
            change = {"tool": name, "trigger": "archive", "dest": dest.value, "reason": reason}
            items.append(("transition", change))
        return items

    def _retired_in_turn(self, records: Sequence[ChainRecord]) -> list[list[str]]:
        """Per record, the prefix tools it retires that the records before it left active.

        A prefix tool stays active while a call to it lies outside every run of the archive
        so far plus records ``0..i``: in this session's record, or (with an archive scope) in
        the scope's window of other sessions' calls (``REUSE_WINDOW``). The calls' coverage
        (``ChainArchive.covered_calls``) only grows as chains are added, so each record marks
        the calls of its own runs (found from where its first tool was called) instead of every
        call being matched against the whole archive again: adopting a scope costs time linear
        in its chains, not quadratic. The scope's window is read only when this session's own
        calls would let some tool retire (its calls can only keep tools active).
        """
        own = [[c.tool for c in self._s.calls.values()]]
        retired = self._retired_over(records, own)
        if self._scope is None or not any(retired):
            return retired
        return self._retired_over(records, own + self._scope_sequences())

    def _scope_sequences(self) -> list[list[str]]:
        """The tools of the other sessions' recent calls in the scope, one list per session."""
        store = self._journal.store
        reader = getattr(store, "scope_calls", None)
        if self._scope is None or not callable(reader):
            return []
        by_session: dict[str, list[str]] = {}
        for session_id, tool in reader(self._scope, REUSE_WINDOW, exclude=self._journal.session_id):
            by_session.setdefault(session_id, []).append(tool)
        return list(by_session.values())

    def _retired_over(
        self, records: Sequence[ChainRecord], sequences: Sequence[Sequence[str]]
    ) -> list[list[str]]:
        """``_retired_in_turn`` over the call records ``sequences`` (a run never spans two)."""
        tools: list[str] = []
        covered: list[bool] = []
        ends: list[int] = []  # per call: the end of its record (a run may end a record)
        for sequence in sequences:
            tools += sequence
            covered += self._s.archive.covered_calls(sequence)
            ends += [len(tools)] * len(sequence)
        elsewhere = Counter(t for t, inside in zip(tools, covered, strict=True) if not inside)
        calls_of: dict[str, list[int]] = {}
        for i, name in enumerate(tools):
            calls_of.setdefault(name, []).append(i)
        retired: set[str] = set()
        seen: dict[str, int] = {}  # first appearance in the records so far: the order of names
        out: list[list[str]] = []
        for record in records:
            prefix = record.prefix
            for name in prefix:
                seen.setdefault(name, len(seen))
            for start in calls_of.get(prefix[0], ()):
                stop, end = start + len(prefix), ends[start]
                if stop > end or tuple(tools[start:stop]) != prefix:
                    continue
                if stop < end:
                    if tools[stop] != record.terminal:
                        continue
                    stop += 1
                for i in range(start, stop):
                    if not covered[i]:
                        covered[i] = True
                        elsewhere[tools[i]] -= 1
            names = [
                name
                for name in sorted(set(prefix), key=seen.__getitem__)
                if elsewhere[name] <= 0
                and name not in retired
                and name not in self._s.shared
                and name not in self._tools.pinned
                and self._s.states[name] is not ToolState.ARCHIVED
            ]
            retired.update(names)
            out.append(names)
        return out

    # -- the archive scope -------------------------------------------------------------------

    def _read_scope(self) -> None:
        """Read the scope's records added since the last read into the (unjournaled) cache."""
        if self._scope is None:
            return
        rows = self._journal.store.archived_chains(self._scope, self._scope_after)  # type: ignore[attr-defined]
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
            if record.digest not in self._s.archive:
                self._scope_pending[record.digest] = record
                self._pending_added += 1
                if self._checked is not None:
                    self._checked.add(record)

    def adopt_scope(self) -> None:
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
        if not self._joined:
            # Once per object, on the first write: the scope's other sessions then count this
            # session's calls as uses (``_scope_sequences``). Opening a session writes nothing.
            join = getattr(self._journal.store, "join_scope", None)
            if callable(join):
                join(self._scope, self._journal.session_id)
            self._joined = True
        self._read_scope()
        if not self._scope_pending:
            return
        # The live guard comes here on every call: with many chains waiting for a tool, looking
        # at each of them again would cost more than the call (23 ms at 10,000).
        s = self._s
        sizes = (len(s.tools), len(s.archive), self._pending_added)
        seen = self._unready_at
        if seen is not None and seen[0] is s.tools and seen[1] is s.archive and seen[2] == sizes:
            return
        for digest in [d for d in self._scope_pending if d in s.archive]:
            del self._scope_pending[digest]
        ready = [r for r in self._scope_pending.values() if all(n in s.tools for n in r.topology)]
        if not ready:
            self._unready_at = (s.tools, s.archive, sizes)
            return
        items: list[Item] = []
        for record, names in zip(ready, self._retired_in_turn(ready), strict=True):
            items.append(("archive_chain", {"chain": record.to_json(), "scope": self._scope}))
            items += self._retirements(names, record)
        self._journal.commit(*items)
        for record in ready:
            self._scope_pending.pop(record.digest, None)

    def mark_shared(self, *names: str) -> None:
        """Operator action: these tools serve other chains; archiving never retires them.

        Raises:
            NotFound: an unknown tool (nothing is marked).
        """
        for name in names:
            self._tools.spec(name)
        new = [n for n in dict.fromkeys(names) if n not in self._s.shared]
        if new:
            self._journal.commit(("share_tools", {"tools": new}))

    def is_shared(self, name: str) -> bool:
        """Whether an operator marked the tool shared. Raises ``NotFound`` for an unknown tool."""
        self._tools.spec(name)
        return name in self._s.shared

    # -- reading -----------------------------------------------------------------------------

    def chains(self) -> list[ChainRecord]:
        """Archived chains, in the order they were archived, then the scope's chains this
        session has not adopted yet (they name tools it has not registered)."""
        self._read_scope()
        return [
            *self._s.archive,
            *(r for r in self._scope_pending.values() if r.digest not in self._s.archive),
        ]

    def chain(self, digest: str) -> ChainRecord:
        """The archived chain with that digest. Raises ``NotFound`` if there is none."""
        record = self._s.archive.get(digest) if isinstance(digest, str) else None
        if record is None:
            raise NotFound(f"no archived chain with digest {digest!r}")
        return record

    def cold_copy(self, digest: str) -> JSONObject:
        """The chain's cold copy (record, full tool definitions, logs), read and verified.

        Raises:
            NotFound: no such chain, or its cold copy is missing from the store.
            IntegrityError: the stored copy does not match its key.
        """
        data: JSONObject = json.loads(self._journal.store.get_content(self.chain(digest).pointer))
        return data

    def archive_digest(self) -> str:
        """sha256 over the archived chains' digests; the order of archiving does not matter."""
        return self._s.archive.digest()

    def chain_rules(self, name: str) -> list[str]:
        """Rules of archived chains whose fatal prefix uses the tool, for where tools are chosen.

        Raises:
            NotFound: unknown tool.
        """
        self._tools.spec(name)
        return [r.rule for r in self._s.archive.with_prefix_tool(name)]

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
        return self._checked_archive().check(sequence, arguments)

    def chains_digest(self) -> str:
        """``archive_digest`` of every chain ``check_chain`` checks against: the archived ones and
        the scope's chains not adopted yet (the same as ``archive_digest`` when none are pending)."""
        return self._checked_archive().digest()

    def _checked_archive(self) -> ChainArchive:
        """The archive, with the scope's chains not adopted yet when there are any.

        Those are indexed together once, then grown: by the scope's new records as they are
        read, by the archive's new records as they are journaled. Rebuilt only when the
        session's state is (a reopened or restored archive is another object).
        """
        self._read_scope()
        archive = self._s.archive
        if not self._scope_pending:
            return archive
        checked = self._checked
        if checked is None or self._checked_base is not archive or len(archive) < self._checked_size:
            checked = ChainArchive(archive)
            for record in self._scope_pending.values():
                checked.add(record)
            self._checked, self._checked_base = checked, archive
        else:
            for record in islice(archive, self._checked_size, None):  # the archive only grows
                checked.add(record)
        self._checked_size = len(archive)
        return checked

    # -- the live guard ----------------------------------------------------------------------

    def _chain_guard(self, name: str, arguments: JSONObject) -> None:
        self.adopt_scope()  # chains archived by other sessions of the scope since the last call
        if not len(self._s.archive):
            return
        tail = list(islice(reversed(self._s.calls.values()), self._s.archive.longest_run))[::-1]
        verdict = self._s.archive.check_next(
            [c.tool for c in tail], [c.arguments for c in tail], name, arguments
        )
        if verdict.safe:
            return
        if self._chain_policy == "warn":
            digest = verdict.chain.digest if verdict.chain is not None else ""
            self._journal.commit(("chain_warning", {"tool": name, "chain": digest, "reason": verdict.reason}))
            return
        raise ChainCollision(
            f"{name}: refused: {verdict.reason}. Choose another route to the goal.",
            tool=name,
            rule=verdict.rule,
            expected_failure=verdict.expected_failure,
        )

    # -- credentials -------------------------------------------------------------------------

    def pending_revocations(self) -> list[str]:
        """Credential references of archived chains not yet revoked, sorted."""
        refs = {c for r in self._s.archive for c in r.credentials}
        return sorted(c for c in refs if not self._s.revocations.get(c))

    def revocations(self) -> dict[str, bool]:
        """Every attempted reference and whether its last attempt revoked it."""
        return dict(self._s.revocations)

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
        return {ref: self._s.revocations[ref] for ref in pending if ref in self._s.revocations}

    def record_revocation(self, reference: str, revoked: bool, error: str = "") -> None:
        """Journal the outcome of a revocation run outside the session.

        For a host that runs its revocation hook itself, away from the session (the gateway
        runs it in a worker thread, so a slow hook does not stall other clients): it archives
        with no ``revoke`` callback, runs the hook for each of ``pending_revocations()``, and
        reports each outcome here. Journaled like the callback's, so it is never re-run.

        Args:
            reference: a credential reference of an archived chain.
            revoked: whether the run revoked it.
            error: why it did not (short, no secret); ignored when revoked.

        Raises:
            NotFound: no archived chain names that reference.
            InvalidInput: ``revoked`` not a bool, or ``error`` not a string.
        """
        if not isinstance(revoked, bool):
            raise InvalidInput("revoked must be true or false", where="revoked")
        if not isinstance(error, str):
            raise InvalidInput("error must be a string", where="error")
        if not isinstance(reference, str) or not any(reference in r.credentials for r in self._s.archive):
            raise NotFound(f"no archived chain names the credential reference {reference!r}")
        if not revoked and not error:
            error = "revocation failed"
        entry = {"credential": reference, "revoked": revoked, "error": "" if revoked else error[:200]}
        self._journal.commit(("revocation", entry))

    def _revoke_each(self, refs: Iterable[str], *, retry: bool = False) -> None:
        if self._revoke is None:
            return
        for ref in refs:
            if ref in self._s.revocations and not (retry and not self._s.revocations[ref]):
                continue
            error = ""
            try:
                revoked = self._revoke(ref) is True
            except Exception as exc:  # the callback's own failure; its message may hold a secret
                revoked, error = False, type(exc).__name__
            if not revoked and not error:
                error = "callback did not return True"
            self._journal.commit(("revocation", {"credential": ref, "revoked": revoked, "error": error}))

    # -- comparison --------------------------------------------------------------------------

    def snapshot_parts(self, parts: dict[str, Any]) -> None:
        parts["chains"] = [r.to_json() for r in self._s.archive]
        parts["archive_digest"] = self._s.archive.digest()
        parts["shared"] = sorted(self._s.shared)
        parts["revocations"] = dict(sorted(self._s.revocations.items()))
