"""OAuth credentials toward an HTTP upstream: tokens fetched, cached, renewed, and put on requests.

``UpstreamCredentials`` holds one upstream's tokens (``_token_cache``) and gets them from the
token endpoint of its ``credentials`` entry (``_credentials_config``): by the client-credentials
grant for the gateway itself, by token exchange (RFC 8693) for a caller.

Which request carries which token. An upstream keeps one connection, shared by every caller
(``_upstream``). The gateway's own requests on it (the start, tool listings, pings, the change
stream) carry the gateway's token. A ``tools/call`` made for a caller carries that caller's
token, per request, in its own ``Authorization`` header: ``Upstream.call`` sets ``SENDING``
around the call, the MCP client posts the request in a task that inherits it (the SDK carries
the sender's context to the task that posts), and ``auth`` (an ``httpx2.Auth``) reads it there.
So an exchanged token is on that one request and no other. This needs requests that belong to
no session: per-caller modes speak the 2026-07-28 era only (in the handshake era, a session
belongs to the identity that opened it, and a server may refuse, or worse mix, the callers
that share it). An upstream that offers only the handshake era fails its start, saying so.

The caller is the request's validated OAuth principal: the ``tools/call`` handler sets
``CALLER`` from the HTTP front's request (``calling_as``). A request with none (stdio, the
shared-token front) reaching a per-caller upstream gets ``UpstreamAuthFailure``: an error
result naming the upstream, never a token of someone else.

Renewal: a token is renewed ``refresh_margin`` seconds before it expires; a 401 from the
upstream drops the token it refused, and the request is sent once more with a fresh one.
Failures to get a token before a request are ``UpstreamAuthFailure`` with the token
endpoint's ``error`` and description; failures inside the HTTP client (a renewal after a
401) are logged and the upstream's 401 stands. Every token held is scrubbed from text the
gateway writes (``Secrets``) while it is held; none is ever logged.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx2

from residency._errors import UpstreamFailure
from residency._gateway._config import HTTPServer, Secrets
from residency._gateway._connection import PRINCIPAL_STATE
from residency._gateway._credentials_config import CredentialsSettings
from residency._gateway._token_cache import Fetched, TokenCache
from residency._text import printable

__all__ = [
    "CALLER",
    "Caller",
    "UpstreamAuthFailure",
    "UpstreamCredentials",
    "caller_of",
    "calling_as",
]

logger = logging.getLogger("residency.gateway")

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
_OWN = "gateway"
"""The cache key of the gateway's own token (callers' keys are ``caller-`` and a digest)."""


class UpstreamAuthFailure(UpstreamFailure):
    """No token could be had for a request to an upstream: the token endpoint refused or could not
    be reached, or the upstream takes each caller's token and the caller has none. Nothing was sent."""


@dataclass(frozen=True)
class Caller:
    """A downstream caller's validated access token.

    Attributes:
        token: the token as it came (never shown: ``repr`` leaves it out).
        expires_at: its ``exp`` (seconds since the epoch), if any.
    """

    token: str = field(repr=False)
    expires_at: int | None = None

    @property
    def key(self) -> str:
        """The cache key of this caller: a digest of the token (one per token, never the token)."""
        return "caller-" + hashlib.sha256(self.token.encode()).hexdigest()


CALLER: ContextVar[Caller | None] = ContextVar("residency_upstream_caller", default=None)
"""The caller of the request being handled (set by ``calling_as``)."""


@dataclass(frozen=True)
class _Sending:
    token: str = field(repr=False)
    key: str
    caller: Caller | None = None


SENDING: ContextVar[_Sending | None] = ContextVar("residency_upstream_sending", default=None)
"""The token the request being posted carries (set by ``UpstreamCredentials.sending``)."""


def caller_of(request: Any) -> Caller | None:
    """The caller an HTTP request (a Starlette request, ``ctx.request``) was validated as, or None.

    Only the OAuth front's requests have one (``_oauth_http`` marks them): the shared-token
    front's token is the gateway's own, not the caller's.
    """
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    if not isinstance(state, dict) or PRINCIPAL_STATE not in state:
        return None
    user = scope.get("user") if isinstance(scope, dict) else None
    access = getattr(user, "access_token", None)
    token = getattr(access, "token", None)
    if not isinstance(token, str) or not token:
        return None
    expires_at = getattr(access, "expires_at", None)
    return Caller(token, expires_at if isinstance(expires_at, int) else None)


