"""Per-identity tool access: which tools of the catalog one caller may see and call.

The rule order (docs: how-to, team deployment)
----------------------------------------------
Without a ``residency.policy`` section every caller sees every tool. With one:

1. The caller is what its access token says: its subject (``sub``), its groups (the claim
   ``auth.groups_claim`` names, ``groups`` by default) and its scopes. A caller without an
   OAuth identity (stdio, a static bearer token, an anonymous request) has none of them.
2. A rule applies to the caller when each of its ``subjects``, ``groups`` and ``scopes`` that
   is not empty holds one of the caller's (any one within a list, every list that is given). A
   rule that names none of them applies to every caller, those without an identity included:
   it is the policy's default rule.
3. A tool ``server/tool`` is denied when a ``deny`` pattern of any rule that applies matches
   it: deny wins, whatever allows it and in whichever rule.
4. Else it is allowed when an ``allow`` pattern of any rule that applies matches it.
5. Else it is denied: a caller no rule allows a tool to sees no tool (the meta-tools only).

The order of the rules never matters. A pattern is matched against the configured server name
and the name the server knows the tool by (a tool the gateway lists renamed keeps its upstream
name here), so a rule holds whatever the gateway names the tool.

The one choke point
-------------------
What a caller is allowed becomes an ``Access``, and ``Access.catalog`` the catalog that caller's
session is built from: a denied tool is simply not in it, so the session never registers it,
and every path that names a tool (``tools/list``, search, re-expansion, calls, resources,
notices, errors) behaves as if the tool did not exist, because for that session it does not.
A session is opened under one access: its key carries the access's ``fingerprint`` (``#`` and
12 hex digits, empty for an unrestricted access), so when a policy reload or a token with other
groups changes what a caller may see, the caller continues in a fresh session instead of one
that knew tools it may no longer see. Two callers with the same identity and the same access
share sessions exactly as before.

Sans-I/O: nothing here reads files or the clock.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from residency._gateway._aggregate import Catalog
from residency._gateway._policy_config import PolicyRule, PolicySettings

if TYPE_CHECKING:
    from residency._gateway._oauth import Principal

__all__ = ["ANYONE", "UNRESTRICTED", "Access", "Caller", "Policy", "caller_of"]

MAX_CALLERS_KEPT = 10_000
"""Callers whose access is remembered at most (the oldest half leaves when full)."""


@dataclass(frozen=True)
class Caller:
    """Who a request is, as the policy sees it (see the module docstring, step 1)."""

    subject: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    scopes: frozenset[str] = field(default_factory=frozenset)


ANYONE = Caller()
"""A caller without an OAuth identity: stdio, a static bearer token, an anonymous request."""


def caller_of(principal: Principal | None) -> Caller:
    """The caller a validated token's principal is (``ANYONE`` for None)."""
    if principal is None:
        return ANYONE
    return Caller(principal.subject, principal.groups, principal.scopes)


class _Pattern:
    """One ``server/tool`` glob, split once."""

    __slots__ = ("server", "tool")

    def __init__(self, pattern: str) -> None:
        server, _, tool = pattern.partition("/")
        self.server = server if pattern != "*" else "*"
        self.tool = tool if pattern != "*" else "*"

    def matches(self, server: str, tool: str) -> bool:
        return (self.server == "*" or fnmatch.fnmatchcase(server, self.server)) and (
            self.tool == "*" or fnmatch.fnmatchcase(tool, self.tool)
        )


class Access:
    """What one caller may see: a tool is allowed when an ``allow`` pattern matches it and no
    ``deny`` pattern does (see the module docstring).

    Args:
        allow: the allow patterns of the rules that apply.
        deny: their deny patterns.
        everything: every tool, whatever the patterns (no policy).
    """

    def __init__(
        self, allow: Iterable[str] = (), deny: Iterable[str] = (), *, everything: bool = False
    ) -> None:
        self.allow = tuple(sorted(set(allow)))
        self.deny = tuple(sorted(set(deny)))
        self.everything = everything or (not self.deny and ("*" in self.allow or "*/*" in self.allow))
        self._allow = [_Pattern(p) for p in self.allow]
        self._deny = [_Pattern(p) for p in self.deny]
        self._decided: dict[tuple[str, str], bool] = {}
        self._catalog: tuple[Catalog, Catalog] | None = None
        if self.everything:
            self.fingerprint = ""
        else:
            text = json.dumps([self.allow, self.deny], separators=(",", ":"))
            self.fingerprint = "#" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def allows(self, server: str, tool: str) -> bool:
        """Whether the tool ``tool`` of server ``server`` (its upstream name) is allowed."""
        if self.everything:
            return True
        key = (server, tool)
        known = self._decided.get(key)
        if known is None:
            known = not any(p.matches(server, tool) for p in self._deny) and any(
                p.matches(server, tool) for p in self._allow
            )
            if len(self._decided) > 100_000:
                self._decided.clear()
            self._decided[key] = known
        return known

    def catalog(self, full: Catalog) -> Catalog:
        """The part of ``full`` this access allows (``full`` itself when it allows everything);
        the same object for the same ``full``, so views and searches made on it are kept."""
        if self.everything:
            return full
        cached = self._catalog
        if cached is not None and cached[0] is full:
            return cached[1]
        mine = full.subset(e for e in full.entries() if self.allows(e.server, e.upstream_name))
        self._catalog = (full, mine)
        return mine

    def __repr__(self) -> str:
        return f"Access(allow={list(self.allow)}, deny={list(self.deny)}, everything={self.everything})"


UNRESTRICTED = Access(everything=True)
"""Every tool: the access of every caller when no policy is configured."""


def _applies(rule: PolicyRule, caller: Caller) -> bool:
    if rule.subjects and caller.subject not in rule.subjects:
        return False
    if rule.groups and caller.groups.isdisjoint(rule.groups):
        return False
    return not (rule.scopes and caller.scopes.isdisjoint(rule.scopes))


class Policy:
    """A configured policy, compiled (see the module docstring).

    Args:
        settings: the ``residency.policy`` section; None: no policy (every tool for everyone).
    """

    def __init__(self, settings: PolicySettings | None = None) -> None:
        self.settings = settings
        self._accesses: dict[tuple[tuple[str, ...], tuple[str, ...]], Access] = {}
        self._callers: dict[Caller, Access] = {}

    @property
    def configured(self) -> bool:
        return self.settings is not None

    def access(self, caller: Caller) -> Access:
        """What ``caller`` may see (the same ``Access`` object for the same patterns)."""
        if self.settings is None:
            return UNRESTRICTED
        found = self._callers.get(caller)
        if found is not None:
            return found
        allow: set[str] = set()
        deny: set[str] = set()
        for rule in self.settings.rules:
            if _applies(rule, caller):
                allow.update(rule.allow)
                deny.update(rule.deny)
        key = (tuple(sorted(allow)), tuple(sorted(deny)))
        found = self._accesses.get(key)
        if found is None:
            found = self._accesses[key] = Access(allow, deny)
        if len(self._callers) >= MAX_CALLERS_KEPT:
            for old in list(self._callers)[: MAX_CALLERS_KEPT // 2]:
                del self._callers[old]
        self._callers[caller] = found
        return found
