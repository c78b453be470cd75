"""The bundled demo upstream: an incident desk of 14 tools, for examples, tests and first runs.

Nine of its tools are read-only (annotated ``readOnlyHint``) and five change the desk
(``create_incident``, ``update_incident``, ``close_incident``, ``add_timeline_note``,
``page_oncall``). ``IncidentDesk().server`` is an in-process MCP server, to give a ``Gateway``
as an upstream; ``python -m residency.demo [--schema v1|v2]`` serves the desk on stdin and
stdout, an ordinary stdio upstream for a gateway config::

    {"mcpServers": {"desk": {"command": "python", "args": ["-m", "residency.demo"]}}}

``--schema v1`` serves ``update_incident`` as it was before its assignee became an object
(``IncidentDesk.migrate`` performs that change mid-session).
"""

from __future__ import annotations

from residency._gateway._demo import IncidentDesk, desk_tools

__all__ = ("IncidentDesk", "desk_tools")


def _report_public_homes() -> None:
    from residency import _report_public_home

    for name in __all__:
        _report_public_home(globals()[name], home="residency.demo")


_report_public_homes()

if __name__ == "__main__":
    from residency._gateway._demo import main

    main(prog="python -m residency.demo")
