"""Seed 004 end to end: abandoned chains archived, re-assembly refused, credentials revoked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from residency import (
    Budget,
    ChainCollision,
    ChainRecord,
    EventKind,
    InvalidInput,
    MemoryStore,
    NotFound,
    Session,
    ToolArchived,
    ToolState,
)
from residency._store._protocol import content_key

FAILURE = "llm_extractor: timeout after 120 s on payload"
BIG = {"tool": "html_parser", "argument": "payload_bytes", "op": ">", "value": 5_000_000}
CHAIN = ["search_api_v2", "html_parser", "llm_extractor"]
LARGE = {"url": "https://example.org/a", "payload_bytes": 8_000_000}
SMALL = {"url": "https://example.org/b", "payload_bytes": 20_000}


def tool(name: str, props: dict[str, Any], read_only: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "description": f"{name} tool",
        "inputSchema": {"type": "object", "properties": props},
    }
    if read_only:
        out["annotations"] = {"readOnlyHint": True}
    return out


TOOLS = [
    tool("search_api_v2", {"q": {"type": "string"}}),
    tool("html_parser", {"url": {"type": "string"}, "payload_bytes": {"type": "integer"}}),
    tool("llm_extractor", {"schema": {"type": "string"}}),
    tool("summarize", {"text": {"type": "string"}}),
    tool("send_report", {"to": {"type": "string"}}, read_only=False),
]


def session(store: MemoryStore | None = None, **kw: Any) -> Session:
    s = Session(store if store is not None else MemoryStore(), session_id="agent", **kw)
    s.register_tools(TOOLS)
    return s


def use(s: Session, name: str, arguments: dict[str, Any]) -> None:
    """What a host does: authorize, forward (not modelled), record."""
    s.authorize_call(name, arguments)
    s.record_call(name, arguments)


def abandon(s: Session, **kw: Any) -> ChainRecord:
    """The predecessor runs the pipeline, the last step times out, and it archives the chain."""
    use(s, "search_api_v2", {"q": "prices"})
    use(s, "html_parser", LARGE)
    use(s, "llm_extractor", {"schema": "offer"})
    return s.archive_chain(CHAIN, FAILURE, BIG, **kw)


# -- the seed's scenarios ---------------------------------------------------------------------


def test_a_successor_cannot_reassemble_the_fatal_prefix() -> None:
    store = MemoryStore()
    s = session(store)
    s.mark_shared("search_api_v2", "html_parser")
    record = abandon(s)
    successor = Session(store, session_id="agent")
    verdict = successor.check_chain(
        ["summarize", "search_api_v2", "html_parser"], arguments=[{}, {"q": "rent"}, LARGE]
    )
    assert not verdict.safe
    assert verdict.chain == record
    assert verdict.rule == record.rule
    assert verdict.expected_failure == FAILURE
    assert "html_parser.payload_bytes > 5000000" in verdict.rule

    use(successor, "search_api_v2", {"q": "rent"})
    with pytest.raises(ChainCollision) as refused:
        successor.authorize_call("html_parser", LARGE)
    assert refused.value.tool == "html_parser"
    assert refused.value.rule == record.rule
    assert refused.value.expected_failure == FAILURE
    assert successor.events(EventKind.REFUSED)[-1].subject == "html_parser"


def test_a_small_payload_passes_and_a_large_one_is_refused() -> None:
    s = session()
    s.mark_shared("search_api_v2", "html_parser")
    abandon(s)
    seq = ["search_api_v2", "html_parser"]
    assert s.check_chain(seq, [{"q": "x"}, SMALL]).safe
    assert not s.check_chain(seq, [{"q": "x"}, LARGE]).safe

    use(s, "search_api_v2", {"q": "x"})
    s.authorize_call("html_parser", SMALL)  # no raise
    with pytest.raises(ChainCollision):
        s.authorize_call("html_parser", LARGE)


def test_a_transient_failure_is_not_archived_and_nothing_changes() -> None:
    s = session()
    use(s, "search_api_v2", {"q": "x"})
    use(s, "html_parser", LARGE)
    before = (s.snapshot(), len(s.store.load("agent")))
    with pytest.raises(InvalidInput) as exc:
        s.archive_chain(CHAIN, "503 then fine on retry", BIG, deterministic=False)
    assert exc.value.where == "deterministic"
    assert (s.snapshot(), len(s.store.load("agent"))) == before
    assert s.chains() == []
    assert s.state("html_parser") is ToolState.RESIDENT


def test_a_prefix_tool_used_only_in_the_chain_leaves_the_active_index() -> None:
    s = session()
    use(s, "search_api_v2", {"q": "news"})
    use(s, "summarize", {"text": "..."})  # search is used elsewhere too
    record = abandon(s)
    assert s.tools(ToolState.ARCHIVED) == ["html_parser"]
    assert s.state("search_api_v2") is ToolState.RESIDENT
    assert s.state("llm_extractor") is ToolState.RESIDENT  # the failing step is not a prefix tool
    assert [e.subject for e in s.events(EventKind.ARCHIVED)] == ["html_parser"]
    assert record.digest[:12] in s.events(EventKind.ARCHIVED)[0].detail

    with pytest.raises(ToolArchived):
        s.authorize_call("html_parser", SMALL)
    plan = s.plan_turn(Budget(schema_tokens=100_000, argument_tokens=100_000))
    assert "html_parser" not in plan.tool_names
    with pytest.raises(ToolArchived):
        s.record_call("html_parser", SMALL)

    # The reused tool stays, and the constraint guards it where calls are authorized.
    assert s.chain_rules("search_api_v2") == [record.rule]
    assert s.check_chain(["search_api_v2", "html_parser"], [{}, LARGE]).chain == record

    # Only an operator brings the archived tool back.
    assert s.readmit("html_parser") in (ToolState.TOMBSTONED, ToolState.EVICTED)
    s.reexpand("html_parser")
    use(s, "search_api_v2", {"q": "again"})
    with pytest.raises(ChainCollision):
        s.authorize_call("html_parser", LARGE)


def test_pinned_and_shared_tools_are_never_retired() -> None:
    s = session(pinned=["search_api_v2"])
    s.mark_shared("html_parser")
    assert s.is_shared("html_parser")
    abandon(s)
    assert s.tools(ToolState.ARCHIVED) == []
    with pytest.raises(NotFound):
        s.mark_shared("nope")


def test_a_chain_archived_in_a_fresh_session_retires_its_unused_prefix_tools() -> None:
    s = session()
    s.archive_chain(CHAIN, FAILURE, BIG)
    assert s.tools(ToolState.ARCHIVED) == ["search_api_v2", "html_parser"]


# -- the live guard ---------------------------------------------------------------------------


def test_the_fatal_step_after_a_completed_prefix_is_refused() -> None:
    s = session()
    s.mark_shared("search_api_v2", "html_parser")
    use(s, "search_api_v2", {"q": "x"})
    use(s, "html_parser", LARGE)
    s.archive_chain(CHAIN, FAILURE, BIG)  # archived right after the attempt failed
    with pytest.raises(ChainCollision) as refused:
        s.authorize_call("llm_extractor", {"schema": "offer"})  # a blind retry
    assert refused.value.expected_failure == FAILURE
    use(s, "summarize", {"text": "give up"})
    s.authorize_call("llm_extractor", {"schema": "offer"})  # no longer after the prefix


def test_a_two_tool_chain_only_blocks_the_pair_not_every_use_of_its_first_tool() -> None:
    s = session()
    s.mark_shared("summarize")
    s.archive_chain(["summarize", "send_report"], "422 report too long", {"all": []})
    s.authorize_call("summarize", {"text": "x"})
    s.record_call("summarize", {"text": "x"})
    with pytest.raises(ChainCollision):
        s.authorize_call("send_report", {"to": "ops"})
    assert not s.check_chain(["search_api_v2", "summarize", "send_report"]).safe
    assert s.check_chain(["summarize", "search_api_v2", "send_report"]).safe


def test_the_warn_policy_lets_the_call_through_and_journals_a_warning() -> None:
    store = MemoryStore()
    s = session(store, chain_policy="warn")
    s.mark_shared("search_api_v2", "html_parser")
    record = abandon(s)
    use(s, "search_api_v2", {"q": "x"})
    s.authorize_call("html_parser", LARGE)  # no raise
    warnings = [e for e in s.events(EventKind.CHAIN) if e.detail.startswith("warning")]
    assert [w.subject for w in warnings] == ["html_parser"]
    assert record.rule in warnings[0].detail
    assert s.events(EventKind.REFUSED) == []
    reopened = Session(store, session_id="agent", chain_policy="warn")
    assert reopened.events(EventKind.CHAIN) == s.events(EventKind.CHAIN)


def test_a_bad_policy_or_callback_is_refused() -> None:
    with pytest.raises(InvalidInput) as exc:
        Session(chain_policy="ignore")  # type: ignore[arg-type]
    assert exc.value.where == "chain_policy"
    with pytest.raises(InvalidInput) as exc:
        Session(revoke="not callable")  # type: ignore[arg-type]
    assert exc.value.where == "revoke"


# -- credentials ------------------------------------------------------------------------------


class Revoker:
    """A fake secrets manager: records every revocation it is asked for."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or set()

    def __call__(self, ref: str) -> bool:
        self.calls.append(ref)
        if ref in self.fail:
            raise RuntimeError("vault said: token s3cr3t-VALUE-123 is still in use")
        return True


