"""The invariants a reopened session is checked against hold in every state a session reaches.

A restored checkpoint that breaks one is not used (``test_bad_stored_data``); that is only safe
if honest states never break one. The random sessions of the stateful and store-agreement
machines check that here after every step, and the chain scenarios check it at their end.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from residency import Budget, MemoryStore, Session
from tests._tiers import examples

from . import test_session_stateful as stateful
from . import test_store_agreement as agreement


class CheckedSession(stateful.SessionMachine):
    @invariant()
    def breaks_no_invariant(self) -> None:
        self.session.check_invariants()


class CheckedAgreement(agreement.StoreAgreement):
    @invariant()
    def breaks_no_invariant(self) -> None:
        self.mem.check_invariants()
        self.sql.check_invariants()


TestCheckedSession = CheckedSession.TestCase
TestCheckedSession.settings = settings(
    max_examples=examples(150),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCheckedAgreement = CheckedAgreement.TestCase
TestCheckedAgreement.settings = settings(
    max_examples=examples(25),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

CHAIN_TOOLS = [
    {"name": n, "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}}}
    for n in ("fetch", "parse", "extract", "report")
]


def test_sessions_with_archived_chains_break_no_invariant_live_or_reopened() -> None:
    store = MemoryStore()
    s = Session(store, session_id="chains", revoke=lambda ref: ref != "stuck", checkpoint_every=3)
    s.register_tools(CHAIN_TOOLS)
    s.admit_call("fetch", {"size": 1})
    s.admit_call("parse", {"size": 9})
    s.archive_chain(
        ["fetch", "parse", "extract"],
        "parser crashed on large payloads",
        {"tool": "parse", "argument": "size", "op": ">", "value": 5},
        credentials=["token-a", "stuck"],
    )
    s.mark_shared("report")
    s.plan_turn(Budget(schema_tokens=50, argument_tokens=0))
    s.revoke_pending()
    s.archive("report")
    s.readmit("report")
    for session in (s, Session(store, session_id="chains")):
        session.check_invariants()
    assert Session(store, session_id="chains").restored_from > 0  # the checkpoint was used
