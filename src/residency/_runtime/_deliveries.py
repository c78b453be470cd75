"""The delivery part of a session: tool schemas the model was shown in results.

A host that keeps its tool list fixed (its pinned tools) delivers the other tools *by
reference*: their schemas reach the model in results (a search hit with its schema, a
re-expansion). Such a schema is resident while a result that showed it is in the transcript:

- ``record_delivery(names)`` records one such result and makes each tool resident (a withheld
  one is re-expanded: it is in the model's context now). The result's id (``r<n>``) is what the
  host names when it drops the result.
- ``drop_deliveries(ids)`` records that the host dropped those results. Nothing leaves at once:
  the next ``plan_turn(by_reference=True)`` withholds every resident tool that no result still
  in the transcript carries (and that is not pinned), by the rule of ``prune``: tombstoned if
  arguments of it are visible, else evicted; the argument budget goes first, as always.
  ``withhold_uncarried()`` does that part at once, for a host that reports the drop on the
  request of a call that must already meet it (a call rebuilt from arguments still in view
  after the schema left is a ghost call, and must be refused).
- a result carries the definition it showed: after a redefinition upstream it carries the tool
  no more (the model's copy is stale), so a plan by reference withholds it unless a newer
  result shows it.

Deliveries change nothing for a plan by list (``by_reference=False``): there the list carries a
resident tool. Journaled like everything else (``deliver``, ``drop_deliveries``).
"""

from __future__ import annotations

from collections.abc import Iterable

from residency._core._lifecycle import TOOL_LIFECYCLE, ToolState
from residency._core._tools import DeliveryRecord
from residency._errors import InvalidInput, NotFound
from residency._runtime._journal import Item, Journal
from residency._runtime._tools import ToolPart

__all__ = ["DELIVERED", "MAX_DELIVERY_TOOLS", "UNCARRIED", "DeliveryPart"]

DELIVERED = "delivered: its schema was shown in a result"
"""The reason journaled when ``record_delivery`` makes a withheld tool resident."""

UNCARRIED = "no result in the transcript shows its schema now"
"""The reason journaled when ``withhold_uncarried`` withholds a tool."""

MAX_DELIVERY_TOOLS = 1000
"""The most tools one delivery may carry."""


class DeliveryPart:
    """Results that showed the model tool schemas (see the module docstring)."""

    def __init__(self, journal: Journal, tools: ToolPart) -> None:
        self._journal = journal
        self._tools = tools

    def record_delivery(self, names: Iterable[str]) -> DeliveryRecord:
        """Record a result that shows the model these tools' schemas (delivery by reference).

        Each tool becomes resident (a tombstoned or evicted one is re-expanded, journaled as
        delivered) and stays so, under ``plan_turn(by_reference=True)``, while this result or
        another that shows its current definition is in the transcript. Repeats count once.

        Returns:
            The delivery (``.id``, ``r<n>``, names it in ``drop_deliveries``).

        Raises:
            InvalidInput: not a non-empty list of tool names (or more than 1,000).
            NotFound: an unknown tool.
            IllegalTransition: an archived tool (only ``readmit`` brings it back).
            Nothing is recorded or re-expanded when any name is refused.
        """
        if isinstance(names, str) or not isinstance(names, Iterable):
            raise InvalidInput("names must be a list of tool names, not one string", where="names")
        wanted = list(dict.fromkeys(names))
        if not wanted or len(wanted) > MAX_DELIVERY_TOOLS or not all(isinstance(n, str) for n in wanted):
            raise InvalidInput(f"names must be 1 to {MAX_DELIVERY_TOOLS} tool names", where="names")
        state = self._journal.state
        items: list[Item] = []
        for name in wanted:
            self._tools.spec(name)  # NotFound for an unknown tool
            current = state.states[name]
            if current is not ToolState.RESIDENT:
                # Asked first for every name: a refusal (archived) raises before anything is written.
                dest = TOOL_LIFECYCLE.fire(current, "reexpand", record=name, facts=state.facts(name))
                data = {"tool": name, "trigger": "reexpand", "dest": dest.value, "reason": DELIVERED}
                items.append(("transition", data))
        delivery_id = state.next_delivery_id()
        hashes = [state.tools[n].hash for n in wanted]
        items.append(("deliver", {"id": delivery_id, "tools": wanted, "hashes": hashes}))
        self._journal.commit(*items)
        return state.deliveries[delivery_id]

    def drop_deliveries(self, *delivery_ids: str) -> None:
        """The host dropped these results from its transcript.

        The tools they carried leave at the next ``plan_turn(by_reference=True)`` unless another
        result still in the transcript carries them, or they are pinned (see the module
        docstring). Already-dropped ids are accepted and change nothing.

        Raises:
            NotFound: an unknown delivery id (nothing is dropped).
        """
        for delivery_id in delivery_ids:
            self.delivery(delivery_id)
        live = self._journal.state.delivered
        ids = [i for i in dict.fromkeys(delivery_ids) if i in live]
        if ids:
            self._journal.commit(("drop_deliveries", {"ids": ids}))

    def withhold_uncarried(self) -> list[str]:
        """Withhold now every resident tool that is neither pinned nor carried by a delivery
        still in the transcript, by the rule of ``prune`` (tombstoned if arguments of it are
        visible, else evicted): what ``plan_turn(by_reference=True)`` would do to it.

        For a host that delivers by reference only: by list, the list carries a resident tool.

        Returns:
            The tools withheld, in registration order (none: nothing is journaled).
        """
        state = self._journal.state
        pinned = self._tools.pinned
        items: list[Item] = []
        withheld: list[str] = []
        for name, current in state.states.items():
            if current is not ToolState.RESIDENT or name in pinned or state.carried(name):
                continue
            dest = TOOL_LIFECYCLE.fire(current, "prune", record=name, facts=state.facts(name))
            items.append(
                ("transition", {"tool": name, "trigger": "prune", "dest": dest.value, "reason": UNCARRIED})
            )
            withheld.append(name)
        if items:
            self._journal.commit(*items)
        return withheld

    def delivery(self, delivery_id: str) -> DeliveryRecord:
        """A recorded delivery. Raises ``NotFound`` for an unknown id."""
        try:
            return self._journal.state.deliveries[delivery_id]
        except (KeyError, TypeError):
            raise NotFound(f"unknown delivery id {delivery_id!r}") from None

    def deliveries(self) -> list[DeliveryRecord]:
        """The deliveries still in the transcript, oldest first."""
        return list(self._journal.state.delivered.values())

    def carried(self, name: str) -> bool:
        """Whether a delivery still in the transcript shows the tool's current definition.

        Raises:
            NotFound: unknown tool.
        """
        self._tools.spec(name)
        return self._journal.state.carried(name)

    def snapshot_parts(self, parts: dict[str, object]) -> None:
        state = self._journal.state
        parts["deliveries"] = {
            d.id: {"tools": list(d.tools), "turn": d.turn, "live": d.id in state.delivered}
            for d in state.deliveries.values()
        }