def test_each_credential_is_revoked_once_and_never_again_on_reopen() -> None:
    store, revoker = MemoryStore(), Revoker()
    s = session(store, revoke=revoker)
    abandon(s, credentials=["scraper-api-key", "oauth:crm/read"])
    s.archive_chain(["summarize", "send_report"], "422", {"all": []}, credentials=["scraper-api-key"])
    assert revoker.calls == ["oauth:crm/read", "scraper-api-key"]
    assert s.revocations() == {"oauth:crm/read": True, "scraper-api-key": True}
    assert s.pending_revocations() == []
    assert [e.detail for e in s.events(EventKind.CHAIN) if e.subject == "scraper-api-key"] == [
        "credential revoked"
    ]

    reopened = Session(store, session_id="agent", revoke=revoker)
    assert reopened.revocations() == s.revocations()
    assert reopened.revoke_pending() == {}
    assert revoker.calls == ["oauth:crm/read", "scraper-api-key"]


def test_a_failed_revocation_is_journaled_without_the_secret_and_can_be_retried() -> None:
    store, revoker = MemoryStore(), Revoker(fail={"scraper-api-key"})
    s = session(store, revoke=revoker)
    abandon(s, credentials=["scraper-api-key"])
    assert s.revocations() == {"scraper-api-key": False}
    assert s.pending_revocations() == ["scraper-api-key"]
    journal = json.dumps([e.data for e in store.load("agent")])
    assert "s3cr3t" not in journal
    assert all("s3cr3t" not in e.detail for e in s.events())
    assert "RuntimeError" in s.events(EventKind.CHAIN)[-1].detail

    revoker.fail.clear()
    assert s.revoke_pending() == {"scraper-api-key": True}
    assert revoker.calls == ["scraper-api-key", "scraper-api-key"]
    assert s.pending_revocations() == []


