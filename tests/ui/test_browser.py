"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

Every page of ``residency ui`` (a process, over a populated SQLite store) and of a running
gateway's ``/ui`` loads with no console error, no failed request and no dialog (the stored markup
never runs); the timeline the browser shows is the journal's; the page follows the journal live.
Screenshots of every page are kept under the test's temporary directory, ``screenshots/``
(``pytest --basetemp=DIR`` puts them under ``DIR``).

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from residency import SQLiteStore
from residency._gateway import IncidentDesk
from residency._runtime import Session
from tests._processes import reap
from tests._timing import NOTICE, START, STEP, TEST
from tests.gateway.conftest import running, served_over_http
from tests.test_cli_view import POLICY
from tests.ui._store import HOSTILE_KEY, populate

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "a-browser-token-of-32-characters"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return populate(tmp_path_factory.mktemp("browser"))


class Watched:
    """A browser page whose console errors, failed requests and dialogs are collected."""

    def __init__(self, page: Any, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.problems: list[str] = []
        page.on(
            "console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", self._failed)
        page.on("dialog", self._dialog)

    def _failed(self, request: Any) -> None:
        # A poll in flight, or the event stream, when the page navigates away is aborted by the
        # browser: not a fault.
        if ("/ui/stamp" in request.url or "/ui/events" in request.url) and "ERR_ABORTED" in str(
            request.failure
        ):
            return
        self.problems.append(f"request failed: {request.url} ({request.failure})")

    async def _dialog(self, dialog: Any) -> None:
        self.problems.append(f"dialog: {dialog.message}")  # stored markup ran
        await dialog.dismiss()

    async def visit(self, url: str, name: str) -> None:
        response = await self.page.goto(url, timeout=STEP * 1000)
        assert response is not None and response.status == 200, (url, response and response.status)
        await self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)
        assert self.problems == [], (url, self.problems)


@asynccontextmanager
async def browser(tmp_path: Path) -> AsyncIterator[Watched]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.async_api import async_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=START * 1000)
        try:
            context = await b.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(STEP * 1000)
            yield Watched(await context.new_page(), shots)
        finally:
            await b.close()


async def sign_in(w: Watched, base: str) -> None:
    response = await w.page.goto(f"{base}/ui/")
    assert response is not None and response.status == 401  # the form, where the page was asked
    await w.page.fill("input[name=token]", TOKEN)
    async with w.page.expect_navigation():
        await w.page.click("button[type=submit]")
    assert w.page.url == f"{base}/ui/", await w.page.content()
    await w.page.screenshot(path=str(w.shots / "signed-in.png"), full_page=True)
    # The only problem allowed so far: the 401 of the first visit, which the browser reports.
    w.problems[:] = [p for p in w.problems if "status of 401" not in p]
    assert w.problems == []


@asynccontextmanager
async def residency_ui(stored: dict[str, Any]) -> AsyncIterator[str]:
    argv = [sys.executable, "-m", "residency", "ui", "--store", str(stored["path"]), "--port", "0"]
    argv += ["--token", TOKEN] + (["--config", str(stored["config"])] if "config" in stored else [])
    process = await anyio.open_process(argv, env={**os.environ}, stdout=None)
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(START):
            while b"/ui/\n" not in seen:
                chunk = await process.stderr.receive()
                seen += chunk
        found = re.search(rb"serving (http://\S+)/ui/", seen)
        assert found, seen
        yield found.group(1).decode()
    finally:
        await reap(process)


async def test_every_page_of_residency_ui_loads_clean_and_shows_the_journal(
    stored: dict[str, Any], tmp_path: Path
) -> None:
    with anyio.fail_after(TEST):
        async with residency_ui(stored) as base, browser(tmp_path) as w:
            await sign_in(w, base)
            await w.visit(f"{base}/ui/", "sessions")
            links = await w.page.eval_on_selector_all("#sessions a", "els => els.map(e => e.href)")
            assert len(links) == 50
            await w.visit(f"{base}/ui/?page=2", "sessions-page-2")
            await w.visit(f"{base}/ui/?q=local-01&identity=local", "sessions-filtered")
            assert len(await w.page.query_selector_all("#sessions tbody tr")) == 10
            await w.visit(f"{base}/ui/chains", "chains")
            sid = f"gateway/{stored['key']}"
            for name, session_id in (("session-gateway", sid), ("session-hostile", HOSTILE_KEY)):
                link = await w.page.goto(f"{base}/ui/?q=" + session_id[:12])
                assert link is not None
                await w.page.click(f"#sessions a:text-is({_quoted(session_id)})")
                await w.page.wait_for_selector("#timeline")
                await w.page.screenshot(path=str(w.shots / f"{name}.png"), full_page=True)
                assert w.problems == [], w.problems
            # What the browser shows of the gateway session's timeline is its journal's event log.
            await w.visit(f"{base}/ui/session/gateway%2F{stored['key']}", "timeline")
            shown = await w.page.eval_on_selector_all(
                "#timeline section.turn li",
                """els => els.map(li => [Number(li.closest('section').dataset.turn),
                    li.querySelector('.kind').textContent, li.querySelector('code').textContent])""",
            )
            store = SQLiteStore(stored["path"])
            try:
                events = Session(store, session_id=sid, resume=True).events()
            finally:
                store.close()
            assert shown == [[e.turn, e.kind.value, e.subject] for e in events]
            assert await w.page.locator("svg.plot").count() == 2


