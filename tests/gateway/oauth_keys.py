"""Keys and tokens of a made-up issuer, for the fast tests of token validation.

The real-provider tests (``test_oauth_provider``) get their tokens from ``oidc-provider``; these
sign with keys generated here, so every claim and header can be bent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from residency._gateway._jwks import IssuerUnavailable
from residency._gateway._oauth_config import OAuthSettings

ISSUER = "https://issuer.example.com"
RESOURCE = "https://mcp.example.com/mcp"
JWKS_URI = "https://issuer.example.com/jwks"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    kid: str
    private: PrivateKey
    alg: str

    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            jwk = json.loads(RSAAlgorithm.to_jwk(public))
        elif isinstance(public, ec.EllipticCurvePublicKey):
            jwk = json.loads(ECAlgorithm.to_jwk(public))
        else:
            jwk = json.loads(OKPAlgorithm.to_jwk(public))
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def rsa_key(kid: str) -> SigningKey:
    return SigningKey(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, ec.generate_private_key(ec.SECP256R1()), "ES256")


def claims(**overrides: Any) -> dict[str, Any]:
    """Good claims for ``RESOURCE`` (an hour left), with ``overrides`` (None removes a claim)."""
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": RESOURCE,
        "sub": "alice",
        "client_id": "desk-client",
        "scope": "mcp:tools",
        "iat": now,
        "exp": now + 3600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def mint(key: SigningKey, *, header: Mapping[str, Any] | None = None, **overrides: Any) -> str:
    """A token signed by ``key`` with ``claims(**overrides)``."""
    headers = {"kid": key.kid, **(header or {})}
    return jwt.encode(claims(**overrides), key.private, algorithm=key.alg, headers=headers)


def unsigned(**overrides: Any) -> str:
    """An ``alg: none`` token (no signature)."""
    head = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims(**overrides)).encode())
    return f"{head}.{body}."


def hs256_with(secret: bytes, kid: str, **overrides: Any) -> str:
    """An HS256 token whose HMAC key is ``secret`` (the confusion attack: the RSA public key)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(claims(**overrides)).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(signature)}"


def settings(**overrides: Any) -> OAuthSettings:
    values: dict[str, Any] = {"issuer": ISSUER, "resource": RESOURCE, "jwks_uri": JWKS_URI}
    values.update(overrides)
    return OAuthSettings(**values)


@dataclass
class FakeIssuer:
    """Serves documents by URL, counts fetches, and can go down: the ``fetch`` of a validator."""

    documents: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    fetched: list[str] = field(default_factory=list)
    down: bool = False

    def publish(self, *keys: SigningKey, uri: str = JWKS_URI) -> None:
        self.documents[uri] = {"keys": [k.public_jwk() for k in keys]}

    async def __call__(self, url: str) -> Mapping[str, Any]:
        self.fetched.append(url)
        if self.down or url not in self.documents:
            raise IssuerUnavailable(f"{url} cannot be reached")
        return self.documents[url]


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now
