"""The gateway's resource and subscription handlers: what a client reads and watches.

``residency://`` resources are the caller's session seen from outside the tool list (its tools,
tombstones, events, chains, spans, upstreams; see ``_resources``). A handshake-era client
subscribes to a resource on its connection (the gateway sends ``resources/updated`` there); a
2026-07-28 client opens the session's ``subscriptions/listen`` stream instead. Like every
handler, each is wrapped in the error table's boundary (``_errors.protocol_errors``): an unknown
resource or a malformed range in its URI is a JSON-RPC error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from residency._gateway import _resources as res
from residency._gateway._config import Secrets
from residency._gateway._connection import connection_of
from residency._gateway._errors import protocol_errors

if TYPE_CHECKING:
    from residency._gateway._server import Gateway

__all__ = ["ResourceHandlers"]


class ResourceHandlers:
    """The ``resources/*`` and ``subscriptions/listen`` handlers of one gateway.

    Args:
        gateway: the gateway whose sessions and catalog the handlers read.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self.secrets: Secrets = gateway.secrets

    @protocol_errors
    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=res.resources(), ttl_ms=0, cache_scope="public")

    @protocol_errors
    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=res.resource_templates(), ttl_ms=0, cache_scope="public"
        )

    @protocol_errors
    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        gs = self._gw._request_session(ctx)
        # An unknown resource, or a malformed range in its URI, raises: a JSON-RPC error.
        contents = res.read_resource(
            str(params.uri), gs.session, self._gw.catalog, upstreams=self._gw.upstreams, secrets=self.secrets
        )
        return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")

    @protocol_errors
    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        gs = self._gw._request_session(ctx)
        subs = connection_of(ctx).state.setdefault("residency.subscriptions", set())
        subs.add(str(params.uri))
        gs.connections.add(connection_of(ctx))
        return types.EmptyResult()

    @protocol_errors
    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        connection_of(ctx).state.setdefault("residency.subscriptions", set()).discard(str(params.uri))
        return types.EmptyResult()

    @protocol_errors
    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        gs = self._gw._request_session(ctx)
        if not params.notifications.tools_list_changed:
            return await gs.listen(ctx, params)
        # Counted while the stream is open: an auto session asks whether its client hears a
        # changed list (``_delivery``).
        with gs.tool_listener():
            return await gs.listen(ctx, params)
