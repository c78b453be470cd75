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

Credentials are references (names), never values. Each reference is passed to the revocation
callback at most once automatically; its outcome is journaled, so replaying or reopening the
session never calls it again. ``revoke_pending`` retries the ones not yet revoked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, Literal

from residency._core._chains import ChainArchive, ChainRecord, ChainVerdict, build_chain, cold_record
from residency._core._events import EventKind
from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._tools import JSONObject
from residency._errors import ChainCollision, InvalidInput, NotFound, StoreError
from residency._tool_ops import ToolOps

__all__ = ["ChainOps", "ChainPolicy"]

ChainPolicy = Literal["refuse", "warn"]
"""What the live guard does with a call that would re-assemble an archived chain."""


class ChainOps(ToolOps):
    """The archive of abandoned tool chains, its live guard, and credential revocation.

    Args:
        chain_policy: ``"refuse"`` (default) raises ``ChainCollision`` from ``authorize_call``;
            ``"warn"`` lets the call through and logs a ``CHAIN`` event.
        revoke: called with each credential reference of an archived chain; returns True when
            the credential was revoked. Exceptions count as a failed revocation.
    """

    def __init__(
        self,
        *args: Any,
        chain_policy: ChainPolicy = "refuse",
        revoke: Callable[[str], bool] | None = None,
        **kwargs: Any,
    ) -> None:
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
        known = self._archive.get(record.digest)
        if known is not None:
            return known
        definitions = {n: self._tools[n].definition for n in record.topology}
        blob = cold_record(record, definitions, logs)
        retire = self._retired_by(record)
        record = replace(record, pointer=self._store.put_content(blob))
        reason = f"only used by archived chain {record.digest[:12]}"
        items: list[tuple[str, Mapping[str, Any]]] = [("archive_chain", {"chain": record.to_json()})]
        for name in retire:
            dest = TOOL_LIFECYCLE.fire(self._states[name], "archive", record=name, facts=self._facts(name))
            change = {"tool": name, "trigger": "archive", "dest": dest.value, "reason": reason}
            items.append(("transition", change))
        self._commit(*items)
        self._revoke_each(record.credentials)
        return self._archive.get(record.digest) or record

    def _retired_by(self, record: ChainRecord) -> list[str]:
        """The prefix tools the new chain takes out of the active index."""
        trial = ChainArchive([*self._archive, record])
        tools = [c.tool for c in self._calls.values()]
        covered = trial.covered_calls(tools)
        elsewhere = {t for t, inside in zip(tools, covered, strict=True) if not inside}
        return [
            name
            for name in dict.fromkeys(record.prefix)
            if name not in elsewhere
            and name not in self._shared
            and not self.is_pinned(name)
            and self._states[name] is not ToolState.ARCHIVED
        ]

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
        """Archived chains, in the order they were archived."""
        return list(self._archive)

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
        return self._archive.check(sequence, arguments)

    # -- the live guard ----------------------------------------------------------------------

    def _chain_guard(self, name: str, arguments: JSONObject) -> None:
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
