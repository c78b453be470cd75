"""One tool catalog from many upstreams: names kept when unique, namespaced on collision.

Naming is a pure function of the whole set of ``(server, tool)`` pairs and of the configured
server names, so it does not depend on which upstream is up or answered first, and a reload
with the same tools gives the same names. The rules:

1. **A listed name is a valid MCP tool name**: 1-128 characters of ``A-Za-z0-9_.-``. An upstream
   name outside that is mapped: each run of other characters becomes ``_``, the result is cut to
   ``MAPPED_STEM`` characters and ``_`` plus 8 hex digits of the name's sha256 is appended
   (``"get item"`` -> ``get_item_<8 hex digits>``; a name with nothing valid in it becomes
   ``tool_<digits>``), so two names that map alike stay apart. Calls are still forwarded under
   the upstream's own name.
2. **A server owns its namespace.** Its *prefix* is its name reduced to ``[A-Za-z0-9_-]`` (other
   characters become ``_``), runs of ``_`` collapsed and ``_`` stripped at the ends (a name with
   nothing left, or longer than ``MAX_PREFIX``, gets 8 hex digits of its sha256). A prefix never
   contains ``__``, so the text before a name's first ``__`` says whose namespace the name is in;
   prefixes are compared ignoring case. Two servers with one prefix (``a.b`` and ``a_b``) are a
   ``ConfigError``. ``residency__`` is reserved for the gateway (``RESERVED_PREFIXES``) unless a
   server is named so: a gateway in front of another one often names it ``residency``.
3. **Captured names move.** An upstream name in another configured server's namespace (evil's
   ``good__echo``), in a reserved namespace, or equal to a meta-tool name is never kept: it is
   namespaced into the offering server's own (``evil__good__echo``), and the entry says why
   (``CatalogEntry.renamed``). A configured server that is down or disabled still owns its
   namespace, so what its tools are called never depends on who answered first.
4. A name offered by exactly one upstream and not moved by rule 3 is kept as it is.
5. Otherwise (two upstreams offer it) it becomes ``<prefix>__<tool>``; if that is taken too (the
   server itself offers a tool of that name), ``__2``, ``__3``, ... is appended, in sorted
   ``(server, tool)`` order. Every name of rules 3 and 5 is in the offering server's namespace,
   and one longer than 128 characters is cut and ends in 8 hex digits of its sha256.

Every entry keeps the upstream's own tool name for forwarding and the definition the gateway
lists (the upstream's, renamed), pinned by ``definition_hash``. The operator hears of every name
renamed by rules 1 and 3: in a log warning (once per server and name), the startup summary and
``residency config check``, each showing the upstream's name escaped (``residency._text``).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from residency._core._tools import JSONObject, definition_hash
from residency._errors import ConfigError

__all__ = [
    "MAPPED_STEM",
    "MAX_NAME",
    "MAX_PREFIX",
    "RESERVED_PREFIXES",
    "SEPARATOR",
    "Catalog",
    "CatalogEntry",
    "build_catalog",
    "check_server_names",
    "gateway_names",
    "name_owner",
    "server_prefix",
    "valid_tool_name",
]

SEPARATOR = "__"
"""Between a server's prefix and the rest of a namespaced name."""
MAX_NAME = 128
"""The longest tool name the gateway lists (the MCP specification's advice)."""
MAX_PREFIX = 40
"""The longest server prefix: a namespaced name keeps room for the tool's own name."""
MAPPED_STEM = 64
"""Characters kept of an invalid upstream name when it is mapped (before its digest)."""
RESERVED_PREFIXES = ("residency",)
"""Namespaces kept for the gateway itself (``residency__``): no upstream's tool is listed under
one, unless a server is named so (a gateway in front of another residency gateway)."""

_RESERVED = frozenset(p.casefold() for p in RESERVED_PREFIXES)
_VALID_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_NOT_PREFIX = re.compile(r"[^A-Za-z0-9_-]+")
_UNDERSCORES = re.compile(r"__+")


def _digest(text: str) -> str:
    # surrogatepass: a JSON name may hold a lone surrogate, which strict UTF-8 refuses.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def valid_tool_name(name: str) -> bool:
    """Whether ``name`` is 1-128 characters of ``A-Za-z0-9_.-`` (what the gateway lists)."""
    return _VALID_NAME.fullmatch(name) is not None


