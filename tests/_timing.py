"""How long the tests wait: generous bounds of their own, apart from the product's timeouts.

A test that waits for something (a process to start, a notice to arrive, a killed process to be
reaped) bounds the wait far above what it takes on an idle machine, so a loaded machine makes the
test slower but not red, while a real hang still fails it instead of stalling the run. These are
bounds on waiting, never speed targets: those live in the benchmarks, as ratios.

Every bound is multiplied by ``RESIDENCY_TEST_TIME_SCALE`` (default 1; e.g. 3 on a machine
slower still). The product's own timeouts (``call_timeout``, ``startup_timeout``, the upstream
timeouts) are not set here: a test that exercises one sets it in its config, next to what it
checks, and a bound that must stay below such a setting says so where it is used. One exception:
``UPSTREAMS_UP``, the settings of a gateway whose subject is not how its upstreams start, so that
it serves once they are up; a test that waits for such a gateway waits ``SERVING``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "CLEANUP",
    "NOTICE",
    "READY_WAIT",
    "SCALE",
    "SERVING",
    "START",
    "STEP",
    "TEST",
    "UPSTREAMS_UP",
    "scaled",
]


def _scale() -> float:
    raw = os.environ.get("RESIDENCY_TEST_TIME_SCALE", "1")
    try:
        value = float(raw)
    except ValueError:
        raise RuntimeError(f"RESIDENCY_TEST_TIME_SCALE={raw!r} is not a number") from None
    if not value > 0:
        raise RuntimeError(f"RESIDENCY_TEST_TIME_SCALE={raw!r} must be above 0")
    return value


SCALE = _scale()
"""What every bound here is multiplied by (``RESIDENCY_TEST_TIME_SCALE``)."""


def scaled(seconds: float) -> float:
    """``seconds`` times :data:`SCALE`: for a wait a test must size itself."""
    return seconds * SCALE


STEP = scaled(30)
"""One request and its answer, in process or over a local socket."""

NOTICE = scaled(30)
"""A notification the gateway sends on its own (``list_changed``, a reload after a change)."""

START = scaled(90)
"""A Python interpreter (a gateway, an upstream, a worker) starting and saying it is ready."""

TEST = scaled(240)
"""A whole test that starts several interpreters one after another."""

CLEANUP = scaled(30)
"""A killed or closed process being reaped."""

READY_WAIT = START
"""What ``UPSTREAMS_UP`` tells a gateway to wait for its upstreams before it serves."""

UPSTREAMS_UP: Mapping[str, float] = {"ready_wait": READY_WAIT, "startup_timeout": START}
"""``residency`` settings for a gateway that starts upstream processes, in a test whose subject is
not their start: it serves once they are up (``ready_wait``; 5 s by default, after which a first
call finds one still starting), and none is failed for starting slowly (``startup_timeout``; 30 s
by default). A test of those settings sets its own."""

SERVING = START + READY_WAIT
"""A gateway process serving: its interpreter starting, then its upstreams (``UPSTREAMS_UP``)."""
