"""The two tiers of the suite: the fast one (``pytest``) and the full one (``pytest --run-slow``).

The fast tier leaves out the tests marked ``slow`` (they start processes, drive real third-party
peers, walk the whole corpus or open thousands of sessions) and runs the property-based tests
with a tenth of their examples (``examples``). The full tier, which CI runs, runs everything at
full strength. ``tests/conftest.py`` sets :data:`FULL` from the command line before any test
module is imported.
"""

from __future__ import annotations

__all__ = ["FULL", "examples"]

FULL = False
"""True when the full tier runs (``--run-slow``, or a ``-m`` expression that picks the tests)."""


def examples(full: int) -> int:
    """How many Hypothesis examples a property runs: ``full`` in the full tier, a tenth otherwise.

    A tenth, but at least 10: the fast tier still finds the shallow bugs at once, and CI's full
    tier searches as deep as the test asks.
    """
    return full if FULL else max(10, full // 10)
