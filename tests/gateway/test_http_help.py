"""The HTTP front answers a person with curl: a page at ``/`` whose examples work as printed, and
a POST that names no session is told what to send.

The gateway is real (``serve_http`` on a loopback socket in this process); the requests are
httpx2's, built from the page's own curl commands.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import anyio
import httpx2
import pytest

from residency._gateway import Gateway, IncidentDesk
from residency._gateway._http_help import MISSING_SESSION, MODERN_VERSION, root_page
from tests._timing import START, STEP
from tests.gateway.conftest import config, served_over_http

pytestmark = pytest.mark.anyio

TOKEN = "help-page-token-0123456789abcdef"


@dataclass
class Curl:
    """One curl command of the page: its URL, headers and body."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    def sent(self, **values: str) -> tuple[dict[str, str], bytes]:
        """Headers and body with the page's ``$NAME`` shell variables given ``values``."""

        def fill(text: str) -> str:
            return re.sub(r"\$([A-Z_]+)", lambda m: values[m.group(1)], text)

        return {k: fill(v) for k, v in self.headers.items()}, fill(self.body).encode()


def curls(page: str) -> list[Curl]:
    """The curl commands of the page, each read as a shell would split it."""
    found: list[Curl] = []
    lines = page.splitlines()
    for at, line in enumerate(lines):
        if not line.lstrip().startswith("curl "):
            continue
        command = [line]
        while command[-1].endswith("\\"):
            at += 1
            command.append(lines[at])
        words = shlex.split(" ".join(part.rstrip("\\") for part in command))
        curl = Curl(url=next(w for w in words if w.startswith("http")))
        for flag, value in pairwise(words):
            if flag == "-H":
                name, _, given = value.partition(": ")
                curl.headers[name] = given
            elif flag == "-d":
                curl.body = value
        found.append(curl)
    return found


def answers(response: httpx2.Response) -> list[Any]:
    """The JSON-RPC messages of an answer, SSE or JSON."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    return [response.json()]


@asynccontextmanager
async def gateway_url(token: str | None = None) -> AsyncIterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of a gateway on the demo desk."""
    gateway = Gateway(config(), upstreams={"desk": IncidentDesk().server})
    async with gateway, served_over_http(gateway, wait=START, token=token) as url:
        yield url.removesuffix("/mcp")


async def _page(http: httpx2.AsyncClient, base: str, **headers: str) -> httpx2.Response:
    return await http.get(f"{base}/", headers=headers)


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_the_root_page_s_curl_examples_of_both_eras_work_as_printed(token: str | None) -> None:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    with anyio.fail_after(START):
        async with gateway_url(token) as base, httpx2.AsyncClient(timeout=STEP) as http:
            page = await _page(http, base, **auth)
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/plain")
            text = page.text
            assert f"{base}/mcp" in text and f"{base}/healthz" in text
            initialize, listed, modern = curls(text)
            values = {"RESIDENCY_TOKEN": token} if token else {}

            headers, body = initialize.sent(**values)
            opened = await http.post(initialize.url, content=body, headers=headers)
            assert opened.status_code == 200
            assert answers(opened)[0]["result"]["serverInfo"]
            session = opened.headers["mcp-session-id"]

            headers, body = listed.sent(SESSION=session, **values)
            tools = answers(await http.post(listed.url, content=body, headers=headers))[0]["result"]["tools"]
            assert "search_tools" in [t["name"] for t in tools]

            headers, body = modern.sent(**values)
            assert "Mcp-Session-Id" not in headers and headers["MCP-Protocol-Version"] == MODERN_VERSION
            (answer,) = answers(await http.post(modern.url, content=body, headers=headers))
            assert "search_tools" in [t["name"] for t in answer["result"]["tools"]]


async def test_the_root_page_is_guarded_as_healthz_is_and_shows_no_token() -> None:
    with anyio.fail_after(START):
        async with gateway_url(TOKEN) as base, httpx2.AsyncClient(timeout=STEP) as http:
            for path in ("/", "/healthz"):
                assert (await http.get(base + path)).status_code == 401
                wrong = {"Authorization": "Bearer " + "x" * len(TOKEN)}
                assert (await http.get(base + path, headers=wrong)).status_code == 401
                auth = {"Authorization": f"Bearer {TOKEN}"}
                foreign = {**auth, "Host": "evil.example"}
                assert (await http.get(base + path, headers=foreign)).status_code == 421
                origin = {**auth, "Origin": "http://evil.example"}
                assert (await http.get(base + path, headers=origin)).status_code == 403
            page = await _page(http, base, Authorization=f"Bearer {TOKEN}")
            assert page.status_code == 200
            assert TOKEN not in page.text and "$RESIDENCY_TOKEN" in page.text


async def test_a_post_without_a_session_id_is_told_to_initialize_or_send_the_envelope() -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    bare = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    with anyio.fail_after(START):
        async with gateway_url() as base, httpx2.AsyncClient(timeout=STEP) as http:
            answer = await http.post(f"{base}/mcp", content=bare, headers=headers)
            assert answer.status_code == 400
            assert answer.headers["content-type"] == "application/json"
            assert int(answer.headers["content-length"]) == len(answer.content)
            body = answer.json()
            assert body["jsonrpc"] == "2.0" and body["id"] is None
            assert body["error"]["code"] == -32600
            message = body["error"]["message"]
            assert message.startswith(MISSING_SESSION)
            assert "initialize" in message and MODERN_VERSION in message and "Mcp-Method" in message
            # Any other answer passes unchanged: a session id the gateway never gave is 404.
            unknown = await http.post(f"{base}/mcp", content=bare, headers={**headers, "Mcp-Session-Id": "x"})
            assert unknown.status_code == 404 and "initialize" not in unknown.text


def test_under_oauth_the_page_asks_for_an_access_token_and_names_the_metadata() -> None:
    page = root_page("http://127.0.0.1:8765", "/mcp", "/healthz", "/metrics", token=False, oauth=True)
    assert "http://127.0.0.1:8765/.well-known/oauth-protected-resource" in page
    assert [c.headers["Authorization"] for c in curls(page)] == ["Bearer $ACCESS_TOKEN"] * 3
    assert "RESIDENCY_TOKEN" not in page
    plain = root_page("http://127.0.0.1:8765", "/mcp", "/healthz", "/metrics", token=False)
    assert all("Authorization" not in c.headers for c in curls(plain))
