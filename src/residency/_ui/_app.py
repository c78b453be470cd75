"""The dashboard's ASGI side: its routes (``dashboard_app``) and who may open them (``DashboardGate``).

Pages (all ``GET``, read-only, under ``/ui``): ``/ui/`` the sessions (filters ``q``,
``identity``, ``page``); ``/ui/session/<id>`` one session; ``/ui/chains`` the chain archive;
``/ui/upstreams`` the gateway's upstreams (gateway only); ``/ui/stamp?path=`` what the live poll
compares; ``/ui/events`` the store's change notices as Server-Sent Events (PostgreSQL, see
``_live``); ``/ui/static/*`` the script and stylesheet; ``/ui/login`` the token form.

Who may open them (``DashboardGate``), decided in this order:

- Static bearer token: a request carrying ``Authorization: Bearer <token>`` (as ``/mcp`` is
  checked), or the dashboard cookie. A browser cannot add a header by itself, so ``/ui/login``
  takes the token once in a POSTed form (never in a URL: URLs land in history, logs and
  ``Referer``) and answers with a cookie that is not the token: ``<issued>.<HMAC-SHA256 of it
  keyed by the token>``, ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
  page sends it), ``Path=/ui`` (never sent to ``/mcp``, which does not accept it anyway),
  ``Secure`` over HTTPS, valid for ``COOKIE_SECONDS``. Changing the token voids every cookie.
- OAuth (``residency.auth``): an access token in the ``Authorization`` header only, checked as
  ``/mcp`` checks it, that also grants ``OPERATOR_SCOPE``: the dashboard shows every identity's
  sessions, which no ordinary client's token should reveal. No cookie: an access token expires
  and is refreshed by its client, which a cookie could not follow.
- No authentication: served on a loopback bind only; on any other bind the dashboard answers
  403, even with ``--insecure`` (a proxy that authenticates MCP clients may not be one an
  operator's pages should trust).

Every answer carries ``no-store``, ``nosniff``, a same-origin referrer policy, frame denial and the pages'
Content-Security-Policy (``_html.CSP``). Store reads run in a worker thread: a page never holds
the gateway's event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from residency._errors import NotFound, ResidencyError
from residency._runtime import Session
from residency._store._protocol import Store
from residency._ui import _pages
from residency._ui._html import CSP, Html
from residency._ui._live import LiveUpdates
from residency._ui._names import find_session
from residency._ui._reads import (
    Readers,
    ServedWith,
    archive,
    last_entries,
    plot_series,
    session_rows,
    timeline,
    view,
)
from residency._ui._static import APP_CSS, APP_JS

__all__ = [
    "COOKIE",
    "COOKIE_SECONDS",
    "OPERATOR_SCOPE",
    "PREFIX",
    "DashboardGate",
    "OperatorScope",
    "Source",
    "dashboard_app",
]

PREFIX = "/ui"
COOKIE = "residency_ui"
COOKIE_SECONDS = 12 * 3600
"""How long a dashboard cookie opens the pages (then the token is asked for again)."""
OPERATOR_SCOPE = "residency:operator"
"""The OAuth scope an access token needs to open the dashboard."""
MAX_FORM_BYTES = 4096
_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # "no-referrer" makes a browser send "Origin: null"
}


@dataclass(frozen=True)
class Source:
    """What the dashboard reads: a store (a callable, as a gateway opens its store only once it
    runs), how sessions were served, the store as shown (credentials redacted) and, in a
    gateway, its upstreams' status (``upstream_status`` entries)."""

    store: Callable[[], Store]
    served: ServedWith
    where: str
    upstreams: Callable[[], list[dict[str, Any]]] | None = None
    readers: Readers = field(default_factory=Readers, compare=False)
    live: LiveUpdates = field(default_factory=LiveUpdates, compare=False)

    @property
    def mode(self) -> str:
        return "gateway" if self.upstreams is not None else "store"


