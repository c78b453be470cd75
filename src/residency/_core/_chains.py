"""Abandoned tool chains: chain records, the collision check, and the prefix index.

Theory of operation
-------------------
A chain is archived when a multi-step pipeline failed deterministically at its last step
(transient failures are refused: the chain stays viable). Its record holds the ordered
topology (tool names), the terminal failure signature, a negative constraint (see
``_predicates``), references to the credentials to revoke (names, never values), a digest
(sha256 of its canonical JSON), and a pointer to the cold copy (full tool definitions and logs)
in the content store.

The *fatal prefix* is every step but the terminal one. A candidate sequence **collides** with
a chain when the chain's *fatal run* occurs in it as a contiguous run, anywhere, and the
constraint holds on the arguments of that run's steps. The fatal run is the fatal prefix, with
one exception: for a two-tool chain whose constraint tests no argument, the run is the whole
topology. A one-tool prefix with nothing to test would ban that tool outright, and a sequence
that merely uses the first tool of a two-tool chain re-assembles nothing. A constraint that is
unknown (arguments not supplied) counts as a collision (fail closed), and the verdict says it
was not conclusive.

The index groups fatal runs by length and keys each by its tuple of tool names. A check looks
up every window of the candidate once per distinct run length, so its cost grows with the
candidate and with the number of distinct run lengths, not with the number of archived chains.
The archive's digest covers the sorted chain digests, so the order of archiving does not
change it.

Pure: no I/O, no clock. The shell stores the cold copy and passes its key back in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from residency._core._predicates import (
    Constraint,
    constraint_json,
    holds,
    is_json,
    parse_constraint,
    render_constraint,
    tests_arguments,
)
from residency._core._tools import JSONObject, canonical_json
from residency._errors import InvalidInput

__all__ = [
    "ChainArchive",
    "ChainRecord",
    "ChainVerdict",
    "build_chain",
    "cold_record",
]

MAX_SEQUENCE = 10_000
_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+#-]{0,199}\Z")
_SEGMENT = re.compile(r"[^-_./:@+#]+")


# -- chain records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """An archived abandoned chain.

    Attributes:
        topology: the tool names of the pipeline, in order; the last one failed.
        failure: the terminal failure signature (what the last step did, deterministically).
        constraint: the negative constraint over the fatal prefix's arguments.
        credentials: references (names, never values) of credentials to revoke, sorted.
        deterministic: always True for an archived chain (transient failures are refused).
        digest: sha256 of the canonical JSON of the fields above.
        pointer: content key of the cold copy (full tool definitions and logs); empty until
            the shell has stored it.
    """

    topology: tuple[str, ...]
    failure: str
    constraint: Constraint
    credentials: tuple[str, ...]
    deterministic: bool
    digest: str
    pointer: str = ""

    @property
    def prefix(self) -> tuple[str, ...]:
        """Every step but the terminal one."""
        return self.topology[:-1]

    @property
    def terminal(self) -> str:
        """The step that failed."""
        return self.topology[-1]

    @property
    def fatal_run(self) -> tuple[str, ...]:
        """What a candidate must contain to collide (see the module docstring)."""
        if len(self.topology) == 2 and not tests_arguments(self.constraint):
            return self.topology
        return self.prefix

    @property
    def rule(self) -> str:
        """The constraint as a sentence: ``IF a -> b WHERE ... THEN c fails``."""
        where = render_constraint(self.constraint)
        run = " -> ".join(self.fatal_run)
        return f"IF {run}{' WHERE ' + where if where else ''} THEN {self.terminal} fails"

    def to_json(self) -> JSONObject:
        """The record as JSON data (what the journal and the cold copy hold)."""
        return {**_digest_fields(self), "digest": self.digest, "pointer": self.pointer}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChainRecord:
        """Rebuild a record from ``to_json`` output, checking its digest.

        Raises:
            InvalidInput: malformed data, or a digest that does not match the fields.
        """
        record = build_chain(
            data["topology"], data["failure"], data["constraint"], data["credentials"], data["deterministic"]
        )
        if record.digest != data.get("digest"):
            raise InvalidInput("chain record does not match its digest", where="digest")
        return replace(record, pointer=str(data.get("pointer", "")))


def _digest_fields(r: ChainRecord) -> JSONObject:
    return {
        "topology": list(r.topology),
        "failure": r.failure,
        "constraint": constraint_json(r.constraint),
        "credentials": list(r.credentials),
        "deterministic": r.deterministic,
    }


def build_chain(
    topology: object,
    failure: object,
    constraint: object,
    credentials: object = (),
    deterministic: object = True,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> ChainRecord:
    """Check an abandoned chain and build its record (with no pointer yet).

    Raises:
        InvalidInput: fewer than two tools, an empty failure signature, a bad constraint, a
            credential that is not a reference, or a transient failure (``deterministic`` not
            True): transient failures leave the chain viable and are never archived.
    """
    if deterministic is not True:
        raise InvalidInput(
            "only deterministic failures are archived: a transient failure (rate limit, network "
            "blip, timeout that succeeds on retry) leaves the chain viable; retry it instead",
            where="deterministic",
        )
    if isinstance(topology, str | bytes) or not isinstance(topology, Sequence):
        raise InvalidInput("topology must be a list of tool names", where="topology")
    if len(topology) < 2:
        raise InvalidInput(
            "an abandoned chain has at least two tools (a single failing tool is not a chain)",
            where="topology",
        )
    for i, name in enumerate(topology):
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"topology[{i}]: a tool name is a non-empty string", where=f"topology[{i}]")
    if not isinstance(failure, str) or not failure.strip():
        raise InvalidInput("a non-empty terminal failure signature is required", where="failure")
    parsed = parse_constraint(constraint, topology, schemas)
    refs = _credential_refs(credentials)
    fields = {
        "topology": list(topology),
        "failure": failure,
        "constraint": constraint_json(parsed),
        "credentials": list(refs),
        "deterministic": True,
    }
    digest = hashlib.sha256(canonical_json(fields).encode()).hexdigest()
    return ChainRecord(tuple(topology), failure, parsed, refs, True, digest)


def _credential_refs(credentials: object) -> tuple[str, ...]:
    if isinstance(credentials, str | bytes) or not isinstance(credentials, Iterable):
        raise InvalidInput("credentials must be a list of credential references", where="credentials")
    refs: set[str] = set()
    for i, ref in enumerate(credentials):
        # Never echo the value: a caller who passed a secret by mistake must not see it logged.
        if not isinstance(ref, str) or not _REFERENCE.match(ref):
            raise InvalidInput(
                f"credentials[{i}]: not a credential reference (a name such as 'scraper-api-key' or "
                f"'vault:kv/scraper#key', up to 200 characters, no spaces); value not shown",
                where=f"credentials[{i}]",
            )
        if _looks_secret(ref):
            raise InvalidInput(
                f"credentials[{i}]: looks like a secret value, which is never stored; pass the "
                f"name it is kept under instead; value not shown",
                where=f"credentials[{i}]",
            )
        refs.add(ref)
    return tuple(sorted(refs))


def _looks_secret(ref: str) -> bool:
    """A long unbroken run of letters and digits reads as key material, not as a name."""
    for segment in _SEGMENT.findall(ref):
        if len(segment) >= 24 and any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment):
            return True
    return False


def cold_record(record: ChainRecord, definitions: Mapping[str, Any], logs: object) -> bytes:
    """The bytes of a chain's cold copy: the record, its tools' full definitions, its logs.

    Raises:
        InvalidInput: ``logs`` is not JSON data.
    """
    if not is_json(logs):
        raise InvalidInput("logs must be JSON data (strings, numbers, lists, objects)", where="logs")
    body = {
        "format": "residency.chain/1",
        "chain": {**_digest_fields(record), "digest": record.digest},
        "tools": {name: definitions[name] for name in sorted(definitions)},
        "logs": logs,
    }
    return canonical_json(body).encode()


# -- verdicts and the index -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChainVerdict:
    """The answer of a collision check.

    Attributes:
        safe: no archived chain's fatal run occurs with its constraint holding.
        reason: one line saying why, meant for the model.
        rule: the colliding chain's rule (``ChainRecord.rule``); empty when safe.
        expected_failure: the colliding chain's terminal failure signature; empty when safe.
        chain: the colliding chain, or None.
        span: ``(start, stop)`` of the colliding run in the candidate, or None.
        conclusive: False when the constraint could not be evaluated (arguments not supplied)
            and the verdict fails closed.
    """

    safe: bool
    reason: str
    rule: str = ""
    expected_failure: str = ""
    chain: ChainRecord | None = None
    span: tuple[int, int] | None = None
    conclusive: bool = True


class ChainArchive:
    """The archived chains, indexed by fatal run. Insertion order does not matter."""

    def __init__(self, chains: Iterable[ChainRecord] = ()) -> None:
        self._chains: dict[str, ChainRecord] = {}
        self._by_length: dict[int, dict[tuple[str, ...], list[ChainRecord]]] = {}
        self._by_tool: dict[str, list[ChainRecord]] = {}
        self._terminals: dict[int, dict[tuple[str, ...], set[str]]] = {}
        self._digest: str | None = None  # ``digest()``, until the next record is added
        for record in chains:
            self.add(record)

    def add(self, record: ChainRecord) -> bool:
        """Index a record; False (and nothing changes) if its digest is already archived."""
        if record.digest in self._chains:
            return False
        self._chains[record.digest] = record
        self._digest = None
        run = record.fatal_run
        bucket = self._by_length.setdefault(len(run), {}).setdefault(run, [])
        bucket.append(record)
        bucket.sort(key=lambda r: r.digest)
        for name in dict.fromkeys(record.prefix):
            self._by_tool.setdefault(name, []).append(record)
        prefix = record.prefix
        self._terminals.setdefault(len(prefix), {}).setdefault(prefix, set()).add(record.terminal)
        return True

    def __len__(self) -> int:
        return len(self._chains)

    def __iter__(self) -> Iterator[ChainRecord]:
        return iter(self._chains.values())

    def __contains__(self, digest: object) -> bool:
        return digest in self._chains

    def get(self, digest: str) -> ChainRecord | None:
        """The record with that digest, or None."""
        return self._chains.get(digest)

    def with_prefix_tool(self, name: str) -> list[ChainRecord]:
        """Chains whose fatal prefix uses the tool, in archive order."""
        return list(self._by_tool.get(name, ()))

    @property
    def longest_run(self) -> int:
        """The longest fatal run archived (0 when empty)."""
        return max(self._by_length, default=0)

    def covered_calls(self, tools: Sequence[str]) -> list[bool]:
        """Which calls of a call record belong to an archived chain's run.

        A call belongs when it is part of a contiguous run matching an archived chain's fatal
        prefix that is followed by the chain's terminal tool (included) or ends the record (an
        abandoned attempt). A call outside every such run is a use of its tool elsewhere.
        """
        n = len(tools)
        covered = [False] * n
        for length, prefixes in self._terminals.items():
            for start in range(n - length + 1):
                stop = start + length
                terminals = prefixes.get(tuple(tools[start:stop]))
                if terminals is None:
                    continue
                if stop < n and tools[stop] in terminals:
                    stop += 1
                elif stop < n:
                    continue
                for i in range(start, stop):
                    covered[i] = True
        return covered

    def digest(self) -> str:
        """sha256 over the sorted chain digests: equal archives, in any order, agree.

        Kept until the next ``add`` (about 6 ms to compute at 10,000 chains)."""
        if self._digest is None:
            self._digest = hashlib.sha256(canonical_json(sorted(self._chains)).encode()).hexdigest()
        return self._digest

    def check(self, sequence: object, arguments: object = None) -> ChainVerdict:
        """Whether a candidate sequence re-assembles an archived fatal run, anywhere in it.

        Args:
            sequence: tool names in the order they would run.
            arguments: per step, its arguments (a JSON object) or None if not known; None
                altogether when no step's arguments are known.

        Raises:
            InvalidInput: a malformed sequence or arguments list.
        """
        tools, args = _candidate(sequence, arguments)
        unknown: ChainVerdict | None = None
        lengths = sorted(self._by_length)
        for start in range(len(tools)):
            for length in lengths:
                stop = start + length
                if stop > len(tools):
                    break
                for record in self._by_length[length].get(tuple(tools[start:stop]), ()):
                    truth = holds(record.constraint, args[start:stop])
                    if truth is True:
                        return _collision(record, start, stop, conclusive=True)
                    if truth is None and unknown is None:
                        unknown = _collision(record, start, stop, conclusive=False)
        return unknown or _SAFE

    def check_next(
        self,
        history: Sequence[str],
        history_arguments: Sequence[Mapping[str, Any] | None],
        tool: str,
        arguments: Mapping[str, Any],
    ) -> ChainVerdict:
        """Whether one more call completes a fatal run, or is the fatal step right after one.

        Only runs that end at the proposed call (or the call before it, when the proposed call
        is the chain's terminal tool) count: earlier runs were judged when their calls were.
        ``history`` needs only its last ``longest_run`` entries.
        """
        tools = [*history, tool]
        args: list[Mapping[str, Any] | None] = [*history_arguments, arguments]
        n = len(tools)
        for length in sorted(self._by_length):
            for stop, fatal_step in ((n, False), (n - 1, True)):
                start = stop - length
                if start < 0:
                    continue
                for record in self._by_length[length].get(tuple(tools[start:stop]), ()):
                    if fatal_step and (record.terminal != tool or record.fatal_run == record.topology):
                        continue
                    if holds(record.constraint, args[start:stop]) is not False:
                        return _collision(record, start, n if fatal_step else stop, conclusive=True)
        return _SAFE


_SAFE = ChainVerdict(True, "no archived chain's fatal prefix occurs in the sequence")


def _collision(record: ChainRecord, start: int, stop: int, *, conclusive: bool) -> ChainVerdict:
    if not conclusive:
        why = "its constraint may hold (arguments not supplied: refused to stay safe)"
    elif tests_arguments(record.constraint):
        why = "its constraint holds"
    else:
        why = "the topology alone is fatal"
    reason = (
        f"steps {start}..{stop - 1} ({' -> '.join(record.fatal_run)}) re-assemble the fatal prefix of "
        f"archived chain {record.digest[:12]} and {why}: {record.rule}. Expected failure: {record.failure}"
    )
    return ChainVerdict(False, reason, record.rule, record.failure, record, (start, stop), conclusive)


def _candidate(sequence: object, arguments: object) -> tuple[list[str], list[Mapping[str, Any] | None]]:
    if isinstance(sequence, str | bytes) or not isinstance(sequence, Sequence):
        raise InvalidInput("sequence must be a list of tool names", where="sequence")
    if len(sequence) > MAX_SEQUENCE:
        raise InvalidInput(f"sequence too long (at most {MAX_SEQUENCE} steps)", where="sequence")
    tools: list[str] = []
    for i, name in enumerate(sequence):
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"sequence[{i}]: a tool name is a non-empty string", where=f"sequence[{i}]")
        tools.append(name)
    if arguments is None:
        return tools, [None] * len(tools)
    if isinstance(arguments, str | bytes | Mapping) or not isinstance(arguments, Sequence):
        raise InvalidInput("arguments must be a list with one entry per step", where="arguments")
    if len(arguments) != len(tools):
        raise InvalidInput(
            f"arguments has {len(arguments)} entries for {len(tools)} steps (use null for unknown)",
            where="arguments",
        )
    args: list[Mapping[str, Any] | None] = []
    for i, a in enumerate(arguments):
        if a is not None and not isinstance(a, Mapping):
            raise InvalidInput(f"arguments[{i}]: a JSON object or null", where=f"arguments[{i}]")
        args.append(a)
    return tools, args
