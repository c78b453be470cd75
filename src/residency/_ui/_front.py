"""The dashboard on a gateway's HTTP front: ``/ui`` beside ``/mcp``, behind the same credentials.

The pages read the gateway's own store (the one its sessions are journaled to), show sessions as
the gateway serves them (its minify level, delivery and pins) and its upstreams as ``/healthz``
reports them. Who may open them is ``_app.DashboardGate``'s rule: the gateway's bearer token
(header or dashboard cookie), or an OAuth access token with ``OPERATOR_SCOPE``.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp

from residency._gateway._http_guard import Admission, Front
from residency._gateway._oauth import TokenValidator
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._oauth_http import OAuthBearer
from residency._gateway._resources import upstream_status
from residency._gateway._server import Gateway
from residency._store import redact_url
from residency._store._protocol import Store
from residency._ui._app import DashboardGate, OperatorScope, Source, dashboard_app
from residency._ui._live import LiveUpdates
from residency._ui._reads import ServedWith

__all__ = ["gateway_dashboard", "store_dashboard"]


def gateway_dashboard(
    app: ASGIApp,
    gateway: Gateway,
    *,
    loopback: bool,
    token: str | None,
    auth: OAuthSettings | None,
    validator: TokenValidator | None = None,
    mcp_path: str = "/mcp",
    live: LiveUpdates | None = None,
) -> ASGIApp:
    """``app`` with the dashboard in front of it for requests under ``/ui``.

    Args:
        app: the gateway's front (everything but ``/ui`` goes there untouched).
        gateway: the gateway whose store and upstreams the pages show.
        loopback: whether the front is bound to loopback only (without credentials the
            dashboard is served there only).
        token: the static bearer token, or None.
        auth: the OAuth settings, or None; ``validator``: the front's own token checker, shared
            so both check a token against the same cached keys.
        live: the pages' live updates (None: their own).
    """
    source = Source(
        store=lambda: gateway.store,
        served=ServedWith.of(gateway.config),
        where=redact_url(str(gateway.config.residency.store)),
        upstreams=lambda: upstream_status(gateway.upstreams, gateway.secrets),
        live=live if live is not None else LiveUpdates(),
    )
    dashboard = dashboard_app(source)
    oauth = None
    if auth is not None:
        oauth = OAuthBearer(OperatorScope(dashboard), auth, validator=validator, mcp_path=mcp_path)
    return DashboardGate(app, dashboard, loopback=loopback, token=token, oauth=oauth)


def store_dashboard(
    store: Store,
    served: ServedWith,
    *,
    where: str,
    host: str,
    token: str | None,
    loopback: bool,
    allowed_hosts: Sequence[str] = (),
    live: LiveUpdates | None = None,
) -> ASGIApp:
    """The dashboard over ``store`` alone (``residency ui``), with ``GET /healthz``, behind the
    HTTP front's own guards: the request caps and the ``Host``/``Origin`` check, then the token
    (``live``: the pages' live updates, None: their own)."""
    from residency._gateway._http import _security  # the front's Host rule, the same for both

    source = Source(
        store=lambda: store, served=served, where=where, live=live if live is not None else LiveUpdates()
    )
    gate = DashboardGate(None, dashboard_app(source, health=True), loopback=loopback, token=token)
    return Admission(gate, Front(), _security(host, allowed_hosts))
