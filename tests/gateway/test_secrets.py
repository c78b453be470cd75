"""Upstream env and header values never reach a client or a log line; ordinary words do."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from residency._cli._serve import configure_logging, redact_logs
from residency._gateway._config import Secrets
from residency._gateway._errors import redact_result
from residency._gateway._http import bind
from tests._timing import START
from tests.gateway import leaky_upstream
from tests.gateway.conftest import agent, reason, running, text

ENV_SECRET = "leaky-env-value-4711"
HEADER_SECRET = "hdr-credential-0815"
LEAKY = {
    "command": sys.executable,
    "args": [str(Path(leaky_upstream.__file__))],
    "env": {leaky_upstream.ENV: ENV_SECRET, "MODE": "hang"},
}


@asynccontextmanager
async def http_upstream() -> AsyncIterator[str]:
    """``leaky_upstream`` over streamable HTTP on an ephemeral loopback port; yields its URL."""
    import uvicorn

    app = leaky_upstream.build().streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    sock = bind("127.0.0.1", 0)  # listening already: connections wait until uvicorn accepts
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
            finally:
                server.should_exit = True
    finally:
        sock.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_is_error_result_quoting_upstream_env_and_headers_reaches_the_client_scrubbed(
    era: str,
) -> None:
    with anyio.fail_after(START):
        async with http_upstream() as url:
            remote = {"url": url, "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}}
            async with running(servers={"leaky": LEAKY, "remote": remote}) as gw, agent(gw, era) as a:
                names = sorted(n for n in gw.catalog.names() if n.endswith("leak"))
                assert len(names) == 2, names  # one each from stdio and HTTP, namespaced
                for name in names:
                    result = await a.use(name, {})
                    assert result.is_error
                    dumped = result.model_dump_json(by_alias=True)
                    assert ENV_SECRET not in dumped and HEADER_SECRET not in dumped
                    assert "***" in text(result)
                    assert "***" in str(result.structured_content) and "***" in str(result.meta)


@pytest.mark.anyio
async def test_an_ordinary_word_in_an_env_value_is_not_scrubbed(era: str) -> None:
    # The env values come from the config (an entry left disabled, so no process starts); the
    # upstream offering the tool ``hang`` runs in-process. ``hang`` is pinned, so the list shows
    # it (by reference, the default, the list shows the pinned tools only).
    configured = {**LEAKY, "disabled": True}
    leaky = {"leaky": leaky_upstream.build()}
    with anyio.fail_after(START):
        async with (
            running({"pinned": ["hang"]}, servers={"configured": configured}, upstreams=leaky) as gw,
            agent(gw, era) as a,
        ):
            assert gw.secrets.redact(ENV_SECRET) == "***"  # the entry's env values are secrets
            refused = await a.use("hang", {})  # "wall" is required
            assert reason(refused) == "arguments_invalid"
            assert text(refused).startswith("hang: invalid arguments")
            assert text(await a.use("hang", {"wall": "north"})) == "hang: on north"
            assert "hang" in await a.names()


# -- which values are secrets -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["hang", "true", "debug", "8080", "us-east", "/tmp", "my_app", "abc", ""])
def test_words_identifiers_numbers_and_paths_under_8_characters_are_not_secrets(value: str) -> None:
    secrets = Secrets([value])
    assert not Secrets.is_secret(value)
    assert secrets.redact(f"tool {value} ran") == f"tool {value} ran"


@pytest.mark.parametrize("value", ["pa55", "x$k!", "hunter22", "production", "tok-en-value-99"])
def test_short_values_mixing_kinds_and_every_value_of_8_characters_are_secrets(value: str) -> None:
    assert Secrets([value]).redact(f"got {value}.") == "got ***."


def test_a_header_credential_is_scrubbed_without_its_scheme() -> None:
    secrets = Secrets([f"Bearer {HEADER_SECRET}", "Basic dXNlcjpwYXNz"])
    assert secrets.redact(f"token {HEADER_SECRET} and dXNlcjpwYXNz") == "token *** and ***"


def test_redacting_a_result_without_secrets_in_it_returns_it_untouched() -> None:
    result = types.CallToolResult(content=[types.TextContent(type="text", text="hang on")])
    assert redact_result(result, Secrets([ENV_SECRET, "hang"])) is result
    assert redact_result(result, Secrets()) is result


def test_a_secret_needing_json_escapes_is_still_found() -> None:
    secret = 'quote"and\\slash-1'
    result = types.CallToolResult(content=[types.TextContent(type="text", text=f"x {secret} y")])
    assert text(redact_result(result, Secrets([secret]))) == "x *** y"


# -- logs --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
def test_every_log_line_is_scrubbed_whichever_library_writes_it(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("debug")
    redact_logs(Secrets([ENV_SECRET, f"Bearer {HEADER_SECRET}"]).redact)
    logging.getLogger("mcp.client.stdio").warning("starting with env API_KEY=%s", ENV_SECRET)
    try:
        raise RuntimeError(f"upstream said {HEADER_SECRET}")
    except RuntimeError:
        logging.getLogger("uvicorn.error").exception("request failed")
    logging.getLogger("residency.gateway").debug("headers %s", {"authorization": f"Bearer {HEADER_SECRET}"})
    logging.getLogger("mcp.client.streamable_http").debug("sending headers %s", HEADER_SECRET)
    err = capsys.readouterr().err
    assert ENV_SECRET not in err and HEADER_SECRET not in err
    assert "starting with env API_KEY=***" in err
    assert "upstream said ***" in err  # the traceback too
    assert "headers {'authorization': '***'}" in err
    assert "sending headers" not in err  # the SDK's debug lines stay out at any --log-level
