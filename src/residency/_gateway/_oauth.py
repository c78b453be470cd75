"""Access tokens: who a request is, as its authorization server vouches.

``TokenValidator.validate`` turns a bearer token into a ``Principal`` or refuses it with
``TokenRefused`` (its ``error`` is the RFC 6750 code the front answers with):

- a JWT (three dot-separated parts) is checked locally: its header's ``alg`` is on the
  allow-list and fits the key its ``kid`` names in the issuer's key set (``_jwks``); the
  signature (PyJWT's algorithm for that key); ``iss`` equal to the issuer; ``aud`` holding the
  resource; ``exp`` (required), ``nbf`` and ``iat`` (not in the future) with the leeway; a
  subject (``sub``, else ``client_id``). The token is parsed here rather than by
  ``jwt.decode``, whose per-character checks cost more than the signature. A verified token is
  remembered by its digest: the same token again costs a lookup, its ``exp`` and a check that
  its key is still the issuer's, not a signature;
- any other token is asked about at the introspection endpoint (RFC 7662), with the same
  issuer, audience and time checks on the answer, when introspection is configured; else it is
  invalid;
- then the required scopes (``scope``, space-separated, or ``scp``): one missing is
  ``insufficient_scope``, a 403, not a 401: the token is fine, its grant is too small.

A ``Principal``'s ``identity`` is a digest of its issuer, subject and client id: session keys
are bound to it (``_connection``), and it shows no claim in keys, journals or logs.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote_plus

import httpx2
from jwt import PyJWK

from residency._gateway._connection import OAUTH_IDENTITY_PREFIX
from residency._gateway._jwks import RETRY_SECONDS, IssuerUnavailable, JwksCache, fetch_json
from residency._gateway._oauth_config import IntrospectionSettings, OAuthSettings

__all__ = [
    "IDENTITY_PREFIX",
    "Introspector",
    "Principal",
    "TokenRefused",
    "TokenValidator",
    "groups_of",
    "scopes_of",
]

logger = logging.getLogger("residency.gateway.auth")

IDENTITY_PREFIX = OAUTH_IDENTITY_PREFIX
"""How an OAuth identity starts, in session keys (``oauth-<32 hex>/<key>``)."""

MAX_TOKEN_CHARS = 16_384
"""A longer bearer token is refused unread."""

VERIFIED_CACHE_SIZE = 10_000
"""Verified JWTs remembered at most (by digest), so a client's next request with the same token
costs a lookup instead of a signature check (the oldest leave first)."""

INTROSPECTION_CACHE_SIZE = 10_000
"""Active introspection answers kept at most (the oldest leave first)."""

ErrorCode = Literal["invalid_token", "insufficient_scope"]


class TokenRefused(Exception):
    """A bearer token the front refuses: 401 ``invalid_token`` (forged, expired, for another
    resource or issuer, unknown key) or 403 ``insufficient_scope`` (valid, but without a
    required scope).

    Raised inside the HTTP front only, which answers it (``_oauth_http``); the description is
    one of a few fixed sentences and never quotes the token.
    """

    def __init__(self, error: ErrorCode, description: str) -> None:
        super().__init__(description)
        self.error: ErrorCode = error
        self.description = description

    @property
    def status(self) -> int:
        return 403 if self.error == "insufficient_scope" else 401


@dataclass(frozen=True)
class Principal:
    """Who a validated token speaks for.

    Attributes:
        issuer: the token's ``iss``.
        subject: its ``sub`` (for a client-credentials token, the client itself).
        client_id: the client the token was issued to (``client_id``, else ``azp``), if named.
        scopes: the scopes granted.
        expires_at: ``exp`` (seconds since the epoch), if any.
        groups: the groups the token's groups claim names (``auth.groups_claim``), for the tool
            policy (``_policy``); not part of the identity: a token with other groups is the
            same caller, who may then see other tools.
    """

    issuer: str
    subject: str
    client_id: str | None
    scopes: frozenset[str]
    expires_at: int | None = None
    groups: frozenset[str] = frozenset()

    @functools.cached_property
    def identity(self) -> str:
        """The identity session keys are bound to: ``oauth-`` and 32 hex digits (128 bits)."""
        parts = json.dumps([self.issuer, self.subject, self.client_id], separators=(",", ":"))
        return IDENTITY_PREFIX + hashlib.sha256(parts.encode()).hexdigest()[:32]


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token's claims grant: ``scope`` (space-separated) or ``scp`` (a list or a string)."""
    raw = claims.get("scope", claims.get("scp"))
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, list):
        return frozenset(s for s in raw if isinstance(s, str))
    return frozenset()


