"""``<!-- gen: NAME ARG... -->`` markers in a page, replaced by what the generator NAME writes."""

from __future__ import annotations

import re
from collections.abc import Callable

from docs_gen import benchmarks, reference

__all__ = ("GENERATORS", "MARKER", "render")

MARKER = re.compile(r"^<!-- gen: ([a-z-]+)((?: [a-z0-9_-]+)*) -->$", re.M)

GENERATORS: dict[str, Callable[..., str]] = {
    "config": reference.config_reference,
    "cli": reference.cli_reference,
    "meta-tools": reference.meta_tool_reference,
    "resources": reference.resource_reference,
    "errors": reference.error_reference,
    "error-tree": reference.error_tree,
    "lifecycle": reference.lifecycle_diagram,
    "bench-figures": benchmarks.bench_figures,
    "bench-session": benchmarks.session_table,
    "bench-savings": benchmarks.savings_table,
    "bench-isolation": benchmarks.isolation_table,
    "bench-http-flood": benchmarks.http_flood_table,
    "bench-oauth": benchmarks.oauth_table,
    "bench-audit": benchmarks.audit_table,
    "bench-otel": benchmarks.otel_table,
    "bench-otel-instructions": benchmarks.otel_instructions_text,
}


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced; an unknown generator name is an error."""

    def replace(found: re.Match[str]) -> str:
        name, args = found.group(1), found.group(2).split()
        if name not in GENERATORS:
            raise KeyError(f"no docs generator named {name!r} (known: {', '.join(sorted(GENERATORS))})")
        return GENERATORS[name](*args)

    return MARKER.sub(replace, markdown)
