"""Access-token validation without a network: keys generated here, a fake issuer that counts.

The same checks run against a real OpenID provider in ``test_oauth_provider`` (slow tier).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.warnings import InsecureKeyLengthWarning
from pydantic import ValidationError

from residency._cli._session_names import find_session, session_key_of
from residency._gateway._jwks import (
    RETRY_SECONDS,
    IssuerUnavailable,
    KeySet,
    RefreshGate,
    key_fits,
    metadata_urls,
)
from residency._gateway._oauth import Introspector, Principal, TokenRefused, TokenValidator
from residency._gateway._oauth_config import IntrospectionSettings, OAuthSettings
from tests.gateway.oauth_keys import (
    ISSUER,
    JWKS_URI,
    RESOURCE,
    Clock,
    FakeIssuer,
    SigningKey,
    ec_key,
    hs256_with,
    mint,
    rsa_key,
    settings,
    unsigned,
)

pytestmark = pytest.mark.anyio

TIME_CLAIMS = ("exp", "nbf", "iat")
FIRST = rsa_key("k1")
SECOND = rsa_key("k2")
ELLIPTIC = ec_key("e1")


def validator(issuer: FakeIssuer, clock: Clock | None = None, **overrides: Any) -> TokenValidator:
    return TokenValidator(settings(**overrides), fetch=issuer, clock=clock or Clock())


def issuing(*keys: SigningKey) -> FakeIssuer:
    issuer = FakeIssuer()
    issuer.publish(*keys)
    return issuer


async def refused(v: TokenValidator, token: str) -> TokenRefused:
    with pytest.raises(TokenRefused) as caught:
        await v.validate(token)
    return caught.value


async def test_a_valid_token_names_its_subject_client_and_scopes() -> None:
    v = validator(issuing(FIRST, ELLIPTIC))
    principal = await v.validate(mint(FIRST, scope="mcp:tools mcp:admin"))
    assert (principal.issuer, principal.subject, principal.client_id) == (ISSUER, "alice", "desk-client")
    assert principal.scopes == {"mcp:tools", "mcp:admin"}
    assert (await v.validate(mint(ELLIPTIC))).identity == principal.identity


async def test_identities_differ_by_subject_client_and_issuer_and_show_no_claim() -> None:
    base = Principal(ISSUER, "alice", "desk", frozenset())
    others = [
        Principal(ISSUER, "bob", "desk", frozenset()),
        Principal(ISSUER, "alice", "other", frozenset()),
        Principal(ISSUER, "alice", None, frozenset()),
        Principal("https://other.example.com", "alice", "desk", frozenset()),
        Principal(ISSUER, "alice/desk", None, frozenset()),  # no ambiguity from separators
    ]
    assert len({base.identity, *(o.identity for o in others)}) == 1 + len(others)
    assert base.identity.startswith("oauth-") and len(base.identity) == 6 + 32
    assert "alice" not in base.identity and "desk" not in base.identity


async def test_a_client_credentials_token_without_sub_is_its_client() -> None:
    principal = await validator(issuing(FIRST)).validate(mint(FIRST, sub=None))
    assert principal.subject == "desk-client"


@pytest.mark.parametrize(
    ("overrides", "description"),
    [
        ({"exp": -120}, "the token has expired"),
        ({"nbf": 120}, "the token is not valid yet"),
        ({"iat": 120}, "the token is not valid yet"),
        ({"aud": "https://other.example.com/mcp"}, "the token was issued for another resource"),
        ({"aud": "https://mcp.example.com/mcp/"}, "the token was issued for another resource"),
        ({"iss": "https://evil.example.com"}, "the token was issued by another issuer"),
        ({"exp": None}, "the token lacks a required claim"),
        ({"aud": None}, "the token lacks a required claim"),
        ({"sub": None, "client_id": None}, "the token names no subject"),
    ],
)
async def test_bad_claims_are_invalid_tokens(overrides: dict[str, Any], description: str) -> None:
    # Times are given as seconds from now, and made absolute here, when the test runs: made at
    # collection, a token "valid in 120 s" is valid by the time a busy worker reaches it.
    now = int(time.time())
    overrides = {k: now + v if k in TIME_CLAIMS and v is not None else v for k, v in overrides.items()}
    refusal = await refused(validator(issuing(FIRST)), mint(FIRST, **overrides))
    assert (refusal.error, refusal.status, refusal.description) == ("invalid_token", 401, description)


async def test_times_within_the_leeway_are_accepted() -> None:
    v = validator(issuing(FIRST), leeway=60)
    now = int(time.time())
    await v.validate(mint(FIRST, exp=now - 20, nbf=now + 20))
    assert (await refused(v, mint(FIRST, exp=now - 90))).description == "the token has expired"


async def test_an_audience_list_holding_the_resource_is_accepted() -> None:
    await validator(issuing(FIRST)).validate(mint(FIRST, aud=["https://other.example.com", RESOURCE]))


async def test_alg_none_is_refused() -> None:
    v = validator(issuing(FIRST))
    refusal = await refused(v, unsigned())
    assert refusal.description == "the token's algorithm is not accepted"


async def test_hs256_signed_with_the_public_key_is_refused() -> None:
    issuer = issuing(FIRST)
    v = validator(issuer)
    for secret in (FIRST.public_pem(), FIRST.public_pem().strip()):
        refusal = await refused(v, hs256_with(secret, FIRST.kid))
        assert refusal.error == "invalid_token"
    assert issuer.fetched == []  # refused on its header: no key was even looked up


async def test_a_key_is_used_only_with_an_algorithm_of_its_type() -> None:
    v = validator(issuing(FIRST, ELLIPTIC))
    # An ES256 token naming the RSA key's kid, and the reverse.
    forged_ec = mint(ec_key(FIRST.kid))
    forged_rsa = mint(rsa_key(ELLIPTIC.kid))
    for token in (forged_ec, forged_rsa):
        assert (await refused(v, token)).description == "the token's signing key is not the issuer's"
    assert not key_fits(FIRST.public_jwk(), "ES256")
    assert not key_fits({**FIRST.public_jwk(), "alg": "RS256"}, "PS256")
    assert key_fits({k: v for k, v in FIRST.public_jwk().items() if k != "alg"}, "PS256")
    assert not key_fits({**ELLIPTIC.public_jwk(), "alg": None, "crv": "P-384"}, "ES256")


async def test_a_token_signed_by_another_key_with_a_known_kid_is_refused() -> None:
    impostor = SigningKey(FIRST.kid, SECOND.private, "RS256")
    refusal = await refused(validator(issuing(FIRST)), mint(impostor))
    assert refusal.description == "the token's signature is invalid"


async def test_garbage_is_refused_as_malformed() -> None:
    v = validator(issuing(FIRST))
    for token in ("a.b.c", "....", "x" * 20_000, "eyJhbGciOiJSUzI1NiJ9.e30.", "not-a-jwt"):
        assert (await refused(v, token)).error == "invalid_token"


async def test_odd_claim_types_headers_and_spellings_are_malformed() -> None:
    v = validator(issuing(FIRST))
    for overrides in ({"exp": "tomorrow"}, {"exp": True}, {"nbf": [1]}):
        assert (await refused(v, mint(FIRST, **overrides))).description == "the token is malformed"
    assert (await refused(v, mint(FIRST, aud={"a": RESOURCE}))).error == "invalid_token"
    head, _, signature = mint(FIRST).split(".")
    nan = base64.urlsafe_b64encode(
        b'{"iss":"%s","aud":"%s","exp":NaN}' % (ISSUER.encode(), RESOURCE.encode())
    )
    assert (
        await refused(v, f"{head}.{nan.rstrip(b'=').decode()}.{signature}")
    ).description == "the token is malformed"
    crit = mint(FIRST, header={"crit": ["exp"], "exp": 1})
    assert (await refused(v, crit)).description == "the token is malformed"
    head, body, signature = mint(FIRST).split(".")
    # The last character of a 256-byte signature carries 4 unused bits: set one of them.
    bent = signature[:-1] + ("B" if signature[-1] == "A" else "A")
    assert (await refused(v, f"{head}.{body}.{bent}")).error == "invalid_token"
    assert (await refused(v, f"{head}.{body}.{signature}=")).description == "the token is malformed"


async def test_an_rsa_key_under_2048_bits_is_not_used() -> None:
    weak = SigningKey("weak", rsa.generate_private_key(public_exponent=65537, key_size=1024), "RS256")
    with pytest.warns(InsecureKeyLengthWarning):  # PyJWT warns when it signs with one
        token = mint(weak)
    refusal = await refused(validator(issuing(weak)), token)
    assert refusal.description == "the token's signing key is not the issuer's"


async def test_a_missing_scope_is_insufficient_scope() -> None:
    v = validator(issuing(FIRST), scopes=["mcp:tools", "mcp:admin"])
    refusal = await refused(v, mint(FIRST, scope="mcp:tools"))
    assert (refusal.error, refusal.status) == ("insufficient_scope", 403)
    await v.validate(mint(FIRST, scope="mcp:admin mcp:tools extra"))
    await v.validate(mint(FIRST, scope=None, scp=["mcp:admin", "mcp:tools"]))


# -- the key cache ------------------------------------------------------------------------------


async def test_keys_are_fetched_once_and_reused() -> None:
    issuer = issuing(FIRST)
    v = validator(issuer)
    for _ in range(5):
        await v.validate(mint(FIRST))
    assert issuer.fetched == [JWKS_URI]


async def test_a_rotated_key_is_picked_up_without_a_restart() -> None:
    issuer = issuing(FIRST)
    clock = Clock()
    v = validator(issuer, clock, jwks_cooldown=30)
    await v.validate(mint(FIRST))
    clock.now += 31
    issuer.publish(FIRST, SECOND)
    principal = await v.validate(mint(SECOND))
    assert principal.subject == "alice" and len(issuer.fetched) == 2


async def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_cooldown() -> None:
    issuer = issuing(FIRST)
    clock = Clock()
    v = validator(issuer, clock, jwks_cooldown=30)
    await v.validate(mint(FIRST))
    clock.now += 31
    for i in range(200):
        stranger = SigningKey(f"made-up-{i}", FIRST.private, "RS256")
        assert (await refused(v, mint(stranger))).description == "the token's signing key is not the issuer's"
        clock.now += 0.1
    assert len(issuer.fetched) == 2  # the first use, then one refresh in the 20 s of the flood
    clock.now += 30
    await refused(v, mint(SigningKey("made-up-again", FIRST.private, "RS256")))
    assert len(issuer.fetched) == 3
    await v.validate(mint(FIRST))  # known keys are served from the cache all along
    assert len(issuer.fetched) == 3


async def test_a_withdrawn_key_stops_working_after_max_age() -> None:
    issuer = issuing(FIRST, SECOND)
    clock = Clock()
    v = validator(issuer, clock, jwks_max_age=600)
    await v.validate(mint(FIRST))
    issuer.publish(SECOND)
    clock.now += 599
    await v.validate(mint(FIRST))
    clock.now += 2
    await refused(v, mint(FIRST))
    await v.validate(mint(SECOND))


async def test_an_unreachable_issuer_is_unavailable_not_invalid() -> None:
    issuer = issuing(FIRST)
    issuer.down = True
    v = validator(issuer)
    with pytest.raises(IssuerUnavailable):
        await v.validate(mint(FIRST))


async def test_while_the_keys_were_never_had_a_flood_costs_one_fetch_per_retry_interval() -> None:
    issuer = issuing(FIRST)
    issuer.down = True
    clock = Clock()
    v = validator(issuer, clock, jwks_cooldown=30)
    for _ in range(50):
        with pytest.raises(IssuerUnavailable):
            await v.validate(mint(FIRST))
        clock.now += 0.05
    assert len(issuer.fetched) == 1
    clock.now += RETRY_SECONDS
    issuer.down = False
    assert (await v.validate(mint(FIRST))).subject == "alice"
    assert len(issuer.fetched) == 2


async def test_an_issuer_going_down_keeps_the_last_good_keys() -> None:
    issuer = issuing(FIRST)
    clock = Clock()
    v = validator(issuer, clock, jwks_max_age=60)
    await v.validate(mint(FIRST))
    issuer.down = True
    clock.now += 120
    assert (await v.validate(mint(FIRST))).subject == "alice"
    assert len(issuer.fetched) == 2


async def test_the_jwks_uri_comes_from_the_issuer_metadata() -> None:
    issuer = FakeIssuer()
    issuer.publish(FIRST, uri="https://issuer.example.com/keys")
    issuer.documents[f"{ISSUER}/.well-known/openid-configuration"] = {
        "issuer": ISSUER,
        "jwks_uri": "https://issuer.example.com/keys",
    }
    v = validator(issuer, jwks_uri=None)
    await v.validate(mint(FIRST))
    assert issuer.fetched == [
        f"{ISSUER}/.well-known/oauth-authorization-server",
        f"{ISSUER}/.well-known/openid-configuration",
        "https://issuer.example.com/keys",
    ]


async def test_metadata_naming_another_issuer_is_not_used() -> None:
    issuer = FakeIssuer()
    issuer.publish(FIRST, uri="https://evil.example.com/keys")
    issuer.documents[f"{ISSUER}/.well-known/oauth-authorization-server"] = {
        "issuer": "https://evil.example.com",
        "jwks_uri": "https://evil.example.com/keys",
    }
    with pytest.raises(IssuerUnavailable):
        await validator(issuer, jwks_uri=None).validate(mint(FIRST))


def test_metadata_urls_follow_rfc_8414_then_openid_discovery() -> None:
    assert metadata_urls("https://id.example.com/tenant/a") == [
        "https://id.example.com/.well-known/oauth-authorization-server/tenant/a",
        "https://id.example.com/tenant/a/.well-known/openid-configuration",
    ]


def test_symmetric_private_and_malformed_keys_are_left_out() -> None:
    public = FIRST.public_jwk()
    document = {
        "keys": [
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {**public, "kid": "leaked", "d": "AAAA"},
            "not a key",
            {**public, "kid": 7},
            public,
        ]
    }
    assert list(KeySet.from_document(document).keys) == [FIRST.kid]
    with pytest.raises(IssuerUnavailable):
        KeySet.from_document({"keys": "none"})


def test_the_refresh_gate_allows_a_fetch_per_cooldown_and_one_per_max_age() -> None:
    gate = RefreshGate(cooldown=10, max_age=100)
    assert gate.stale(0) and gate.may_fetch_for_unknown_key(0)
    gate.fetched(0)
    assert not gate.may_fetch_for_unknown_key(9.9) and gate.may_fetch_for_unknown_key(10)
    assert not gate.stale(99.9) and gate.stale(100)


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"algorithms": ["HS256"]},
        {"algorithms": ["none"]},
        {"algorithms": []},
        {"issuer": "http://issuer.example.com"},
        {"issuer": "ftp://issuer.example.com"},
        {"resource": "https://mcp.example.com/mcp#frag"},
        {"jwks_uri": "http://keys.example.com/jwks"},
        {"scopes": ["two words"]},
        {"leeway": -1},
        {"unknown": 1},
    ],
)
def test_bad_settings_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        settings(**overrides)


def test_loopback_issuers_may_use_http_and_audience_is_the_resource() -> None:
    parsed = OAuthSettings.model_validate(
        {"issuer": "http://127.0.0.1:9000", "audience": "http://localhost:8000/mcp"}
    )
    assert parsed.resource == "http://localhost:8000/mcp"
    assert parsed.algorithms == ("RS256", "PS256", "ES256", "EdDSA")


# -- introspection -------------------------------------------------------------------------------


class FakeIntrospection:
    def __init__(self, answers: Mapping[str, Mapping[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, tuple[str, str]]] = []

    async def __call__(
        self, url: str, form: Mapping[str, str], credentials: tuple[str, str], timeout: float
    ) -> Mapping[str, Any]:
        self.asked.append((form["token"], credentials))
        return self.answers.get(form["token"], {"active": False})


def introspecting(
    answers: Mapping[str, Mapping[str, Any]], clock: Clock, **introspection: Any
) -> tuple[TokenValidator, FakeIntrospection]:
    spec = {
        "endpoint": f"{ISSUER}/introspect",
        "client_id": "gw",
        "client_secret": "s3cret!!",
        **introspection,
    }
    config = settings(introspection=spec)
    assert config.introspection is not None
    fake = FakeIntrospection(answers)
    inspector = Introspector(config.introspection, config, post=fake, wallclock=clock)
    return TokenValidator(config, fetch=FakeIssuer(), introspector=inspector), fake


async def test_opaque_tokens_are_introspected_checked_and_cached() -> None:
    clock = Clock(now=time.time())
    good = {"active": True, "iss": ISSUER, "aud": RESOURCE, "sub": "carol", "scope": "mcp:tools",
            "exp": int(clock.now) + 3600}  # fmt: skip
    answers = {
        "opaque-good": good,
        "opaque-other-aud": {**good, "aud": "https://other.example.com"},
        "opaque-no-aud": {k: v for k, v in good.items() if k != "aud"},
        "opaque-other-iss": {**good, "iss": "https://evil.example.com"},
        "opaque-expired": {**good, "exp": int(clock.now) - 600},
    }
    v, fake = introspecting(answers, clock, cache_seconds=60)
    assert (await v.validate("opaque-good")).subject == "carol"
    assert (await v.validate("opaque-good")).subject == "carol"
    assert fake.asked == [("opaque-good", ("gw", "s3cret!!"))]
    clock.now += 61
    await v.validate("opaque-good")
    assert len(fake.asked) == 2
    for token in ("opaque-other-aud", "opaque-no-aud", "opaque-other-iss", "opaque-expired", "unknown"):
        assert (await refused(v, token)).error == "invalid_token"


async def test_a_failing_introspection_endpoint_is_left_alone_for_a_while() -> None:
    clock = Clock(now=time.time())
    calls = 0

    async def failing(url: str, form: Mapping[str, str], credentials: tuple[str, str], timeout: float) -> Any:
        nonlocal calls
        calls += 1
        raise IssuerUnavailable("down")

    config = settings(introspection={"endpoint": f"{ISSUER}/i", "client_id": "gw", "client_secret": "x"})
    assert config.introspection is not None
    down = TokenValidator(
        config,
        fetch=FakeIssuer(),
        introspector=Introspector(config.introspection, config, post=failing, wallclock=clock),
    )
    for _ in range(20):
        with pytest.raises(IssuerUnavailable):
            await down.validate("opaque")
    assert calls == 1
    clock.now += RETRY_SECONDS
    with pytest.raises(IssuerUnavailable):
        await down.validate("opaque")
    assert calls == 2


async def test_opaque_tokens_without_introspection_are_refused() -> None:
    assert (await refused(validator(issuing(FIRST)), "opaque")).description == "the token is not a JWT"


def test_introspection_settings_need_https_and_a_client() -> None:
    with pytest.raises(ValidationError):
        IntrospectionSettings.model_validate({"endpoint": "http://id.example.com/i", "client_id": "a",
                                              "client_secret": "b"})  # fmt: skip
    with pytest.raises(ValidationError):
        IntrospectionSettings.model_validate({"endpoint": "https://id.example.com/i", "client_secret": "b"})


def test_store_commands_find_a_key_under_an_oauth_identity() -> None:
    identity = Principal(ISSUER, "alice", "desk", frozenset()).identity
    sid = f"gateway/{identity}/mine"
    assert session_key_of(sid) == "mine"
    assert find_session(["desk", sid], "mine", where="s.db") == sid


async def test_a_remembered_token_is_still_refused_once_expired_or_its_key_withdrawn() -> None:
    issuer = issuing(FIRST, SECOND)
    clock, wall = Clock(), Clock(now=time.time())
    v = TokenValidator(settings(leeway=10, jwks_max_age=600), fetch=issuer, clock=clock, wallclock=wall)
    short = mint(FIRST, exp=int(wall.now) + 60)
    for _ in range(3):
        await v.validate(short)
    wall.now += 75
    assert (await refused(v, short)).description == "the token has expired"
    long = mint(SECOND, exp=int(wall.now) + 3600)
    await v.validate(long)
    issuer.publish(FIRST)
    clock.now += 601  # the key set is fetched again: SECOND is gone
    assert (await refused(v, long)).description == "the token's signing key is not the issuer's"
    assert len(issuer.fetched) == 2


async def test_every_one_character_change_of_a_valid_token_is_refused() -> None:
    v = validator(issuing(FIRST, ELLIPTIC))
    for key in (FIRST, ELLIPTIC):
        genuine = mint(key)
        await v.validate(genuine)  # remembered: a changed token must not ride on that
        alphabet = "AQgw-_."
        tries = 0
        for i, char in enumerate(genuine):
            for other in alphabet:
                if other == char:
                    continue
                with pytest.raises(TokenRefused):
                    await v.validate(genuine[:i] + other + genuine[i + 1 :])
                tries += 1
        assert tries > 1000


async def test_tokens_spliced_from_two_valid_ones_are_refused() -> None:
    v = validator(issuing(FIRST, SECOND))
    alice, bob = mint(FIRST, sub="alice"), mint(SECOND, sub="bob")
    assert (await v.validate(alice)).subject == "alice" and (await v.validate(bob)).subject == "bob"
    a, b = alice.split("."), bob.split(".")
    for parts in ((a[0], b[1], a[2]), (b[0], a[1], a[2]), (a[0], a[1], b[2]), (b[0], b[1], a[2])):
        assert (await refused(v, ".".join(parts))).error == "invalid_token"