def test_without_a_callback_credentials_wait_as_pending() -> None:
    store = MemoryStore()
    s = session(store)
    abandon(s, credentials=["scraper-api-key"])
    assert s.pending_revocations() == ["scraper-api-key"]
    with pytest.raises(InvalidInput):
        s.revoke_pending()
    revoker = Revoker()
    later = Session(store, session_id="agent", revoke=revoker)
    assert revoker.calls == []  # reopening never revokes on its own
    assert later.revoke_pending() == {"scraper-api-key": True}


def test_a_secret_passed_as_a_credential_is_refused_and_not_echoed() -> None:
    s = session()
    secret = "sk-live-51HbX9aKz7QpL2mN8vR4tY6uI0oP3sD5fG"
    with pytest.raises(InvalidInput) as exc:
        s.archive_chain(CHAIN, FAILURE, BIG, credentials=[secret])
    assert secret not in str(exc.value)
    assert s.chains() == []
    assert secret not in json.dumps([e.data for e in s.store.load("agent")])


# -- the archive ------------------------------------------------------------------------------


def test_the_cold_copy_holds_full_definitions_and_logs_under_the_pointer() -> None:
    s = session()
    record = abandon(s, logs=["GET /a 200", {"step": 2, "error": "timeout"}])
    blob = s.store.get_content(record.pointer)
    assert content_key(blob) == record.pointer
    cold = s.cold_copy(record.digest)
    assert cold["chain"]["digest"] == record.digest
    assert cold["tools"]["html_parser"] == s.tool("html_parser").definition
    assert cold["logs"][1] == {"step": 2, "error": "timeout"}


def test_archiving_the_same_chain_again_returns_the_record_and_journals_nothing() -> None:
    s = session()
    record = abandon(s)
    n = len(s.store.load("agent"))
    assert s.archive_chain(CHAIN, FAILURE, dict(BIG)) == record
    assert len(s.store.load("agent")) == n
    assert s.chain(record.digest) == record
    with pytest.raises(NotFound):
        s.chain("0" * 64)


