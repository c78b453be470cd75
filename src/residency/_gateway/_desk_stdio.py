"""The demo desk as a stdio upstream, under its older name: ``python -m residency.demo`` is the
documented one (``residency.demo``); this one keeps configs written for it working.

A module of its own (not ``_demo``, which the package imports) so that ``python -m`` runs it
without a second import of the desk.
"""

from __future__ import annotations

from residency._gateway._demo import main

if __name__ == "__main__":
    main(prog="python -m residency._gateway._desk_stdio")
