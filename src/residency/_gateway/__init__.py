"""The MCP gateway (``residency serve``): the only layer that knows MCP."""

from __future__ import annotations

from residency._gateway._config import GatewayConfig, load_config, parse_config
from residency._gateway._demo import IncidentDesk, desk_tools
from residency._gateway._server import Gateway

__all__ = ["Gateway", "GatewayConfig", "IncidentDesk", "desk_tools", "load_config", "parse_config"]
