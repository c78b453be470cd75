"""The dashboard's pages in process: what they show (the same as ``view``/``inspect``), escaping,
filters, and who may open them (token, cookie, OAuth operator scope, loopback only without)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx2
import pytest
from starlette.testclient import TestClient

from residency import SQLiteStore
from residency._cli import main
from residency._gateway import IncidentDesk
from residency._gateway._config import load_config
from residency._gateway._http import http_app
from residency._gateway._oauth import TokenValidator
from residency._gateway._oauth_http import OAuthBearer
from residency._runtime import Session
from residency._ui._app import (
    COOKIE,
    COOKIE_SECONDS,
    OPERATOR_SCOPE,
    DashboardGate,
    OperatorScope,
    Source,
    cookie_for,
    dashboard_app,
)
from residency._ui._front import store_dashboard
from residency._ui._reads import ServedWith, open_readonly
from tests._timing import START
from tests.gateway.conftest import running
from tests.gateway.oauth_keys import Clock, FakeIssuer, mint, rsa_key, settings
from tests.test_cli_view import POLICY
from tests.ui._html import Node, parse
from tests.ui._store import HOSTILE_KEY, HOSTILE_SOURCE, HOSTILE_TOOL, LOCAL_SESSIONS, populate

TOKEN = "a-dashboard-token-of-32-chars-xx"
BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return populate(tmp_path_factory.mktemp("ui"))


@pytest.fixture
def client(stored: dict[str, Any]) -> Any:
    store = open_readonly(str(stored["path"]))
    served = ServedWith.of(load_config(stored["config"]))
    app = store_dashboard(store, served, where="the store", host="127.0.0.1", token=None, loopback=True)
    try:
        with TestClient(app, base_url=BASE) as c:
            yield c
    finally:
        store.close()


def page(client: TestClient, path: str, **kwargs: Any) -> Node:
    response = client.get(path, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    return parse(response.text)


def session_path(session_id: str) -> str:
    return "/ui/session/" + quote(session_id, safe="")


# -- what the pages show ------------------------------------------------------------------------


def test_the_session_list_shows_every_session_with_its_key_and_pages_them(
    client: TestClient, stored: dict[str, Any]
) -> None:
    doc = page(client, "/ui/")
    total = LOCAL_SESSIONS + 2
    assert f"{total} of {total} sessions match; page 1 of 2" in doc.one("p", class_="summary").text()
    rows = doc.one("table", id="sessions").rows()
    assert len(rows) == 50
    key = stored["key"]
    assert [f"gateway/{key}", key, "none"] == next(r[:3] for r in rows if r[0] == f"gateway/{key}")
    second = page(client, "/ui/?page=2").one("table", id="sessions").rows()
    assert len(second) == total - 50 and not {r[0] for r in rows} & {r[0] for r in second}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=local-00", [f"local-{i:03d}" for i in range(10)]),
        ("q=AGENT", ["gateway/agent-1"]),
        ("identity=none", ["gateway/agent-1", HOSTILE_KEY]),
        ("identity=token", []),
        ("q=nothing-like-this", []),
    ],
)
def test_filters_narrow_the_list_by_id_text_and_identity(
    client: TestClient, query: str, expected: list[str]
) -> None:
    doc = page(client, f"/ui/?{query}")
    assert sorted(r[0] for r in doc.one("table", id="sessions").rows()) == sorted(expected)


def test_a_session_page_lists_what_residency_view_prints(
    client: TestClient, stored: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    key = stored["key"]
    code = main(
        [
            "view",
            "--store",
            str(stored["path"]),
            "--session",
            key,
            "--config",
            str(stored["config"]),
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    doc = page(client, session_path(f"gateway/{key}"))
    listed = doc.one("table", id="listed").rows()
    expected = [[t["name"], str(t["tokens"])] for t in printed["tools"]]
    expected += [[f"{m['name']} (meta-tool)", str(m["tokens"])] for m in printed["meta_tools"]]
    assert listed == expected
    assert [li.text() for li in doc.one("ul", id="tombstones").all("li")] == printed["tombstones"]
    assert f"{printed['total_tokens']} tokens listed" in doc.one("p", class_="summary").text()


def test_the_timeline_is_the_journal_event_log_turn_by_turn(
    client: TestClient, stored: dict[str, Any]
) -> None:
    sid = f"gateway/{stored['key']}"
    store = SQLiteStore(stored["path"])
    try:
        events = Session(store, session_id=sid, resume=True).events()
    finally:
        store.close()
    doc = page(client, session_path(sid))
    shown = []
    for section in doc.one("div", id="timeline").all("section", class_="turn"):
        turn = int(section.attrs["data-turn"])
        for li in section.all("li"):
            kind = li.one("span", class_="kind").text()
            subject = li.one("code").text()
            shown.append((turn, kind, subject, li.text().partition(": ")[2]))
    assert shown == [(e.turn, e.kind.value, e.subject, e.detail) for e in events]
    assert any(kind == "tombstoned" and subject == "update_incident" for _, kind, subject, _ in shown)
    # Two plots, each with a line for what was resident and one for showing every tool.
    assert len(doc.all("svg")) == 2 and len(doc.all("polyline")) == 4


def test_spans_show_their_provenance_and_the_archive_page_answers(client: TestClient) -> None:
    doc = page(client, session_path(HOSTILE_KEY))
    rows = doc.one("table", id="spans").rows()
    assert [r[0] for r in rows] == ["s1", "s2", "s3"]
    assert rows[0][3] == HOSTILE_SOURCE and rows[0][4] == "(original)"
    assert rows[2][4] == "s1, s2" and rows[2][5] == "1"
    archive = page(client, "/ui/chains")
    assert "archived chains" in archive.one("p", class_="summary").text()


def test_stored_markup_is_shown_as_text_never_run(client: TestClient) -> None:
    response = client.get(session_path(HOSTILE_KEY))
    assert response.status_code == 200
    text = response.text
    # The only script element is the dashboard's own, loaded from its own origin.
    assert re.findall(r"<script[^>]*>", text) == ['<script src="/ui/static/app.js" defer>']
    assert "<img" not in text and "onerror=alert(1)>" not in text
    doc = parse(text)
    assert doc.one("h1").text() == f"Session {HOSTILE_KEY}"
    assert HOSTILE_TOOL in [li.one("code").text() for li in doc.all("li") if li.all("code")]
    assert any(HOSTILE_TOOL in li.text() for li in doc.one("ul", id="tombstones").all("li"))
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "script-src 'self'" in response.headers["content-security-policy"]
    listing = client.get("/ui/?q=" + quote('"><script>'))
    assert listing.status_code == 200 and '"><script>' not in listing.text
    assert parse(listing.text).one("input", name="q").attrs["value"] == '"><script>'


def test_an_unknown_session_or_page_is_404_and_the_server_keeps_serving(client: TestClient) -> None:
    missing = client.get(session_path("no-such-<b>session</b>"))
    assert missing.status_code == 404 and "<b>session" not in missing.text
    assert "no session" in parse(missing.text).one("p", class_="refused").text()
    assert client.get("/ui/nowhere").status_code == 404
    assert client.get("/ui/").status_code == 200


def test_the_stamp_changes_when_the_journal_moves(client: TestClient, stored: dict[str, Any]) -> None:
    path = "/ui/session/local-007"
    doc = page(client, path)
    before = doc.one("main").attrs["data-stamp"]
    assert client.get("/ui/stamp", params={"path": path}).text == before
    store = SQLiteStore(stored["path"])
    try:
        session = Session(store, session_id="local-007", resume=True)
        session.tombstone("t7")
    finally:
        store.close()
    after = client.get("/ui/stamp", params={"path": path}).text
    assert after != before and page(client, path).one("main").attrs["data-stamp"] == after


def test_the_script_and_stylesheet_are_served_and_healthz_answers(client: TestClient) -> None:
    js = client.get("/ui/static/app.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "/ui/stamp" in js.text
    assert client.get("/ui/static/app.css").status_code == 200
    assert client.get("/ui/static/other.js").status_code == 404
    assert client.get("/healthz").json() == {"status": "ok"}


# -- who may open it ----------------------------------------------------------------------------


@pytest.fixture
def guarded(stored: dict[str, Any]) -> Any:
    store = open_readonly(str(stored["path"]))
    app = store_dashboard(
        store, ServedWith("compact"), where="the store", host="127.0.0.1", token=TOKEN, loopback=True
    )
    try:
        with TestClient(app, base_url=BASE, follow_redirects=False) as c:
            yield c
    finally:
        store.close()


def test_with_a_token_a_request_without_it_gets_the_sign_in_form(guarded: TestClient) -> None:
    for headers in ({}, {"authorization": "Bearer wrong-token-of-enough-chars"}, {"authorization": TOKEN}):
        response = guarded.get("/ui/", headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert parse(response.text).one("form").attrs["action"] == "/ui/login"
        assert "local-000" not in response.text
    assert guarded.get("/ui/stamp", params={"path": "/ui/"}).status_code == 401
    assert guarded.get("/ui/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_signing_in_sets_a_strict_http_only_cookie_that_is_not_the_token(guarded: TestClient) -> None:
    wrong = guarded.post("/ui/login", data={"token": "not-the-token"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert guarded.get("/ui/login").status_code == 200
    signed = guarded.post("/ui/login", data={"token": TOKEN})
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
    cookie = signed.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and "Path=/ui" in cookie
    assert TOKEN not in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    guarded.cookies.clear()  # each request below carries exactly the cookie it names

    def with_cookie(given: str) -> int:
        return guarded.get("/ui/", headers={"cookie": f"{COOKIE}={given}"}).status_code

    assert with_cookie(value) == 200
    tampered = value[:-1] + ("0" if value[-1] != "0" else "1")
    assert with_cookie(tampered) == 401
    expired = cookie_for(TOKEN, int(value.split(".")[0]) - COOKIE_SECONDS - 10)
    assert with_cookie(expired) == 401
    other_token = cookie_for("another-token-of-32-characters-x", int(value.split(".")[0]))
    assert with_cookie(other_token) == 401
    assert guarded.post("/ui/login", content=b"token=" + b"x" * 5000).status_code == 413


def test_a_non_loopback_bind_without_credentials_refuses_the_dashboard(stored: dict[str, Any]) -> None:
    store = open_readonly(str(stored["path"]))
    try:
        source = Source(store=lambda: store, served=ServedWith("compact"), where="the store")
        app = DashboardGate(None, dashboard_app(source), loopback=False)
        with TestClient(app, base_url=BASE) as c:
            response = c.get("/ui/")
            assert response.status_code == 403 and "non-loopback" in response.text
    finally:
        store.close()


def test_the_host_check_guards_the_dashboard(client: TestClient) -> None:
    assert client.get("/ui/", headers={"host": "evil.example"}).status_code == 421


@pytest.mark.anyio
async def test_oauth_needs_a_bearer_token_with_the_operator_scope(stored: dict[str, Any]) -> None:
    key = rsa_key("ui-key")
    issuer = FakeIssuer()
    issuer.publish(key)
    config = settings()
    store = open_readonly(str(stored["path"]))
    try:
        source = Source(store=lambda: store, served=ServedWith("compact"), where="the store")
        dashboard = dashboard_app(source)
        validator = TokenValidator(config, fetch=issuer, clock=Clock())
        oauth = OAuthBearer(OperatorScope(dashboard), config, validator=validator)
        app = DashboardGate(None, dashboard, loopback=True, oauth=oauth)
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url=BASE) as c:
            assert (await c.get("/ui/")).status_code == 401
            plain = await c.get("/ui/", headers={"authorization": f"Bearer {mint(key)}"})
            assert plain.status_code == 403 and OPERATOR_SCOPE in plain.text
            operator = mint(key, scope=f"mcp:tools {OPERATOR_SCOPE}")
            allowed = await c.get("/ui/", headers={"authorization": f"Bearer {operator}"})
            assert allowed.status_code == 200 and "local-000" in allowed.text
    finally:
        store.close()


# -- on a gateway's front -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_gateway_serves_the_dashboard_behind_its_token_with_its_upstreams(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "gw.db")
    Session(store, session_id="gateway/seen-by-the-front").register_tools(
        [{"name": "x", "description": "d", "inputSchema": {"type": "object"}}]
    )
    try:
        with anyio.fail_after(START):
            async with running(POLICY, desk=IncidentDesk(), store=store) as gw:
                app = http_app(gw, token=TOKEN)
                transport = httpx2.ASGITransport(app=app)
                async with httpx2.AsyncClient(transport=transport, base_url=BASE) as c:
                    auth = {"authorization": f"Bearer {TOKEN}"}
                    assert (await c.get("/ui/")).status_code == 401
                    listing = await c.get("/ui/", headers=auth)
                    assert listing.status_code == 200 and "gateway/seen-by-the-front" in listing.text
                    ups = parse((await c.get("/ui/upstreams", headers=auth)).text)
                    assert ups.one("table", id="upstreams").rows()[0][:3] == [
                        "desk",
                        "in-process",
                        "connected",
                    ]
                    signed = await c.post("/ui/login", data={"token": TOKEN})
                    value = signed.cookies[COOKIE]
                    # The dashboard cookie opens the dashboard only, never the MCP endpoint.
                    c.cookies.set(COOKIE, value)
                    assert (await c.get("/ui/")).status_code == 200
                    mcp = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                    assert mcp.status_code == 401
    finally:
        store.close()


def test_the_cost_plot_charges_a_changed_tool_block_as_a_cache_write(stored: dict[str, Any]) -> None:
    from residency._bench._pricing import DEFAULT_PROFILE, PROFILES
    from residency._ui._reads import CACHE_READ, CACHE_WRITE, Turn, plot_series

    assert (PROFILES[DEFAULT_PROFILE].write, PROFILES[DEFAULT_PROFILE].read) == (CACHE_WRITE, CACHE_READ)
    store = SQLiteStore(stored["path"])
    try:
        session = Session(store, session_id=HOSTILE_KEY, resume=True)
        tokens = {n: session.tool(n).tokens for n in session.tools()}
        both, one = (HOSTILE_TOOL, "plain_tool"), ("plain_tool",)
        turns = [Turn(0, (), both), Turn(1, (), both), Turn(2, (), one)]
        points = plot_series(session, turns)
    finally:
        store.close()
    everything = sum(tokens.values())
    assert [p.all_tokens for p in points] == [everything] * 3
    assert [p.shown_tokens for p in points] == [everything, everything, tokens["plain_tool"]]
    write, read = everything * CACHE_WRITE, everything * CACHE_READ
    assert [p.all_cost for p in points] == [
        round(write, 1),
        round(write + read, 1),
        round(write + 2 * read, 1),
    ]
    changed = write + read + tokens["plain_tool"] * CACHE_WRITE
    assert points[2].shown_cost == round(changed, 1)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--host", "0.0.0.0"], "without a bearer token"),
        (["--host", "192.0.2.1", "--token", "short"], "bearer token is 5 characters"),
        (["--port", "70000"], "not a port number"),
    ],
)
def test_residency_ui_refuses_bad_exposure_and_usage_before_serving(
    stored: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert main(["ui", "--store", str(stored["path"]), *argv]) == 2
    assert said in capsys.readouterr().err


def test_residency_ui_refuses_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--store", str(tmp_path / "none.db")]) == 2
    assert "no such store file" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
