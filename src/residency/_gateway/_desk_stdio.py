"""The demo desk as a stdio upstream: ``python -m residency._gateway._desk_stdio [--schema v1|v2]``.

A module of its own (not ``_demo``, which the package imports) so that ``python -m`` runs it
without a second import of the desk.
"""

from __future__ import annotations

from residency._gateway._demo import main

if __name__ == "__main__":
    main()
