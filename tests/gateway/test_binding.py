"""``residency serve --host 0.0.0.0``: served to clients on the machine's real addresses, with the
DNS-rebinding check still refusing a ``Host`` or ``Origin`` no one allowed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from residency import ConfigError
from residency._cli import build_parser
from residency._gateway import parse_config
from residency._gateway._http import machine_names
from residency._gateway._run import ServeOptions
from tests._timing import STEP
from tests.clients._serve import Shared, serve_shared

TOKEN = "binding-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ALLOWED = "gw.example.internal"


def _routable() -> str:
    """The machine's own non-loopback address (the one it reaches other hosts from)."""
    names = [n for n in machine_names() if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", n) and n != "127.0.0.1"]
    if not names:
        pytest.skip("this machine has no non-loopback IPv4 address")
    return names[-1]


@pytest.fixture(scope="module")
def wildcard() -> Iterator[tuple[Shared, int]]:
    """``residency serve --transport http --host 0.0.0.0 --allowed-host ...`` with a token."""
    with serve_shared("--host", "0.0.0.0", "--allowed-host", ALLOWED, "--token", TOKEN) as shared:
        port = int(re.search(r":(\d+)/", shared.served.url).group(1))  # type: ignore[union-attr]
        yield shared, port


@pytest.mark.slow
def test_bound_to_every_address_it_serves_loopback_the_machine_address_and_allowed_names(
    wildcard: tuple[Shared, int],
) -> None:
    _, port = wildcard
    address = _routable()
    with httpx2.Client(timeout=STEP) as http:
        for base in (f"http://127.0.0.1:{port}", f"http://{address}:{port}", f"http://localhost:{port}"):
            answer = http.get(f"{base}/healthz", headers=AUTH)
            assert answer.status_code == 200, (base, answer.status_code, answer.text)
        # A DNS name the operator allowed, reached through the real address.
        named = http.get(f"http://{address}:{port}/healthz", headers={**AUTH, "Host": f"{ALLOWED}:{port}"})
        assert named.status_code == 200
        # DNS rebinding: a name nobody allowed, and a foreign page's Origin, are still refused.
        rebound = http.get(
            f"http://{address}:{port}/healthz", headers={**AUTH, "Host": f"evil.example:{port}"}
        )
        assert rebound.status_code == 421
        foreign = http.get(
            f"http://{address}:{port}/healthz", headers={**AUTH, "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        # The token still guards everything.
        assert http.get(f"http://{address}:{port}/healthz").status_code == 401


@pytest.mark.slow
def test_a_real_client_on_the_machine_address_lists_and_calls(wildcard: tuple[Shared, int]) -> None:
    _, port = wildcard
    url = f"http://{_routable()}:{port}/mcp"

    async def run() -> tuple[list[str], bool]:
        with anyio.fail_after(STEP):
            async with (
                httpx2.AsyncClient(
                    headers={**AUTH, "Residency-Session": "binding"}, timeout=httpx2.Timeout(STEP, read=None)
                ) as http,
                Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
            ):
                names = [t.name for t in (await client.list_tools()).tools]
                found = await client.call_tool("search_tools", {"query": "list open incidents"})
                return names, found.is_error

    names, failed = anyio.run(run)
    assert "search_tools" in names and "call_tool" in names
    assert not failed


def _options(*argv: str) -> ServeOptions:
    return ServeOptions.from_args(build_parser().parse_args(["serve", "--transport", "http", *argv]), {})


def test_allowed_hosts_come_from_the_config_and_the_command_line() -> None:
    options = _options("--token", TOKEN, "--allowed-host", "a.example", "--allowed-host", "10.0.0.7")
    assert options.allowed_hosts == ("a.example", "10.0.0.7")
    config = parse_config('{"mcpServers": {}, "residency": {"allowed_hosts": ["lb.example", "::1"]}}')
    assert config.residency.allowed_hosts == ("lb.example", "::1")


@pytest.mark.parametrize(
    "bad", ["http://a.example", "a.example:8080", "*.example", "a.example/mcp", "a b", ""]
)
def test_a_malformed_allowed_host_is_refused_naming_where(bad: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _options("--token", TOKEN, "--allowed-host", bad)
    assert raised.value.where == "--allowed-host"
    with pytest.raises(ConfigError):
        parse_config(json.dumps({"mcpServers": {}, "residency": {"allowed_hosts": [bad]}}))
