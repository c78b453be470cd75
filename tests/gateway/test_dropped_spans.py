"""Hosts report the spans they dropped through ``_meta`` (issue #15, part 3).

A gateway in process on a SQLite store, two upstreams (``big_upstream.build()`` twice, so every
tool is namespaced ``db__*`` / ``web__*``) and a config that tags ``db__dump`` results as
``constraint`` (a precondition) and ``db__echo`` results as ``note``; ``web__*`` has no rule.
The process is not the subject here: ``test_spans_over_mcp`` kills a real one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import mcp_types as types
import pytest

from residency._store._sqlite import SQLiteStore
from tests._timing import STEP
from tests.gateway.big_upstream import build, text_of
from tests.gateway.conftest import Agent, agent, running, text

pytestmark = pytest.mark.anyio

WAIT = STEP  # per test: a few dozen requests in process, no interpreter to start
KEY = "dropped-k"
DROPPED = "residency/dropped_spans"
KEPT = "residency/kept_spans"
SPAN = "residency/span"
BIG = 60_000  # bytes: well over the 2000-token offload limit
SPANS = {
    "offload_tokens": 2000,
    "preview_chars": 100,
    "tags": {"db__dump": ["constraint"], "db__echo": ["note"]},
}


@asynccontextmanager
async def gateway(folder: Path) -> AsyncIterator[Agent]:
    """A gateway on ``folder``'s store and an agent on session ``KEY``; a second one resumes it."""
    store = SQLiteStore(folder / "r.db")
    try:
        async with (
            running({"spans": SPANS}, upstreams={"db": build(), "web": build()}, store=store) as gw,
            agent(gw, "legacy", KEY) as a,
        ):
            yield a
    finally:
        store.close()


async def _call(a: Agent, name: str, arguments: dict[str, Any], dropped: Any = None) -> types.CallToolResult:
    """A call that must succeed; ``dropped`` (any JSON value) goes in ``_meta`` when given."""
    # RequestParamsMeta is an open map (PEP 728) that mypy does not read as one.
    meta = a.meta if dropped is None else cast(types.RequestParamsMeta, {**a.meta, DROPPED: dropped})
    result = await a.client.call_tool(name, arguments, meta=meta)
    assert not result.is_error, result
    return result


