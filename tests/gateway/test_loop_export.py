"""The gateway's spans sent over OTLP/HTTP from its event loop (``_loop_export``): batches,
the delay, a full queue, a busy collector, compression, TLS, and what is left at the end.

Every test sends to a real OTLP/HTTP receiver (``tests._otlp``, which decodes what arrives with
the official protobuf definitions), from a ``Tracing`` whose sender runs in the test's loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import trustme
from prometheus_client import CollectorRegistry

from residency._errors import ConfigError
from residency._gateway._config import Secrets
from residency._gateway._loop_export import batch_settings
from residency._gateway._otel_config import TelemetrySettings
from residency._gateway._tracing import Tracing
from tests._otlp import OTLPReceiver
from tests._timing import STEP

pytestmark = pytest.mark.anyio


def tracing(rx: OTLPReceiver, timeout: float = 10) -> Tracing:
    settings = TelemetrySettings.model_validate(
        {"otlp": {"endpoint": rx.endpoint, "timeout": timeout}, "metrics": False}
    )
    return Tracing(settings, CollectorRegistry(), Secrets(), "0")


@asynccontextmanager
async def sending(t: Tracing) -> AsyncIterator[Tracing]:
    """``t`` with its sender running in this loop, as a gateway runs it; closed as a gateway
    closes it (what is queued is sent, then the exporter stops)."""
    async with anyio.create_task_group() as tg:
        await tg.start(t.run_exports)
        try:
            yield t
        finally:
            tg.cancel_scope.cancel()
    await t.aclose_exports()
    await anyio.to_thread.run_sync(t.shutdown)


def admit(t: Tracing, n: int, tool: str = "get_thing") -> None:
    for i in range(n):
        t.admission(tool, i + 1, reason="resident", refused=False)


async def received(rx: OTLPReceiver, spans: int) -> bool:
    return await anyio.to_thread.run_sync(rx.wait_for, lambda: len(rx.spans()) >= spans, STEP)


def test_the_batch_settings_are_the_sdks_and_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert batch_settings() == (2048, 512, 5.0)
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    assert batch_settings() == (100, 50, 0.25)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "soon")  # the SDK logs it and takes its default
    assert batch_settings()[2] == 5.0
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500")  # more than the queue: refused
    with pytest.raises(ConfigError, match="OTEL_BSP_MAX_EXPORT_BATCH_SIZE=500"):
        batch_settings()


async def test_a_full_batch_is_sent_at_once_and_the_rest_waits_for_the_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", str(int(STEP * 10 * 1000)))  # never, here
    with OTLPReceiver() as rx:
        async with sending(tracing(rx)) as t:
            admit(t, 6)
            assert await received(rx, 4)
            await anyio.sleep(0.2)
            assert [len(r.resource_spans[0].scope_spans[0].spans) for r in rx.traces] == [4]
        # The two left were sent when the tracing closed.
        assert len(rx.spans()) == 6 and len(rx.traces) == 2


async def test_spans_short_of_a_batch_are_sent_after_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with OTLPReceiver() as rx:
        async with sending(tracing(rx)) as t:
            admit(t, 3)
            assert await received(rx, 3)
            assert len(rx.traces) == 1
    names = {s.name for s in rx.spans()}
    assert names == {"admit get_thing"}


async def test_the_sender_holds_no_timer_that_keeps_ended_requests_deadlines_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # asyncio drops a cancelled timer only when it reaches the head of its queue: a pending
    # schedule-delay timer there kept every ended request's deadline (and the context it copied,
    # spans included) queued until the delay ran out. The delay is kept by a thread instead.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "5000")
    with OTLPReceiver() as rx:
        async with sending(tracing(rx)):
            loop = asyncio.get_running_loop()
            for _ in range(50):  # fifty requests whose deadline (a minute) was not reached
                with anyio.move_on_after(60):
                    await anyio.lowlevel.checkpoint()
            await anyio.lowlevel.checkpoint()  # one turn of the loop
            assert not [h for h in loop._scheduled if h.cancelled()]  # type: ignore[attr-defined]


async def test_a_busy_collector_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OTLPReceiver() as rx:
        rx.unavailable = 2  # two 503 answers with Retry-After: 0, then 200
        async with sending(tracing(rx)) as t:
            admit(t, 2)
            assert await received(rx, 2)
        assert rx.unavailable == 0 and len(rx.spans()) == 2


async def test_a_batch_under_way_when_the_sender_stops_is_finished_and_sent_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OTLPReceiver() as rx:
        rx.answer_after = 0.5
        async with sending(tracing(rx)) as t:
            admit(t, 5)
            assert await received(rx, 5)  # taken; the answer is half a second away
        # Cut off there, the batch would have been tried again by the close: twice.
        assert len(rx.spans()) == 5 and len(rx.traces) == 1


async def test_a_full_queue_without_a_sender_keeps_what_fits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3")
    caplog.set_level(logging.WARNING, logger="residency.gateway")
    with OTLPReceiver() as rx:
        t = tracing(rx)
        admit(t, 5)  # no loop runs the sender: the queue fills
        t.shutdown()  # sent by the SDK's exporter, in this thread
        assert len(rx.spans()) == 3
    assert t._loop_export is not None and t._loop_export.dropped == 2
    assert len([r for r in caplog.records if "span queue is full" in r.getMessage()]) == 1


async def test_compressed_batches_arrive_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OTLPReceiver() as rx:
        async with sending(tracing(rx)) as t:
            admit(t, 20)
            assert await received(rx, 20)
        assert {h.get("Content-Encoding") for h in rx.headers} == {"gzip"}
        assert len(rx.spans()) == 20


async def test_a_collector_that_is_down_is_logged_once_and_the_spans_are_let_go(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    caplog.set_level(logging.WARNING, logger="residency.gateway")
    settings = TelemetrySettings.model_validate(
        {"otlp": {"endpoint": f"http://127.0.0.1:{port}", "timeout": 1}, "metrics": False}
    )
    t = Tracing(settings, CollectorRegistry(), Secrets(), "0")
    with anyio.fail_after(STEP):
        async with sending(t):
            admit(t, 2)
            await anyio.sleep(0.3)
            admit(t, 2)
            await anyio.sleep(0.3)
    assert t._loop_export is not None and not t._loop_export._queue
    failures = [r for r in caplog.records if "spans not exported" in r.getMessage()]
    assert len(failures) == 1 and f"127.0.0.1:{port}" in failures[0].getMessage()


# -- TLS, as the SDK exporter's certificate variables say ------------------------------------


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def https_receiver(ca: trustme.CA, *, client_certificates: bool = False) -> OTLPReceiver:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    if client_certificates:  # mutual TLS: a client without a certificate of this CA is refused
        context.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(context)
    return OTLPReceiver(tls=context)


async def test_https_trusts_the_certificate_authority_the_variables_name(
    monkeypatch: pytest.MonkeyPatch, ca: trustme.CA, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    authority = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(authority))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(authority))
    with https_receiver(ca) as rx:
        assert rx.endpoint.startswith("https://")
        async with sending(tracing(rx)) as t:
            admit(t, 2)
            assert await received(rx, 2)


async def test_https_with_an_unknown_authority_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    caplog.set_level(logging.WARNING, logger="residency.gateway")
    with https_receiver(ca) as rx:
        # A refused handshake is retried after about a second (0.8 to 1.2 s, jittered), if the
        # timeout leaves room: with 0.7 s it does not, so the log names the handshake's failure
        # (at 1 s a retry could start and run out of time on a busy machine, a TimeoutError).
        async with sending(tracing(rx, timeout=0.7)) as t:
            admit(t, 2)
            await anyio.sleep(0.5)
        assert rx.spans() == []
    assert any("spans not exported (ConnectError)" in r.getMessage() for r in caplog.records)


async def test_mutual_tls_presents_the_client_certificate_the_variables_name(
    monkeypatch: pytest.MonkeyPatch, ca: trustme.CA, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    authority, chain, key = tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client.key"
    ca.cert_pem.write_to_path(str(authority))
    client = ca.issue_cert("otel-client@example.org")
    client.cert_chain_pems[0].write_to_path(str(chain))
    client.private_key_pem.write_to_path(str(key))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(authority))
    with https_receiver(ca, client_certificates=True) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", str(chain))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", str(key))
        async with sending(tracing(rx)) as t:
            admit(t, 2)
            assert await received(rx, 2)
        # One file that holds both, as the SDK also takes.
        both = tmp_path / "client-both.pem"
        client.private_key_and_cert_chain_pem.write_to_path(str(both))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", str(both))
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY")
        async with sending(tracing(rx)) as t:
            admit(t, 3)
            assert await received(rx, 5)


def test_a_certificate_file_that_cannot_be_used_stops_the_start_and_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, ca: trustme.CA, tmp_path: Path
) -> None:
    with OTLPReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path / "missing.pem"))
        with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_CERTIFICATE='.*missing\.pem'"):
            tracing(rx)
        authority = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(authority))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(authority))
        not_a_key = tmp_path / "key.pem"
        not_a_key.write_text("not a key")
        client = tmp_path / "client.pem"
        ca.issue_cert("c@example.org").cert_chain_pems[0].write_to_path(str(client))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", str(client))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", str(not_a_key))
        with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY="):
            tracing(rx)