@pytest.mark.parametrize(
    ("topology", "constraint", "error", "where"),
    [
        (["search_api_v2", "nope"], {"all": []}, NotFound, None),
        (CHAIN, {**BIG, "op": "approx"}, InvalidInput, "constraint.op"),
        (CHAIN, {**BIG, "argument": "payload_size"}, InvalidInput, "constraint.argument"),
        (CHAIN, {**BIG, "tool": "summarize"}, InvalidInput, "constraint.tool"),
        (CHAIN, {**BIG, "value": "5 MB"}, InvalidInput, "constraint.value"),
    ],
)
def test_a_bad_archive_request_changes_nothing(
    topology: list[str], constraint: Any, error: type[Exception], where: str | None
) -> None:
    s = session()
    before = (s.snapshot(), len(s.store.load("agent")))
    with pytest.raises(error) as exc:
        s.archive_chain(topology, FAILURE, constraint)
    if where is not None:
        assert getattr(exc.value, "where", None) == where
    assert (s.snapshot(), len(s.store.load("agent"))) == before


def test_the_archive_digest_does_not_depend_on_the_order_of_archiving() -> None:
    a, b = session(), Session()
    b.register_tools(TOOLS)
    two: tuple[list[str], str, dict[str, Any]] = (["summarize", "send_report"], "422", {"all": []})
    a.archive_chain(CHAIN, FAILURE, BIG)
    a.archive_chain(*two)
    b.archive_chain(*two)
    b.archive_chain(CHAIN, FAILURE, BIG)
    assert a.archive_digest() == b.archive_digest()
    assert a.archive_digest() != Session().archive_digest()


def reopen_equals(store: Any) -> None:
    revoker = Revoker()
    s = Session(store, session_id="agent", revoke=revoker)
    s.register_tools(TOOLS)
    use(s, "search_api_v2", {"q": "elsewhere"})
    use(s, "summarize", {"text": "x"})
    record = abandon(s, credentials=["scraper-api-key"])
    s.mark_shared("summarize")
    again = Session(store, session_id="agent", revoke=revoker)
    assert again.snapshot() == s.snapshot()
    assert again.chains() == [record]
    assert again.archive_digest() == s.archive_digest()
    assert again.tools(ToolState.ARCHIVED) == ["html_parser"]
    assert revoker.calls == ["scraper-api-key"]
    use(again, "search_api_v2", {"q": "y"})
    s2 = Session(store, session_id="agent")
    assert s2.check_chain(["search_api_v2", "summarize"]).safe
    assert not s2.check_chain(["search_api_v2", "html_parser"], [{}, LARGE]).safe


def test_the_archive_survives_a_reopen_on_the_memory_store() -> None:
    reopen_equals(MemoryStore())


def test_the_archive_survives_a_reopen_on_sqlite(tmp_path: Path) -> None:
    from residency import SQLiteStore

    path = tmp_path / "residency.db"
    with SQLiteStore(path) as store:
        reopen_equals(store)
    with SQLiteStore(path) as store:
        s = Session(store, session_id="agent")
        assert s.tools(ToolState.ARCHIVED) == ["html_parser"]
        assert len(s.chains()) == 1


def test_a_revocation_run_outside_the_session_is_journaled_once_and_checked() -> None:
    store = MemoryStore()
    s = session(store)
    use(s, "search_api_v2", {"q": "prices"})
    s.archive_chain(CHAIN, FAILURE, BIG, credentials=["scraper-api-key"])  # no callback: nothing run
    assert s.pending_revocations() == ["scraper-api-key"] and s.revocations() == {}
    length = len(store.load(s.session_id))
    for bad, error in (
        (("other-key", True), NotFound),  # no archived chain names it
        (("scraper-api-key", "yes"), InvalidInput),
        (("scraper-api-key", False, 3), InvalidInput),
    ):
        with pytest.raises(error):
            s.record_revocation(*bad)
    assert len(store.load(s.session_id)) == length  # refusals changed nothing
    s.record_revocation("scraper-api-key", False, "hook exit status 3")
    assert s.revocations() == {"scraper-api-key": False}
    s.record_revocation("scraper-api-key", True)
    assert s.revocations() == {"scraper-api-key": True} and s.pending_revocations() == []
    assert Session(store, session_id=s.session_id).revocations() == {"scraper-api-key": True}
