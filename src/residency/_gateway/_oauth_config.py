"""The ``residency.auth`` section: the HTTP front as an OAuth 2.1 resource server.

The gateway accepts access tokens its authorization server (``issuer``) issued for it
(``resource``, the URL clients reach ``/mcp`` by, which the token's ``aud`` must hold). JWTs are
checked against the issuer's keys (``jwks_uri``, found in the issuer's metadata when not given);
opaque tokens are asked about at the issuer's introspection endpoint (RFC 7662) when
``introspection`` is set. Only asymmetric algorithms are allowed: a shared-secret algorithm
(``HS256``) would let anyone who holds the issuer's public key, which is public, sign tokens.

Loopback issuers may use ``http://`` (a provider on the same machine, as in tests); any other
must use ``https://``: the keys that sign every token come from it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_ALGORITHMS",
    "IntrospectionSettings",
    "OAuthSettings",
    "url_problem",
]

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Every algorithm ``algorithms`` may name: public-key signatures only (no ``none``, no ``HS*``)."""

DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")


def url_problem(url: str, *, what: str) -> str | None:
    """Why ``url`` cannot be an authorization server's or this resource's URL, or None.

    ``https://`` is required, except toward loopback (``localhost``, 127.0.0.0/8, ``::1``).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{what} must be an absolute https:// URL (got {url!r})"
    if parts.fragment or parts.query:
        return f"{what} cannot have a query or a fragment (got {url!r})"
    if parts.scheme == "http" and not _loopback(parts.hostname):
        return f"{what} must use https:// unless it is on this machine (got {url!r})"
    return None


def checked_url(url: str, *, what: str) -> str:
    """``url`` if :func:`url_problem` finds nothing wrong with it; else ``ValueError`` (for validators)."""
    problem = url_problem(url, what=what)
    if problem is not None:
        raise ValueError(problem)
    return url


def checked_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """``scopes`` if each is a scope token (RFC 6749 section 3.3); else ``ValueError``."""
    for scope in scopes:
        if not scope or not all("!" <= c <= "~" and c not in '"\\' for c in scope):
            raise ValueError(f"{scope!r} is not a scope (visible ASCII, no spaces, quotes or backslashes)")
    return scopes


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntrospectionSettings(_Strict):
    """Token introspection (RFC 7662) for opaque access tokens (``residency.auth.introspection``).

    Attributes:
        endpoint: the issuer's introspection endpoint.
        client_id: the gateway's own client at the issuer (introspection needs one).
        client_secret: its secret, sent with HTTP Basic authentication. ``${NAME}`` is not
            expanded here: put the secret in the environment and the config file out of reach.
        cache_seconds: how long an active answer is reused (never past the token's ``exp``).
        timeout: seconds the introspection request may take.
    """

    endpoint: str
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    cache_seconds: float = Field(default=60.0, ge=0, le=3600)
    timeout: float = Field(default=5.0, gt=0, le=60)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        problem = url_problem(value, what="the introspection endpoint")
        if problem is not None:
            raise ValueError(problem)
        return value


class OAuthSettings(_Strict):
    """The ``residency.auth`` section (see the module docstring).

    Attributes:
        issuer: the authorization server, exactly as its tokens' ``iss`` and its metadata name it.
        resource: this gateway's resource URI, as clients reach its MCP endpoint (e.g.
            ``https://mcp.example.com/mcp``); a token's ``aud`` must hold it. ``audience`` is
            read as the same key.
        jwks_uri: where the issuer publishes its signing keys; None: from the issuer's
            metadata (``/.well-known/oauth-authorization-server``, else
            ``/.well-known/openid-configuration``).
        scopes: scopes every token must carry (a token without one is answered 403
            ``insufficient_scope``).
        algorithms: the signature algorithms accepted (public-key ones only).
        leeway: seconds of clock difference allowed on ``exp``, ``nbf`` and ``iat``.
        jwks_cooldown: seconds between two fetches of the keys caused by a token whose key
            (``kid``) is unknown: a rotated key is picked up at once, a flood of made-up key ids
            costs the issuer one request per cooldown.
        jwks_max_age: seconds after which the keys are fetched again anyway (so a key the
            issuer withdrew stops being accepted).
        timeout: seconds a request to the issuer (metadata, keys) may take.
        resource_name: a human-readable name in the protected-resource metadata.
        introspection: ask the issuer about opaque (non-JWT) tokens; None: they are refused.
        groups_claim: the claim that holds a token's groups, for the tool policy
            (``residency.policy``): a list of strings or a space-separated string; a dotted
            name reads a nested object (``realm_access.roles``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    issuer: str
    resource: str = Field(alias="audience")
    jwks_uri: str | None = None
    scopes: tuple[str, ...] = ()
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway: float = Field(default=30.0, ge=0, le=300)
    jwks_cooldown: float = Field(default=30.0, ge=0, le=3600)
    jwks_max_age: float = Field(default=3600.0, gt=0, le=7 * 86400)
    timeout: float = Field(default=5.0, gt=0, le=60)
    resource_name: str | None = None
    introspection: IntrospectionSettings | None = None
    groups_claim: str = Field(default="groups", min_length=1, max_length=128)

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return checked_url(value, what="the issuer")

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        return checked_url(value, what="the resource (the URL clients reach /mcp by)")

    @field_validator("jwks_uri")
    @classmethod
    def _jwks_uri(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, what="jwks_uri")

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return checked_scopes(value)

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("name at least one algorithm, e.g. ['RS256']")
        for name in value:
            if name not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(
                    f"{name!r} is not allowed: use public-key algorithms only "
                    f"({', '.join(sorted(ASYMMETRIC_ALGORITHMS))}); 'none' and HS* never are"
                )
        return tuple(dict.fromkeys(value))
