"""The MCP gateway (``residency serve``): the only layer that knows MCP.

Besides the gateway itself, ``__all__`` names the pieces a simulated host may drive without a
gateway (the benchmarks do): the aggregated catalog, the meta-tools as a host lists and calls
them, the era an in-process upstream is spoken to in, how a request names its session, how
offloaded results are named and read back, and how the HTTP front is told to answer. The
benchmarks import these names only (``tests/test_layering.py`` checks it), never the gateway's
modules. ``call_tool`` has no handler of its own here: a simulated host routes it as the
direct call of the tool it names (``call_tool_target``), as the gateway does.
"""

from __future__ import annotations

from residency._gateway._aggregate import Catalog, CatalogEntry, build_catalog
from residency._gateway._config import RESPONSES_ENV, GatewayConfig, load_config, parse_config
from residency._gateway._connection import SESSION_META_KEY
from residency._gateway._demo import IncidentDesk, desk_tools
from residency._gateway._meta_tools import (
    CALL_HINT,
    CALL_TOOL,
    LIST_META_TOOLS,
    META_TOOLS,
    REEXPAND_TOOLS,
    RESULT_META_KEY,
    SEARCH_TOOLS,
    call_tool_target,
    listed_meta_tools,
    meta_tool_definitions,
    reexpand_tools,
    search_tools,
)
from residency._gateway._resources import MAX_RANGE, SPAN_META_KEY
from residency._gateway._server import Gateway
from residency._gateway._upstream import in_process_era

__all__ = [
    "CALL_HINT",
    "CALL_TOOL",
    "LIST_META_TOOLS",
    "MAX_RANGE",
    "META_TOOLS",
    "REEXPAND_TOOLS",
    "RESPONSES_ENV",
    "RESULT_META_KEY",
    "SEARCH_TOOLS",
    "SESSION_META_KEY",
    "SPAN_META_KEY",
    "Catalog",
    "CatalogEntry",
    "Gateway",
    "GatewayConfig",
    "IncidentDesk",
    "build_catalog",
    "call_tool_target",
    "desk_tools",
    "in_process_era",
    "listed_meta_tools",
    "load_config",
    "meta_tool_definitions",
    "parse_config",
    "reexpand_tools",
    "search_tools",
]
