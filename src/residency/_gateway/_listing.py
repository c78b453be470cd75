"""The gateway's ``tools/list`` handler, and how a session's client hears that its list changed.

``tools/list`` is the caller's session view in both eras: the tools its list shows (its
resident tools by list; its pinned tools, or the list an auto session froze, by reference: see
``_delivery``), minified, in the order they became resident, then the meta-tools, whose
definitions never change for the session (``call_tool`` and its variant of the texts from an
auto or reference session's first list on). 2026-07-28 answers are ``cacheScope: "private"``
with ``ttlMs: 0`` (the list differs per caller and may change). Each answer is remembered as
what the client was last served (``DeliveryState.served``), which auto delivery reads.

A change of what a client sees is announced (``announce``): ``tools/list_changed`` in the
handshake era, ``ToolsListChanged`` on the session's listen streams in the 2026-07-28 era, and
``resources/updated`` for ``residency://tombstones`` when only tombstones moved (they are not in
the list, so the host's cached prompt survives them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ResourceUpdated, ToolsListChanged

from residency._core._tools import JSONObject
from residency._gateway import _meta_tools as meta
from residency._gateway import _resources as res
from residency._gateway._config import Secrets
from residency._gateway._connection import connection_of, is_modern
from residency._gateway._errors import protocol_errors
from residency._gateway._sessions import GatewaySession, View
from residency._gateway._telemetry import meta_tool_tokens

if TYPE_CHECKING:
    from residency._gateway._server import Gateway

__all__ = ["ToolListing"]


def _models(names: tuple[str, ...]) -> dict[str, types.Tool]:
    return {str(d["name"]): types.Tool.model_validate(d) for d in meta.meta_tool_definitions(names)}


_BY_LIST = _models(meta.LIST_META_TOOLS)
_BY_REFERENCE = _models(meta.META_TOOLS)
"""The meta-tools as listed, in each variant: the same for every session, so built once."""


class ToolListing:
    """The ``tools/list`` handler and the announcements of one gateway.

    Args:
        gateway: the gateway whose sessions and catalog are listed.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self.secrets: Secrets = gateway.secrets
        self._tool_models: dict[tuple[str, str], types.Tool] = {}

    def _tool_model(self, name: str, digest: str, shown: JSONObject) -> types.Tool:
        """The listed ``Tool`` of a definition, built once per (name, definition hash)."""
        key = (name, digest)
        found = self._tool_models.get(key)
        if found is None:
            found = types.Tool.model_validate(shown)
            if len(self._tool_models) > 100_000:
                self._tool_models.clear()
            self._tool_models[key] = found
        return found

    def meta_tools(self, gs: GatewaySession) -> tuple[str, ...]:
        """The meta-tools the session's list shows, in order."""
        return meta.listed_meta_tools(
            chains=gs.has_chains(),
            offload=self._gw.config.residency.spans.recorded,
            call_tool=gs.delivery.lists_call_tool,
        )

    @protocol_errors
    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        gw = self._gw
        gs = gw._request_session(ctx)
        s = gs.session
        listed = gs.resident_definitions(gw.catalog_for(gs))
        tools = [self._tool_model(n, h, d) for n, h, d in listed]
        names = self.meta_tools(gs)
        models = _BY_REFERENCE if gs.delivery.lists_call_tool else _BY_LIST
        tools += [models[name] for name in names]
        shown = sum(s.tool(n).tokens for n, _, _ in listed) + meta_tool_tokens(names)
        gw.telemetry.listed(gs.key, shown, gw.catalog_tokens())
        gs.delivery.served = tuple((n, h) for n, h, _ in listed)
        gs.delivery.unseen_change = False
        # The view this list shows, kept: a later change (another session archiving the scope's
        # first chain, say) is announced against what the client was served.
        gs.view(gw.catalog_for(gs))
        if is_modern(ctx):
            # Per caller and liable to change at any turn: never cached, never shared.
            return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")
        return types.ListToolsResult(tools=tools)

    async def tell_list_changed(self, gs: GatewaySession) -> None:
        """Tell every client of the session that its tool list changed (a policy reload changed
        what its caller may see, ``Gateway.set_policy``)."""
        self._gw.telemetry.list_changed(gs.key)
        gs.delivery.unseen_change = True
        await gs.bus.publish(ToolsListChanged())
        for connection in list(gs.connections):
            await connection.send_tool_list_changed()

    async def announce(
        self, gs: GatewaySession, before: View, *, current: ServerRequestContext[Any, Any] | None
    ) -> None:
        """Tell the session's clients what changed since ``before`` (nothing if nothing did).

        ``current``: the request being answered, whose own stream carries the caller's notice.
        """
        after = gs.view(self._gw.catalog_for(gs))
        if after == before:
            return
        # Tombstones are not in the list: a change of them alone leaves the list (and the
        # host's cached prompt) alone and is announced on the resource only.
        list_changed = after.listed != before.listed
        tombstones_changed = after.tombstones != before.tombstones
        # A handshake-era request answered on a stream of its own (stdio, SSE responses) carries
        # the caller's notice; one answered with a JSON body cannot (the SDK would drop it), so
        # the caller's standalone stream gets it like every other connection's.
        own_stream = current is not None and not is_modern(current) and current.session.can_send_request
        here = connection_of(current) if current is not None and (own_stream or is_modern(current)) else None
        if list_changed:
            self._gw.telemetry.list_changed(gs.key)
            gs.delivery.unseen_change = True  # until the client lists again
            # 2026-07-28 listeners of this session (a bus with no listener drops it).
            await gs.bus.publish(ToolsListChanged())
            if current is not None and own_stream:
                # On the request's own stream: a client that never opens the standalone stream
                # (stateful HTTP) still sees it.
                await current.session.send_notification(
                    types.ToolListChangedNotification(), related_request_id=current.request_id
                )
        for connection in list(gs.connections):
            if list_changed and connection is not here:
                await connection.send_tool_list_changed()
            if tombstones_changed and res.TOMBSTONES in connection.state.get("residency.subscriptions", ()):
                await connection.send_resource_updated(res.TOMBSTONES)
        if tombstones_changed:
            await gs.bus.publish(ResourceUpdated(uri=res.TOMBSTONES))
