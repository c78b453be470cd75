"""The gateway's resource and subscription handlers: what a client reads and watches.

``residency://`` resources are the caller's session seen from outside the tool list (its tools,
tombstones, events, chains, spans, upstreams; see ``_resources``). A handshake-era client
subscribes to a resource on its connection (the gateway sends ``resources/updated`` there); a
2026-07-28 client opens the session's ``subscriptions/listen`` stream instead. Like every
handler, each is wrapped in the error table's boundary (``_errors.protocol_errors``): an unknown
resource or a malformed range in its URI is a JSON-RPC error.

Subscriptions are held in memory while they last (a connection's set, a listen stream's
filter), so what a client may subscribe to is bounded, and a refused subscription changes
nothing:

- only to a resource the gateway serves (one it lists, or ``residency://spans/{id}`` of a span
  the session has): a subscription to anything else could never be told of a change, and
  ``not_found`` says so, as ``resources/read`` does;
- by URIs of at most ``MAX_URI_CHARS`` characters (``invalid_input``; the gateway's are short);
- at most ``residency.max_subscriptions`` per connection, and as many URIs per listen filter
  (``subscription_limit``). Subscribing again to a URI already held always succeeds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from residency._errors import InvalidInput, NotFound, SubscriptionLimitReached
from residency._gateway import _resources as res
from residency._gateway._config import Secrets
from residency._gateway._connection import connection_of
from residency._gateway._errors import protocol_errors
from residency._gateway._policy import Access
from residency._runtime import Session

if TYPE_CHECKING:
    from residency._gateway._server import Gateway
    from residency._gateway._upstream import Upstream

__all__ = ["MAX_URI_CHARS", "SUBSCRIPTIONS_STATE", "ResourceHandlers"]

MAX_URI_CHARS = 2048
"""The longest resource URI a subscription may name (the gateway's own are far shorter)."""

SUBSCRIPTIONS_STATE = "residency.subscriptions"
"""Where a connection keeps the URIs it subscribed to (its ``state``; ``_listing`` reads it)."""

_SHOWN = 80
"""Characters of a refused URI an error message quotes."""


class ResourceHandlers:
    """The ``resources/*`` and ``subscriptions/listen`` handlers of one gateway.

    Args:
        gateway: the gateway whose sessions and catalog the handlers read.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self.secrets: Secrets = gateway.secrets
        self._limit = gateway.config.residency.max_subscriptions
        self._listed = frozenset(str(r.uri) for r in res.resources())

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
        access = gs.access
        # A caller under a policy sees the upstreams it may use a tool of, and their tools it may.
        upstreams = self._gw.upstreams if access.everything else visible_upstreams(self._gw.upstreams, access)
        # An unknown resource, or a malformed range in its URI, raises: a JSON-RPC error.
        contents = res.read_resource(
            str(params.uri), gs.session, self._gw.catalog_for(gs), upstreams=upstreams, secrets=self.secrets
        )
        return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")

    @protocol_errors
    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        gs = self._gw._request_session(ctx)
        uri = str(params.uri)
        subs: set[str] = connection_of(ctx).state.setdefault(SUBSCRIPTIONS_STATE, set())
        if uri not in subs:
            self._check([uri], gs.session, held=subs)
            subs.add(uri)
        gs.connections.add(connection_of(ctx))
        return types.EmptyResult()

    @protocol_errors
    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        connection_of(ctx).state.setdefault(SUBSCRIPTIONS_STATE, set()).discard(str(params.uri))
        return types.EmptyResult()

    @protocol_errors
    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        gs = self._gw._request_session(ctx)
        self._check(params.notifications.resource_subscriptions or (), gs.session, held=())
        if not params.notifications.tools_list_changed:
            return await gs.listen(ctx, params)
        # Counted while the stream is open: an auto session asks whether its client hears a
        # changed list (``_delivery``).
        with gs.tool_listener():
            return await gs.listen(ctx, params)

    def _check(self, uris: Sequence[str], session: Session, *, held: Collection[str]) -> None:
        """Refuse subscribing to ``uris`` beside ``held`` past the rules (the module docstring).

        Raises:
            InvalidInput: a URI longer than ``MAX_URI_CHARS``.
            NotFound: a URI the gateway does not serve for this session.
            SubscriptionLimitReached: more than ``max_subscriptions`` in all.
        """
        new = [uri for uri in dict.fromkeys(uris) if uri not in held]
        if len(held) + len(new) > self._limit:
            raise SubscriptionLimitReached(
                f"subscription refused: a client may hold at most {self._limit} resource "
                f"subscriptions ({len(held)} held, {len(new)} more asked for); unsubscribe from "
                f"some first, or subscribe to fewer",
                limit=self._limit,
            )
        for uri in new:
            if len(uri) > MAX_URI_CHARS:
                raise InvalidInput(
                    f"subscription refused: a resource URI of {len(uri):,} characters (at most "
                    f"{MAX_URI_CHARS:,}); the gateway's resource URIs are listed by resources/list",
                    where="uri",
                )
            if uri in self._listed:
                continue
            span_id = uri[len(res.SPANS) :].partition("?")[0] if uri.startswith(res.SPANS) else ""
            if not span_id:
                raise NotFound(
                    f"subscription refused: the gateway serves no resource {uri[:_SHOWN]!r}; it "
                    f"serves {', '.join(sorted(self._listed))} and {res.SPANS}{{id}}"
                )
            try:
                session.span(span_id)
            except NotFound:
                raise NotFound(
                    f"subscription refused: this session has no span {span_id[:_SHOWN]!r} "
                    f"(its spans are listed at {res.SPAN_LIST})"
                ) from None


class _Visible:
    """An upstream as a caller under a policy sees it in ``residency://upstreams``: the tools it
    may use (so the count tells of no other) and no error text (it may name any tool)."""

    def __init__(self, upstream: Upstream, access: Access) -> None:
        self.kind = upstream.kind
        self.status = upstream.status
        self.protocol_version = upstream.protocol_version
        self.starts = upstream.starts
        self.last_error = ""
        self.tools = [t for t in upstream.tools if access.allows(upstream.name, str(t.get("name")))]


def visible_upstreams(upstreams: Mapping[str, Upstream], access: Access) -> dict[str, Upstream]:
    """The upstreams ``access`` may use a tool of, as it may see them (see ``_Visible``)."""
    shown: dict[str, Any] = {}
    for name, upstream in upstreams.items():
        visible = _Visible(upstream, access)
        if visible.tools:
            shown[name] = visible
    return shown
