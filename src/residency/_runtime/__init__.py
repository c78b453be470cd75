"""The runtime: ``Session``, which binds the pure core to a store and a clock.

Theory of operation
-------------------
The session's state is a pure value (``residency._core._state.SessionState``): what its journal
adds up to. Everything here is the shell around it:

- ``_journal``: the store, the clock, the write-ahead commit, replay, catching up with other
  writers, checkpoints, and the concurrent-use guard;
- ``_session``: ``Session``, the public class, with an explicit constructor; it holds the parts
  below and delegates to them;
- ``_tools`` (registration, calls, the tool lifecycle), ``_deliveries`` (schemas shown in
  results, for hosts that deliver tools by reference), ``_plans`` (turn plans, with
  ``_plan_index``, the cache of the tools a decision must read), ``_spans``
  (the window and the content store), ``_chains`` (archived chains, the live guard, revocation):
  each reads the state, computes journal entries, and has the journal commit them;
- ``_tool_cache``: tool definitions checked, minified and counted once per process and shared;
- ``_inputs``: checks of what an embedding host passes in.

The runtime never imports the gateway, the command line or the benchmarks.
"""

from residency._runtime._plans import TurnPlan
from residency._runtime._session import Session

__all__ = ["Session", "TurnPlan"]
