"""One HTTP gateway per test module, shared by its tests; each test keeps to sessions of its own.

Two in fact, each started only if a test asks: ``gateway`` for the list scenario, and
``reference_gateway`` for the by-reference task (``scenario.reference_config()``).
A ``residency serve --transport http`` of the scenario config starts the first time a test of
the module asks for ``gateway`` and stops after the module's last test. What a test does there
is kept apart by session: a handshake-era connection is a session of its own (its
``Mcp-Session-Id``), a 2026-07-28 client names its session with ``session_key``, which no other
test uses, and an anonymous 2026-07-28 request is a throwaway session. What the sessions do
share is the gateway's one upstream desk (its incidents and their timelines): a test that reads
desk state counts only what it added. A test that needs a fresh process, another config, or a
state no session can give starts its own with ``http_serve``; stdio clients start theirs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.clients import scenario
from tests.clients._serve import Served, Shared, serve_shared


@pytest.fixture(scope="module")
def shared_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """The module's ``residency serve --transport http`` of ``scenario.config()``."""
    config = scenario.write_config(tmp_path_factory.mktemp("gateway"))
    with serve_shared("--config", str(config), scenario.DEMO) as shared:
        yield shared


@pytest.fixture
def gateway(shared_gateway: Shared) -> Served:
    """The module's shared HTTP gateway, its log starting with this test."""
    return shared_gateway.for_a_test()


@pytest.fixture(scope="module")
def shared_reference_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """The module's ``residency serve --transport http`` of ``scenario.reference_config()``."""
    config = scenario.write_reference_config(tmp_path_factory.mktemp("reference"))
    with serve_shared("--config", str(config), scenario.DEMO) as shared:
        yield shared


@pytest.fixture
def reference_gateway(shared_reference_gateway: Shared) -> Served:
    """The module's shared HTTP gateway of the by-reference task, its log starting with this test."""
    return shared_reference_gateway.for_a_test()


@pytest.fixture
def session_key(request: pytest.FixtureRequest) -> str:
    """A session key that no other test (nor another run of this one) uses."""
    return f"{request.node.originalname[:80]}-{uuid.uuid4().hex[:12]}"
