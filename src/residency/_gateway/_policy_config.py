"""The ``residency.policy`` section: which tools each caller may see and call.

A policy is a list of rules. Each rule says who it is for (``subjects``, ``groups``, ``scopes``)
and which tools it allows and denies, as patterns ``server/tool`` (shell-style globs: ``*``,
``?``, ``[...]``, matched case-sensitively; ``server`` against the configured server name,
``tool`` against the name the server knows the tool by; ``*`` alone is every tool). How a
caller's access is decided is ``_policy``'s (its docstring states the order).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["PolicyRule", "PolicySettings", "pattern_problem"]

MAX_PATTERN_CHARS = 256


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a tool pattern (``server/tool`` or ``*``), or None."""
    if pattern == "*":
        return None
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        return f"a tool pattern is 1 to {MAX_PATTERN_CHARS} characters (got {pattern[:40]!r})"
    server, slash, tool = pattern.partition("/")
    if not slash or not server or not tool:
        return f"{pattern!r} is not a tool pattern: write server/tool, e.g. 'github/*' or '*/delete_*'"
    if any(c.isspace() for c in pattern):
        return f"{pattern!r} is not a tool pattern: it holds a space"
    return None


def _names(value: tuple[str, ...], what: str) -> tuple[str, ...]:
    for item in value:
        if not item or len(item) > MAX_PATTERN_CHARS:
            raise ValueError(f"a {what} is 1 to {MAX_PATTERN_CHARS} characters (got {item[:40]!r})")
    return value


class PolicyRule(_Strict):
    """One rule of the policy (``[[residency.policy.rules]]``).

    Attributes:
        subjects: the token subjects (``sub``) it is for.
        groups: the groups it is for (the token's groups claim, ``auth.groups_claim``).
        scopes: the scopes it is for (the token's ``scope``).
        allow: tool patterns it allows.
        deny: tool patterns it denies (a deny of any rule that applies wins over every allow).
    """

    subjects: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @field_validator("subjects", "groups", "scopes")
    @classmethod
    def _who(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _names(value, "subject, group or scope")

    @field_validator("allow", "deny")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            problem = pattern_problem(pattern)
            if problem is not None:
                raise ValueError(problem)
        return value


class PolicySettings(_Strict):
    """The ``residency.policy`` section (see the module docstring and ``_policy``).

    Attributes:
        rules: the rules, in any order (the decision does not depend on it).
    """

    rules: tuple[PolicyRule, ...] = Field(default=(), max_length=10_000)
