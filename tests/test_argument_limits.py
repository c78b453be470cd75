"""What one call may cost: argument limits, patterns that cannot backtrack, bounded token counts.

Costs are asserted as bounds, never as timings: a check that would take minutes runs in a
worker process with a generous timeout (one worker for the module, killed and started again if a
check overruns), and token counting is measured by what it hands the tokenizer.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import pytest

from residency import ArgumentsInvalid, InvalidInput, Session
from residency import _tokens as tokens
from residency._core._validation import MAX_ARGUMENT_BYTES, MAX_ARGUMENT_VALUES, PATTERN_BACKTRACK_LIMIT
from tests._timing import CLEANUP, TEST
from tests.conftest import load_corpus

ROOT = Path(__file__).resolve().parents[1]
WAIT = TEST  # for a subprocess that should take one: a loaded machine, not a cost bound


def _session(schema: dict[str, Any]) -> Session:
    s = Session()
    s.register_tools([{"name": "t", "annotations": {"readOnlyHint": True}, "inputSchema": schema}])
    return s


WORKER = textwrap.dedent(
    """
    import json, sys
    from residency import ArgumentsInvalid, Session
    for line in sys.stdin:
        schema, arguments = json.loads(line)
        s = Session()
        s.register_tools([{"name": "t", "inputSchema": schema}])
        try:
            s.admit_call("t", arguments)
        except ArgumentsInvalid as exc:
            answer = {"refused": True, "path": exc.path, "message": str(exc)}
        else:
            answer = {"refused": False}
        print(json.dumps(answer), flush=True)
    """
)


class Worker:
    """``admit_call`` in an interpreter of its own, one request at a time: a check that overruns
    ``WAIT`` s fails its test and its worker is killed, so it cannot hold up the tests after it
    (the next request starts a fresh worker)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader: threading.Thread | None = None

    def _start(self) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            start_new_session=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def read(stdout: IO[str]) -> None:
            for line in stdout:
                lines.put(line)
            lines.put("")  # EOF: the worker exited

        assert process.stdout is not None
        self._reader = threading.Thread(target=read, args=(process.stdout,), daemon=True)
        self._reader.start()
        self._process, self._lines = process, lines
        return process

    def refusal(self, schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
        """The refusal of ``arguments`` against ``schema`` as JSON; fails after ``WAIT`` s."""
        process = self._process if self._process is not None else self._start()
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps([schema, arguments]) + "\n")
            process.stdin.flush()
            line = self._lines.get(timeout=WAIT)
        except queue.Empty:
            self.stop()
            pytest.fail(f"admit_call gave no answer within {WAIT:.0f} s")
        except BrokenPipeError:
            line = ""
        if not line:
            code = process.poll()
            self.stop()
            pytest.fail(f"the worker exited ({code})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        """Kill the worker's process group and reap it; every wait bounded by ``CLEANUP``."""
        process, self._process = self._process, None
        if process is None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            process.wait(CLEANUP)
        if self._reader is not None:
            self._reader.join(CLEANUP)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with suppress(OSError):
                    stream.close()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    shared = Worker()
    try:
        yield shared
    finally:
        shared.stop()


# -- patterns -----------------------------------------------------------------------------------

HOSTILE = "a" * 40 + "!"  # 2**40 ways for ^(a|a)*$ to fail: hours of Python `re` backtracking


@pytest.mark.slow
@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"p": {"type": "string", "pattern": "^(a|a)*$"}}}, "$.p"),
        ({"type": "object", "patternProperties": {"^(a|a)*$": {}}, "additionalProperties": False}, "$"),
        ({"type": "object", "propertyNames": {"pattern": "^(a|a)*$"}}, "$"),
        # Back-references need a backtracking engine: it stops at its step limit.
        ({"type": "object", "properties": {"p": {"type": "string", "pattern": "^(a|a)*\\1$"}}}, "$.p"),
    ],
    ids=["pattern", "patternProperties", "propertyNames", "back-reference"],
)  # fmt: skip
def test_a_catastrophic_pattern_refuses_the_call_at_once(
    worker: Worker, schema: dict[str, Any], path: str
) -> None:
    arguments = {"p": HOSTILE} if "properties" in schema else {HOSTILE: 1}
    answer = worker.refusal(schema, arguments)
    assert answer["refused"] is True
    assert answer["path"] == path


def test_patterns_are_ecma_262_as_json_schema_specifies() -> None:
    s = _session({"type": "object", "properties": {"d": {"pattern": "^\\d+$"}, "e": {"pattern": "^[a-z]+$"}}})
    s.admit_call("t", {"d": "123", "e": "abc"})
    for arguments in ({"d": "١٢"}, {"e": "abc\n"}):  # Python's `re` accepts both
        with pytest.raises(ArgumentsInvalid):
            s.admit_call("t", arguments)


def test_a_back_reference_over_its_step_limit_is_named_in_the_refusal() -> None:
    s = _session({"type": "object", "properties": {"p": {"pattern": "^(a|a)*\\1$"}}})
    s.admit_call("t", {"p": "aa"})  # real strings take a handful of steps
    with pytest.raises(ArgumentsInvalid) as refused:
        s.admit_call("t", {"p": "a" * 18 + "!"})  # 2**18 ways to fail: over the limit, quick for `re`
    assert refused.value.path == "$.p"
    assert f"{PATTERN_BACKTRACK_LIMIT:,} backtracking steps" in str(refused.value)