@contextmanager
def calling_as(caller: Caller | None) -> Iterator[None]:
    """Make ``caller`` the caller of the upstream calls made inside (``CALLER``)."""
    reset = CALLER.set(caller)
    try:
        yield
    finally:
        CALLER.reset(reset)


class UpstreamCredentials:
    """One upstream's OAuth tokens (see the module docstring).

    Args:
        name: the upstream's name.
        target: its entry, with ``credentials`` set.
        secrets: every token held is added while held (scrubbed from text), and dropped after.
        clock: seconds, monotonic (tests drive it).
        wall: seconds since the epoch (a caller token's ``exp`` is on this clock).
    """

    def __init__(
        self,
        name: str,
        target: HTTPServer,
        *,
        secrets: Secrets | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        assert target.credentials is not None
        self.name = name
        self.settings: CredentialsSettings = target.credentials
        self.mode = self.settings.mode
        self._resource = self.settings.resource
        if self._resource is None and self.settings.audience is None:
            self._resource = target.url
        self._secrets = secrets
        self._wall = wall
        self.tokens = TokenCache(
            margin=self.settings.refresh_margin,
            size=self.settings.cache_size + 1,
            clock=clock,
            on_hold=(lambda v: secrets.add(v)) if secrets is not None else None,
            on_drop=(lambda v: secrets.discard(v)) if secrets is not None else None,
        )
        self._endpoint: str | None = self.settings.token_endpoint

    @property
    def per_caller(self) -> bool:
        return self.settings.per_caller

    # -- tokens ----------------------------------------------------------------------------------

    async def own_token(self) -> str | None:
        """The gateway's own token (None in ``passthrough``: its own requests carry ``headers`` only).

        Raises:
            UpstreamAuthFailure: the token endpoint refused, or could not be reached.
        """
        if self.mode == "passthrough":
            return None
        return await self.tokens.get(_OWN, lambda: self._grant({"grant_type": "client_credentials"}))

    async def call_token(self, caller: Caller | None) -> _Sending:
        """What a call made for ``caller`` carries.

        Raises:
            UpstreamAuthFailure: the upstream takes each caller's token and ``caller`` has none;
                or the token endpoint refused or could not be reached.
        """
        if not self.per_caller:
            token = await self.own_token()
            assert token is not None
            return _Sending(token, _OWN)
        if caller is None:
            raise UpstreamAuthFailure(
                f"upstream {self.name!r} takes each caller's own OAuth access token ({self.mode}), and "
                f"this request carries none: its tools answer callers of the HTTP front signed in "
                f"with OAuth (residency.auth), not stdio or shared-token callers",
                server=self.name,
            )
        left = None if caller.expires_at is None else caller.expires_at - self._wall()
        if left is not None and left <= 0:
            raise UpstreamAuthFailure(
                f"upstream {self.name!r}: the caller's access token has expired", server=self.name
            )
        if self.mode == "passthrough":
            token = caller.token

            async def same() -> Fetched:
                return Fetched(token, cap=left)

            return _Sending(await self.tokens.get(caller.key, same), caller.key, caller)
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": caller.token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
        }
        exchanged = await self.tokens.get(caller.key, lambda: self._grant(form, cap=left))
        return _Sending(exchanged, caller.key, caller)

    @contextmanager
    def sending(self, token: _Sending) -> Iterator[None]:
        """Requests posted inside carry ``token`` (see the module docstring)."""
        reset = SENDING.set(token)
        try:
            yield
        finally:
            SENDING.reset(reset)

    def auth(self) -> httpx2.Auth:
        """The ``httpx2.Auth`` of the upstream's HTTP client."""
        return _BearerAuth(self)

    async def _renewed(self, refused: _Sending) -> str | None:
        """A fresh token in place of one the upstream refused (None: none to be had; logged)."""
        self.tokens.invalidate(refused.key, refused.token)
        if refused.key != _OWN and self.mode == "passthrough":
            return None  # the caller's own token: nothing to renew it with
        try:
            if refused.key == _OWN:
                return await self.own_token()
            return (await self.call_token(refused.caller)).token
        except UpstreamFailure as exc:
            logger.warning("%s", printable(self._redact(str(exc))))
            return None

    # -- the token endpoint ----------------------------------------------------------------------

    async def _grant(self, form: dict[str, str], *, cap: float | None = None) -> Fetched:
        settings = self.settings
        grant = "token exchange" if form["grant_type"] == TOKEN_EXCHANGE else "client-credentials grant"
        if settings.scopes:
            form["scope"] = " ".join(settings.scopes)
        if settings.audience is not None:
            form["audience"] = settings.audience
        if self._resource is not None:
            form["resource"] = self._resource
        assert settings.client_id is not None and settings.client_secret is not None
        secret = settings.client_secret.get_secret_value()
        headers = {"accept": "application/json"}
        if settings.auth_method == "client_secret_basic":
            # RFC 6749 section 2.3.1: each part form-encoded before Basic encoding.
            user, password = quote(settings.client_id, safe=""), quote(secret, safe="")
            headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        else:
            form = {**form, "client_id": settings.client_id, "client_secret": secret}
        try:
            async with httpx2.AsyncClient(timeout=settings.timeout) as http:
                endpoint = await self._token_endpoint(http)
                response = await http.post(endpoint, data=form, headers=headers)
        except UpstreamAuthFailure:
            raise
        except Exception as exc:
            raise UpstreamAuthFailure(
                f"upstream {self.name!r}: the {grant} at its token endpoint failed ({type(exc).__name__}: "
                f"{self._redact(str(exc), form.get('subject_token'))[:200]})",
                server=self.name,
            ) from None
        return self._answer(response, grant, cap, form.get("subject_token"))

    def _answer(self, response: httpx2.Response, grant: str, cap: float | None, hide: str | None) -> Fetched:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            said = body.get("error_description") if isinstance(body, dict) else None
            # Scrubbed before it is cut short: a cut could leave part of a secret.
            words = ": ".join(printable(str(w)) for w in (error, said) if w) or "no error given"
            raise UpstreamAuthFailure(
                f"upstream {self.name!r}: the token endpoint refused the {grant} "
                f"(HTTP {response.status_code}, {self._redact(words, hide)[:300]})",
                server=self.name,
            )
        token = body.get("access_token")
        kind = str(body.get("token_type", "bearer"))
        if not isinstance(token, str) or not token or kind.lower() not in ("bearer", "n_a"):
            raise UpstreamAuthFailure(
                f"upstream {self.name!r}: the token endpoint's answer to the {grant} holds no bearer "
                f"access_token",
                server=self.name,
            )
        return Fetched(token, lifetime=_seconds(body.get("expires_in")), cap=cap)

    async def _token_endpoint(self, http: httpx2.AsyncClient) -> str:
        if self._endpoint is not None:
            return self._endpoint
        issuer = self.settings.issuer
        assert issuer is not None
        base = issuer.rstrip("/")
        for well_known in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
            response = await http.get(base + well_known, headers={"accept": "application/json"})
            if response.status_code != 200:
                continue
            try:
                document = response.json()
            except ValueError:
                continue
            endpoint = document.get("token_endpoint") if isinstance(document, dict) else None
            if isinstance(endpoint, str) and endpoint.startswith(("https://", "http://")):
                self._endpoint = endpoint
                return endpoint
        raise UpstreamAuthFailure(
            f"upstream {self.name!r}: the issuer {issuer} publishes no token_endpoint in its metadata "
            f"(set credentials.token_endpoint)",
            server=self.name,
        )

    def _redact(self, text: str, hide: str | None = None) -> str:
        """``text`` scrubbed of every secret, and of ``hide`` (a caller's token being exchanged)."""
        if hide:
            text = text.replace(hide, "***")
        return self._secrets.redact(text) if self._secrets is not None else text


def _seconds(value: object) -> float | None:
    """``expires_in`` as seconds (some servers send it as a string); None: absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds != float("inf") else None


class _BearerAuth(httpx2.Auth):
    """Puts the request's token on it; on a 401, sends it once more with a fresh one."""

    requires_request_body = True

    def __init__(self, credentials: UpstreamCredentials) -> None:
        self._credentials = credentials

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        credentials = self._credentials
        sending = SENDING.get()
        if sending is None:
            try:
                own = await credentials.own_token()
            except UpstreamFailure as exc:
                own = None
                logger.warning("%s", printable(credentials._redact(str(exc))))
            sending = _Sending(own, _OWN) if own is not None else None
        if sending is not None:
            request.headers["Authorization"] = f"Bearer {sending.token}"
        response = yield request
        if response.status_code != 401 or sending is None:
            return
        fresh = await credentials._renewed(sending)
        if fresh is None or fresh == sending.token:
            return
        request.headers["Authorization"] = f"Bearer {fresh}"
        yield request
