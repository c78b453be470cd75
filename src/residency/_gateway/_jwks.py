"""The issuer's signing keys (JWKS): fetched when first needed, cached, refreshed with care.

Rules:

- The keys are fetched on the first token, not at start: a gateway whose issuer is down still
  starts, and answers 503 (not 401) while it cannot get them, so clients keep their tokens; the
  fetch is retried at most every ``RETRY_SECONDS`` meanwhile, however many requests come.
- A token whose key id (``kid``) is not in the cached set makes the set be fetched again, at
  most once per ``cooldown`` (``RefreshGate``): a rotated key is picked up without a restart,
  while a flood of made-up key ids costs the issuer one request per cooldown. Concurrent
  misses share one fetch.
- The set is fetched again after ``max_age`` anyway, so a withdrawn key stops being accepted. A
  failed fetch keeps the last good set and counts against the cooldown like a good one.
- A key is used only with an algorithm of its own type (``RS*``/``PS*`` with RSA, ``ES256``
  with P-256, ``EdDSA`` with Ed25519, ...), and only with its own ``alg`` when it names one.
  Symmetric (``oct``) keys are never loaded, nor keys shorter than their algorithm asks (RSA
  under 2048 bits).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from jwt import PyJWK
from jwt.exceptions import PyJWKError

__all__ = ["FetchJSON", "JwksCache", "KeySet", "IssuerUnavailable", "RefreshGate", "fetch_json", "key_fits"]

logger = logging.getLogger("residency.gateway.auth")

RETRY_SECONDS = 5.0
"""While the issuer's keys were never had, a failed fetch is retried after this long at most
(what a refused client is told to wait, ``Retry-After``); requests in between get 503 at once."""

MAX_DOCUMENT_BYTES = 1 << 20
"""The largest metadata or key-set document read from the issuer."""

FetchJSON = Callable[[str], Awaitable[Mapping[str, Any]]]
"""GET a URL and return its JSON object; raises ``IssuerUnavailable`` when it cannot."""

_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


class IssuerUnavailable(Exception):
    """The issuer cannot answer now: its metadata, keys or introspection endpoint cannot be
    reached, answers an error, or sends something else than asked for.

    Raised inside the HTTP front only, which answers 503 with ``Retry-After``: the token may be
    fine, the gateway just cannot check it yet.
    """


def key_fits(jwk: Mapping[str, Any], alg: str) -> bool:
    """Whether the JWK ``jwk`` may verify a signature made with ``alg`` (see the module docstring)."""
    named = jwk.get("alg")
    if named is not None and named != alg:
        return False
    if jwk.get("use", "sig") != "sig":
        return False
    kty = jwk.get("kty")
    if alg[:2] in ("RS", "PS"):
        return kty == "RSA"
    if alg in _CURVES:
        return kty == "EC" and jwk.get("crv") == _CURVES[alg]
    if alg == "EdDSA":
        return kty == "OKP" and jwk.get("crv") == "Ed25519"
    return False


@dataclass(frozen=True)
class KeySet:
    """A parsed key set: public signing keys by ``kid`` (``""`` for a key without one)."""

    keys: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> KeySet:
        """The signing keys of a JWKS document; symmetric and malformed keys are left out.

        Raises:
            IssuerUnavailable: the document is not a key set.
        """
        raw = document.get("keys")
        if not isinstance(raw, list):
            raise IssuerUnavailable("the issuer's key set has no 'keys' list")
        keys: dict[str, Mapping[str, Any]] = {}
        for entry in raw:
            if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC", "OKP"):
                continue
            if any(private in entry for private in ("d", "p", "q")):
                continue  # a private key published by mistake: never use it
            kid = entry.get("kid", "")
            if isinstance(kid, str) and kid not in keys:
                keys[kid] = entry
        return cls(keys)

    def knows(self, kid: str | None) -> bool:
        """Whether a token with this ``kid`` has a key here (of any algorithm)."""
        return len(self.keys) == 1 if kid is None else kid in self.keys

    def find(self, kid: str | None, alg: str) -> Mapping[str, Any] | None:
        """The key for a token's ``kid`` and ``alg``, or None.

        A token without a ``kid`` matches only when the set holds a single key.
        """
        if kid is None:
            if len(self.keys) != 1:
                return None
            jwk = next(iter(self.keys.values()))
        else:
            found = self.keys.get(kid)
            if found is None:
                return None
            jwk = found
        return jwk if key_fits(jwk, alg) else None


@dataclass
class RefreshGate:
    """When the key set may be fetched again (pure: the caller passes ``now``).

    Attributes:
        cooldown: seconds between fetches caused by an unknown ``kid``.
        max_age: seconds after which the set is fetched again whatever the tokens say.
    """

    cooldown: float
    max_age: float
    fetched_at: float | None = field(default=None)
    """When the last fetch was attempted (good or not); None: never."""

    def stale(self, now: float) -> bool:
        """Whether the set is missing or older than ``max_age``."""
        return self.fetched_at is None or now - self.fetched_at >= self.max_age

    def may_fetch_for_unknown_key(self, now: float) -> bool:
        """Whether a token with an unknown ``kid`` may cause a fetch now."""
        return self.fetched_at is None or now - self.fetched_at >= self.cooldown

    def may_retry(self, now: float) -> bool:
        """Whether a fetch may be tried again while no key set was ever had (the last failed):
        after the cooldown, or ``RETRY_SECONDS`` if that is sooner."""
        return self.fetched_at is None or now - self.fetched_at >= min(self.cooldown, RETRY_SECONDS)

    def fetched(self, now: float) -> None:
        self.fetched_at = now


async def fetch_json(url: str, *, timeout: float) -> Mapping[str, Any]:
    """GET ``url`` and return its JSON object (at most ``MAX_DOCUMENT_BYTES``).

    Raises:
        IssuerUnavailable: it cannot be reached, answers an error, or is not a JSON object.
    """
    try:
        async with (
            httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as client,
            client.stream("GET", url, headers={"accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise IssuerUnavailable(f"{url} answered {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise IssuerUnavailable(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
    except httpx2.HTTPError as exc:
        raise IssuerUnavailable(f"{url} cannot be reached ({type(exc).__name__})") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise IssuerUnavailable(f"{url} did not send JSON") from None
    if not isinstance(document, dict):
        raise IssuerUnavailable(f"{url} did not send a JSON object")
    return document


class JwksCache:
    """The issuer's key set, as the rules in the module docstring keep it.

    Args:
        jwks_uri: where the keys are; None: found in the issuer's metadata on first use.
        issuer: the issuer (to find its metadata, which must name it exactly).
        fetch: how documents are fetched (``fetch_json`` with a timeout, or a test's own).
        clock: seconds on a monotonic clock.
        cooldown, max_age: see ``RefreshGate``.
    """

    def __init__(
        self,
        *,
        jwks_uri: str | None,
        issuer: str,
        fetch: FetchJSON,
        clock: Callable[[], float],
        cooldown: float,
        max_age: float,
    ) -> None:
        self._jwks_uri = jwks_uri
        self._issuer = issuer
        self._fetch = fetch
        self._clock = clock
        self._gate = RefreshGate(cooldown, max_age)
        self._keys: KeySet | None = None
        self._parsed: dict[tuple[str, str], PyJWK] = {}
        self._lock = anyio.Lock()
        self._problem = ""
        self.fetches = 0
        """Key-set fetches attempted so far (good or not)."""

    async def key(self, kid: str | None, alg: str) -> PyJWK | None:
        """The verification key for a token's ``kid`` and ``alg``; None: no such key (an
        invalid token).

        Raises:
            IssuerUnavailable: the keys were never fetched and cannot be now.
        """
        keys = self._keys
        if keys is None or self._wants_fetch(keys, kid, self._clock()):
            keys = await self._refresh(kid)
        found = keys.find(kid, alg)
        return self._parse(kid or "", alg, found) if found is not None else None

    def _wants_fetch(self, keys: KeySet, kid: str | None, now: float) -> bool:
        if self._gate.stale(now):
            return True
        return not keys.knows(kid) and self._gate.may_fetch_for_unknown_key(now)

    async def _refresh(self, kid: str | None) -> KeySet:
        async with self._lock:
            now = self._clock()
            keys = self._keys
            # Another request may have fetched while this one waited for the lock.
            if keys is not None and not self._wants_fetch(keys, kid, now):
                return keys
            if keys is None and not self._gate.may_retry(now):
                raise IssuerUnavailable(self._problem)
            self._gate.fetched(now)
            self.fetches += 1
            try:
                fresh = KeySet.from_document(await self._fetch(await self._uri()))
            except IssuerUnavailable as exc:
                self._problem = str(exc)
                if keys is None:
                    logger.warning("cannot get the issuer's keys (tokens are answered 503): %s", exc)
                    raise
                logger.warning("keeping the issuer's last key set: %s", exc)
                return keys
            self._keys = fresh
            self._parsed = {}  # a kid may come back with other key material
            return fresh

    async def _uri(self) -> str:
        if self._jwks_uri is None:
            self._jwks_uri = await discover_jwks_uri(self._issuer, self._fetch)
        return self._jwks_uri

    def _parse(self, kid: str, alg: str, jwk: Mapping[str, Any]) -> PyJWK | None:
        parsed = self._parsed.get((kid, alg))
        if parsed is None:
            try:
                parsed = PyJWK(dict(jwk), algorithm=alg)
            except PyJWKError:
                return None
            if parsed.Algorithm.check_key_length(parsed.key) is not None:
                return None  # e.g. an RSA key under 2048 bits
            self._parsed[(kid, alg)] = parsed
        return parsed


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: RFC 8414 (path after the well-known part), then
    OpenID Connect Discovery (path before it)."""
    base = issuer.rstrip("/")
    scheme, _, rest = base.partition("://")
    host, slash, path = rest.partition("/")
    suffix = f"/{path}" if slash else ""
    return [
        f"{scheme}://{host}/.well-known/oauth-authorization-server{suffix}",
        f"{base}/.well-known/openid-configuration",
    ]


async def discover_jwks_uri(issuer: str, fetch: FetchJSON) -> str:
    """The ``jwks_uri`` the issuer's metadata names.

    Raises:
        IssuerUnavailable: no metadata found, or it names another issuer or no ``jwks_uri``.
    """
    problems: list[str] = []
    for url in metadata_urls(issuer):
        try:
            metadata = await fetch(url)
        except IssuerUnavailable as exc:
            problems.append(str(exc))
            continue
        if metadata.get("issuer") != issuer:
            # RFC 8414 section 3.3: metadata naming another issuer must not be used.
            raise IssuerUnavailable(f"{url} names the issuer {metadata.get('issuer')!r}, not {issuer!r}")
        jwks_uri = metadata.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise IssuerUnavailable(f"{url} names no jwks_uri")
        return jwks_uri
    raise IssuerUnavailable("no issuer metadata: " + "; ".join(problems))