def test_a_pattern_schema_the_compiled_validator_cannot_read_refuses_every_call() -> None:
    s = _session({"type": "object", "properties": {"p": {"pattern": "^a\\Z"}}})  # Python-only: ECMA has no \Z
    with pytest.raises(ArgumentsInvalid, match="cannot be checked safely"):
        s.admit_call("t", {"p": "x"})


# -- size and value count -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"blob": "x" * 3_000_000}, f"{MAX_ARGUMENT_BYTES:,}-byte"),
        ({"blob": "é" * (MAX_ARGUMENT_BYTES // 2 + 1)}, f"{MAX_ARGUMENT_BYTES:,}-byte"),  # 2 bytes each
        ({f"k{i}": i for i in range(50_000)}, f"{MAX_ARGUMENT_VALUES:,} values"),
        ({"rows": [[0]] * (MAX_ARGUMENT_VALUES // 2 + 1)}, f"{MAX_ARGUMENT_VALUES:,} values"),
    ],
    ids=["3-MB-string", "multibyte", "50k-keys", "nested-items"],
)
def test_arguments_over_a_limit_are_refused_naming_it_and_nothing_is_recorded(
    arguments: dict[str, Any], named: str
) -> None:
    s = _session({"type": "object"})
    with pytest.raises(ArgumentsInvalid) as refused:
        s.admit_call("t", arguments)
    assert refused.value.path == "$"
    assert named in str(refused.value)
    assert s.resident_calls() == []


def test_arguments_at_the_limits_are_accepted() -> None:
    s = _session({"type": "object"})
    s.admit_call("t", {f"k{i}": i for i in range(MAX_ARGUMENT_VALUES)})
    s.admit_call("t", {"blob": "x" * (MAX_ARGUMENT_BYTES - len('{"blob":""}'))})
    assert len(s.resident_calls()) == 2


def test_recording_a_call_over_the_size_limit_is_refused() -> None:
    s = _session({"type": "object"})
    with pytest.raises(InvalidInput):
        s.record_call("t", {"blob": "x" * (MAX_ARGUMENT_BYTES + 1)})
    assert s.resident_calls() == []


# -- uniqueItems ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_unique_items_of_objects_is_checked_in_linear_time(worker: Worker) -> None:
    # The reference compares unsortable items pairwise: ~10,000 objects took minutes.
    schema = {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}
    items: list[Any] = [{"k": i} for i in range(MAX_ARGUMENT_VALUES // 2 - 2)]
    answer = worker.refusal(schema, {"x": [*items, {"k": 0}]})
    assert answer["refused"] is True
    assert answer["path"] == "$.x"


def test_unique_items_keeps_json_schema_equality() -> None:
    s = _session({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}})
    s.admit_call("t", {"x": [1, True, [1], [True], {"a": 1}, {"a": True}, "1", None, 0, False]})
    for duplicates in (
        [1, 1.0],
        [{"a": [1]}, {"a": [1.0]}],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [None, None],
    ):
        with pytest.raises(ArgumentsInvalid):
            s.admit_call("t", {"x": duplicates})


def test_a_refusal_does_not_quote_a_whole_huge_value() -> None:
    s = _session({"type": "object", "properties": {"x": {"type": "array", "maxItems": 1}}})
    with pytest.raises(ArgumentsInvalid) as refused:
        s.admit_call("t", {"x": ["y" * 1000] * 500})
    assert len(str(refused.value)) < 1000


# -- token counting -------------------------------------------------------------------------------


class _CountingEncoder:
    """The real tokenizer, noting how many characters it was handed."""

    def __init__(self) -> None:
        real = tokens._encoder()
        assert real is not None, "these tests need the bundled cl100k encoding"
        self.real = real
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.chars += len(text)
        return self.real(text)


@pytest.fixture
def encoder(monkeypatch: pytest.MonkeyPatch) -> _CountingEncoder:
    counting = _CountingEncoder()
    monkeypatch.setattr(tokens, "_encoder", lambda: counting)
    return counting


def test_a_huge_text_is_counted_from_a_bounded_sample(encoder: _CountingEncoder) -> None:
    spaceless = "".join(chr(ord("a") + (i * 7919) % 26) for i in range(3_000_000))
    assert tokens.count_tokens(spaceless) > 0
    assert encoder.chars <= tokens.SAMPLE_WINDOWS * tokens.SAMPLE_CHARS


def test_the_estimate_of_a_long_text_is_close_and_short_texts_are_exact(encoder: _CountingEncoder) -> None:
    text = json.dumps(load_corpus(), indent=1, ensure_ascii=False)  # real tool schemas, a fixed text
    long = (text * (3_000_000 // len(text) + 1))[:3_000_000]
    exact = encoder.real(long)
    assert abs(tokens.count_tokens(long) - exact) <= 0.05 * exact
    short = long[: tokens.EXACT_TOKEN_CHARS]
    assert tokens.count_tokens(short) == encoder.real(short)


def test_recording_a_large_call_hands_the_tokenizer_a_bounded_sample(encoder: _CountingEncoder) -> None:
    s = _session({"type": "object"})
    encoder.chars = 0  # registering counted the tool's schema
    record = s.admit_call("t", {"blob": "q" * (MAX_ARGUMENT_BYTES - 100)})
    assert record.argument_tokens > 0
    assert encoder.chars <= tokens.SAMPLE_WINDOWS * tokens.SAMPLE_CHARS
