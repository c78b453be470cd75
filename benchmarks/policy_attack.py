"""Per-identity isolation under attack: no caller reads or writes another's session, and no
caller learns of a tool the policy denies it.

Run from the repository root, with the project's venv active:

    python benchmarks/policy_attack.py
    python benchmarks/policy_attack.py --tries 1000 --json benchmarks/results/policy_attack.json
    RESIDENCY_PG_URL=postgresql://... python benchmarks/policy_attack.py --replicas 2

The world is ``policy_world``'s: the demo desk and a vault behind a gateway's OAuth front (or
``--replicas`` gateways sharing one PostgreSQL store, each attack request sent to one of them in
turn), three users with real RS256 tokens, and a policy that gives each other tools. First
``alice`` and ``carol`` (the victims) each read a secret under a session key of their own: the
secret's path is a marker only they have seen, kept in their session as a span. Their sessions'
``residency://events``, ``tools``, ``spans`` and ``tombstones`` are read as a baseline.

Then ``--tries`` attacks, drawn from these kinds in turn (by every user against every other):

``swapped_key_header``  a victim's session key in the ``Residency-Session`` header: read every
                        resource, read the victim's span by its id, call a tool, re-expand
``swapped_key_meta``    the same with the key in ``_meta["residency/session"]``
``forged_key``          keys built to collide: the victim's key with its identity prefix, a
                        policy fingerprint, path tricks, case and padding variants
``forged_token``        the victim's or the attacker's token re-signed by another key, with
                        ``alg: none``, with its claims edited (groups, subject) and the
                        signature kept, expired, for another audience; each must be a 401
``denied_name``         a tool the attacker may not see, by every path: a direct call,
                        ``call_tool``, ``reexpand_tools``, ``search_tools`` (by its words)

Counted: a cross-identity read is a response that holds a victim's marker, or a read of a
victim's span that did not fail as an unknown span; a cross-identity write is a victim session
whose resources differ from the baseline afterwards; a denied tool is revealed when a response
names one of the attacker's denied tools that its request did not name, or when a request that
named one is answered otherwise than the same request naming a tool that does not exist (with
the name swapped). Target: all three are 0. The exit code is 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import jwt
import mcp_types as types
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, MCPError

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.policy_world import DENIED, ISSUER, RESOURCE, USERS, World, client, serve

KINDS = ("swapped_key_header", "swapped_key_meta", "forged_key", "forged_token", "denied_name")
VICTIMS = ("alice", "carol")
RESOURCES = (
    "residency://events",
    "residency://tools",
    "residency://spans",
    "residency://tombstones",
    "residency://chains",
    "residency://upstreams",
)
UNKNOWN = "no_such_tool_here"
SEARCH_WORDS = {
    "delete_secret": "delete a secret",
    "rotate_key": "rotate the key",
    "list_secrets": "list secrets",
    "read_secret": "read a secret",
    "close_incident": "close an incident",
    "page_oncall": "page the on-call engineer",
}


@dataclass
class Victim:
    user: str
    key: str
    marker: str
    span: str
    baseline: dict[str, str]


@dataclass
class Figures:
    tries: int = 0
    requests: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    cross_reads: int = 0
    cross_writes: int = 0
    denied_revealed: int = 0
    tokens_accepted: int = 0
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    replicas: int = 1

    @property
    def met(self) -> bool:
        return not (self.cross_reads or self.cross_writes or self.denied_revealed or self.tokens_accepted)

    def report(self) -> dict[str, Any]:
        return {
            "tries": self.tries,
            "requests": self.requests,
            "by_kind": dict(self.by_kind),
            "replicas": self.replicas,
            "cross_identity_reads": self.cross_reads,
            "cross_identity_writes": self.cross_writes,
            "denied_tools_revealed": self.denied_revealed,
            "forged_tokens_accepted": self.tokens_accepted,
            "findings": self.findings[:20],
            "seconds": round(self.seconds, 1),
            "target": "0 cross-identity reads and writes, 0 denied tools revealed, 0 forged tokens accepted",
            "met": self.met,
        }

    def summary(self) -> str:
        return (
            f"{self.tries} tries ({self.requests} requests, {self.replicas} replica(s)) "
            f"in {self.seconds:.0f} s: "
            f"cross-identity reads {self.cross_reads}, writes {self.cross_writes}, denied tools revealed "
            f"{self.denied_revealed}, forged tokens accepted {self.tokens_accepted} "
            f"({'met' if self.met else 'MISSED'})"
        )


def _dump(value: Any) -> str:
    if isinstance(value, MCPError):
        return json.dumps(
            {"error": type(value).__name__, "code": value.error.code, "message": value.error.message}
        )
    if hasattr(value, "model_dump"):
        return json.dumps(value.model_dump(mode="json", by_alias=True, exclude_none=True))
    return json.dumps(value)


async def _call(c: Client, name: str, arguments: Mapping[str, Any], meta: Any = None) -> str:
    try:
        return _dump(await c.call_tool(name, dict(arguments), meta=meta))
    except MCPError as exc:
        return _dump(exc)


async def _read(c: Client, uri: str, meta: Any = None) -> str:
    try:
        return _dump(await c.read_resource(uri, meta=meta, cache_mode="refresh"))
    except MCPError as exc:
        return _dump(exc)


def _meta(key: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {"residency/session": key})


async def _snapshot(c: Client, key: str) -> dict[str, str]:
    return {uri: await _read(c, uri, _meta(key)) for uri in RESOURCES[:4]}


class Attack:
    """One run: the world, the victims, and what every response is checked for."""

    def __init__(self, world: World, figures: Figures) -> None:
        self.world = world
        self.figures = figures
        self.victims: dict[str, Victim] = {}
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._turn = 0

    def url(self) -> str:
        self._turn += 1
        return self.world.urls[self._turn % len(self.world.urls)]

    def check(self, attacker: str, request: str, body: str) -> None:
        """Count what ``body`` (the answer to ``request``, by ``attacker``) gives away."""
        self.figures.requests += 1
        for victim in self.victims.values():
            if victim.user != attacker and victim.marker in body:
                self.figures.cross_reads += 1
                self.figures.findings.append(f"{attacker} read {victim.user}'s marker via {request}")
        for name in DENIED[attacker]:
            if name in body and name not in request:
                self.figures.denied_revealed += 1
                self.figures.findings.append(f"{attacker} learned of {name} via {request}: {body[:300]}")

    def same_as_unknown(self, attacker: str, request: str, denied: str, body: str, unknown: str) -> None:
        self.figures.requests += 1
        if body.replace(denied, "<tool>") != unknown.replace(UNKNOWN, "<tool>"):
            self.figures.denied_revealed += 1
            self.figures.findings.append(f"{attacker}: {request} differs from an unknown tool: {body[:300]}")

    async def set_up(self) -> None:
        for user in VICTIMS:
            marker = f"{user}-secret-{os.urandom(6).hex()}"
            key = f"{user}-work"
            async with client(self.world.urls[0], self.world.issuer.token(user)) as c:
                result = await c.call_tool("read_secret", {"path": marker}, meta=_meta(key))
                span = (result.meta or {}).get("residency/span", {}).get("id")
                if result.is_error or not isinstance(span, str):
                    raise RuntimeError(f"{user} could not read a secret: {_dump(result)}")
                self.victims[user] = Victim(user, key, marker, span, await _snapshot(c, key))

    async def verify(self) -> None:
        """Count the victim sessions the attack changed (each victim reads its own)."""
        for victim in self.victims.values():
            async with client(self.world.urls[0], self.world.issuer.token(victim.user)) as c:
                now = await _snapshot(c, victim.key)
            for uri, body in now.items():
                if body != victim.baseline[uri]:
                    self.figures.cross_writes += 1
                    self.figures.findings.append(f"{victim.user}'s {uri} changed during the attack")
            if victim.marker not in now["residency://spans"] and victim.span not in now["residency://spans"]:
                raise RuntimeError(f"{victim.user}'s own span is gone: the check would prove nothing")

    # -- the kinds ---------------------------------------------------------------------------

    async def swapped_key(self, c: Client, attacker: str, victim: Victim, *, header: bool) -> None:
        meta = None if header else _meta(victim.key)
        where = "header" if header else "_meta"
        for uri in (*RESOURCES, f"residency://spans/{victim.span}"):
            body = await _read(c, uri, meta)
            self.check(attacker, f"read {uri} with {victim.user}'s key in the {where}", body)
            if (
                uri.endswith(victim.span)
                and "no span" not in body
                and "NotFound" not in body
                and '"code"' not in body
            ):
                self.figures.cross_reads += 1
                self.figures.findings.append(f"{attacker} read {victim.user}'s span: {body[:200]}")
        body = await _call(c, "get_incident", {"id": "INC-7"}, meta)
        self.check(attacker, f"call with {victim.user}'s key", body)
        body = await _call(c, "reexpand_tools", {"names": ["get_runbook"]}, meta)
        self.check(attacker, f"reexpand with {victim.user}'s key", body)

    async def forged_key(self, base: Client, attacker: str, victim: Victim, n: int) -> None:
        from residency._gateway._oauth import Principal

        identity = Principal(ISSUER, victim.user, "team-agent", frozenset()).identity
        forged = [
            f"{identity}/{victim.key}",
            f"{victim.key}#000000000000",
            f"../{victim.key}",
            f"{victim.key}/",
            victim.key.upper(),
            f" {victim.key}",
            f"{identity}",
            f"{victim.key}\u200b",
        ][n % 8]
        meta = _meta(forged)
        self.check(attacker, f"_meta {forged!r}", await _read(base, "residency://events", meta))
        self.check(
            attacker, f"_meta {forged!r} span", await _read(base, f"residency://spans/{victim.span}", meta)
        )
        if not forged.isascii() or forged != forged.strip():
            return  # not a header value a client can send (the _meta above carried it)
        async with client(self.url(), self.world.issuer.token(attacker), session=forged) as c:
            for uri in RESOURCES[:3]:
                self.check(attacker, f"read {uri} with forged key {forged!r}", await _read(c, uri))
            self.check(
                attacker, f"read the span with {forged!r}", await _read(c, f"residency://spans/{victim.span}")
            )

    def forged_tokens(self, attacker: str, victim: Victim) -> list[str]:
        issuer = self.world.issuer
        good = issuer.token(attacker)
        head, _, signature = good.split(".")
        victims_body = issuer.token(victim.user).split(".")[1]
        raise_to = {"iss": ISSUER, "aud": RESOURCE, "sub": attacker, "groups": ["ops", "support"]}
        edited = jwt.utils.base64url_encode(json.dumps(raise_to).encode()).decode()
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": RESOURCE,
            "sub": victim.user,
            "client_id": "team-agent",
            "scope": "mcp:tools",
            "groups": ["ops", "support"],
            "iat": now,
            "exp": now + 600,
        }
        return [
            jwt.encode(claims, self.other_key, algorithm="RS256", headers={"kid": issuer.kid}),
            jwt.encode(claims, self.other_key, algorithm="RS256"),
            f"{jwt.encode(claims, '', algorithm='none')}",
            f"{head}.{victims_body}.{signature}",  # the victim's claims, the attacker's signature
            f"{head}.{edited}.{signature}",  # the attacker's own token, its claims edited
            issuer.token(attacker, exp=now - 3600, iat=now - 7200),
            issuer.token(attacker, aud="https://elsewhere.example.com/mcp"),
            issuer.token(attacker, iss="https://evil.example.com"),
        ]

    async def forged_token(self, http: httpx2.AsyncClient, attacker: str, victim: Victim, n: int) -> None:
        tokens = self.forged_tokens(attacker, victim)
        token = tokens[n % len(tokens)]
        payload = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        response = await http.post(
            self.url(),
            json=payload,
            headers={
                "authorization": f"Bearer {token}",
                "accept": "application/json, text/event-stream",
                "residency-session": victim.key,
            },
        )
        self.check(attacker, f"forged token #{n % len(tokens)}", response.text)
        if response.status_code != 401:
            self.figures.tokens_accepted += 1
            self.figures.findings.append(f"forged token #{n % len(tokens)} got {response.status_code}")

    async def denied_name(self, c: Client, attacker: str, n: int) -> None:
        names = sorted(DENIED[attacker])
        name = names[n % len(names)]
        for request, arguments, tool in (
            ("direct", {"path": "x"}, name),
            ("call_tool", {"name": name, "arguments": {"path": "x"}}, "call_tool"),
            ("reexpand_tools", {"names": [name]}, "reexpand_tools"),
        ):
            body = await _call(c, tool, arguments)
            unknown_args = json.loads(json.dumps(arguments).replace(name, UNKNOWN))
            unknown = await _call(c, tool if tool != name else UNKNOWN, unknown_args)
            self.same_as_unknown(attacker, f"{request} {name}", name, body, unknown)
            self.check(attacker, f"{request} {name} {json.dumps(arguments)}", body)
        query = SEARCH_WORDS.get(name, name.replace("_", " "))
        body = await _call(c, "search_tools", {"query": query, "limit": 50})
        self.check(attacker, f"search {query!r}", body)
        body = _dump(await c.list_tools())
        self.check(attacker, "tools/list", body)


async def measure(tries: int, *, replicas: int = 1, store: str | None = None) -> Figures:
    figures = Figures(replicas=replicas)
    started = time.perf_counter()
    async with serve(replicas=replicas, store=store) as world:
        attack = Attack(world, figures)
        await attack.set_up()
        attackers = sorted(USERS)
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60.0)) as http:
            clients: dict[tuple[str, str | None], Client] = {}
            async with AsyncExitStack() as stack:
                for attacker in attackers:
                    for whose in (None, *VICTIMS):
                        key = None if whose is None else attack.victims[whose].key
                        url = world.urls[len(clients) % len(world.urls)]
                        clients[(attacker, whose)] = await stack.enter_async_context(
                            client(url, world.issuer.token(attacker), session=key)
                        )
                for n in range(tries):
                    kind = KINDS[n % len(KINDS)]
                    attacker = attackers[(n // len(KINDS)) % len(attackers)]
                    others = [v for v in VICTIMS if v != attacker]
                    victim = attack.victims[others[n % len(others)]]
                    if kind == "swapped_key_header":
                        await attack.swapped_key(
                            clients[(attacker, victim.user)], attacker, victim, header=True
                        )
                    elif kind == "swapped_key_meta":
                        await attack.swapped_key(clients[(attacker, None)], attacker, victim, header=False)
                    elif kind == "forged_key":
                        await attack.forged_key(clients[(attacker, None)], attacker, victim, n // len(KINDS))
                    elif kind == "forged_token":
                        await attack.forged_token(http, attacker, victim, n // len(KINDS))
                    else:
                        await attack.denied_name(clients[(attacker, None)], attacker, n // len(KINDS))
                    figures.by_kind[kind] += 1
                    figures.tries += 1
        await attack.verify()
    figures.seconds = time.perf_counter() - started
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tries", type=int, default=1000, help="attacks to make (default 1000)")
    parser.add_argument("--replicas", type=int, default=1, help="gateways on one store (default 1)")
    parser.add_argument("--store", help="their store (default: RESIDENCY_PG_URL with --replicas > 1)")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    store = args.store
    if store is None and args.replicas > 1:
        store = os.environ.get("RESIDENCY_PG_URL")
        if not store:
            parser.error("--replicas > 1 needs a shared store: --store or RESIDENCY_PG_URL")
    import logging

    logging.getLogger("client").setLevel(logging.ERROR)
    figures = anyio.run(lambda: measure(args.tries, replicas=args.replicas, store=store))
    print(figures.summary())
    for finding in figures.findings[:20]:
        print("  " + finding)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures.report(), indent=1) + "\n")
    return 0 if figures.met else 1


if __name__ == "__main__":
    sys.exit(main())
