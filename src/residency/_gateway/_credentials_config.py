"""An HTTP upstream's ``credentials``: how the gateway authenticates to it with OAuth.

One mode per upstream (``mode``), each a whole way of authenticating, so they never mix:

- ``client_credentials``: the gateway is a client of the upstream's authorization server and
  sends a token of its own (the client-credentials grant), fetched, cached and renewed before
  it expires. Every caller reaches the upstream as the gateway.
- ``token_exchange``: each call carries a token issued *for that caller* and for this upstream
  (RFC 8693): the caller's own access token, validated by the HTTP front, is exchanged at the
  token endpoint for one whose audience is the upstream. The gateway's own requests (the start,
  tool listings) carry a client-credentials token of the same client.
- ``passthrough``: each call carries the caller's own access token as it came. Discouraged:
  the upstream gets a token issued for the gateway (so it must accept another audience), and
  any upstream so configured can replay it against the gateway and every service that accepts
  it. Named explicitly or never done.

The token endpoint is ``token_endpoint``, or found in ``issuer``'s metadata
(``/.well-known/oauth-authorization-server``, else ``/.well-known/openid-configuration``).
``client_secret`` takes ``${NAME}`` (the gateway's environment variable ``NAME``), like
``headers`` values, and is a secret: never shown.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from residency._gateway._oauth_config import checked_scopes, checked_url

__all__ = ["CredentialsSettings", "Mode", "PER_CALLER_MODES"]

Mode = Literal["client_credentials", "token_exchange", "passthrough"]

PER_CALLER_MODES = frozenset({"token_exchange", "passthrough"})
"""Modes in which a call carries a token of its caller (a call with no caller token fails)."""

_CLIENT_KEYS = ("issuer", "token_endpoint", "client_id", "client_secret", "scopes", "audience", "resource")


class CredentialsSettings(BaseModel):
    """An HTTP upstream's ``credentials`` entry (see the module docstring).

    Attributes:
        mode: ``client_credentials``, ``token_exchange`` or ``passthrough``.
        issuer: the authorization server whose metadata names the token endpoint.
        token_endpoint: the token endpoint itself (wins over ``issuer``'s metadata).
        client_id: the gateway's client at that server.
        client_secret: its secret (``${NAME}`` reads the environment); sent with HTTP Basic
            authentication, or in the form with ``auth_method: client_secret_post``.
        auth_method: how the client authenticates at the token endpoint.
        scopes: scopes asked for (none: the server's default).
        audience: the ``audience`` parameter (an identifier the server knows the upstream by).
        resource: the ``resource`` parameter (RFC 8707); with neither set, the upstream's ``url``.
        refresh_margin: seconds before a token's expiry at which it is renewed.
        timeout: seconds a token request may take.
        cache_size: ``token_exchange``: exchanged tokens kept (one per caller token, until expiry).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode
    issuer: str | None = None
    token_endpoint: str | None = None
    client_id: str | None = Field(default=None, min_length=1)
    client_secret: SecretStr | None = None
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    scopes: tuple[str, ...] = ()
    audience: str | None = Field(default=None, min_length=1)
    resource: str | None = None
    refresh_margin: float = Field(default=60.0, ge=0, le=3600)
    timeout: float = Field(default=10.0, gt=0, le=120)
    cache_size: int = Field(default=1000, ge=1, le=1_000_000)

    @property
    def per_caller(self) -> bool:
        """Whether a call carries a token of its caller (``token_exchange``, ``passthrough``)."""
        return self.mode in PER_CALLER_MODES

    @field_validator("issuer", "token_endpoint", "resource")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, what="this URL")

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return checked_scopes(value)

    @model_validator(mode="after")
    def _mode_keys(self) -> CredentialsSettings:
        if self.mode == "passthrough":
            given = [k for k in _CLIENT_KEYS if getattr(self, k) not in (None, ())]
            if given:
                raise ValueError(
                    f"passthrough sends the caller's own token and fetches none: remove {', '.join(given)}"
                )
            return self
        missing = [k for k in ("client_id", "client_secret") if getattr(self, k) is None]
        if missing:
            raise ValueError(
                f"{self.mode} needs {' and '.join(missing)} (the gateway's client at the issuer)"
            )
        if self.issuer is None and self.token_endpoint is None:
            raise ValueError(
                f"{self.mode} needs token_endpoint, or issuer to find it in the issuer's metadata"
            )
        return self
