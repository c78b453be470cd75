"""How a tool the model needs reaches it: by list or by reference (``residency.delivery``).

Theory of operation
-------------------
**By list** (``"list"``). A tool the model needs joins the session's
``tools/list`` (a re-expansion, a phase entered, an implicit re-expansion), the client is told
(``list_changed`` or the listen stream), and every change costs the host a prompt-cache write of
the conversation so far. The schema budget decides what the list shows (``_planner``).

**By reference** (``"reference"``, the default: it serves every client, one that freezes its
first list included, and costs least on the session benchmark). The list stays fixed: the
pinned tools, plus the meta-tools with ``call_tool``. It changes only when an upstream's
catalog changes under it (a pinned tool added, redefined or gone), or when the archive scope
gains its first chain (``check_chain`` joins, and the tools a chain retires leave). Other tools
reach the model in results, and the model calls them through ``call_tool`` (or by name, where
its client allows):

1. A result that shows schemas is a *delivery* (``Session.record_delivery``): each
   ``search_tools`` hit carries its schema as the list would show it (the session's minify
   level; the search covers the tools the model does not see: neither listed nor carried by a
   result still in the transcript, as by list it covers the withheld ones), ``reexpand_tools``
   returns full schemas (of any tool, by name), and a call that re-expands an evicted tool
   implicitly carries that tool's schema in a text block of its own (the list will not show
   it). The result names its delivery id in ``_meta["residency/result"]``; the tools are
   resident while it is in the transcript.
2. A host that drops such results from its transcript says so in
   ``_meta["residency/dropped_results"]`` (the ids), on any ``tools/call``, the way it reports
   dropped calls in ``residency/evicted_calls``. Both are applied before the call, the evicted
   calls first (arguments first, as the planner orders it), and a tool that no result still
   in the transcript shows is withheld at once (``Session.withhold_uncarried``), so the call
   of that request meets it: a call of it rebuilt from arguments still in view is refused
   with its tombstone. Entries that are not strings and ids the session never issued are
   ignored; a value that is not a list is ignored whole.
3. Every turn is planned by reference (``plan_turn(by_reference=True)``): a resident tool that
   is neither listed nor carried by a delivery still in the transcript leaves, by the rule the
   planner applies to any pruned tool: tombstoned if arguments of it are visible, else
   evicted. A tool whose definition changed upstream is carried by no earlier result (the
   model's copy is stale) and leaves the same way.
4. The schema budget does not demote a carried tool. Its schema is in a result, which the
   gateway cannot take out of the transcript: demoting it would save no token, and would only
   tombstone a tool the model can still call correctly (every call is validated against the
   pinned schema anyway). So the schema budget bounds nothing by reference: the list is the
   pinned tools, and results grow the transcript only when the model asks. A carried schema
   leaves with its last result, when the host drops it; the argument budget applies as by list.
5. A refusal of a tool the list does not show carries its full schema (invalid arguments) and
   says how to call it (``CALL_HINT``), and so does every search or re-expansion result.

**Auto** (``"auto"``). ``call_tool`` is listed from the session's first list on (with the
definitions' ``call_tool`` variant, which never changes afterwards), so a tool the gateway says
is callable can always be called. The session is delivered by list while its client can see a
changed list, and by reference for good from the first ``tools/call`` at which it cannot:

- a 2026-07-28 request while no ``subscriptions/listen`` stream of the session subscribes to
  tool-list changes (such a client sees a new list only if it happens to list again);
- in either era, a list change was announced and the client has not listed since (it cannot
  be relied on to list again).

At the switch the list the client was last served freezes: its tools stay listed (and
resident: the gateway records that list as a delivery, ``DeliveryState.fixed``, which no report
drops), so a client that never lists again keeps a list that is true, and one that does list
sees no change. Tools that joined the list after it was served stay resident only if a result
carries them (auto sessions record re-expansions as deliveries from the start). None of this
is journaled: a session reopened by a restarted gateway starts by list again and decides anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.context import ServerRequestContext

from residency._core._lifecycle import ToolState
from residency._errors import NotFound
from residency._gateway._connection import is_modern

if TYPE_CHECKING:
    from residency._gateway._sessions import GatewaySession

__all__ = ["DROPPED_RESULTS_META_KEY", "Delivery", "DeliveryState", "switch_if_blind"]

Delivery = Literal["list", "reference", "auto"]

DROPPED_RESULTS_META_KEY = "residency/dropped_results"
"""The ``_meta`` key of a ``tools/call`` naming the delivery ids of results the host dropped."""


@dataclass(slots=True)
class DeliveryState:
    """One session's delivery (see the module docstring); kept beside the session, not journaled.

    Attributes:
        by_reference: this session's tools are delivered by reference now.
        auto: the config says ``auto``: ``call_tool`` is listed, and ``by_reference`` may turn on.
        fixed: auto, after the switch: the delivery id that carries the list the client was
            last served (never dropped by a host report); None when nothing was frozen.
        served: the tools (name, hash) of the last list the client was served; None before one.
        unseen_change: a list change was announced since the client last listed.
    """

    by_reference: bool
    auto: bool
    fixed: str | None = None
    served: tuple[tuple[str, str], ...] | None = None
    unseen_change: bool = False

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryState:
        """The state a new session starts in under config ``delivery``."""
        return cls(by_reference=delivery == "reference", auto=delivery == "auto")

    @property
    def lists_call_tool(self) -> bool:
        """Whether the session's list shows ``call_tool`` (always, from its first list)."""
        return self.by_reference or self.auto

    @property
    def records_deliveries(self) -> bool:
        """Whether results that show schemas are recorded as deliveries (auto: from the start,
        so a later switch knows what the transcript carries)."""
        return self.by_reference or self.auto


def switch_if_blind(gs: GatewaySession, ctx: ServerRequestContext[Any, Any]) -> bool:
    """Switch an auto session to delivery by reference if its client cannot see a changed list.

    Called at the start of each ``tools/call`` (see the module docstring).

    Returns:
        Whether the session switched now.
    """
    state = gs.delivery
    if not state.auto or state.by_reference:
        return False
    blind = state.unseen_change or (is_modern(ctx) and not gs.hears_tool_changes())
    if not blind:
        return False
    s = gs.session
    if state.served is not None:
        kept = [n for n, digest in state.served if _resident_at(gs, n, digest)]
    else:
        kept = s.resident_tools()  # never served a list: what it would be shown
    unpinned = [n for n in kept if not s.is_pinned(n)]
    if unpinned:
        state.fixed = s.record_delivery(unpinned).id
    state.by_reference = True
    return True


def _resident_at(gs: GatewaySession, name: str, digest: str) -> bool:
    s = gs.session
    try:
        return s.tool(name).hash == digest and s.state(name) is ToolState.RESIDENT
    except NotFound:
        return False
