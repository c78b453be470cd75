"""The session benchmark's cost model, on tiny hand-built sequences whose bill is computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from residency._bench._pricing import (
    DEFAULT_PROFILE,
    PROFILES,
    Profile,
    Prompt,
    Request,
    block_key,
    call_tokens,
    cost,
    load_profiles,
    summarize,
)
from residency._tokens import count_tokens

A5M, A1H, OPENAI, NONE = (PROFILES[n] for n in ("anthropic-5m", "anthropic-1h", "openai", "none"))


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": "Read a record.", "inputSchema": {"type": "object"}}


def _session(second_block: str) -> list[Request]:
    """Block A (100 tokens), the user's words (10), an exchange (50), then ``second_block``
    (100 tokens too) for two more requests with one more exchange (10) between them."""
    prompt = Prompt()
    prompt.set_block("A", 100)
    prompt.say(10)
    prompt.request()  # 110 new
    prompt.meta(50)
    prompt.request()  # 110 cached + 50 new
    prompt.set_block(second_block, 100)
    prompt.request()  # 160: all cached if the block is the same, all new if not
    prompt.meta(10)
    prompt.request()  # 160 cached + 10 new
    return prompt.requests


def test_the_shipped_profiles_are_the_documented_prices() -> None:
    assert DEFAULT_PROFILE == "anthropic-5m"
    assert {n: (p.write, p.read) for n, p in PROFILES.items()} == {
        "anthropic-5m": (1.25, 0.10),
        "anthropic-1h": (2.0, 0.10),
        "openai": (1.0, 0.10),
        "none": (1.0, 1.0),
    }
    for name in ("anthropic-5m", "anthropic-1h", "openai"):
        assert PROFILES[name].sources
        assert all(s.startswith("https://") for s in PROFILES[name].sources)
        assert PROFILES[name].model


def test_a_profile_without_numeric_prices_is_refused() -> None:
    with pytest.raises(ValueError, match="cheap"):
        load_profiles({"profiles": {"cheap": {"write": "1.0", "read": 0.1}}})
    with pytest.raises(ValueError):
        load_profiles({"profiles": {"free": {"write": 1.0, "read": -0.1}}})


def test_an_unchanged_block_reads_the_transcript_so_far_from_the_cache() -> None:
    requests = _session("A")
    assert [(r.total_tokens, r.cached_tokens, r.list_changed) for r in requests] == [
        (110, 0, False),
        (160, 110, False),
        (160, 160, False),
        (170, 160, False),
    ]
    # 110 written; 110 read + 50 written; 160 read; 160 read + 10 written.
    assert cost(requests, A5M) == pytest.approx(137.5 + (11 + 62.5) + 16 + (16 + 12.5))


def test_a_list_change_mid_session_makes_every_later_token_pay_the_write_price() -> None:
    requests = _session("B")
    assert [(r.total_tokens, r.cached_tokens, r.list_changed) for r in requests] == [
        (110, 0, False),
        (160, 110, False),
        (160, 0, True),
        (170, 160, False),
    ]
    # The third request writes the block and the whole transcript again: 160 x 1.25.
    assert cost(requests, A5M) == pytest.approx(137.5 + 73.5 + 200 + 28.5)
    assert cost(requests, A5M) - cost(_session("A"), A5M) == pytest.approx(200 - 16)
    assert cost(requests, A1H) == pytest.approx(220 + (11 + 100) + 320 + (16 + 20))


def test_openai_has_no_write_premium_and_none_prices_every_token_at_one() -> None:
    requests = _session("B")
    # Uncached tokens at 1.0 (no write premium), cached ones at 0.1.
    assert cost(requests, OPENAI) == pytest.approx(110 + (11 + 50) + 160 + (16 + 10))
    assert cost(requests, NONE) == 110 + 160 + 160 + 170
    # Without a write premium a list change costs only the lost discount.
    assert cost(requests, OPENAI) - cost(_session("A"), OPENAI) == pytest.approx(160 - 16)


def test_two_different_blocks_of_equal_token_count_are_a_change() -> None:
    first, second = [_tool("read_alpha")], [_tool("read_gamma")]
    tokens = count_tokens(first)
    assert count_tokens(second) == tokens  # same size, different content
    assert block_key(first) != block_key(second)
    prompt = Prompt()
    prompt.set_block(block_key(first), tokens)
    prompt.say(10)
    prompt.request()
    prompt.set_block(block_key(second), tokens)
    changed = prompt.request()
    assert changed.list_changed
    assert changed.cached_tokens == 0
    # The same content, rebuilt, is the same block: read from the cache.
    prompt.set_block(block_key([_tool("read_gamma")]), tokens)
    again = prompt.request()
    assert not again.list_changed
    assert again.cached_tokens == again.total_tokens


def test_the_order_of_the_tools_is_part_of_the_block() -> None:
    a, b = _tool("read_a"), _tool("read_b")
    assert block_key([a, b]) != block_key([b, a])


def test_a_compaction_breaks_the_prefix_at_the_first_segment_that_left() -> None:
    prompt = Prompt()
    prompt.set_block("A", 100)
    prompt.say(10)
    prompt.call("get", {"id": 1}, "c1")
    prompt.result("c1", 300)
    prompt.call("get", {"id": 2}, "c2")
    prompt.result("c2", 200)
    prompt.request()
    args = call_tokens("get", {"id": 2})
    assert prompt.compact(1) == ["c1"]
    assert [ref for ref, _, _ in prompt.calls()] == ["c2"]
    after = prompt.request()
    # Only the block and the user's words are still a prefix of the previous prompt.
    assert after.total_tokens == 100 + 10 + args + 200
    assert after.cached_tokens == 100 + 10


def test_a_dropped_argument_leaves_its_result_and_breaks_the_prefix_there() -> None:
    prompt = Prompt()
    prompt.set_block("A", 100)
    prompt.call("get", {"id": 1}, "c1")
    prompt.result("c1", 300)
    prompt.say(10)
    prompt.request()
    prompt.drop_arguments(["c1"])
    after = prompt.request()
    assert prompt.calls() == []
    assert after.total_tokens == 100 + 300 + 10
    assert after.cached_tokens == 100


def test_a_search_result_is_held_until_a_compaction_drops_it() -> None:
    prompt = Prompt()
    prompt.set_block("A", 100)
    handle = prompt.meta(40)
    prompt.call("get", {"id": 1}, "c1")
    prompt.result("c1", 5)
    assert prompt.holds(handle)
    prompt.compact(1)
    assert not prompt.holds(handle)


def test_summarize_gives_raw_tokens_peak_context_changes_and_the_cost_per_turn() -> None:
    prompt = Prompt()
    prompt.next_turn()
    prompt.set_block("A", 100)
    prompt.say(10)
    prompt.request()
    prompt.next_turn()
    prompt.set_block("B", 120)
    prompt.meta(30)
    prompt.request()
    prompt.request()
    bill = summarize(prompt.requests, PROFILES, per_turn=A5M)
    assert bill["requests"] == 3
    assert bill["raw_input_tokens"] == 110 + 160 + 160
    assert bill["cached_tokens"] == 160
    assert bill["raw_tool_block_tokens"] == 100 + 120 + 120
    assert bill["peak_context_tokens"] == 160
    assert (bill["list_changes"], bill["list_change_turns"]) == (1, [1])
    assert bill["effective_cost"]["none"] == 430
    assert bill["per_turn_cost"] == [137.5, 200 + 16]
    assert sum(bill["per_turn_cost"]) == pytest.approx(bill["effective_cost"]["anthropic-5m"])


def test_a_request_needs_a_tool_block() -> None:
    with pytest.raises(RuntimeError):
        Prompt().request()


def test_a_custom_profile_prices_the_same_requests() -> None:
    half = Profile("half", write=0.5, read=0.5)
    assert cost(_session("B"), half) == pytest.approx((110 + 160 + 160 + 170) / 2)