def server_prefix(server: str) -> str:
    """The prefix of ``server``'s namespace (see the module docstring, rule 2)."""
    prefix = _UNDERSCORES.sub("_", _NOT_PREFIX.sub("_", server)).strip("_")
    if not prefix:
        return f"server_{_digest(server)}"
    if len(prefix) > MAX_PREFIX:
        return f"{prefix[: MAX_PREFIX - 9].rstrip('_')}_{_digest(server)}"
    return prefix


def _owners(servers: Iterable[str]) -> dict[str, str]:
    """Each configured server by its casefolded prefix.

    Raises:
        ConfigError: two servers share a prefix.
    """
    owners: dict[str, str] = {}
    for server in sorted(set(servers)):
        prefix = server_prefix(server)
        key = prefix.casefold()
        other = owners.get(key)
        if other is not None:
            raise ConfigError(
                f"servers {other!r} and {server!r} would both name their tools {prefix}{SEPARATOR}... "
                "(a server's name is reduced to letters, digits, _ and -, ignoring case): rename one "
                "of them",
                where=f"mcpServers.{server}",
            )
        owners[key] = server
    return owners


def check_server_names(servers: Iterable[str]) -> None:
    """Check that every server owns a namespace of its own (rule 2 of the module docstring).

    Raises:
        ConfigError: two servers share a prefix; it names both.
    """
    _owners(servers)


def name_owner(name: str, servers: Iterable[str]) -> str | None:
    """The server among ``servers`` whose namespace ``name`` is in; None if none's.

    A name in a reserved namespace (``residency__...``) that no server owns is the gateway's:
    its prefix is returned with the separator (``"residency__"``), which no server name reduces to.

    Raises:
        ConfigError: two of ``servers`` share a prefix.
    """
    return _owner(name, _owners(servers))


def _owner(name: str, owners: Mapping[str, str]) -> str | None:
    head, sep, _ = name.partition(SEPARATOR)
    if not sep:
        return None
    key = head.casefold()
    owner = owners.get(key)
    if owner is None and key in _RESERVED:
        return f"{head}{SEPARATOR}"
    return owner


def _fit(name: str) -> str:
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9]}_{_digest(name)}"