async def test_a_page_follows_the_journal_live(stored: dict[str, Any], tmp_path: Path) -> None:
    with anyio.fail_after(TEST):
        async with residency_ui(stored) as base, browser(tmp_path) as w:
            await sign_in(w, base)
            await w.visit(f"{base}/ui/session/local-021", "live-before")
            assert await w.page.locator("#timeline .kind", has_text="tombstoned").count() == 0
            store = SQLiteStore(stored["path"])
            try:
                Session(store, session_id="local-021", resume=True).tombstone("t21")
            finally:
                store.close()
            with anyio.fail_after(NOTICE):
                await w.page.locator("#timeline .kind", has_text="tombstoned").wait_for(timeout=NOTICE * 1000)
            await w.page.screenshot(path=str(w.shots / "live-after.png"), full_page=True)
            assert w.problems == []


async def test_over_postgresql_a_new_session_appears_when_the_store_notifies(tmp_path: Path) -> None:
    from residency import PostgresStore
    from residency._store._protocol import JournalEntry
    from tests.postgres import drop_schema, new_schema, pg_url, with_params

    base_url, schema = pg_url(), new_schema()
    url = with_params(base_url, schema=schema)
    store = PostgresStore(url)
    try:
        Session(store, session_id="gateway/first").register_tools(
            [{"name": "t", "description": "d", "inputSchema": {"type": "object"}}]
        )
        with anyio.fail_after(TEST):
            async with residency_ui({"path": url}) as base, browser(tmp_path) as w:
                asked: list[str] = []
                w.page.on("request", lambda r: asked.append(r.url.split("?")[0].removeprefix(base)))
                await sign_in(w, base)
                await w.visit(f"{base}/ui/", "pg-sessions-before")
                assert await w.page.locator("main[data-live=events]").count() == 1
                assert await w.page.locator("#sessions a", has_text="gateway/second").count() == 0
                with anyio.fail_after(NOTICE):  # subscribed: the stream is open and heard
                    while "/ui/events" not in asked or "/ui/stamp" not in asked:
                        await anyio.sleep(0.05)
                store.append("gateway/second", [JournalEntry("turn", {"turn": 1}, 1.0)])
                with anyio.fail_after(NOTICE):
                    await w.page.locator("#sessions a", has_text="gateway/second").wait_for(
                        timeout=NOTICE * 1000
                    )
                await w.page.screenshot(path=str(w.shots / "pg-sessions-after.png"), full_page=True)
                assert w.problems == []
                # Told, not polling: one stamp question per page load (its stream opened) and
                # one for the change.
                assert asked.count("/ui/stamp") <= asked.count("/ui/") + 1, asked
    finally:
        store.close()
        drop_schema(base_url, schema)


async def test_a_running_gateway_serves_every_dashboard_page(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "gw.db")
    try:
        with anyio.fail_after(TEST):
            async with (
                running(POLICY, desk=IncidentDesk(), store=store) as gw,
                served_over_http(gw, token=TOKEN) as url,
                browser(tmp_path) as w,
            ):
                session = gw.session("browsed")
                session.archive("get_timeline", "archived by the browser test")
                base = url.removesuffix("/mcp")
                await sign_in(w, base)
                await w.visit(f"{base}/ui/", "gateway-sessions")
                await w.visit(f"{base}/ui/upstreams", "gateway-upstreams")
                assert await w.page.locator("#upstreams .status-connected").count() == 1
                await w.visit(f"{base}/ui/chains", "gateway-chains")
                await w.visit(
                    f"{base}/ui/session/{session.session_id.replace('/', '%2F')}", "gateway-session"
                )
                archived = w.page.locator("#timeline li", has_text="archived by the browser test")
                assert await archived.count() == 1
    finally:
        store.close()


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
