"""Upstream credentials without a provider: the config, the redaction of secrets, the token cache
on a clock the tests drive, and a caller with no token. The provider-backed tests are in
``test_upstream_credentials_provider``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from residency._cli import main
from residency._errors import ConfigError
from residency._gateway import parse_config
from residency._gateway._config import HTTPServer, Secrets
from residency._gateway._token_cache import Fetched, TokenCache
from residency._gateway._upstream_auth import Caller, UpstreamAuthFailure, UpstreamCredentials

SECRET = "s3cret-value-of-the-client-0123456789"
ENV = {"UPSTREAM_SECRET": SECRET}


def _entry(**credentials: Any) -> dict[str, Any]:
    return {"url": "https://tools.example.com/mcp", "credentials": credentials}


def _parse(entry: dict[str, Any]) -> Any:
    return parse_config(json.dumps({"mcpServers": {"up": entry}}, indent=2), environ=ENV)


CC = {
    "mode": "client_credentials",
    "issuer": "https://login.example.com",
    "client_id": "gateway",
    "client_secret": "${UPSTREAM_SECRET}",
}


# -- config -----------------------------------------------------------------------------------


def test_client_secret_is_read_from_the_environment_and_never_shown() -> None:
    cfg = _parse(_entry(**CC))
    server = cfg.servers["up"]
    assert isinstance(server, HTTPServer) and server.credentials is not None
    assert server.credentials.client_secret is not None
    assert server.credentials.client_secret.get_secret_value() == SECRET
    assert SECRET not in repr(cfg) and SECRET not in str(server.credentials)
    assert cfg.secrets().redact(f"the secret is {SECRET}") == "the secret is ***"


@pytest.mark.parametrize(
    ("credentials", "words"),
    [
        ({**CC, "client_secret": None}, "client_credentials needs client_secret"),
        ({k: v for k, v in CC.items() if k != "issuer"}, "needs token_endpoint, or issuer"),
        ({"mode": "token_exchange", "client_id": "g"}, "token_exchange needs client_secret"),
        ({"mode": "passthrough", "client_id": "g"}, "passthrough sends the caller's own token"),
        ({**CC, "issuer": "http://login.example.com"}, "must use https://"),
        ({**CC, "mode": "exchange"}, "expected one of"),
        ({**CC, "client_secret": "${NOT_SET_ANYWHERE}"}, "NOT_SET_ANYWHERE is not set"),
        ({**CC, "scopes": ["a b"]}, "is not a scope"),
        ({**CC, "refresh_margin": -1}, "expected 0.0 or more"),
    ],
)
def test_a_wrong_credentials_entry_is_a_config_error(credentials: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(_entry(**{k: v for k, v in credentials.items() if v is not None}))
    assert words in str(caught.value)
    assert "mcpServers.up.credentials" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_mistyped_credentials_key_is_named_with_the_key_it_was_meant_to_be() -> None:
    with pytest.raises(ConfigError) as caught:
        _parse(_entry(**CC, client_secert="x"))
    assert "did you mean 'client_secret'?" in str(caught.value)


def test_credentials_and_a_static_authorization_header_are_one_too_many() -> None:
    with pytest.raises(ConfigError) as caught:
        _parse({**_entry(**CC), "headers": {"Authorization": "Bearer abcdefgh12345678"}})
    assert "remove it from headers" in str(caught.value)
    assert "abcdefgh12345678" not in str(caught.value)


def test_per_caller_credentials_refuse_the_handshake_era() -> None:
    with pytest.raises(ConfigError) as caught:
        _parse({**_entry(mode="passthrough"), "era": "legacy"})
    assert "2026-07-28 era" in str(caught.value)


def test_config_check_never_prints_the_client_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_SECRET", SECRET)
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": {"up": _entry(**CC)}}, indent=2))
    capsys.readouterr()
    assert main(["config", "check", "--no-connect", str(path)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"mcpServers": {"up": _entry(**{**CC, "client_secret": SECRET, "timeout": -1})}})
    )
    assert main(["config", "check", "--no-connect", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert "credentials.timeout" in err
    assert SECRET not in out and SECRET not in err


# -- the token cache --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fetcher(lifetime: float | None = 100.0) -> tuple[list[str], Any]:
    issued: list[str] = []

    async def fetch() -> Fetched:
        issued.append(f"token-number-{len(issued) + 1}")
        return Fetched(issued[-1], lifetime=lifetime)

    return issued, fetch


@pytest.mark.anyio
async def test_a_token_is_reused_until_the_margin_before_expiry_then_fetched_again() -> None:
    clock = Clock()
    cache = TokenCache(margin=10, clock=clock)
    issued, fetch = _fetcher(100)
    assert await cache.get("k", fetch) == "token-number-1"
    clock.now += 89.9
    assert await cache.get("k", fetch) == "token-number-1"
    clock.now += 0.1  # 10 s before expiry
    assert await cache.get("k", fetch) == "token-number-2"
    assert issued == ["token-number-1", "token-number-2"]


@pytest.mark.anyio
async def test_a_short_lived_token_is_still_reused_for_half_its_lifetime() -> None:
    clock = Clock()
    cache = TokenCache(margin=60, clock=clock)
    issued, fetch = _fetcher(4)
    await cache.get("k", fetch)
    clock.now += 1.9
    assert await cache.get("k", fetch) == "token-number-1"
    clock.now += 0.1
    assert await cache.get("k", fetch) == "token-number-2"
    assert issued == ["token-number-1", "token-number-2"]


@pytest.mark.anyio
async def test_a_cap_shortens_what_the_lifetime_allows() -> None:
    clock = Clock()
    cache = TokenCache(margin=0, clock=clock)
    issued: list[str] = []

    async def fetch() -> Fetched:
        issued.append(f"exchanged-{len(issued)}")
        return Fetched(issued[-1], lifetime=600, cap=30)

    await cache.get("caller", fetch)
    clock.now += 30
    await cache.get("caller", fetch)
    assert len(issued) == 2


@pytest.mark.anyio
async def test_concurrent_requests_share_one_fetch() -> None:
    cache = TokenCache(margin=0, clock=Clock())
    release = anyio.Event()
    calls = 0

    async def fetch() -> Fetched:
        nonlocal calls
        calls += 1
        await release.wait()
        return Fetched("the-only-token", lifetime=100)

    got: list[str] = []

    async def one() -> None:
        got.append(await cache.get("k", fetch))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            release.set()
    assert calls == 1 and got == ["the-only-token"] * 10


@pytest.mark.anyio
async def test_a_failed_fetch_fails_its_waiters_and_the_next_request_fetches_again() -> None:
    cache = TokenCache(margin=0, clock=Clock())
    release = anyio.Event()
    calls = 0

    async def failing() -> Fetched:
        nonlocal calls
        calls += 1
        await release.wait()
        raise UpstreamAuthFailure("the token endpoint refused", server="up")

    failures: list[BaseException] = []

    async def one() -> None:
        try:
            await cache.get("k", failing)
        except UpstreamAuthFailure as exc:
            failures.append(exc)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            release.set()
    assert calls == 1 and len(failures) == 3
    _, fetch = _fetcher()
    assert await cache.get("k", fetch) == "token-number-1"


@pytest.mark.anyio
async def test_a_cancelled_fetch_lets_the_next_waiter_fetch() -> None:
    cache = TokenCache(margin=0, clock=Clock())
    never = anyio.Event()

    async def hangs() -> Fetched:
        await never.wait()
        raise AssertionError

    _, fetch = _fetcher()
    got: list[str] = []
    first = anyio.CancelScope()

    async def leader() -> None:
        with first:
            await cache.get("k", hangs)

    async def second() -> None:
        got.append(await cache.get("k", fetch))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            first.cancel()
    assert got == ["token-number-1"]


@pytest.mark.anyio
async def test_held_tokens_are_scrubbed_while_held_and_the_cache_is_bounded() -> None:
    clock = Clock()
    secrets = Secrets()
    cache = TokenCache(margin=0, size=2, clock=clock, on_hold=secrets.add, on_drop=secrets.discard)
    _, fetch = _fetcher(100)
    for key in ("a", "b", "c"):
        await cache.get(key, fetch)
    assert len(cache) == 2
    assert secrets.redact("token-number-1 token-number-2 token-number-3") == "token-number-1 *** ***"
    cache.invalidate("b", "token-number-2")
    assert secrets.redact("token-number-2") == "token-number-2"
    assert cache.fresh("b") is None and cache.fresh("c") == "token-number-3"


# -- a caller with no token -------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["token_exchange", "passthrough"])
async def test_a_caller_without_a_token_gets_a_clear_error(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    entry = _entry(**{**CC, "mode": mode}) if mode == "token_exchange" else _entry(mode="passthrough")
    server = _parse(entry).servers["up"]
    credentials = UpstreamCredentials("up", server, secrets=Secrets())
    with pytest.raises(UpstreamAuthFailure) as caught:
        await credentials.call_token(None)
    assert "takes each caller's own OAuth access token" in str(caught.value)
    assert caught.value.server == "up"
    expired = Caller("an-expired-token-0123456789", expires_at=1)
    with pytest.raises(UpstreamAuthFailure, match="has expired"):
        await credentials.call_token(expired)
    assert "an-expired-token" not in repr(expired)


@pytest.mark.anyio
async def test_passthrough_sends_the_callers_own_token_and_scrubs_it_while_held() -> None:
    secrets = Secrets()
    credentials = UpstreamCredentials("up", _parse(_entry(mode="passthrough")).servers["up"], secrets=secrets)
    alice = Caller("alice-token-0123456789")
    bob = Caller("bob-token-0123456789")
    assert (await credentials.call_token(alice)).token == alice.token
    assert (await credentials.call_token(bob)).token == bob.token
    assert secrets.redact(f"{alice.token} {bob.token}") == "*** ***"
    assert await credentials.own_token() is None


def test_no_log_line_here_holds_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _parse(_entry(**CC))
    assert SECRET not in caplog.text


def test_a_token_endpoint_that_quotes_a_secret_is_scrubbed_before_its_words_are_cut() -> None:
    cfg = _parse(_entry(**{**CC, "mode": "token_exchange"}))
    credentials = UpstreamCredentials("up", cfg.servers["up"], secrets=cfg.secrets())
    subject = "the-callers-own-token-0123456789"
    said = "x" * 245 + f" {subject} {SECRET}"  # cut first, the message would keep 6 of its characters
    answer = httpx2.Response(400, json={"error": "invalid_grant", "error_description": said})
    with pytest.raises(UpstreamAuthFailure) as caught:
        credentials._answer(answer, "token exchange", None, subject)
    message = str(caught.value)
    assert "refused the token exchange (HTTP 400, invalid_grant: xxx" in message
    assert SECRET[:6] not in message and subject[:6] not in message
