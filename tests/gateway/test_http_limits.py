"""The HTTP front's limits as data: settings, caps under a descriptor limit, the ledger, the tally,
and the quiet handling of failed accepts and uvicorn's per-request warnings."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import given
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from residency._errors import ConfigError
from residency._gateway._http_guard import FD_TARGET, Front, raise_fd_limit
from residency._gateway._http_limits import (
    FD_RESERVE,
    FD_RESERVE_PER_UPSTREAM,
    Caps,
    Event,
    Gauge,
    HTTPSettings,
    Tally,
)
from tests.gateway.conftest import config

# -- settings ------------------------------------------------------------------------------------


def test_http_settings_come_from_the_residency_section() -> None:
    settings = config({"http": {"header_timeout": 2, "max_connections_per_client": 1024}}).residency.http
    assert settings.header_timeout == 2.0 and settings.max_connections_per_client == 1024
    assert config().residency.http == HTTPSettings()


@pytest.mark.parametrize(
    "http",
    [
        {"max_connections_per_client": 2000},
        {"max_requests": 8, "max_requests_per_client": 9},
        {"body_budget_bytes": 4096, "body_budget_per_client_bytes": 8192, "max_body_bytes": 2048},
        {"max_body_bytes": 16 << 20},
        {"header_timeout": 0},
        {"header_timout": 5},
    ],
)
def test_http_settings_out_of_order_or_unknown_are_refused(http: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        config({"http": http})


# -- caps under a descriptor limit ---------------------------------------------------------------


def test_without_a_descriptor_limit_the_caps_are_the_settings() -> None:
    caps = Caps.under(HTTPSettings(), None)
    assert (caps.connections, caps.connections_per_client, caps.backlog, caps.clamped) == (
        1024,
        256,
        2048,
        False,
    )


def test_a_low_descriptor_limit_lowers_the_connection_caps_in_proportion() -> None:
    caps = Caps.under(HTTPSettings(), 1024, upstreams=1)
    spare = 1024 - FD_RESERVE - FD_RESERVE_PER_UPSTREAM
    assert caps.clamped and caps.connections == spare // 2
    assert caps.connections_per_client == 256 * caps.connections // 1024
    # Behind a load balancer (per client = total), one client still gets every connection.
    lb = HTTPSettings(max_connections_per_client=1024)
    assert Caps.under(lb, 1024, upstreams=1).connections_per_client == caps.connections


@given(
    fd_limit=st.integers(min_value=1, max_value=1 << 21), upstreams=st.integers(min_value=0, max_value=500)
)
def test_counted_connections_and_two_accept_passes_fit_under_the_descriptor_limit(
    fd_limit: int, upstreams: int
) -> None:
    caps = Caps.under(HTTPSettings(), fd_limit, upstreams)
    reserve = FD_RESERVE + FD_RESERVE_PER_UPSTREAM * upstreams
    if fd_limit - reserve >= 16:
        assert caps.connections + 2 * caps.backlog <= fd_limit - reserve
    assert 1 <= caps.connections_per_client <= caps.connections
    assert caps.connections <= 1024 and 2 <= caps.backlog <= 2048


# -- the ledger -----------------------------------------------------------------------------------


class GaugeMachine(RuleBasedStateMachine):
    """A gauge against a plain count: a refused take changes nothing; what is given back leaves
    no trace of the client."""

    def __init__(self) -> None:
        super().__init__()
        self.gauge = Gauge(cap=10, cap_per_client=4)
        self.model: Counter[str] = Counter()

    @rule(client=st.sampled_from("abcd"), amount=st.integers(min_value=0, max_value=5))
    def take(self, client: str, amount: int) -> None:
        fits = sum(self.model.values()) + amount <= 10 and self.model[client] + amount <= 4
        assert self.gauge.take(client, amount) is fits
        if fits:
            self.model[client] += amount

    @rule(client=st.sampled_from("abcd"), data=st.data())
    def give(self, client: str, data: st.DataObject) -> None:
        amount = data.draw(st.integers(min_value=0, max_value=self.model[client]))
        self.gauge.give(client, amount)
        self.model[client] -= amount

    @invariant()
    def agrees(self) -> None:
        assert self.gauge.total == sum(self.model.values())
        assert dict(self.gauge.per_client) == {c: n for c, n in self.model.items() if n}


test_a_gauge_holds_what_its_caps_allow_and_nothing_else = GaugeMachine.TestCase


# -- the tally -----------------------------------------------------------------------------------


def test_the_first_event_of_a_quiet_spell_is_logged_and_repeats_come_as_one_count() -> None:
    tally = Tally(interval=10)
    assert tally.note(Event.ACCEPT_FAILED, 0.0)
    assert not any(tally.note(Event.ACCEPT_FAILED, t / 10) for t in range(1, 1000))
    assert tally.note(Event.BODY_TIMED_OUT, 5.0)  # another kind has its own spell
    assert tally.next_due() == 10.0
    assert tally.due(9.9) == []
    assert tally.due(10.0) == [(Event.ACCEPT_FAILED, 999)]
    # A flood that goes on is counted interval by interval; a kind with no repeat goes quiet.
    assert not tally.note(Event.ACCEPT_FAILED, 12.0)
    assert tally.due(20.0) == [(Event.ACCEPT_FAILED, 1)]
    assert tally.due(30.0) == []
    assert tally.next_due() is None
    assert tally.note(Event.ACCEPT_FAILED, 31.0)


# -- the front's logging hooks ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_failed_accepts_are_counted_and_other_loop_errors_passed_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    front = Front()
    passed: list[dict[str, object]] = []
    handle = front.exception_handler(lambda loop, context: passed.append(context))
    loop = asyncio.get_running_loop()
    with socket.socket() as sock, caplog.at_level(logging.INFO, "residency.gateway.http"):
        failed = {"message": "accept failed", "exception": OSError(errno.EMFILE, "Too many open files")}
        for _ in range(2000):
            handle(loop, {**failed, "socket": sock})
        other = {"message": "something else", "exception": OSError(errno.EMFILE, "Too many open files")}
        handle(loop, other)
        front.close()
    assert passed == [other]  # an EMFILE that is not an accept's is not ours to hide
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(r.exc_info is None for r in caplog.records)
    assert "EMFILE" in lines[0] and "1999 more" in lines[1]


@pytest.mark.anyio
async def test_uvicorns_per_request_warnings_are_counted_instead(caplog: pytest.LogCaptureFixture) -> None:
    front = Front()
    uvicorn_log = logging.getLogger("uvicorn.error")
    counted = front.log_filter()
    uvicorn_log.addFilter(counted)
    try:
        with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, "residency.gateway.http"):
            for _ in range(100):
                uvicorn_log.warning("Invalid HTTP request received.")
                uvicorn_log.warning("Unsupported upgrade request.")
            uvicorn_log.warning("something uvicorn has never said")
            front.close()
    finally:
        uvicorn_log.removeFilter(counted)
    lines = [r.getMessage() for r in caplog.records]
    assert "something uvicorn has never said" in lines
    assert not any(line.startswith(("Invalid HTTP", "Unsupported upgrade")) for line in lines)
    assert len(lines) == 3 and "199 more" in lines[-1], lines


# -- the descriptor limit -------------------------------------------------------------------------


def test_the_soft_descriptor_limit_is_raised_toward_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = FD_TARGET if hard == resource.RLIM_INFINITY else min(hard, FD_TARGET)
    if ceiling <= 256:
        pytest.skip(f"the hard descriptor limit is {hard}: nothing to raise toward")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert raise_fd_limit() == ceiling
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (ceiling, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