async def _span(a: Agent, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tagged (or large) tool; the span its result names."""
    link: dict[str, Any] = dict((await _call(a, name, arguments)).meta or {})[SPAN]
    return link


async def _states(a: Agent) -> dict[str, str]:
    return {row["id"]: row["state"] for row in json.loads(await a.read("residency://spans"))}


async def _read_whole(a: Agent, span_id: str) -> str:
    parts: list[str] = []
    offset = 0
    while True:
        result = await _call(a, "read_span", {"id": span_id, "offset": offset, "length": 7001})
        data = dict(result.structured_content or {})
        parts.append(data["text"])
        if data["done"]:
            return "".join(parts)
        offset = data["next_offset"]


def _key(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


async def test_a_small_result_of_a_tool_with_a_tag_rule_becomes_a_resident_span(tmp_path: Path) -> None:
    expected = text_of(200)
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path) as a:
            result = await _call(a, "db__dump", {"size": 200})
            assert text(result) == expected  # passed whole: it is small
            link = dict(result.meta or {})[SPAN]
            assert link["uri"] == f"residency://spans/{link['id']}" and link["key"] == _key(expected)
            assert link["bytes"] == len(expected.encode("utf-8")) and link["tokens"] > 0
            note = await _span(a, "db__echo", {"text": "the staging db is shared"})
            untagged = await _call(a, "web__echo", {"text": "hi"})
            assert text(untagged) == "echo: hi" and SPAN not in (untagged.meta or {})
            assert await _states(a) == {link["id"]: "resident", note["id"]: "resident"}
            shown = json.loads(await a.read(link["uri"]))
            assert shown["state"] == "resident" and shown["tags"] == ["constraint"]
            assert shown["text"] == expected and shown["source"] == "tool:db__dump"
            # Never written to the store, still read by range.
            assert await _read_whole(a, link["id"]) == expected
            assert await _read_whole(a, note["id"]) == "echo: the staging db is shared"


async def test_a_dropped_precondition_span_stays_a_pointer_and_any_other_is_evicted(tmp_path: Path) -> None:
    small, big = text_of(300), text_of(BIG)
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path) as a:
            rule = await _span(a, "db__dump", {"size": 300})  # resident, a precondition
            schema = await _span(a, "db__dump", {"size": BIG})  # offloaded, a precondition
            note = await _span(a, "db__echo", {"text": "try the replica"})  # resident
            log = await _span(a, "web__echo", {"text": big})  # offloaded, no rule
            assert await _states(a) == {
                rule["id"]: "resident",
                schema["id"]: "externalized",
                note["id"]: "resident",
                log["id"]: "externalized",
            }
            dropped = [note["id"], rule["id"], log["id"], schema["id"]]
            result = await _call(a, "web__echo", {"text": "next"}, dropped)
            assert text(result) == "echo: next"
            kept = dict(result.meta or {})[KEPT]
            assert kept == [{"id": s["id"], "uri": s["uri"], "key": s["key"]} for s in (rule, schema)]
            assert await _states(a) == {
                rule["id"]: "externalized",
                schema["id"]: "externalized",
                note["id"]: "evicted",
                log["id"]: "evicted",
            }
            # Nothing is lost: every span reads back whole, from the content store.
            assert await _read_whole(a, rule["id"]) == small
            assert await _read_whole(a, schema["id"]) == text_of(BIG)
            assert await _read_whole(a, note["id"]) == "echo: try the replica"
            assert await _read_whole(a, log["id"]) == "echo: " + big
            shown = json.loads(await a.read(note["uri"]))
            assert shown["state"] == "evicted" and shown["text"] == "echo: try the replica"
            # The same report again, on a meta-tool call this time: nothing changes.
            again = await _call(a, "read_span", {"id": rule["id"], "length": 10}, dropped)
            assert dict(again.meta or {})[KEPT] == kept
            events = json.loads(await a.read("residency://events"))
            moves = [
                e for e in events if e["kind"] == "span" and e["detail"].startswith(("externalize", "evict"))
            ]
            assert len(moves) == 3  # rule externalized, note and log evicted; once each


async def test_unknown_ids_and_bad_shapes_change_nothing_and_the_call_goes_on(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with gateway(tmp_path) as a:
            rule = await _span(a, "db__dump", {"size": 300})
            note = await _span(a, "db__echo", {"text": "kept resident"})
            before = await _states(a)
            assert set(before.values()) == {"resident"}
            for bad in (rule["id"], {"ids": [rule["id"]]}, 7, True):  # not a list: ignored whole
                result = await _call(a, "web__echo", {"text": "x"}, bad)
                assert text(result) == "echo: x" and KEPT not in (result.meta or {})
            for ids in ([], ["s999", "", "nope"], [1, None, {"id": rule["id"]}, [note["id"]]]):
                result = await _call(a, "web__echo", {"text": "y"}, ids)
                assert text(result) == "echo: y" and dict(result.meta or {})[KEPT] == []
            assert await _states(a) == before
            # A list mixing bad entries with a real id applies the real one only.
            result = await _call(a, "web__echo", {"text": "z"}, [None, "s999", note["id"], note["id"]])
            assert dict(result.meta or {})[KEPT] == []
            assert await _states(a) == {**before, note["id"]: "evicted"}


async def test_dropped_spans_keep_their_states_and_read_back_after_a_restart(tmp_path: Path) -> None:
    small, big = text_of(300), text_of(BIG)
    with anyio.fail_after(2 * WAIT):
        async with gateway(tmp_path) as first:
            rule = await _span(first, "db__dump", {"size": 300})
            schema = await _span(first, "db__dump", {"size": BIG})
            note = await _span(first, "db__echo", {"text": "before the restart"})
            later = await _span(first, "db__echo", {"text": "dropped after the restart"})
            log = await _span(first, "web__echo", {"text": big})
            answer = await _call(first, "web__echo", {"text": "go"}, [rule["id"], note["id"], log["id"]])
            assert [k["id"] for k in dict(answer.meta or {})[KEPT]] == [rule["id"]]
        # The restart: a new gateway, new upstreams, the same store file, the same session key.
        async with gateway(tmp_path) as a:
            assert await _states(a) == {
                rule["id"]: "externalized",
                schema["id"]: "externalized",
                note["id"]: "evicted",
                later["id"]: "resident",
                log["id"]: "evicted",
            }
            expected = {
                rule["id"]: small,
                schema["id"]: text_of(BIG),
                note["id"]: "echo: before the restart",
                later["id"]: "echo: dropped after the restart",
                log["id"]: "echo: " + big,
            }
            links = {s["id"]: s for s in (rule, schema, note, later, log)}
            for span_id, whole in expected.items():
                read = await _read_whole(a, span_id)
                assert read == whole and _key(read) == links[span_id]["key"]
            # A span added before the restart is dropped after it: evicted, and still whole.
            result = await _call(a, "web__echo", {"text": "on"}, [later["id"], schema["id"]])
            assert [k["id"] for k in dict(result.meta or {})[KEPT]] == [schema["id"]]
            assert (await _states(a))[later["id"]] == "evicted"
            assert await _read_whole(a, later["id"]) == "echo: dropped after the restart"
