"""What a host reports in a ``tools/call``'s ``_meta``, applied before the call runs.

The gateway cannot see the agent's transcript; a host that edits it says what it did, on any
``tools/call`` (see ``_calls`` and ``_delivery`` for what each report changes):

``residency/phase``            the phase to plan in (a configured name; ``""`` or null: none);
                               from then on the host alone chooses the session's phase
``residency/evicted_calls``    call ids whose arguments it dropped (``residency/call`` of each
                               forwarded result); the session then gets the argument budget
``residency/dropped_results``  delivery ids of results that carried schemas it dropped
                               (``residency/result``)
``residency/dropped_spans``    span ids it dropped (``residency/span``)

They are applied in that order (arguments before the schemas that may leave with them, as the
planner orders it). In every list, entries that are not strings and ids the session never
issued are ignored, and a value that is not a list is ignored whole; sending a list again
changes nothing. Only an unknown phase is refused (``UnknownPhase``, before anything changes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import ServerRequestContext

from residency._core._spans import SpanRecord
from residency._core._tools import JSONObject
from residency._errors import NotFound, UnknownPhase
from residency._gateway import _resources as res
from residency._gateway._delivery import DROPPED_RESULTS_META_KEY
from residency._gateway._sessions import GatewaySession

__all__ = [
    "DROPPED_META_KEY",
    "DROPPED_RESULTS_META_KEY",
    "EVICTED_META_KEY",
    "KEPT_META_KEY",
    "PHASE_META_KEY",
    "host_dropped_results",
    "host_dropped_spans",
    "host_evictions",
    "host_phase",
]

EVICTED_META_KEY = "residency/evicted_calls"
PHASE_META_KEY = "residency/phase"
DROPPED_META_KEY = "residency/dropped_spans"
KEPT_META_KEY = "residency/kept_spans"


def _meta_of(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    return ctx.meta if isinstance(ctx.meta, dict) else {}


def host_phase(
    gs: GatewaySession, ctx: ServerRequestContext[Any, Any], phases: Mapping[str, Any]
) -> str | None:
    """The phase this turn is planned in: the host's choice if it sent one, else the session's.

    Raises:
        UnknownPhase: the host named a phase the config does not define (nothing is changed).
    """
    meta_in = _meta_of(ctx)
    if PHASE_META_KEY not in meta_in:
        current = gs.session.phase
        return current if current in phases else None  # a phase dropped from the config ends
    chosen = meta_in[PHASE_META_KEY]
    if chosen == "":
        chosen = None  # some SDKs drop nulls from _meta: an empty name also means none
    if chosen is not None and (not isinstance(chosen, str) or chosen not in phases):
        known = tuple(sorted(phases))
        raise UnknownPhase(
            f'_meta[{PHASE_META_KEY!r}] must name a configured phase, or be "" for none; '
            f"known: {list(known)}",
            phases=known,
        )
    gs.host_sets_phase = True
    return chosen


def host_evictions(gs: GatewaySession, ctx: ServerRequestContext[Any, Any]) -> None:
    """Apply the calls whose arguments the host dropped; it gets the argument budget from now on."""
    ids = _meta_of(ctx).get(EVICTED_META_KEY)
    if not isinstance(ids, list):
        return
    gs.host_applies_evictions = True
    s = gs.session
    # Ids this session never issued are ignored; already-evicted ones change nothing.
    known = [i for i in ids if isinstance(i, str) and _found(s.call, i)]
    if known:
        s.evict_arguments(*known)


def host_dropped_results(gs: GatewaySession, ctx: ServerRequestContext[Any, Any]) -> None:
    """Apply the results carrying schemas that the host dropped (see ``_delivery``).

    By reference, a tool that no result in the transcript shows any more is withheld at once:
    the call this request carries meets it (a call of it rebuilt from arguments still in view
    is refused as a ghost call, not forwarded before the turn's plan).
    """
    ids = _meta_of(ctx).get(DROPPED_RESULTS_META_KEY)
    if not isinstance(ids, list):
        return
    s = gs.session
    fixed = gs.delivery.fixed  # the list an auto session froze is no result of the host's
    known = [i for i in dict.fromkeys(ids) if isinstance(i, str) and i != fixed and _found(s.delivery, i)]
    if known:
        s.drop_deliveries(*known)
        if gs.delivery.by_reference:
            s.withhold_uncarried()


def host_dropped_spans(
    gs: GatewaySession, ctx: ServerRequestContext[Any, Any], extra_meta: JSONObject
) -> None:
    """Apply the spans the host dropped from its context (see "Spans" in ``_calls``)."""
    ids = _meta_of(ctx).get(DROPPED_META_KEY)
    if not isinstance(ids, list):
        return
    s = gs.session
    named = dict.fromkeys(i for i in ids if isinstance(i, str))
    records = [record for i in named if (record := _span_or_none(gs, i)) is not None]
    kept = [r for r in records if r.precondition]
    for record in kept:
        s.externalize(record.id)  # written to the content store first; never evicted
    others = [r.id for r in records if not r.precondition]
    if others:
        s.evict_span(*others)  # their bytes go to the content store first
    extra_meta[KEPT_META_KEY] = [{"id": r.id, "uri": res.SPANS + r.id, "key": r.key} for r in kept]


def _found(lookup: Callable[[str], object], key: str) -> bool:
    try:
        lookup(key)
    except NotFound:
        return False
    return True


def _span_or_none(gs: GatewaySession, span_id: str) -> SpanRecord | None:
    try:
        return gs.session.span(span_id)
    except NotFound:
        return None
