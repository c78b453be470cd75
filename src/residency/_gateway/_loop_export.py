"""The gateway's spans batched and sent over OTLP/HTTP from its own event loop, not a thread.

The SDK's ``BatchSpanProcessor`` sends from a thread of its own, with a blocking HTTP client.
Measured under the tracing benchmark's workload (``benchmarks/otel_overhead.py``, an
in-process call of about 0.6 ms), that thread was most of what tracing cost a call: the same
spans, encoded the same way, cost a call about four times as much latency sent from it as sent
from the loop, though the thread spends under a millisecond of CPU on a batch of 512 spans. The
likely cause is the interpreter lock: between its socket reads and writes the thread runs
Python, and the event loop, which gives the lock up at every turn, waits for it each time.
Sending from the loop, with the ``httpx2`` client the gateway already uses for its upstreams,
does the same work without the waits.

So for OTLP/HTTP a ``LoopSpanExport`` takes the processor's place: ``on_end`` queues a span
(the spans end on the loop), and a task in the gateway's task group sends a batch when
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` spans wait or ``OTEL_BSP_SCHEDULE_DELAY`` has passed (a
thread that sleeps in between keeps the delay, see ``LoopSpanExport.run``), as the SDK's
processor does (and, as there, drops spans past ``OTEL_BSP_MAX_QUEUE_SIZE``). The
bytes are ``_otlp_spans``' encoding; the endpoint, headers, compression and timeout are those
the SDK's exporter resolved (its ``OTEL_EXPORTER_OTLP_*`` variables included), TLS follows its
certificate variables, and transient failures (429, 502, 503, 504, a lost connection) are
retried with its backoff within the timeout. What this cannot honour, a credential provider
(``OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER``, a ``requests`` session) or a
batch the encoder does not handle, goes through the SDK's exporter in a worker thread.

Spans ended outside the loop (a ``Tracing`` used without a gateway) wait in the queue; the
synchronous ``shutdown`` sends them with the SDK's exporter.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import ssl
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import anyio.lowlevel
import httpx2
from opentelemetry.exporter.otlp.common.http import (
    _DEFAULT_JITTER,
    _MAX_RETRIES,
    Compression,
    _extract_retry_after,
    _is_retryable,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

from residency._errors import ConfigError
from residency._gateway._otlp_spans import FastOTLPSpanExporter, NotEncodable

if TYPE_CHECKING:
    from opentelemetry.exporter.http.transport._base import BaseHTTPResult

__all__ = ["LoopSpanExport", "batch_settings", "loop_sendable"]

logger = logging.getLogger("residency.gateway")

_CREDENTIAL_PROVIDER = "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER"


def batch_settings() -> tuple[int, int, float]:
    """``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` and
    ``OTEL_BSP_SCHEDULE_DELAY`` (in seconds), read as the SDK's ``BatchSpanProcessor`` reads
    them (its defaults: 2048, 512, 5 s; a value that is not a number is logged and the default
    used).

    Raises:
        ConfigError: a value the SDK's processor refuses too (not positive, or a batch larger
            than the queue).
    """
    queue = BatchSpanProcessor._default_max_queue_size()  # type: ignore[no-untyped-call]
    batch = BatchSpanProcessor._default_max_export_batch_size()  # type: ignore[no-untyped-call]
    delay = BatchSpanProcessor._default_schedule_delay_millis()  # type: ignore[no-untyped-call]
    if min(queue, batch, delay) <= 0 or batch > queue:
        raise ConfigError(
            f"residency.telemetry: OTEL_BSP_MAX_QUEUE_SIZE={queue}, OTEL_BSP_MAX_EXPORT_BATCH_SIZE="
            f"{batch} and OTEL_BSP_SCHEDULE_DELAY={delay} must be positive, the batch no larger "
            "than the queue",
            where="OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        )
    return queue, batch, delay / 1000


def loop_sendable() -> bool:
    """Whether the environment leaves the sending to this module (no credential provider)."""
    return not os.environ.get(_CREDENTIAL_PROVIDER, "").strip()


def _tls() -> ssl.SSLContext | bool:
    """The client's ``verify``, from the variables the SDK's exporter reads: a CA file (or
    directory), and a client certificate with its key (a certificate without a key file is a
    file that holds both). True (the client's default trust) when none is set.

    Raises:
        ConfigError: a file they name cannot be read or is not what they say.
    """

    def env(*names: str) -> tuple[str, str] | None:
        for name in names:
            if value := os.environ.get(name):
                return name, value
        return None

    ca = env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
    key = env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
    certificate = env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
    if ca is None and certificate is None:
        return True
    reading = ca or certificate
    try:
        if ca is None:
            context = httpx2.create_ssl_context()
        elif os.path.isdir(ca[1]):
            context = ssl.create_default_context(capath=ca[1])
        else:
            context = ssl.create_default_context(cafile=ca[1])
        if certificate is not None:
            reading = certificate if key is None else key
            context.load_cert_chain(certificate[1], key[1] if key else None)
    except (OSError, ssl.SSLError) as exc:  # SSLError is an OSError; named for the reader
        assert reading is not None
        name, path = reading
        raise ConfigError(
            f"residency.telemetry: {name}={path!r} cannot be used for OTLP over HTTPS: {exc.strerror or exc}",
            where=name,
        ) from None
    return context


class LoopSpanExport:
    """The gateway's span processor for OTLP/HTTP (see the module docstring).

    Args:
        exporter: the SDK exporter, configured: its settings are read, and it sends what this
            cannot.

    Raises:
        ConfigError: a certificate variable names a file that cannot be used.
    """

    def __init__(self, exporter: FastOTLPSpanExporter) -> None:
        self._exporter = exporter
        self._queue_size, self._batch_size, self._delay = batch_settings()
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._dropped = 0
        self._loop_thread: int | None = None
        self._wake: anyio.Event | None = None
        self._client: httpx2.AsyncClient | None = None
        self._failed_once = False
        client = exporter._client  # the SDK's resolved settings (endpoint, headers, timeout)
        self._endpoint: str = client._endpoint
        self._headers: dict[str, str] = dict(client._headers)
        self._timeout: float = client._timeout
        self._compression: Compression = client._compression
        self._verify = _tls()  # read now: a file that cannot be used stops the gateway's start

    # -- the processor's side ----------------------------------------------------------------

    def on_end(self, span: ReadableSpan) -> None:
        """Queue a sampled span that ended (what ``SpanProcessor.on_end`` is given)."""
        if len(self._queue) >= self._queue_size:
            self._dropped += 1
            if self._dropped == 1:
                logger.warning(
                    "telemetry: the span queue is full (%d, OTEL_BSP_MAX_QUEUE_SIZE); "
                    "spans are dropped until the collector takes them",
                    self._queue_size,
                )
            return
        self._queue.append(span)
        wake = self._wake
        if (
            wake is not None
            and len(self._queue) >= self._batch_size
            and threading.get_ident() == self._loop_thread
        ):
            wake.set()

    @property
    def dropped(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    # -- the sender ----------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send batches until cancelled (a task of the gateway's task group); ``aclose`` sends
        what is left.

        On asyncio the schedule delay is kept by a thread of its own that wakes the sender
        (``_tick``), not by a timer of the event loop. asyncio removes a cancelled timer only
        when it reaches the head of its queue, and the sender's timer (the delay, shorter than
        a request's deadline) stayed there: every request's deadline, cancelled when the request
        ended, stayed queued behind it with the context it had copied (the request's spans
        among it) until the delay ran out. Under the tracing benchmark's load that was up to a
        hundred requests' worth (asyncio rebuilds the queue past 100 timers, half of them
        cancelled), and 60% more collections of the young generation per call
        (3,000 calls: 218 against 138 without tracing; 143 with the thread). On another
        backend (trio) the timer stays: its deadlines copy no context.
        """
        self._loop_thread = threading.get_ident()
        self._client = httpx2.AsyncClient(verify=self._verify, timeout=self._timeout)
        self._wake = anyio.Event()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        stop = threading.Event()
        if loop is not None:
            threading.Thread(
                target=self._tick, args=(loop, stop), name="residency-otel-span-delay", daemon=True
            ).start()
        task_status.started()
        try:
            while True:
                if loop is not None:
                    await self._wake.wait()  # a full batch, or the thread's tick
                else:
                    with anyio.move_on_after(self._delay):
                        await self._wake.wait()
                self._wake = anyio.Event()
                # Full batches, as long as there are (spans keep coming while one is sent); after
                # the delay, what is queued too (up to one batch), as the SDK's processor does.
                await self._send_queued(everything=False)
        finally:
            stop.set()

    def _tick(self, loop: asyncio.AbstractEventLoop, stop: threading.Event) -> None:
        """Wake the sender every schedule delay until ``stop`` is set (see ``run``)."""
        while not stop.wait(self._delay):
            try:
                loop.call_soon_threadsafe(self._due)
            except RuntimeError:  # the loop is closed
                return

    def _due(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def aclose(self) -> None:
        """Send what is queued (bounded by the export timeout; not tried when the collector
        failed the last batch) and close the client. A batch is sent at most once: one under way
        when the sender was cancelled was finished first."""
        if not self._failed_once:  # a collector that failed the last batch is not waited for
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._timeout):
                await self._send_queued()
        if self._queue:
            self._failed(f"{len(self._queue)} spans not exported at shutdown")
            self._queue.clear()
        self._wake = None
        self._loop_thread = None
        if self._client is not None:
            with anyio.CancelScope(shield=True):
                await self._client.aclose()
            self._client = None

    def shutdown(self) -> None:
        """Send what is queued with the SDK's exporter, then stop it (no loop needed)."""
        while self._queue:
            batch = self._take()
            self._exporter.export(batch)
        self._exporter.shutdown()

    def _take(self) -> list[ReadableSpan]:
        count = min(self._batch_size, len(self._queue))
        return [self._queue.popleft() for _ in range(count)]

    async def _send_queued(self, *, everything: bool = True) -> None:
        """Send what is queued: everything, or one batch and then full batches only (the
        spans that come while one is sent wait for a full batch or the next delay)."""
        sent = 0
        while self._queue and (everything or sent == 0 or len(self._queue) >= self._batch_size):
            await anyio.lowlevel.checkpoint_if_cancelled()  # stopping: the rest is aclose's
            sent += 1
            batch = self._take()
            # A batch under way is finished (bounded by the timeout) even when the gateway
            # stops meanwhile: cut off, it might have arrived, and sent again, arrive twice.
            with anyio.CancelScope(shield=True):
                try:
                    await self._send(batch)
                except Exception as exc:  # whatever it is, the gateway goes on serving
                    self._failed(f"{len(batch)} spans not exported ({type(exc).__name__})")

    async def _send(self, batch: Sequence[ReadableSpan]) -> None:
        client = self._client
        try:
            body = self._exporter._encoder.request(batch)
        except NotEncodable:
            client = None
        if client is None:  # a span the encoder does not handle: the SDK's path, in a thread
            result = await anyio.to_thread.run_sync(self._exporter.export, batch)
            if result is not SpanExportResult.SUCCESS:
                self._failed(f"{len(batch)} spans not exported")
            return
        if self._compression is not Compression.NONE:  # the SDK client's; zlib leaves the lock
            body = await anyio.to_thread.run_sync(self._exporter._client._compress, body)
        await self._post(client, body, len(batch))

    async def _post(self, client: httpx2.AsyncClient, body: bytes, spans: int) -> None:
        deadline = anyio.current_time() + self._timeout
        problem = ""
        for attempt in range(_MAX_RETRIES):
            left = deadline - anyio.current_time()
            if left <= 0:
                break
            backoff = 2**attempt * random.uniform(1 - _DEFAULT_JITTER, 1 + _DEFAULT_JITTER)
            try:
                with anyio.fail_after(left):
                    response = await client.post(self._endpoint, content=body, headers=self._headers)
            except (httpx2.TransportError, TimeoutError) as exc:
                problem = type(exc).__name__
            else:
                if 200 <= response.status_code < 400:
                    if self._failed_once:
                        self._failed_once = False
                        logger.info("telemetry: spans are exported again")
                    return
                problem = f"HTTP {response.status_code}"
                if not _is_retryable(response.status_code):
                    break
                after = _extract_retry_after(cast("BaseHTTPResult", _Answer(response)))  # reads headers()
                backoff = backoff if after is None else after
            if backoff >= deadline - anyio.current_time():
                break
            await anyio.sleep(backoff)
        self._failed(f"{spans} spans not exported ({problem or 'timeout'})")

    def _failed(self, what: str) -> None:
        # Once until an export succeeds again: a collector that is down must not flood the log.
        if not self._failed_once:
            self._failed_once = True
            logger.warning(
                "telemetry: %s to %s; the next batches are tried as they come", what, _shown(self._endpoint)
            )


class _Answer:
    """An ``httpx2`` response as the SDK's ``_extract_retry_after`` reads one."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    def headers(self) -> httpx2.Headers:
        return self._response.headers


def _shown(url: str) -> str:
    """``url`` as a log line may show it: without a user name or password."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
