"""The gateway's resources: what a session holds, readable by the client (and the model).

``residency://tombstones``  one line per withheld tool whose arguments are still visible
``residency://tools``       the state table: every tool, its upstream, state and hash
``residency://chains``      archived abandoned chains with their rules
``residency://events``      the session's event log (re-expansions, refusals, tombstones, ...)
``residency://spans/{id}``  one context span: its record and, when stored, its original bytes
``residency://upstreams``   the upstream servers: kind, status, tool count, protocol, last error

Every read but ``upstreams`` is scoped to the session the request belongs to; ``upstreams`` is
the gateway's (the same ``upstream_status`` the HTTP health endpoint serves). The list itself
is the same for everyone (it may be cached publicly); the contents change at any time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from residency._core._tools import JSONObject
from residency._errors import NotFound
from residency._gateway._aggregate import Catalog
from residency._gateway._config import Secrets
from residency._gateway._upstream import Upstream
from residency._session import Session

__all__ = [
    "CHAINS",
    "EVENTS",
    "SPANS",
    "TOMBSTONES",
    "TOOLS",
    "UPSTREAMS",
    "read_resource",
    "resource_templates",
    "resources",
    "upstream_status",
]

TOMBSTONES = "residency://tombstones"
TOOLS = "residency://tools"
CHAINS = "residency://chains"
EVENTS = "residency://events"
SPANS = "residency://spans/"
UPSTREAMS = "residency://upstreams"


_JSON = "application/json"


def resources() -> list[types.Resource]:
    return [
        types.Resource(
            uri=TOMBSTONES,
            name="tombstones",
            description="Withheld tools whose earlier arguments are still in the conversation, one per line.",
            mime_type="text/plain",
        ),
        types.Resource(uri=TOOLS, name="tools", description="Every tool's residency state.", mime_type=_JSON),
        types.Resource(
            uri=CHAINS, name="chains", description="Archived abandoned tool chains.", mime_type=_JSON
        ),
        types.Resource(uri=EVENTS, name="events", description="The session's event log.", mime_type=_JSON),
        types.Resource(
            uri=UPSTREAMS,
            name="upstreams",
            description="The upstream MCP servers: status, tool count, protocol version, last error.",
            mime_type=_JSON,
        ),
    ]


def resource_templates() -> list[types.ResourceTemplate]:
    return [
        types.ResourceTemplate(
            uri_template=SPANS + "{id}", name="span", description="One context span.", mime_type=_JSON
        )
    ]


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=False)


def tool_table(session: Session, catalog: Catalog) -> list[JSONObject]:
    rows: list[JSONObject] = []
    for name in session.tools():
        spec = session.tool(name)
        entry = catalog.get(name)
        rows.append(
            {
                "name": name,
                "server": entry.server if entry else None,
                "upstream_name": entry.upstream_name if entry else None,
                "offered": entry is not None,
                "state": session.state(name).value,
                "mutation": spec.mutation,
                "pinned": session.is_pinned(name),
                "arguments_resident": session.arguments_resident(name),
                "tokens": spec.tokens,
                "hash": spec.hash,
            }
        )
    return rows


def upstream_status(upstreams: Mapping[str, Upstream], secrets: Secrets) -> list[JSONObject]:
    """One entry per upstream, in configuration order (the health endpoint and ``residency://upstreams``).

    Each entry: ``name``, ``kind`` (``stdio``, ``http`` or ``in-process``), ``status``
    (``connected``, ``starting``, ``failed``: its last start or connection failed, or
    ``stopped``), ``tools`` (how many it last listed), ``protocol_version`` (None while not
    connected), ``starts`` (start attempts) and ``last_error`` (redacted; ``""`` if none).
    """
    return [
        {
            "name": name,
            "kind": upstream.kind,
            "status": upstream.status,
            "tools": len(upstream.tools),
            "protocol_version": upstream.protocol_version,
            "starts": upstream.starts,
            "last_error": secrets.redact(upstream.last_error),
        }
        for name, upstream in upstreams.items()
    ]


def read_resource(
    uri: str,
    session: Session,
    catalog: Catalog,
    *,
    upstreams: Mapping[str, Upstream] | None = None,
    secrets: Secrets | None = None,
) -> types.TextResourceContents:
    """The contents of one resource for this session.

    Args:
        uri: the resource.
        session: the session the request belongs to.
        catalog: the aggregated catalog.
        upstreams: the gateway's upstreams, for ``residency://upstreams``.
        secrets: scrubbed from upstream errors (nothing is scrubbed when omitted).

    Raises:
        NotFound: an unknown URI or span id, or ``residency://upstreams`` without ``upstreams``.
    """
    if uri == TOMBSTONES:
        return types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="\n".join(session.tombstones())
        )
    if uri == TOOLS:
        text = _dump(tool_table(session, catalog))
    elif uri == CHAINS:
        text = _dump([{**c.to_json(), "rule": c.rule} for c in session.chains()])
    elif uri == EVENTS:
        text = _dump(
            [
                {"turn": e.turn, "kind": e.kind.value, "subject": e.subject, "detail": e.detail, "at": e.at}
                for e in session.events()
            ]
        )
    elif uri == UPSTREAMS:
        if upstreams is None:
            raise NotFound(f"{UPSTREAMS} cannot be read here: no upstreams were given to read it from")
        text = _dump(upstream_status(upstreams, secrets if secrets is not None else Secrets()))
    elif uri.startswith(SPANS) and len(uri) > len(SPANS):
        record = session.span(uri[len(SPANS) :])
        data: JSONObject = {
            "id": record.id,
            "key": record.key,
            "state": session.span_state(record.id).value,
            "tags": sorted(record.tags),
            "source": record.source,
            "provenance": list(record.provenance),
            "derivation_depth": record.derivation_depth,
            "verified": record.verified,
            "turn": record.turn,
            "tokens": record.tokens,
        }
        try:
            data["text"] = session.store.get_content(record.key).decode("utf-8", "replace")
        except NotFound:
            data["text"] = None
        text = _dump(data)
    else:
        raise NotFound(
            f"unknown resource {uri!r}; the gateway serves {TOMBSTONES}, {TOOLS}, {CHAINS}, {EVENTS}, "
            f"{UPSTREAMS} and {SPANS}{{id}}"
        )
    return types.TextResourceContents(uri=uri, mime_type=_JSON, text=text)
