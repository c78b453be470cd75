"""The gateway's ``tools/call`` handler: each call is a turn of its session.

Theory of operation
-------------------
A ``tools/call`` runs in four steps:

1. a meta-tool runs against the session; any other call is admitted by the session first
   (withheld, archived, invalid arguments, chain collision: refused with the tombstone or error
   text, never forwarded), which records its arguments (they are in the model's transcript
   now), and is forwarded upstream with a timeout;
2. the session plans the next turn (``plan_turn``), so a tool unused for a while is demoted
   under budget pressure, and a demoted tool with visible arguments is tombstoned;
3. the tombstones the call created are appended to its result (they are not in the list);
4. if what the client sees changed, it is told (``Gateway._announce``).

Step 1 raises domain errors; ``refusals_as_results`` turns a refusal into the call's result
(the turn goes on), and the handler's ``protocol_errors`` boundary turns anything else into a
JSON-RPC error (see ``_errors``).

``call_tool(name, arguments)`` is not a meta-tool of its own: its arguments are read first
(``_meta_tools.call_tool_target``), and the turn then runs as the turn of a direct call of
``name`` with ``arguments``, the same code from step 1 on: validation against the pinned schema,
tombstone and archive refusals, implicit re-expansion, the chain guard, spans, the journal (the
call is recorded ``via="call_tool"``), telemetry, the phase the call selects, the result's
``_meta`` and tombstone notices, the plan and the announcements. Only bad input differs: a
missing or non-string name, a meta-tool's name (``call_tool`` included), arguments that are not
an object, or a tool no one knows is answered at once with an ``isError`` result
(``arguments_invalid``, ``tool: call_tool``, ``path`` naming the field, a text saying what to do)
before anything is applied, ``_meta`` reports included: it changes nothing. (A direct call of
an unknown tool is a JSON-RPC error; through ``call_tool`` the name is an argument the model
chose, so the model reads the refusal.) How tools are delivered (by list or by reference, and
what results carry) is ``_delivery``'s. A call to an evicted tool (no arguments of it in the
transcript, so it cannot be a ghost call) whose arguments validate against the full schema is
admitted: the tool is re-expanded implicitly. A tombstoned tool stays refused until it is
re-expanded explicitly.

Rug pulls. An upstream may change a tool's definition at any time: after announcing it
(``tools/list_changed``), silently, or across a restart. The catalog remembers which version of
each upstream's list it was built from, and a call is forwarded only under the definition the
session pinned when the call came in:

1. the call is admitted against the session's pin (a session that missed a catalog update
   catches up first), which records its arguments;
2. if the upstream's list may have moved (a change announced or being listed, the connection
   down, or ``relist_interval`` seconds since the last listing), it is brought up to date
   first: restarted (a start lists) or re-listed, waiting for a relist already in flight, and
   a changed list is applied to the catalog and every open session;
3. if the tool's definition is no longer the one pinned at step 1, the call is not sent: the
   session has re-registered it, and the redefinition tombstoned it (its arguments are visible),
   so the agent gets the tombstone and ``reexpand_tools`` gives the new schema. A tool renamed
   (even only in case) is a new tool; the old name is offered by no one and is never routed to
   the new definition.

The upstream refuses to send a call checked against a version of its list that has moved since
(``ToolsChanged``), which closes the gap between steps 2 and 3 and the send. Step 2 costs
nothing on most calls (two comparisons); a listing round trip happens at most once per
``relist_interval`` per upstream, or after an announcement, so a silent change is noticed
within that interval. Announcements are coalesced (see ``_upstream``).

The gateway assumes call arguments stay in the transcript (it cannot edit it), so the planner
gets no argument budget, unless the host takes part: a host that sends
``_meta["residency/evicted_calls"]`` (call ids it dropped; each forwarded result names its call
id in ``_meta["residency/call"]``) gets the configured argument budget and the planner's
evictions in ``_meta["residency/evict"]``. Results that carried schemas (delivery by
reference) name their id in ``_meta["residency/result"]``; the host reports dropping them in
``_meta["residency/dropped_results"]``, applied after the evicted calls (see ``_delivery``).

Spans. A forwarded result may become a span of the session (``_resources.record_result``):

* a successful text result over ``spans.offload_tokens`` tokens is offloaded: written to the
  content store first, it reaches the client as a preview and a ``residency://spans/{id}``
  link (an externalized span);
* a successful text result of a tool with a rule in ``spans.tags`` is recorded whole as a
  resident span with those tags, however small, and reaches the client unchanged, so a
  precondition result (``describe_table`` -> ``constraint``) is tracked.

Either names its span in ``_meta["residency/span"]`` (``id``, ``uri``, ``key``, ``bytes``,
``tokens``). Other results are not recorded: nothing refers to them, and their text would only
grow the journal (a resident span's text is journaled).

A host that drops spans from its context says so in ``_meta["residency/dropped_spans"]`` (a list
of span ids) on any ``tools/call``; like ``evicted_calls``, it is applied before the call.
Entries that are not strings, and ids the session never issued, are ignored; a value that is
not a list is ignored whole; the call goes on either way. A dropped precondition span is kept
by pointer (externalized, never evicted); any other is evicted. Either way its bytes are in the
content store before the change is journaled, so ``read_span`` and ``residency://spans/{id}``
resolve it still, after a restart too, and ``residency://spans`` shows its state. The result
lists the dropped spans kept as pointers in ``_meta["residency/kept_spans"]`` (``[{id, uri,
key}]``, present whenever a list was sent), so the host can keep a pointer in their place.
Sending the same list again changes nothing; a store failure fails the call like any other
request, and the spans already moved stay moved.

Phases (the config's ``phases``) favour their tools while active. The agent's own calls select
one: a forwarded call to a tool outside the active phase activates the first configured phase
that has it. A host that knows better sends ``_meta["residency/phase"]`` (a phase name; ``""`` or
null for none) on a ``tools/call``; from then on it alone chooses that session's phase.

Another gateway may journal to the same session (one store, one session key). A
``SessionConflict`` means this gateway's copy was behind: it has caught up and applied nothing,
so unless the call was already admitted (and so may have been forwarded), the work runs once
more on the new state. A second conflict is the caller's to retry.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Never

import mcp_types as types
from mcp.server.context import ServerRequestContext

from residency._core._lifecycle import ToolState
from residency._core._tools import JSONObject
from residency._errors import (
    ArgumentsInvalid,
    NotFound,
    ResidencyError,
    SessionConflict,
    UpstreamFailure,
)
from residency._gateway import _meta_tools as meta
from residency._gateway import _resources as res
from residency._gateway._aggregate import CatalogEntry
from residency._gateway._config import Secrets
from residency._gateway._delivery import switch_if_blind
from residency._gateway._errors import (
    ERROR_META_KEY,
    error_result,
    protocol_errors,
    redact_result,
    refusals_as_results,
    rule_for,
)
from residency._gateway._host_reports import (
    DROPPED_META_KEY,
    DROPPED_RESULTS_META_KEY,
    EVICTED_META_KEY,
    KEPT_META_KEY,
    PHASE_META_KEY,
    host_dropped_results,
    host_dropped_spans,
    host_evictions,
    host_phase,
)
from residency._gateway._revoke import revoke_off_loop
from residency._gateway._sessions import GatewaySession
from residency._gateway._upstream import ToolsChanged, Upstream
from residency._gateway._upstream_auth import caller_of, calling_as
from residency._runtime import Session, TurnPlan
from residency._text import printable

if TYPE_CHECKING:
    from residency._gateway._server import Gateway

__all__ = [
    "CALL_META_KEY",
    "DROPPED_META_KEY",
    "DROPPED_RESULTS_META_KEY",
    "EVICTED_META_KEY",
    "EVICT_META_KEY",
    "KEPT_META_KEY",
    "PHASE_META_KEY",
    "TOMBSTONE_NOTICE",
    "ToolCalls",
]

logger = logging.getLogger("residency.gateway")

CALL_META_KEY = "residency/call"
EVICT_META_KEY = "residency/evict"
TOMBSTONE_NOTICE = "Withheld now:"
"""The first line of the text block a call's result gets when the call created tombstones."""
_SEND_ATTEMPTS = 3
# Refusals of a tool the list does not show that say how to call it there (``CALL_HINT``).
_TAUGHT = frozenset({"tool_not_resident", "arguments_invalid"})


