"""The audit log: one JSON line per decision, no argument values, no secret; off costs nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from residency._errors import ConfigError
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._audit import DECISIONS, AuditLog, AuditSettings
from residency._gateway._config import Secrets
from residency._gateway._gate import RequestGate
from tests.gateway.conftest import config, reason, session_meta

pytestmark = pytest.mark.anyio

SECRET_ENV = "env-secret-value-0042"
VALUE = "INC-value-never-logged-7"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class Audited:
    """An in-process client of a gateway whose audit file it reads line by line."""

    def __init__(self, client: Client, path: Path, key: str) -> None:
        self.client = client
        self.path = path
        self.meta = session_meta(key)
        self.seen = 0

    def new(self) -> list[dict[str, Any]]:
        found = lines(self.path)
        fresh, self.seen = found[self.seen :], len(found)
        return fresh

    def one(self) -> dict[str, Any]:
        [line] = self.new()
        return line


@asynccontextmanager
async def audited(tmp_path: Path, mode: str, **audit: Any) -> AsyncIterator[Audited]:
    path = tmp_path / "audit.jsonl"
    residency = {
        "delivery": "list",
        "budget": {"schema_tokens": 1},
        "pinned": ["get_incident", "search_runbooks"],
        "audit": {"path": str(path), **audit},
    }
    # A configured server whose env holds a secret: the secret must never reach the audit file.
    servers = {"off": {"command": "true", "env": {"TOKEN": SECRET_ENV}, "disabled": True}}
    gateway = Gateway(config(residency, servers), upstreams={"desk": IncidentDesk().server})
    async with gateway, Client(gateway.server, mode=mode) as client:
        yield Audited(client, path, "k1")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_decision_writes_exactly_one_line(tmp_path: Path, mode: str) -> None:
    async with audited(tmp_path, mode) as a:
        c, m = a.client, a.meta
        listed = [t.name for t in (await c.list_tools(meta=m)).tools]
        line = a.one()
        assert {k: line[k] for k in ("decision", "tool", "outcome", "code", "session", "subject")} == {
            "decision": "listed",
            "tool": None,
            "outcome": "ok",
            "code": None,
            "session": "k1",
            "subject": None,
        }
        assert line["time"].endswith("Z") and "T" in line["time"]

        shown = "search_runbooks"
        assert shown in listed and "update_incident" not in listed
        assert not (await c.call_tool(shown, {"query": VALUE}, meta=m)).is_error
        line = a.one()
        assert (line["decision"], line["tool"], line["outcome"], line["code"]) == (
            "forwarded",
            shown,
            "ok",
            None,
        )

        await c.call_tool("search_tools", {"query": "timeline note"}, meta=m)
        assert (a.one()["decision"], "search_tools") == ("searched", "search_tools")

        withheld = "update_incident"
        refused = await c.call_tool(withheld, {"incident_id": VALUE}, meta=m)
        line = a.one()
        assert (line["decision"], line["tool"], line["outcome"]) == ("refused", withheld, "error")
        assert line["code"] == reason(refused)

        await c.call_tool("reexpand_tools", {"names": [withheld]}, meta=m)
        assert a.one()["decision"] == "reexpanded"

        bad = await c.call_tool(shown, {"query": 7}, meta=m)
        line = a.one()
        assert bad.is_error and (line["decision"], line["code"]) == ("refused", "arguments_invalid")

        with pytest.raises(MCPError):
            await c.call_tool("no_such_tool", {}, meta=m)
        line = a.one()
        assert (line["decision"], line["tool"], line["code"]) == ("refused", "no_such_tool", "not_found")

        await c.read_resource("residency://tombstones", meta=m)
        line = a.one()
        assert (line["decision"], line["resource"], line["tool"]) == ("read", "residency://tombstones", None)

    text = a.path.read_text(encoding="utf-8")
    assert VALUE not in text and "timeline note" not in text
    assert not any("arguments" in line for line in lines(a.path))
    assert {line["decision"] for line in lines(a.path)} <= set(DECISIONS)


async def test_the_names_option_writes_argument_names_never_values(tmp_path: Path) -> None:
    async with audited(tmp_path, "legacy", arguments="names") as a:
        await a.client.call_tool(
            "call_tool", {"name": "search_runbooks", "arguments": {"query": VALUE}}, meta=a.meta
        )
        # (The client lists first: call_tool is not in a list-delivery session's list.)
        [line] = [line for line in a.new() if line["decision"] != "listed"]
    assert (line["decision"], line["tool"], line["arguments"]) == ("forwarded", "search_runbooks", ["query"])
    assert VALUE not in a.path.read_text(encoding="utf-8")


async def test_a_secret_in_a_tool_name_or_session_key_is_redacted(tmp_path: Path) -> None:
    async with audited(tmp_path, "legacy") as a:
        with pytest.raises(MCPError):
            await a.client.call_tool(f"x{SECRET_ENV}", {}, meta=session_meta(f"s-{SECRET_ENV}"))
        line = a.one()
    assert SECRET_ENV not in a.path.read_text(encoding="utf-8")
    assert line["tool"] == "x***" and line["session"] == "s-***"


async def test_without_an_audit_or_limit_no_middleware_runs() -> None:
    gateway = Gateway(config({}), upstreams={"desk": IncidentDesk().server})
    assert gateway.gate is None
    assert not any(isinstance(m, RequestGate) for m in gateway.server.middleware)


async def test_an_audit_path_that_cannot_be_written_fails_the_start(tmp_path: Path) -> None:
    gateway = Gateway(config({"audit": {"path": str(tmp_path / "missing" / "a.jsonl")}}))
    with pytest.raises(ConfigError) as raised:
        async with gateway:
            pass
    assert raised.value.where == "audit.path"


def test_the_audit_settings_refuse_unknown_keys_and_options() -> None:
    with pytest.raises(ConfigError):
        config({"audit": {"path": "a.jsonl", "arguments": "values"}})
    with pytest.raises(ConfigError):
        config({"audit": {"file": "a.jsonl"}})


def test_several_threads_writing_at_once_leave_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(AuditSettings(path=str(path)), Secrets().redact) as log:

        def write(n: int) -> None:
            for i in range(200):
                log.record("forwarded", subject=f"s{n}", session=f"k{n}", tool=f"t{i}" * 20, outcome="ok")

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    found = lines(path)
    assert len(found) == 800 and {line["subject"] for line in found} == {"s0", "s1", "s2", "s3"}


def test_stderr_gets_the_lines_when_the_path_is_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    with AuditLog(AuditSettings(path="-")) as log:
        log.record(
            "limited",
            subject=None,
            session=None,
            tool="t",
            outcome="error",
            code="rate_limited",
            retry_after=1.5,
        )
    line = json.loads(capsys.readouterr().err)
    assert (line["decision"], line["retry_after"], line["code"]) == ("limited", 1.5, "rate_limited")


def test_a_refusal_whose_reason_is_a_policys_is_written_denied() -> None:
    from residency._gateway._audit import DENIED_REASONS
    from residency._gateway._gate import _answered, _failed

    [reason_] = sorted(DENIED_REASONS)
    refusal = {"isError": True, "content": [], "_meta": {"residency/error": {"reason": reason_}}}
    assert _answered("tools/call", "update_incident", refusal) == ("denied", "error", reason_)
    assert _failed("tools/call", "update_incident", reason_) == "denied"
    # A meta-tool keeps its own decision; another reason stays a refusal.
    assert _failed("tools/call", "search_tools", reason_) == "searched"
    other = {"isError": True, "content": [], "_meta": {"residency/error": {"reason": "tool_not_resident"}}}
    assert _answered("tools/call", "update_incident", other) == ("refused", "error", "tool_not_resident")


async def test_a_refusal_a_policy_notes_is_written_denied_though_the_caller_sees_an_unknown_tool(
    tmp_path: Path,
) -> None:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from residency._gateway._audit import note_denied

    async def hiding_policy(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        # A policy that hides hidden_tool: it says so to the audit; the caller sees no such tool.
        if ctx.method == "tools/call" and (ctx.params or {}).get("name") == "hidden_tool":
            note_denied()
        return await call_next(ctx)

    path = tmp_path / "audit.jsonl"
    gateway = Gateway(config({"audit": {"path": str(path)}}), upstreams={"desk": IncidentDesk().server})
    gateway.server.middleware.append(hiding_policy)  # inside the gate, as a handler would be
    async with gateway, Client(gateway.server, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("hidden_tool", {})
        with pytest.raises(MCPError):
            await client.call_tool("no_such_tool", {})
    assert raised.value.error.data["reason"] == "not_found"  # the caller learns nothing
    found = lines(path)
    assert [(line["decision"], line["tool"], line["code"]) for line in found[-2:]] == [
        ("denied", "hidden_tool", "tool_denied"),
        ("refused", "no_such_tool", "not_found"),
    ]
