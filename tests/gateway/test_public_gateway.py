"""The gateway through its public names (``residency.gateway``, ``residency.demo``), as embedders use it."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client

from residency import ConfigError
from residency.demo import IncidentDesk
from residency.gateway import Gateway, parse_config, serve_http
from tests._timing import STEP

CONFIG = '{"residency": {"pinned": ["list_incidents", "get_incident"]}}'


@pytest.mark.anyio
async def test_the_module_docstrings_example_lists_the_pinned_desk_tools() -> None:
    config = parse_config(CONFIG)
    gateway = Gateway(config, upstreams={"desk": IncidentDesk().server})
    async with gateway, Client(gateway.server) as client:
        with anyio.fail_after(STEP):
            tools = [t.name for t in (await client.list_tools()).tools]
    assert tools[:2] == ["list_incidents", "get_incident"]


@pytest.mark.anyio
async def test_serve_http_serves_an_entered_gateway_on_a_free_port_until_cancelled() -> None:
    urls: list[str] = []
    ready = anyio.Event()

    def started(url: str) -> None:
        urls.append(url)
        ready.set()

    gateway = Gateway(parse_config(CONFIG), upstreams={"desk": IncidentDesk().server})
    async with gateway, anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(gateway, port=0, started=started))
        with anyio.fail_after(STEP):
            await ready.wait()
            async with Client(urls[0]) as client:
                result = await client.call_tool("get_incident", {"incident_id": "INC-2"})
        tg.cancel_scope.cancel()
    assert urls[0].startswith("http://127.0.0.1:") and urls[0].endswith("/mcp")
    assert not result.is_error
    assert result.structured_content is not None and result.structured_content["service"] == "auth"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("host", "token"),
    [
        ("0.0.0.0", None),  # beyond loopback with no token
        ("127.0.0.1", "short"),  # a token too short to be one
    ],
)
async def test_serve_http_refuses_an_unsafe_exposure_before_binding(host: str, token: str | None) -> None:
    called: list[str] = []
    async with Gateway(parse_config(CONFIG)) as gateway:
        with anyio.fail_after(STEP), pytest.raises(ConfigError):
            await serve_http(gateway, host=host, port=0, token=token, started=called.append)
    assert called == []


@pytest.mark.anyio
async def test_serve_http_refuses_a_static_token_beside_oauth() -> None:
    oauth = {"issuer": "https://id.example.com", "audience": "https://mcp.example.com/mcp"}
    called: list[str] = []
    async with Gateway(parse_config(json.dumps({"residency": {"auth": oauth}}))) as gateway:
        with anyio.fail_after(STEP), pytest.raises(ConfigError):
            await serve_http(gateway, port=0, token="a-static-token-0123456789", started=called.append)
    assert called == []