def _listed_form(tool: str) -> str:
    """Rule 1: ``tool`` if it is a valid tool name, else its mapping."""
    if valid_tool_name(tool):
        return tool
    stem = _NOT_NAME.sub("_", tool).strip("_")[:MAPPED_STEM].rstrip("_") or "tool"
    return f"{stem}_{_digest(tool)}"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One aggregated tool.

    Attributes:
        name: the name the gateway lists and the model calls.
        server: the upstream that offers it.
        upstream_name: the name the upstream knows it by.
        definition: the definition as the gateway lists it (``name`` replaced).
        hash: ``definition_hash(definition)``.
        renamed: why the upstream's name was not kept (an invalid name, one in another
            server's or a reserved namespace, a meta-tool's name), for the operator; empty when
            it was kept, or only namespaced because two upstreams offer it.
    """

    name: str
    server: str
    upstream_name: str
    definition: JSONObject
    hash: str
    renamed: str = ""


class Catalog:
    """The aggregated tools, by gateway name, in a stable order (server, then upstream order).

    ``source``: the whole catalog a ``subset`` was taken from (itself for a whole catalog); the
    search index is the source's, shared by every subset (``_search.catalog_index``).
    """

    def __init__(self, entries: Iterable[CatalogEntry] = (), *, source: Catalog | None = None) -> None:
        self._by_name: dict[str, CatalogEntry] = {e.name: e for e in entries}
        self.source: Catalog = source if source is not None else self

    def subset(self, entries: Iterable[CatalogEntry]) -> Catalog:
        """A catalog of some of these entries (one caller's, ``_policy``), sharing this one's source."""
        return Catalog(entries, source=self.source)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> CatalogEntry | None:
        return self._by_name.get(name)

    def entries(self) -> list[CatalogEntry]:
        return list(self._by_name.values())

    def definitions(self) -> list[JSONObject]:
        return [e.definition for e in self._by_name.values()]

    def names(self) -> list[str]:
        return list(self._by_name)

    def servers(self) -> list[str]:
        return sorted({e.server for e in self._by_name.values()})

    def renamed(self) -> list[CatalogEntry]:
        """The entries whose upstream name was not kept for a reason the operator should hear."""
        return [e for e in self._by_name.values() if e.renamed]


def _naming(
    pairs: Sequence[tuple[str, str]], reserved: Iterable[str], servers: Iterable[str]
) -> dict[tuple[str, str], tuple[str, str]]:
    """Each pair's gateway name and why its upstream name was not kept (empty: no reason)."""
    every = {*servers, *(server for server, _ in pairs)}
    owners = _owners(every)
    prefixes = {server: server_prefix(server) for server in every}
    meta = set(reserved)
    listed: dict[tuple[str, str], str] = {}
    why: dict[tuple[str, str], str] = {}
    literal: list[tuple[str, str]] = []
    for pair in pairs:
        server, tool = pair
        form = listed[pair] = _listed_form(tool)
        reasons: list[str] = []
        if form != tool:
            reasons.append("is not a valid tool name (1-128 characters of A-Z a-z 0-9 _ . -)")
        owner = _owner(form, owners) if SEPARATOR in form else None
        if owner is not None and owner != server:
            if owner.endswith(SEPARATOR):
                reasons.append(f"is in the gateway's reserved namespace {owner}")
            else:
                reasons.append(f"is in the namespace of server {owner!r} ({prefixes[owner]}{SEPARATOR})")
        elif form in meta:
            reasons.append("is the name of a gateway meta-tool")
        else:
            literal.append(pair)
        if reasons:
            why[pair] = "; ".join(reasons)
    counts = Counter(listed[pair] for pair in literal)
    names = {pair: listed[pair] for pair in literal if counts[listed[pair]] == 1}
    taken = meta | set(names.values())
    for pair in sorted(p for p in listed if p not in names):
        base = f"{prefixes[pair[0]]}{SEPARATOR}{listed[pair]}"
        name, n = _fit(base), 1
        while name in taken:
            n += 1
            name = _fit(f"{base}{SEPARATOR}{n}")
        taken.add(name)
        names[pair] = name
    return {pair: (names[pair], why.get(pair, "")) for pair in listed}


def gateway_names(
    pairs: Sequence[tuple[str, str]], reserved: Iterable[str] = (), servers: Iterable[str] = ()
) -> dict[tuple[str, str], str]:
    """The gateway name of every ``(server, tool)`` pair (see the module docstring).

    Args:
        pairs: the tools offered, by server.
        reserved: names the gateway itself uses (the meta-tools).
        servers: every configured server, up or not (the servers of ``pairs`` are added).

    Raises:
        ConfigError: two servers share a prefix.
    """
    return {pair: name for pair, (name, _) in _naming(pairs, reserved, servers).items()}


def build_catalog(
    tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    reserved: Iterable[str] = (),
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    servers: Iterable[str] = (),
) -> Catalog:
    """Aggregate upstream ``tools/list`` entries.

    Args:
        tools_by_server: each upstream's tool definitions, in the order it listed them.
        reserved: names the gateway itself uses (the meta-tools).
        overrides: gateway name -> annotation keys to set (the config's read-only/mutating).
        servers: every configured server, up or not, so that each owns its namespace (the
            servers of ``tools_by_server`` are added).

    Raises:
        ConfigError: two servers share a prefix.
    """
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for server in sorted(tools_by_server):
        for tool in tools_by_server[server]:
            pair = (server, str(tool["name"]))
            if pair not in seen:  # an upstream listing a name twice: the first wins
                seen.add(pair)
                pairs.append(pair)
    naming = _naming(pairs, reserved, {*servers, *tools_by_server})
    entries: list[CatalogEntry] = []
    done: set[tuple[str, str]] = set()
    for server in sorted(tools_by_server):
        for tool in tools_by_server[server]:
            pair = (server, str(tool["name"]))
            if pair in done:
                continue
            done.add(pair)
            name, renamed = naming[pair]
            definition: JSONObject = {**tool, "name": name}
            extra = (overrides or {}).get(name)
            if extra:
                definition["annotations"] = {**(definition.get("annotations") or {}), **extra}
            entries.append(
                CatalogEntry(name, server, pair[1], definition, definition_hash(definition), renamed)
            )
    return Catalog(entries)