def groups_of(claims: Mapping[str, Any], claim: str) -> frozenset[str]:
    """The groups a token's claims name under ``claim``: a list of strings or one
    space-separated string; a dotted name reads a nested object (``realm_access.roles``) when
    no claim has the whole name. Anything else is no group."""
    raw: Any = claims.get(claim)
    if raw is None and "." in claim:
        raw = claims
        for part in claim.split("."):
            raw = raw.get(part) if isinstance(raw, Mapping) else None
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, list):
        return frozenset(g for g in raw if isinstance(g, str) and g)
    return frozenset()


def _principal(
    claims: Mapping[str, Any], issuer: str, required: tuple[str, ...], groups_claim: str = "groups"
) -> Principal:
    client_id = claims.get("client_id", claims.get("azp"))
    client = client_id if isinstance(client_id, str) and client_id else None
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        if client is None:
            raise TokenRefused("invalid_token", "the token names no subject")
        subject = client
    scopes = scopes_of(claims)
    if not scopes.issuperset(required):
        raise TokenRefused("insufficient_scope", "the token lacks a required scope")
    exp = claims.get("exp")
    expires = exp if isinstance(exp, int) else None
    return Principal(issuer, subject, client, scopes, expires, groups_of(claims, groups_claim))


def _looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class TokenValidator:
    """Validates bearer tokens against ``settings`` (see the module docstring).

    Args:
        settings: the ``residency.auth`` section.
        fetch: how the issuer's metadata and keys are fetched (None: HTTP with the settings'
            timeout).
        clock: a monotonic clock, for the key cache's cooldown and age.
        wallclock: seconds since the epoch, for ``exp``, ``nbf`` and ``iat``.
        remember: verified JWTs kept (0: every request checks its token's signature).
        introspector: for opaque tokens (None: built from ``settings.introspection``, if set).
    """

    def __init__(
        self,
        settings: OAuthSettings,
        *,
        fetch: Callable[[str], Awaitable[Mapping[str, Any]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
        introspector: Introspector | None = None,
        remember: int = VERIFIED_CACHE_SIZE,
    ) -> None:
        self.settings = settings
        self._remember = remember
        timeout = settings.timeout

        async def fetch_with_timeout(url: str) -> Mapping[str, Any]:
            return await fetch_json(url, timeout=timeout)

        self.keys = JwksCache(
            jwks_uri=settings.jwks_uri,
            issuer=settings.issuer,
            fetch=fetch if fetch is not None else fetch_with_timeout,
            clock=clock,
            cooldown=settings.jwks_cooldown,
            max_age=settings.jwks_max_age,
        )
        if introspector is None and settings.introspection is not None:
            introspector = Introspector(settings.introspection, settings, wallclock=wallclock)
        self._introspector = introspector
        self._algorithms = frozenset(settings.algorithms)
        self._wallclock = wallclock
        self._verified: OrderedDict[bytes, tuple[Principal, str | None, str, PyJWK, float]] = OrderedDict()

    async def validate(self, token: str) -> Principal:
        """The principal ``token`` speaks for.

        Raises:
            TokenRefused: the token is not valid here (401), or lacks a required scope (403).
            IssuerUnavailable: the issuer's keys or introspection cannot be had now.
        """
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise TokenRefused("invalid_token", "the token is malformed")
        if not _looks_like_jwt(token):
            if self._introspector is None:
                raise TokenRefused("invalid_token", "the token is not a JWT")
            return await self._introspector.principal(token)
        digest = hashlib.sha256(token.encode()).digest()
        seen = self._verified.get(digest)
        if seen is not None:
            principal, kid, alg, key, exp = seen
            # Still valid: not expired, and its key is still the issuer's, the very key object
            # it was checked with (a refreshed key set makes new ones: checked again then).
            if exp > self._wallclock() - self.settings.leeway and await self.keys.key(kid, alg) is key:
                return principal
            del self._verified[digest]
        return await self._verify(token, digest)

    async def _verify(self, token: str, digest: bytes) -> Principal:
        header, claims, signed, signature = _compact(token)
        alg = header.get("alg")
        kid = header.get("kid")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise TokenRefused("invalid_token", "the token's algorithm is not accepted")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("invalid_token", "the token is malformed")
        if "crit" in header:  # RFC 7515 section 4.1.11: no extension is understood here
            raise TokenRefused("invalid_token", "the token is malformed")
        key = await self.keys.key(kid, alg)
        if key is None:
            raise TokenRefused("invalid_token", "the token's signing key is not the issuer's")
        if not key.Algorithm.verify(signed, key.key, signature):
            raise TokenRefused("invalid_token", "the token's signature is invalid")
        self._check_claims(claims, self._wallclock())
        principal = _principal(claims, self.settings.issuer, self.settings.scopes, self.settings.groups_claim)
        self._verified[digest] = (principal, kid, alg, key, claims["exp"])
        while len(self._verified) > self._remember:
            self._verified.popitem(last=False)
        return principal

    def _check_claims(self, claims: Mapping[str, Any], now: float) -> None:
        """``exp`` (required), ``nbf``, ``iat`` with the leeway; ``iss``; ``aud`` (as RFC 7519
        section 4.1 and RFC 9068 section 4 say)."""
        settings = self.settings
        leeway = settings.leeway
        exp, nbf, iat = (claims.get(name) for name in ("exp", "nbf", "iat"))
        if exp is None or claims.get("iss") is None or claims.get("aud") is None:
            raise TokenRefused("invalid_token", "the token lacks a required claim")
        if not all(
            t is None or (isinstance(t, int | float) and not isinstance(t, bool)) for t in (exp, nbf, iat)
        ):
            raise TokenRefused("invalid_token", "the token is malformed")
        if exp <= now - leeway:
            raise TokenRefused("invalid_token", "the token has expired")
        if (nbf is not None and nbf > now + leeway) or (iat is not None and iat > now + leeway):
            raise TokenRefused("invalid_token", "the token is not valid yet")
        if claims["iss"] != settings.issuer:
            raise TokenRefused("invalid_token", "the token was issued by another issuer")
        audience = claims["aud"]
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or settings.resource not in audiences:
            raise TokenRefused("invalid_token", "the token was issued for another resource")


_SEGMENTS = re.compile(rb"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)")


def _segment(part: bytes) -> bytes:
    """A base64url segment decoded, refusing a non-canonical spelling (a segment whose unused
    bits are set decodes to the same bytes as another: one token, one spelling)."""
    if len(part) % 4 == 1:
        raise TokenRefused("invalid_token", "the token is malformed")
    decoded = base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))
    if base64.urlsafe_b64encode(decoded).rstrip(b"=") != part:
        raise TokenRefused("invalid_token", "the token is malformed")
    return decoded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: a time that never passes


