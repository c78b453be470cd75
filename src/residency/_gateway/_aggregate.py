"""One tool catalog from many upstreams: names kept when unique, namespaced on collision.

Naming is a pure function of the whole set of ``(server, tool)`` pairs, so it does not depend
on which upstream answered first, and a reload with the same tools gives the same names:

1. A tool name offered by exactly one upstream, and not the name of a meta-tool, is kept.
2. Otherwise it becomes ``<server>__<tool>`` (the server name reduced to ``[A-Za-z0-9_-]``).
3. If that is taken too (an upstream really offers a tool of that name), ``__2``, ``__3``, ...
   is appended, in sorted ``(server, tool)`` order.

Every entry keeps the upstream's own tool name for forwarding and the definition the gateway
lists (the upstream's, renamed), pinned by ``definition_hash``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from residency._core._tools import JSONObject, definition_hash

__all__ = ["Catalog", "CatalogEntry", "build_catalog", "gateway_names"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One aggregated tool.

    Attributes:
        name: the name the gateway lists and the model calls.
        server: the upstream that offers it.
        upstream_name: the name the upstream knows it by.
        definition: the definition as the gateway lists it (``name`` replaced).
        hash: ``definition_hash(definition)``.
    """

    name: str
    server: str
    upstream_name: str
    definition: JSONObject
    hash: str


class Catalog:
    """The aggregated tools, by gateway name, in a stable order (server, then upstream order)."""

    def __init__(self, entries: Iterable[CatalogEntry] = ()) -> None:
        self._by_name: dict[str, CatalogEntry] = {e.name: e for e in entries}

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


def gateway_names(
    pairs: Sequence[tuple[str, str]], reserved: Iterable[str] = ()
) -> dict[tuple[str, str], str]:
    """The gateway name of every ``(server, tool)`` pair (see the module docstring)."""
    taken = set(reserved)
    counts = Counter(tool for _, tool in pairs)
    names: dict[tuple[str, str], str] = {}
    clashing: list[tuple[str, str]] = []
    for pair in pairs:
        tool = pair[1]
        if counts[tool] == 1 and tool not in taken:
            names[pair] = tool
        else:
            clashing.append(pair)
    taken |= set(names.values())
    for server, tool in sorted(clashing):
        base = f"{_UNSAFE.sub('_', server).strip('_') or 'server'}__{tool}"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}__{n}"
        taken.add(name)
        names[(server, tool)] = name
    return names


def build_catalog(
    tools_by_server: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    reserved: Iterable[str] = (),
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Catalog:
    """Aggregate upstream ``tools/list`` entries.

    Args:
        tools_by_server: each upstream's tool definitions, in the order it listed them.
        reserved: names the gateway itself uses (the meta-tools).
        overrides: gateway name -> annotation keys to set (the config's read-only/mutating).
    """
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for server in sorted(tools_by_server):
        for tool in tools_by_server[server]:
            pair = (server, str(tool["name"]))
            if pair not in seen:  # an upstream listing a name twice: the first wins
                seen.add(pair)
                pairs.append(pair)
    names = gateway_names(pairs, reserved)
    entries: list[CatalogEntry] = []
    done: set[tuple[str, str]] = set()
    for server in sorted(tools_by_server):
        for tool in tools_by_server[server]:
            pair = (server, str(tool["name"]))
            if pair in done:
                continue
            done.add(pair)
            name = names[pair]
            definition: JSONObject = {**tool, "name": name}
            extra = (overrides or {}).get(name)
            if extra:
                definition["annotations"] = {**(definition.get("annotations") or {}), **extra}
            entries.append(CatalogEntry(name, server, pair[1], definition, definition_hash(definition)))
    return Catalog(entries)