def _html(body: Html, status: int = 200, extra: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(str(body), status_code=status, headers={**_HEADERS, **(extra or {})})


def _problem(title: str, message: str, status: int, source: Source) -> HTMLResponse:
    from residency._ui._html import page, tag

    return _html(
        page(title, tag("p", message, class_="refused"), mode=source.mode, where=source.where), status
    )


# -- what each page reads (in a worker thread) --------------------------------------------------


def _sessions(source: Source, params: dict[str, str]) -> tuple[Html, str]:
    text, identity = params.get("q", ""), params.get("identity", "")
    try:
        number = int(params.get("page", "1"))
    except ValueError:
        number = 1
    found = session_rows(source.store(), text=text, identity=identity, page=number)
    stamp = f"{found.total}:" + ",".join(f"{r.entries}" for r in found.rows)
    body = _pages.sessions_page(
        found,
        text=text,
        identity=identity,
        stamp=stamp,
        mode=source.mode,
        where=source.where,
        live=source.live.notifies(source.store()),
    )
    return body, stamp


def _session(source: Source, given: str) -> tuple[Html, str]:
    store = source.store()
    found = find_session(store.sessions(), given, where=source.where)
    served = source.served
    with source.readers.session(store, found, served) as session:
        return _session_body(source, session)


def _session_body(source: Source, session: Session) -> tuple[Html, str]:
    served = source.served
    listed = view(session, offload=served.offload, delivery=served.delivery, pinned=served.pinned)
    turns = timeline(session)
    spans = [
        {
            "id": s.id,
            "state": session.span_state(s.id).value,
            "tags": sorted(s.tags),
            "source": s.source,
            "provenance": list(s.provenance),
            "depth": s.derivation_depth,
            "verified": s.verified,
            "grounded": s.grounded,
            "turn": s.turn,
            "tokens": s.tokens,
        }
        for s in session.spans()
    ]
    chains = [
        {"digest": c.digest, "rule": c.rule, "topology": list(c.topology), "failure": c.failure}
        for c in session.chains()
    ]
    stamp = str(session.seq)
    body = _pages.session_page(
        listed,
        turns,
        plot_series(session, turns),
        spans,
        chains,
        minify=served.minify,
        stamp=stamp,
        mode=source.mode,
        where=source.where,
        live=source.live.notifies(session.store),
    )
    return body, stamp


def _chains(source: Source) -> tuple[Html, str]:
    records = archive(source.store())
    stamp = str(len(records))
    live = source.live.notifies(source.store())
    return _pages.chains_page(records, stamp=stamp, mode=source.mode, where=source.where, live=live), stamp


def _upstreams(source: Source) -> tuple[Html, str]:
    assert source.upstreams is not None
    entries = source.upstreams()
    stamp = ",".join(f"{e['name']}={e['status']}/{e['tools']}" for e in entries)
    return _pages.upstreams_page(entries, stamp=stamp, where=source.where), stamp


def _stamp(source: Source, path: str, query: str) -> str | None:
    """What ``_render`` would stamp the page at ``path`` with; for a session page without
    replaying it (its stamp is its journal's last entry, ``Session.seq``)."""
    if path.startswith(PREFIX + "/session/"):
        store = source.store()
        found = find_session(store.sessions(), unquote(path[len(PREFIX + "/session/") :]), where=source.where)
        last = last_entries(store, [found]).get(found)
        return str(last.seq if last is not None else 0)
    result = _render(source, path, query)
    return None if result is None else result[1]


def _render(source: Source, path: str, query: str) -> tuple[Html, str] | None:
    """The page at ``path`` (with its query) and its stamp; None for no such page."""
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    if path in (PREFIX + "/", PREFIX):
        return _sessions(source, params)
    if path.startswith(PREFIX + "/session/"):
        return _session(source, unquote(path[len(PREFIX + "/session/") :]))
    if path == PREFIX + "/chains":
        return _chains(source)
    if path == PREFIX + "/upstreams" and source.upstreams is not None:
        return _upstreams(source)
    return None


def dashboard_app(source: Source, *, health: bool = False) -> Starlette:
    """The dashboard's pages over ``source`` (see the module docstring); ``health`` adds
    ``GET /healthz`` (``residency ui``, which has no gateway to answer it)."""

    async def rendered(request: Request) -> Response:
        path = request.url.path
        try:
            result = await anyio.to_thread.run_sync(_render, source, path, request.url.query)
        except NotFound as exc:
            return _problem("Not found", str(exc), 404, source)
        except ResidencyError as exc:
            return _problem("Cannot read the store", str(exc), 503, source)
        if result is None:
            return _problem("Not found", f"no dashboard page {path}", 404, source)
        return _html(result[0])

    async def stamp(request: Request) -> Response:
        wanted = urlsplit(request.query_params.get("path", PREFIX + "/"))
        try:
            found = await anyio.to_thread.run_sync(_stamp, source, wanted.path, wanted.query)
        except ResidencyError:
            found = None
        if found is None:
            return PlainTextResponse("", status_code=404, headers=_HEADERS)
        return PlainTextResponse(found, headers=_HEADERS)

    async def events(request: Request) -> Response:
        return source.live.response(source.store())

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "app.js":
            return Response(APP_JS, media_type="text/javascript", headers=_HEADERS)
        if name == "app.css":
            return Response(APP_CSS, media_type="text/css", headers=_HEADERS)
        return PlainTextResponse("not found", status_code=404, headers=_HEADERS)

    async def bare(request: Request) -> Response:
        return RedirectResponse(PREFIX + "/", status_code=308, headers=_HEADERS)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"}, headers={"cache-control": "no-store"})

    routes = [
        Route(PREFIX, bare, methods=["GET"]),
        Route(PREFIX + "/stamp", stamp, methods=["GET"]),
        Route(PREFIX + "/events", events, methods=["GET"]),
        Route(PREFIX + "/static/{name}", static, methods=["GET"]),
        Route(PREFIX + "/{rest:path}", rendered, methods=["GET"]),
    ]
    if health:
        routes.insert(0, Route("/healthz", healthz, methods=["GET"]))
    return Starlette(routes=routes)


# -- who may open it ----------------------------------------------------------------------------


def cookie_for(token: str, issued: int) -> str:
    """The dashboard cookie's value for ``token``, issued at ``issued`` (seconds since the epoch)."""
    mac = hmac.new(token.encode(), f"residency-ui:{issued}".encode(), hashlib.sha256).hexdigest()
    return f"{issued}.{mac}"


def cookie_valid(token: str, value: str, now: float) -> bool:
    """Whether ``value`` is a dashboard cookie for ``token`` still in its lifetime."""
    issued_text, _, _ = value.partition(".")
    if not issued_text.isdigit():
        return False
    issued = int(issued_text)
    if not issued <= now + 60 or now - issued > COOKIE_SECONDS:
        return False
    return hmac.compare_digest(cookie_for(token, issued), value)


def _cookie(scope: Scope) -> str:
    for key, value in scope["headers"]:
        if key == b"cookie":
            text: str = bytes(value).decode("latin-1")
            for part in text.split(";"):
                name, _, given = part.strip().partition("=")
                if name == COOKIE:
                    return given
    return ""


def _header(scope: Scope, name: bytes) -> bytes:
    return next((v for k, v in scope["headers"] if k == name), b"")


class OperatorScope:
    """Inside ``OAuthBearer``: a principal whose token lacks ``OPERATOR_SCOPE`` gets 403."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        auth = scope.get("auth")
        scopes: Sequence[str] = getattr(auth, "scopes", ())
        if OPERATOR_SCOPE not in scopes:
            body = f"the dashboard needs an access token with the {OPERATOR_SCOPE} scope"
            response = PlainTextResponse(body, status_code=403, headers={"cache-control": "no-store"})
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)


class DashboardGate:
    """ASGI middleware: requests under ``/ui`` go to ``dashboard`` if allowed (see the module
    docstring), everything else to ``app`` untouched.

    Args:
        app: the rest (the MCP front), or None (``residency ui``: only the dashboard).
        dashboard: ``dashboard_app``.
        loopback: whether the server is bound to loopback only.
        token: the static bearer token, or None.
        oauth: ``dashboard`` already wrapped in the OAuth check (``OAuthBearer(OperatorScope(...))``),
            or None.
    """

    def __init__(
        self,
        app: ASGIApp | None,
        dashboard: ASGIApp,
        *,
        loopback: bool,
        token: str | None = None,
        oauth: ASGIApp | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._dashboard = dashboard
        self._loopback = loopback
        self._token = token or None
        self._expected = f"Bearer {token}".encode() if token else b""
        self._oauth = oauth
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if self._app is not None and not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self._app(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan: the app's own (the dashboard's, standing alone)
            await (self._app if self._app is not None else self._dashboard)(scope, receive, send)
            return
        if self._oauth is not None:
            await self._oauth(scope, receive, send)
        elif self._token is not None:
            await self._with_token(scope, receive, send)
        elif self._loopback:
            await self._dashboard(scope, receive, send)
        else:
            body = (
                "the dashboard is not served without authentication on a non-loopback address: "
                "set a bearer token or residency.auth, or bind 127.0.0.1"
            )
            await PlainTextResponse(body, status_code=403, headers=_HEADERS)(scope, receive, send)

    async def _with_token(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._token is not None
        path = scope["path"]
        if path == PREFIX + "/login":
            await self._login(scope, receive, send)
            return
        if path.startswith(PREFIX + "/static/"):
            await self._dashboard(scope, receive, send)  # the script and stylesheet are no secret
            return
        given = _header(scope, b"authorization")
        if (given and hmac.compare_digest(given, self._expected)) or cookie_valid(
            self._token, _cookie(scope), self._clock()
        ):
            await self._dashboard(scope, receive, send)
            return
        # The form, where the page was asked for: a browser signs in and is sent back to /ui/.
        await _html(_pages.login_page(), 401, {"www-authenticate": "Bearer"})(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._token is not None
        if scope["method"] == "GET":
            await _html(_pages.login_page())(scope, receive, send)
            return
        if scope["method"] != "POST":
            await PlainTextResponse("use GET or POST", status_code=405, headers=_HEADERS)(
                scope, receive, send
            )
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if len(body) > MAX_FORM_BYTES:
                await PlainTextResponse("form too large", status_code=413, headers=_HEADERS)(
                    scope, receive, send
                )
                return
            if not message.get("more_body", False):
                break
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[-1]
        if not hmac.compare_digest(given.encode(), self._token.encode()):
            await _html(_pages.login_page(failed=True), 401)(scope, receive, send)
            return
        response = RedirectResponse(PREFIX + "/", status_code=303, headers=_HEADERS)
        response.set_cookie(
            COOKIE,
            cookie_for(self._token, int(self._clock())),
            max_age=COOKIE_SECONDS,
            path=PREFIX,
            secure=scope.get("scheme") == "https",
            httponly=True,
            samesite="strict",
        )
        await response(scope, receive, send)