class ToolCalls:
    """The ``tools/call`` handler of one gateway (see the module docstring).

    Args:
        gateway: the gateway whose catalog, upstreams and sessions the calls use.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self.secrets: Secrets = gateway.secrets
        # The phase a call to each tool selects: the first configured phase that has it.
        self._phase_of: dict[str, str] = {}
        for phase, names in gateway.config.residency.phases.items():
            for name in names:
                self._phase_of.setdefault(name, phase)

    @protocol_errors
    async def handle(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Answer one ``tools/call`` (retried once on a ``SessionConflict``, see the module docstring)."""
        extra_meta: JSONObject = {}
        # Upstreams that take each caller's token get this caller's (``_upstream_auth``).
        with calling_as(caller_of(ctx.request)):
            try:
                return await self._turn(ctx, params, extra_meta)
            except SessionConflict:
                if CALL_META_KEY in extra_meta:
                    raise
            return await self._turn(ctx, params, {})

    async def _turn(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, extra_meta: JSONObject
    ) -> types.CallToolResult:
        gw = self._gw
        gs = gw._request_session(ctx)
        s = gs.session
        name = params.name
        arguments: JSONObject = dict(params.arguments or {})
        via = ""
        if name == meta.CALL_TOOL:
            try:
                name, arguments = self._call_tool_target(gs, arguments)
            except ArgumentsInvalid as exc:
                return error_result(exc, self.secrets, structured=True)  # nothing was applied
            via = meta.CALL_TOOL
        # What the host reports is applied before the call (``_host_reports``).
        phase = host_phase(gs, ctx, gw.config.residency.phases)
        switch_if_blind(gs, ctx)
        host_evictions(gs, ctx)
        host_dropped_results(gs, ctx)
        host_dropped_spans(gs, ctx, extra_meta)
        before = gs.view(gw.catalog_for(gs))
        if name in meta.META_TOOLS:
            result = await refusals_as_results(
                self._meta_call(gs, name, arguments), self.secrets, structured=True
            )
        else:
            carried: list[str] = []
            result = await refusals_as_results(
                self._forward(gs, name, arguments, extra_meta, via=via, carried=carried), self.secrets
            )
            if CALL_META_KEY in extra_meta and not gs.host_sets_phase:
                phase = self._phase_after_call(phase, name)
            self._carry(gs, carried, result, extra_meta)
            self._teach(gs, result)
        budget = gw._turn_budget(gs)
        by_reference = gs.delivery.by_reference
        plan: TurnPlan | None = None
        try:
            try:
                plan = s.plan_turn(budget, phase=phase, by_reference=by_reference)
            except SessionConflict:
                # Caught up: planned on the new state.
                plan = s.plan_turn(budget, phase=phase, by_reference=by_reference)
        except SessionConflict:
            # The call's own work is done (it may have been forwarded): its result is not
            # dropped for a plan. Losing a plan leaves a more cautious state; the next request
            # plans the turn.
            logger.warning("session %s: another writer keeps changing it; turn not planned", gs.key)
        if plan is not None and gs.host_applies_evictions and plan.evictions:
            extra_meta[EVICT_META_KEY] = list(plan.evictions)
        _add_tombstone_notice(result, before.tombstones, gs.view(gw.catalog_for(gs)).tombstones)
        await gw._announce(gs, before, current=ctx)
        if gw._fanout is not None and gs.view(gw.catalog_for(gs)) != before:
            await gw._fanout.notify(s.session_id)  # clients of other replicas hear of it too
        if extra_meta:
            # The result is this call's own (fresh from the upstream client or a meta-tool).
            result.meta = {**(result.meta or {}), **extra_meta}
        return result

    def _call_tool_target(self, gs: GatewaySession, arguments: JSONObject) -> tuple[str, JSONObject]:
        """The direct call a ``call_tool`` call stands for (see the module docstring).

        Raises:
            ArgumentsInvalid: bad input (``tool`` is ``call_tool``); nothing has been applied.
        """
        name, inner = meta.call_tool_target(arguments)
        unknown = self._gw.catalog_for(gs).get(name) is None and not _known(gs.session, name)
        if unknown and not self._upstreams_down():
            self._gw.note_denied(gs, name)
            raise ArgumentsInvalid(
                f"invalid arguments at $.name: no tool named {name!r}. Find one with "
                f"{meta.SEARCH_TOOLS}, then call it through {meta.CALL_TOOL} with the name it gives.",
                tool=meta.CALL_TOOL,
                path="$.name",
            )
        return name, inner

    async def _meta_call(self, gs: GatewaySession, name: str, arguments: JSONObject) -> types.CallToolResult:
        s, catalog, delivery = gs.session, self._gw.catalog_for(gs), gs.delivery
        if name == meta.SEARCH_TOOLS:
            listed = gs.listed_tools(catalog) if delivery.by_reference else ()
            result = meta.search_tools(
                s, catalog, arguments, by_reference=delivery.by_reference, listed=listed
            )
        elif name == meta.REEXPAND_TOOLS:
            result = meta.reexpand_tools(
                s, catalog, arguments, call_tool=delivery.lists_call_tool, deliver=delivery.records_deliveries
            )
        else:
            handler = {
                meta.CHECK_CHAIN: meta.check_chain,
                meta.ARCHIVE_CHAIN: meta.archive_chain,
                meta.READ_SPAN: meta.read_span,
            }[name]
            result = handler(s, catalog, arguments)
        if name == meta.ARCHIVE_CHAIN and not result.is_error and self._gw._revoker is not None:
            record = gs.session.chain(str((result.structured_content or {}).get("digest", "")))
            await revoke_off_loop(gs.session, self._gw._revoker, record.credentials, self._gw._revoking)
        if name == meta.ARCHIVE_CHAIN and not result.is_error and self._gw._fanout is None:
            # The other sessions this gateway holds adopt the chain now and hear of it where
            # their view moves. (With PostgreSQL the store's notice does this on every replica,
            # this one included; other processes on a SQLite file adopt it at their next request.)
            await self._gw._archive_grew("")
        if name == meta.REEXPAND_TOOLS:
            for error in (result.structured_content or {}).get("errors", ()):
                self._gw.note_denied(gs, str(error.get("name")))
        if name == meta.REEXPAND_TOOLS and not result.is_error:
            names = [t["name"] for t in (result.structured_content or {}).get("tools", ())]
            self._gw.telemetry.reexpanded(gs.key, names, implicit=False)
        return result

    async def _forward(
        self,
        gs: GatewaySession,
        name: str,
        arguments: JSONObject,
        extra_meta: JSONObject,
        *,
        via: str = "",
        carried: list[str] | None = None,
    ) -> types.CallToolResult:
        """Admit a call and forward it upstream.

        ``via``: what the call came through (``call_tool``), journaled with it. ``carried``: gets
        the tool's name when the call re-expanded it implicitly and the session's list does not
        show it (its result must carry the schema, see ``_delivery``).

        Raises:
            ResidencyError: the call is refused, or the upstream failed (``UpstreamFailure``).
        """
        gw = self._gw
        s = gs.session
        mine = gw.catalog_for(gs)
        entry = mine.get(name)
        if entry is None:
            down = self._upstreams_down()
            if name not in s.tools():
                gw.note_denied(gs, name)
                if down:
                    raise self._down_failure(name, down)  # it may be one of theirs: say so
                raise NotFound(f"unknown tool {name!r}: use {meta.SEARCH_TOOLS} to find tools", tool=name)
            self._not_offered(gs, name, arguments, down)
        if not _pinned(s, name, entry.hash):
            # The session missed a catalog update (or was opened from an older journal).
            s.register_tools(mine.definitions())
        evicted = s.state(name) is ToolState.EVICTED
        unlisted = gs.delivery.by_reference and not gs.lists(name)
        tracing = gw.tracing
        admitting = time.time_ns() if tracing is not None else 0
        try:
            record = s.admit_call(name, arguments, reexpand_evicted=True, show_schema=unlisted, via=via)
        except ResidencyError as exc:
            self._refused(gs, name, exc, admitting)
            raise
        if tracing is not None:
            reason = "reexpanded" if evicted else "resident"
            tracing.admission(name, admitting, reason=reason, refused=False, upstream=entry.server)
        if evicted:
            gw.telemetry.reexpanded(gs.key, (name,), implicit=True)
            if unlisted and carried is not None:
                carried.append(name)
        extra_meta[CALL_META_KEY] = record.id
        started = time.perf_counter()
        try:
            result = await self._send(gs, entry, arguments)
        except UpstreamFailure:
            gw.telemetry.forwarded(gs.key, name, entry.server, time.perf_counter() - started, ok=False)
            raise
        if result is None:  # its definition changed under the call: not sent
            self._redefined_under_call(gs, name, arguments)
        gw.telemetry.forwarded(
            gs.key, name, entry.server, time.perf_counter() - started, ok=not result.is_error, via=via
        )
        if not result.is_error:
            s.call_succeeded(name)  # a search that found it is a label of it (search learns from use)
        # An upstream may quote its own env or headers, in an isError result above all.
        # Recorded after redaction: what the store keeps is what the client may see.
        return res.record_result(s, redact_result(result, self.secrets), name, gw.config.residency.spans)

    async def _send(
        self, gs: GatewaySession, entry: CatalogEntry, arguments: JSONObject
    ) -> types.CallToolResult | None:
        """Forward an admitted call under the definition it was admitted against (see "Rug pulls"
        in the module docstring); None if that definition is no longer the upstream's.

        Raises:
            UpstreamFailure: the upstream failed, or did not answer (or list its tools) in time.
        """
        gw = self._gw
        upstream = gw.upstreams[entry.server]
        for _ in range(_SEND_ATTEMPTS):
            if not upstream.current(gw.relist_interval) or upstream.version != gw._applied.get(entry.server):
                await gw._refresh(upstream, gw.relist_interval)
                now = gw.catalog_for(gs).get(entry.name)
                if now is None or now.hash != entry.hash or not _pinned(gs.session, entry.name, entry.hash):
                    return None
            try:
                return await upstream.call(
                    entry.upstream_name, arguments, version=gw._applied.get(entry.server)
                )
            except ToolsChanged:
                continue  # its list moved after the check above: check again
        raise UpstreamFailure(
            f"upstream {entry.server!r} kept changing its tools; {entry.name!r} was not sent",
            server=entry.server,
        )

    def _not_offered(
        self, gs: GatewaySession, name: str, arguments: JSONObject, down: list[Upstream]
    ) -> Never:
        """A call to a tool the session knows but no upstream offers now: never forwarded.

        Raises:
            ResidencyError: the session's refusal, else ``UpstreamFailure`` naming why.
        """
        gs.session.authorize_call(name, arguments)  # a refusal still reads as one
        if down:
            raise self._down_failure(name, down)
        raise UpstreamFailure(f"{name}: no upstream offers this tool any more", server="")

    def _redefined_under_call(self, gs: GatewaySession, name: str, arguments: JSONObject) -> Never:
        """The tool's definition changed between the call's admission and its sending.

        Raises:
            ResidencyError: the refusal (its arguments are resident now, so the redefinition
                tombstoned it), else ``UpstreamFailure`` saying it was not sent.
        """
        mine = self._gw.catalog_for(gs)
        if name not in mine:  # gone, or renamed (a name differing only in case is another tool)
            self._not_offered(gs, name, arguments, self._upstreams_down())
        gs.session.register_tools(mine.definitions())
        try:
            gs.session.authorize_call(name, arguments)
        except ResidencyError as exc:
            self._refused(gs, name, exc)
            raise
        raise UpstreamFailure(
            f"{name}: its definition changed upstream while the call was made; it was not sent. "
            f"Call {meta.REEXPAND_TOOLS} to see the new definition.",
            server=mine.get(name).server,  # type: ignore[union-attr]
        )

    def _carry(
        self, gs: GatewaySession, carried: list[str], result: types.CallToolResult, extra_meta: JSONObject
    ) -> None:
        """By reference: the result of a call that re-expanded its tool implicitly carries the
        tool's schema (the list does not show it), recorded as a delivery (see ``_delivery``)."""
        if not carried:
            return
        s = gs.session
        try:
            delivery = s.record_delivery(carried)
        except ResidencyError as exc:
            # Another writer moved the tool: unrecorded, the next plan withholds it (tombstoned,
            # its arguments are visible), which is the cautious side.
            logger.warning(
                "session %s: schema delivery not recorded: %s",
                gs.key,
                printable(self.secrets.redact(str(exc))),
            )
            return
        extra_meta[meta.RESULT_META_KEY] = delivery.id
        for name in carried:
            schema = json.dumps(s.tool(name).shown, ensure_ascii=False, separators=(",", ":"))
            text = f"{name} is not in your tool list; its schema: {schema}\n{meta.CALL_HINT}"
            result.content = [*result.content, types.TextContent(type="text", text=text)]

    def _teach(self, gs: GatewaySession, result: types.CallToolResult) -> None:
        """A refusal of a tool the session's list does not show says how to call such a tool."""
        if not result.is_error or not gs.delivery.lists_call_tool:
            return
        details = (result.meta or {}).get(ERROR_META_KEY)
        if not isinstance(details, dict) or details.get("reason") not in _TAUGHT:
            return
        tool = details.get("tool")
        if not isinstance(tool, str) or not _known(gs.session, tool) or gs.lists(tool):
            return
        first = result.content[0] if result.content else None
        if isinstance(first, types.TextContent) and meta.CALL_HINT not in first.text:
            first.text = f"{first.text} {meta.CALL_HINT}"

    def _refused(self, gs: GatewaySession, name: str, exc: ResidencyError, started_ns: int = 0) -> None:
        rule = rule_for(exc)
        reason = rule.reason if rule is not None else type(exc).__name__
        self._gw.telemetry.refused(gs.key, name, reason)
        if self._gw.tracing is not None:
            self._gw.tracing.admission(name, started_ns or time.time_ns(), reason=reason, refused=True)

    def _phase_after_call(self, phase: str | None, tool: str) -> str | None:
        """The agent's call selects the phase: the active one if it has the tool, else the first that does."""
        if phase is not None and tool in self._gw.config.residency.phases.get(phase, ()):
            return phase
        return self._phase_of.get(tool, phase)

    def _upstreams_down(self) -> list[Upstream]:
        return [u for u in self._gw.upstreams.values() if not u.connected]

    @staticmethod
    def _down_failure(tool: str, down: list[Upstream]) -> UpstreamFailure:
        states = ", ".join(
            f"{u.name} ({'still starting' if u.starting else u.last_error or 'not connected'})" for u in down
        )
        return UpstreamFailure(
            f"{tool}: no running upstream offers this tool; down: {states}. It may be one of theirs: "
            f"retry when the upstream is back.",
            server=",".join(u.name for u in down),
        )


def _pinned(session: Session, name: str, digest: str) -> bool:
    """Whether the session pins ``name`` at ``digest`` (one dict lookup: on every call's path)."""
    try:
        return session.tool(name).hash == digest
    except NotFound:
        return False


def _add_tombstone_notice(
    result: types.CallToolResult, before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    """Append the tombstones this call created to its result, as one more text block.

    Tombstones are not in the tool list (it would change, and the host's cached prompt with
    it, whenever a tool is withheld); the model learns of them here, in the result of the call
    that creates them, and from ``residency://tombstones``.
    """
    known = set(before)
    new = [line for line in after if line not in known]
    if new:
        notice = types.TextContent(type="text", text="\n".join([TOMBSTONE_NOTICE, *new]))
        result.content = [*result.content, notice]


def _known(session: Session, name: str) -> bool:
    try:
        session.tool(name)
    except NotFound:
        return False
    return True