def _object(part: bytes) -> dict[str, Any]:
    try:
        value = json.loads(_segment(part), parse_constant=_no_constant)
    except ValueError:
        raise TokenRefused("invalid_token", "the token is malformed") from None
    if not isinstance(value, dict):
        raise TokenRefused("invalid_token", "the token is malformed")
    return value


def _compact(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """A JWS compact serialization split: header, claims, signing input, signature.

    The checks are C-speed (a regular expression over the alphabet, the stdlib's base64): this
    runs on every request.
    """
    try:
        raw = token.encode("ascii")
    except UnicodeEncodeError:
        raise TokenRefused("invalid_token", "the token is malformed") from None
    match = _SEGMENTS.fullmatch(raw)
    if match is None:
        raise TokenRefused("invalid_token", "the token is malformed")
    head, body, signature = match.groups()
    return _object(head), _object(body), raw[: match.end(2)], _segment(signature)


PostForm = Callable[[str, Mapping[str, str], tuple[str, str], float], Awaitable[Mapping[str, Any]]]
"""POST a form to a URL with HTTP Basic credentials and a timeout; return the JSON object."""


async def post_form(
    url: str, form: Mapping[str, str], credentials: tuple[str, str], timeout: float
) -> Mapping[str, Any]:
    """POST ``form`` to ``url`` with HTTP Basic ``credentials``; the JSON object answered.

    Raises:
        IssuerUnavailable: it cannot be reached, answers an error, or not a JSON object.
    """
    user, secret = credentials
    # RFC 6749 section 2.3.1: client id and secret are form-urlencoded before Basic encoding.
    basic = base64.b64encode(f"{quote_plus(user)}:{quote_plus(secret)}".encode()).decode()
    try:
        async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            response = await client.post(
                url,
                data=dict(form),
                headers={"authorization": f"Basic {basic}", "accept": "application/json"},
            )
    except httpx2.HTTPError as exc:
        raise IssuerUnavailable(f"{url} cannot be reached ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise IssuerUnavailable(f"{url} answered {response.status_code}")
    try:
        document = response.json()
    except ValueError:
        raise IssuerUnavailable(f"{url} did not send JSON") from None
    if not isinstance(document, dict):
        raise IssuerUnavailable(f"{url} did not send a JSON object")
    return document


class Introspector:
    """Asks the issuer about opaque tokens (RFC 7662) and keeps active answers for a while.

    After a failed request, the endpoint is left alone for ``RETRY_SECONDS``: opaque tokens are
    answered 503 at once meanwhile.

    Args:
        settings: the ``introspection`` settings.
        auth: the whole ``residency.auth`` section (issuer, resource, scopes, leeway).
        post: how the form is posted (None: ``post_form``).
        wallclock: seconds since the epoch (``exp`` and ``nbf`` are such times).
    """

    def __init__(
        self,
        settings: IntrospectionSettings,
        auth: OAuthSettings,
        *,
        post: PostForm | None = None,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._auth = auth
        self._post = post if post is not None else post_form
        self._now = wallclock
        self._cache: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()
        self._failed_at: float | None = None
        self.requests = 0
        """Introspection requests sent so far."""

    async def principal(self, token: str) -> Principal:
        """The principal an opaque token speaks for.

        Raises:
            TokenRefused: the issuer says it is not active, or its answer fails a check.
            IssuerUnavailable: the introspection endpoint cannot answer now.
        """
        digest = hashlib.sha256(token.encode()).digest()
        now = self._now()
        cached = self._cache.get(digest)
        if cached is not None:
            principal, until = cached
            if now < until:
                return self._granted(principal)
            del self._cache[digest]
        settings = self._settings
        if self._failed_at is not None and now - self._failed_at < RETRY_SECONDS:
            raise IssuerUnavailable("the introspection endpoint failed moments ago")
        self.requests += 1
        try:
            answer = await self._post(
                settings.endpoint,
                {"token": token, "token_type_hint": "access_token"},
                (settings.client_id, settings.client_secret.get_secret_value()),
                settings.timeout,
            )
        except IssuerUnavailable as exc:
            self._failed_at = now
            logger.warning("cannot introspect tokens (they are answered 503): %s", exc)
            raise
        self._failed_at = None
        claims = self._checked(answer, now)
        principal = _principal(claims, self._auth.issuer, (), self._auth.groups_claim)
        until = now + settings.cache_seconds
        if principal.expires_at is not None:
            until = min(until, principal.expires_at)
        if until > now:
            self._cache[digest] = (principal, until)
            while len(self._cache) > INTROSPECTION_CACHE_SIZE:
                self._cache.popitem(last=False)
        return self._granted(principal)

    def _granted(self, principal: Principal) -> Principal:
        if not principal.scopes.issuperset(self._auth.scopes):
            raise TokenRefused("insufficient_scope", "the token lacks a required scope")
        return principal

    def _checked(self, answer: Mapping[str, Any], now: float) -> Mapping[str, Any]:
        auth = self._auth
        if answer.get("active") is not True:
            raise TokenRefused("invalid_token", "the token is not active")
        issuer = answer.get("iss")
        if issuer is not None and issuer != auth.issuer:
            raise TokenRefused("invalid_token", "the token was issued by another issuer")
        audience = answer.get("aud")
        audiences = (
            [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        )
        if auth.resource not in audiences:
            raise TokenRefused("invalid_token", "the token was issued for another resource")
        exp = answer.get("exp")
        if isinstance(exp, int | float) and now > exp + auth.leeway:
            raise TokenRefused("invalid_token", "the token has expired")
        nbf = answer.get("nbf")
        if isinstance(nbf, int | float) and now < nbf - auth.leeway:
            raise TokenRefused("invalid_token", "the token is not valid yet")
        return answer
