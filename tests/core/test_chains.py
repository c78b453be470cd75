"""The chain core: the constraint language, chain records, the collision check and its index."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residency import InvalidInput
from residency._core._chains import ChainArchive, ChainRecord, build_chain, cold_record
from residency._core._predicates import OPS, constraint_json, holds, parse_constraint, render_constraint
from tests._tiers import examples

TOPOLOGY = ["search_api_v2", "html_parser", "llm_extractor"]
BIG = {"tool": "html_parser", "argument": "payload_bytes", "op": ">", "value": 5_000_000}
ALWAYS: dict[str, Any] = {"all": []}


def chain(topology: list[str], constraint: Any = ALWAYS, failure: str = "timeout", **kw: Any) -> ChainRecord:
    return build_chain(topology, failure, constraint, **kw)


def evaluate_one(op: str, value: Any, argument: Any) -> bool | None:
    c = parse_constraint({"tool": "a", "argument": "x", "op": op, "value": value}, ["a", "b"])
    return holds(c, [{"x": argument}])


# -- the constraint language ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "value", "argument", "expected"),
    [
        ("==", 5, 5, True),
        ("==", 5, 5.0, True),
        ("==", 1, True, False),
        ("==", True, 1, False),
        ("==", {"a": [1, 2]}, {"a": [1, 2]}, True),
        ("==", "x", "y", False),
        ("!=", "x", "y", True),
        ("!=", 0, False, True),
        ("<", 10, 9, True),
        ("<", 10, 10, False),
        ("<=", 10, 10, True),
        (">", 10, 11, True),
        (">", 10, "11", False),
        (">", 0, True, False),
        (">=", 10, 10, True),
        ("in", ["a", "b"], "b", True),
        ("in", ["a", "b"], "c", False),
        ("in", [1], True, False),
        ("not in", ["a", "b"], "c", True),
        ("not in", ["a", "b"], "a", False),
        ("size >", 3, "abcd", True),
        ("size >", 3, "abc", False),
        ("size ==", 4, "é€", False),  # 2 + 3 UTF-8 bytes
        ("size ==", 5, "é€", True),
        ("size <", 2, [1], True),
        ("size >=", 2, {"a": 1, "b": 2}, True),
        ("size !=", 0, [], False),
        ("size <=", 100, 42, False),  # a number has no size
    ],
)
def test_every_op_evaluates_by_json_rules(op: str, value: Any, argument: Any, expected: bool) -> None:
    assert evaluate_one(op, value, argument) is expected


def test_the_op_list_covers_comparisons_membership_and_sizes() -> None:
    assert {"==", "!=", "<", "<=", ">", ">=", "in", "not in", "size >", "size <="} <= set(OPS)


@pytest.mark.parametrize("op", OPS)
def test_a_condition_on_an_absent_argument_never_holds(op: str) -> None:
    value: Any = ["a"] if op in ("in", "not in") else 1
    c = parse_constraint({"tool": "a", "argument": "x", "op": op, "value": value}, ["a", "b"])
    assert holds(c, [{"y": 1}]) is False


def test_nested_paths_reach_into_objects_and_arrays() -> None:
    c = parse_constraint(
        {"tool": "a", "argument": ["pages", 1, "bytes"], "op": ">=", "value": 10}, ["a", "b"]
    )
    assert holds(c, [{"pages": [{"bytes": 1}, {"bytes": 10}]}]) is True
    assert holds(c, [{"pages": [{"bytes": 1}]}]) is False
    assert holds(c, [{"pages": "not a list"}]) is False


def test_all_and_any_combine_with_three_valued_logic() -> None:
    topology = ["a", "b", "c"]
    big = {"tool": "a", "argument": "n", "op": ">", "value": 5}
    fast = {"tool": "b", "argument": "mode", "op": "==", "value": "fast"}
    both = parse_constraint({"all": [big, fast]}, topology)
    either = parse_constraint({"any": [big, fast]}, topology)
    assert holds(both, [{"n": 9}, {"mode": "fast"}]) is True
    assert holds(both, [{"n": 1}, {"mode": "fast"}]) is False
    assert holds(both, [{"n": 9}, None]) is None
    assert holds(both, [{"n": 1}, None]) is False
    assert holds(either, [{"n": 9}, None]) is True
    assert holds(either, [{"n": 1}, None]) is None
    assert holds(either, [{"n": 1}, {"mode": "slow"}]) is False


def test_the_empty_conjunction_means_the_topology_alone_is_fatal() -> None:
    c = parse_constraint(ALWAYS, ["a", "b"])
    assert holds(c, [None]) is True
    assert constraint_json(c) == ALWAYS
    assert render_constraint(c) == ""


def test_a_condition_holds_at_any_step_of_its_tool_unless_a_step_is_pinned() -> None:
    topology = ["fetch", "parse", "fetch", "extract"]
    anywhere = parse_constraint({"tool": "fetch", "argument": "n", "op": ">", "value": 5}, topology)
    pinned = parse_constraint({"tool": "fetch", "argument": "n", "op": ">", "value": 5, "step": 2}, topology)
    args = [{"n": 9}, {}, {"n": 1}]
    assert holds(anywhere, args) is True
    assert holds(pinned, args) is False
    assert holds(pinned, [{"n": 1}, {}, {"n": 9}]) is True


def test_the_canonical_form_round_trips_and_renders_readably() -> None:
    raw = {"any": [BIG, {"tool": "search_api_v2", "argument": ["q", 0], "op": "in", "value": ["x", "y"]}]}
    c = parse_constraint(raw, TOPOLOGY)
    assert constraint_json(c) == raw
    assert parse_constraint(constraint_json(c), TOPOLOGY) == c
    assert render_constraint(c) == 'html_parser.payload_bytes > 5000000 or search_api_v2.q[0] in ["x", "y"]'


SCHEMAS = {
    "html_parser": {
        "type": "object",
        "properties": {"payload_bytes": {"type": "integer"}, "opts": {"type": "object", "properties": {}}},
    }
}


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ("payload_bytes > 5MB", "constraint"),
        ({**BIG, "op": "=~"}, "constraint.op"),
        ({**BIG, "op": "gt"}, "constraint.op"),
        ({**BIG, "value": "5MB"}, "constraint.value"),
        ({**BIG, "value": True}, "constraint.value"),
        ({**BIG, "value": float("nan")}, "constraint.value"),
        ({**BIG, "op": "in", "value": 5}, "constraint.value"),
        ({**BIG, "op": "in", "value": []}, "constraint.value"),
        ({**BIG, "op": "size >", "value": -1}, "constraint.value"),
        ({**BIG, "op": "size >", "value": 1.5}, "constraint.value"),
        ({**BIG, "tool": "llm_extractor"}, "constraint.tool"),  # the terminal step is not tested
        ({**BIG, "tool": "no_such_tool"}, "constraint.tool"),
        ({**BIG, "tool": 3}, "constraint.tool"),
        ({**BIG, "vaule": 1}, "constraint.vaule"),
        ({"tool": "html_parser", "op": ">", "value": 1}, "constraint.argument"),
        ({**BIG, "argument": ""}, "constraint.argument"),
        ({**BIG, "argument": [0]}, "constraint.argument"),
        ({**BIG, "argument": ["opts", -1]}, "constraint.argument[1]"),
        ({**BIG, "argument": "payload_size"}, "constraint.argument"),  # not in the schema
        ({**BIG, "argument": ["payload_bytes", "x"]}, "constraint.argument[1]"),  # an integer
        ({**BIG, "argument": ["opts", "depth"]}, "constraint.argument[1]"),
        ({**BIG, "step": 0}, "constraint.step"),
        ({**BIG, "step": 2}, "constraint.step"),
        ({"any": []}, "constraint.any"),
        ({"all": [{"all": []}]}, "constraint.all[0].all"),
        ({"all": [BIG], "any": [BIG]}, "constraint"),
        ({"any": [BIG, {**BIG, "op": "~"}]}, "constraint.any[1].op"),
    ],
)
def test_a_bad_constraint_is_refused_with_where_it_is_wrong(raw: Any, where: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        build_chain(TOPOLOGY, "timeout", raw, schemas=SCHEMAS)
    assert exc.value.where == where


def test_a_path_the_schema_leaves_open_is_accepted() -> None:
    schemas = {"a": {"type": "object", "properties": {"x": {}}, "additionalProperties": True}}
    parse_constraint({"tool": "a", "argument": "y", "op": "==", "value": 1}, ["a", "b"], schemas)
    parse_constraint({"tool": "a", "argument": ["x", "deep", 3], "op": "==", "value": 1}, ["a", "b"], schemas)


def test_a_constraint_nested_too_deeply_is_refused() -> None:
    deep: Any = BIG
    for _ in range(40):
        deep = {"all": [deep]}
    with pytest.raises(InvalidInput):
        parse_constraint(deep, TOPOLOGY)


# -- chain records ----------------------------------------------------------------------------


def test_a_transient_failure_is_refused_rather_than_archived() -> None:
    with pytest.raises(InvalidInput) as exc:
        build_chain(TOPOLOGY, "429 rate limited", BIG, deterministic=False)
    assert exc.value.where == "deterministic"


@pytest.mark.parametrize(
    ("topology", "failure", "where"),
    [
        (["only_one"], "boom", "topology"),
        ("search_api_v2", "boom", "topology"),
        (["a", ""], "boom", "topology[1]"),
        (["a", "b"], "   ", "failure"),
        (["a", "b"], None, "failure"),
    ],
)
def test_a_chain_needs_two_tools_and_a_failure_signature(topology: Any, failure: Any, where: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        build_chain(topology, failure, ALWAYS)
    assert exc.value.where == where


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c",
        "ghp_1234567890abcdefghijABCDEFGHIJ123456",
        "Bearer abc.def",
        "AKIAIOSFODNN7EXAMPLE1234567890abcd",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ],
)
def test_a_credential_value_is_refused_and_never_echoed(secret: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        build_chain(TOPOLOGY, "timeout", BIG, credentials=["ok-ref", secret])
    assert exc.value.where == "credentials[1]"
    assert secret not in str(exc.value)
    assert secret[:12] not in str(exc.value)


def test_credentials_are_references_kept_sorted_and_unique() -> None:
    refs = ["vault:kv/scraper#api_key", "scraper-api-key", "scraper-api-key", "oauth:crm/read.write-2024"]
    record = build_chain(TOPOLOGY, "timeout", BIG, credentials=refs)
    assert record.credentials == ("oauth:crm/read.write-2024", "scraper-api-key", "vault:kv/scraper#api_key")


def test_the_digest_covers_the_record_and_survives_a_round_trip() -> None:
    record = build_chain(TOPOLOGY, "llm_extractor: timeout after 120 s", BIG, credentials=["k"])
    again = build_chain(TOPOLOGY, "llm_extractor: timeout after 120 s", dict(BIG), credentials=["k"])
    assert record.digest == again.digest and len(record.digest) == 64
    assert build_chain(TOPOLOGY, "other failure", BIG).digest != record.digest
    assert (
        build_chain(TOPOLOGY, "llm_extractor: timeout after 120 s", {**BIG, "value": 1}).digest
        != record.digest
    )
    assert ChainRecord.from_json(record.to_json()) == record
    tampered = {**record.to_json(), "failure": "something else"}
    with pytest.raises(InvalidInput):
        ChainRecord.from_json(tampered)


def test_the_rule_names_the_run_the_condition_and_the_failing_step() -> None:
    record = build_chain(TOPOLOGY, "timeout", BIG)
    assert record.rule == (
        "IF search_api_v2 -> html_parser WHERE html_parser.payload_bytes > 5000000 THEN llm_extractor fails"
    )


def test_the_cold_copy_holds_definitions_and_logs_but_not_the_pointer() -> None:
    record = build_chain(TOPOLOGY, "timeout", BIG)
    blob = cold_record(record, {"html_parser": {"name": "html_parser"}}, ["line 1"])
    assert b'"logs":["line 1"]' in blob and b"pointer" not in blob
    with pytest.raises(InvalidInput) as exc:
        cold_record(record, {}, object())
    assert exc.value.where == "logs"


# -- collisions -------------------------------------------------------------------------------


def test_a_two_tool_chain_does_not_block_a_sequence_that_only_shares_its_first_tool() -> None:
    archive = ChainArchive([chain(["a", "b"])])
    assert archive.check(["a", "c", "d"]).safe
    assert archive.check(["x", "a"]).safe
    verdict = archive.check(["x", "a", "b", "y"])
    assert not verdict.safe and verdict.span == (1, 3)


def test_a_two_tool_chain_whose_rule_tests_the_first_tool_blocks_it_when_the_rule_holds() -> None:
    archive = ChainArchive([chain(["a", "b"], {"tool": "a", "argument": "n", "op": ">", "value": 5})])
    assert archive.check(["a", "c"], [{"n": 1}, {}]).safe
    assert not archive.check(["a", "c"], [{"n": 9}, {}]).safe


def test_the_prefix_is_found_anywhere_not_only_at_the_start() -> None:
    record = chain(TOPOLOGY, BIG, failure="llm_extractor: timeout after 120 s")
    archive = ChainArchive([record])
    verdict = archive.check(
        ["plan", "search_api_v2", "html_parser", "summarize"],
        [{}, {"q": "x"}, {"payload_bytes": 8_000_000}, {}],
    )
    assert not verdict.safe and verdict.conclusive
    assert verdict.span == (1, 3)
    assert verdict.chain == record
    assert verdict.rule == record.rule
    assert verdict.expected_failure == "llm_extractor: timeout after 120 s"
    assert record.digest[:12] in verdict.reason
    assert archive.check(["search_api_v2", "plan", "html_parser"]).safe
    assert archive.check(["html_parser", "search_api_v2"]).safe


def test_the_payload_condition_separates_small_from_large() -> None:
    archive = ChainArchive([chain(TOPOLOGY, BIG)])
    seq = ["search_api_v2", "html_parser"]
    assert archive.check(seq, [{}, {"payload_bytes": 10_000}]).safe
    assert not archive.check(seq, [{}, {"payload_bytes": 8_000_000}]).safe


def test_unknown_arguments_fail_closed_and_say_so() -> None:
    archive = ChainArchive([chain(TOPOLOGY, BIG)])
    verdict = archive.check(["search_api_v2", "html_parser"])
    assert not verdict.safe and not verdict.conclusive
    assert not archive.check(["search_api_v2", "html_parser"], [{}, None]).safe


def test_a_definite_collision_is_preferred_to_an_unknown_one() -> None:
    archive = ChainArchive([chain(TOPOLOGY, BIG), chain(["x", "y", "z"])])
    verdict = archive.check(["search_api_v2", "html_parser", "x", "y"], [None, None, None, None])
    assert not verdict.safe and verdict.conclusive and verdict.span == (2, 4)


@pytest.mark.parametrize(
    ("sequence", "arguments", "where"),
    [
        ("search_api_v2", None, "sequence"),
        (["a", 3], None, "sequence[1]"),
        (["a", "b"], [{}], "arguments"),
        (["a", "b"], {"a": {}}, "arguments"),
        (["a", "b"], [{}, "x"], "arguments[1]"),
        (["a"] * 10_001, None, "sequence"),
    ],
)
def test_a_malformed_candidate_is_refused(sequence: Any, arguments: Any, where: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        ChainArchive([chain(TOPOLOGY)]).check(sequence, arguments)
    assert exc.value.where == where


def test_the_next_call_is_refused_when_it_completes_a_fatal_prefix_or_is_the_fatal_step() -> None:
    archive = ChainArchive([chain(TOPOLOGY, BIG)])
    big, small = {"payload_bytes": 8_000_000}, {"payload_bytes": 1}
    assert not archive.check_next(["search_api_v2"], [{}], "html_parser", big).safe
    assert archive.check_next(["search_api_v2"], [{}], "html_parser", small).safe
    fatal = archive.check_next(["search_api_v2", "html_parser"], [{}, big], "llm_extractor", {})
    assert not fatal.safe and fatal.span == (0, 3)
    assert archive.check_next(["search_api_v2", "html_parser"], [{}, small], "llm_extractor", {}).safe
    # A run judged earlier is not judged again at every later call.
    assert archive.check_next(["search_api_v2", "html_parser"], [{}, big], "summarize", {}).safe


def test_calls_inside_an_archived_run_are_covered_and_others_are_not() -> None:
    archive = ChainArchive([chain(TOPOLOGY)])
    tools = ["search_api_v2", "summarize", "search_api_v2", "html_parser", "llm_extractor", "search_api_v2"]
    assert archive.covered_calls(tools) == [False, False, True, True, True, False]
    # An abandoned attempt at the end of the record counts as inside too.
    assert archive.covered_calls(["x", "search_api_v2", "html_parser"]) == [False, True, True]
    assert archive.covered_calls(["search_api_v2", "html_parser", "x"]) == [False, False, False]


def test_archiving_the_same_chain_twice_changes_nothing() -> None:
    archive = ChainArchive()
    assert archive.add(chain(TOPOLOGY)) is True
    before = archive.digest()
    assert archive.add(chain(TOPOLOGY)) is False
    assert len(archive) == 1 and archive.digest() == before


# -- properties -------------------------------------------------------------------------------

TOOL = st.sampled_from(["a", "b", "c", "d", "e"])
SEQ = st.lists(TOOL, max_size=12)


@st.composite
def records(draw: st.DrawFn) -> ChainRecord:
    topology = draw(st.lists(TOOL, min_size=2, max_size=5))
    if draw(st.booleans()):
        constraint: Any = ALWAYS
    else:
        tool = draw(st.sampled_from(topology[:-1]))
        constraint = {"tool": tool, "argument": "n", "op": draw(st.sampled_from(["<", ">"])), "value": 5}
    return build_chain(topology, draw(st.sampled_from(["timeout", "oom"])), constraint)


def naive(chains: list[ChainRecord], tools: list[str], args: list[Any]) -> bool:
    """The reference: scan every chain at every position."""
    for record in chains:
        run = list(record.fatal_run)
        for start in range(len(tools) - len(run) + 1):
            if tools[start : start + len(run)] == run and holds(record.constraint, args[start:]) is not False:
                return True
    return False


@settings(max_examples=examples(200), deadline=None)
@given(records(), SEQ, SEQ, st.data())
def test_a_collision_is_found_wherever_the_prefix_sits(
    record: ChainRecord, left: list[str], right: list[str], data: st.DataObject
) -> None:
    run = list(record.fatal_run)
    tools = left + run + right
    # Arguments that make the constraint hold inside the run; anything elsewhere.
    args: list[Any] = [{"n": data.draw(st.integers(0, 10))} for _ in tools]
    inside = {"n": 9} if getattr(record.constraint, "op", ">") == ">" else {"n": 1}
    args[len(left) : len(left) + len(run)] = [inside] * len(run)
    verdict = ChainArchive([record]).check(tools, args)
    assert not verdict.safe
    assert verdict.span is not None and verdict.span[0] <= len(left)
    assert tools[verdict.span[0] : verdict.span[0] + len(run)] == run


@settings(max_examples=examples(200), deadline=None)
@given(records(), SEQ)
def test_a_sequence_without_the_fatal_run_never_collides(record: ChainRecord, tools: list[str]) -> None:
    run = list(record.fatal_run)
    present = any(tools[i : i + len(run)] == run for i in range(len(tools) - len(run) + 1))
    verdict = ChainArchive([record]).check(tools)
    assert verdict.safe is not present


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(records(), max_size=6), SEQ, st.data())
def test_the_index_agrees_with_a_naive_scan_of_every_chain(
    chains: list[ChainRecord], tools: list[str], data: st.DataObject
) -> None:
    args: list[Any] = [data.draw(st.none() | st.fixed_dictionaries({"n": st.integers(0, 10)})) for _ in tools]
    assert ChainArchive(chains).check(tools, args).safe is not naive(chains, tools, args)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(records(), min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_the_archive_digest_does_not_depend_on_order(chains: list[ChainRecord], rnd: Any) -> None:
    shuffled = list(chains)
    rnd.shuffle(shuffled)
    assert ChainArchive(chains).digest() == ChainArchive(shuffled).digest()
    distinct = {c.digest for c in chains}
    if len(distinct) > 1:
        fewer = [c for c in chains if c.digest != chains[0].digest]
        assert ChainArchive(fewer).digest() != ChainArchive(chains).digest()


def test_every_order_of_three_chains_gives_one_digest() -> None:
    chains = [chain(["a", "b"]), chain(TOPOLOGY, BIG), chain(["x", "y", "z"], failure="oom")]
    digests = {ChainArchive(p).digest() for p in itertools.permutations(chains)}
    assert len(digests) == 1
