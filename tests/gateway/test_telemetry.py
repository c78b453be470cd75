"""What an operator sees: log lines, Prometheus metrics, ``/healthz`` and ``residency://upstreams``."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from residency import EventKind, ToolState
from residency._gateway import Gateway, IncidentDesk
from residency._gateway import _resources as res
from residency._gateway._config import Secrets
from residency._gateway._demo import SCENARIO_READS
from residency._gateway._telemetry import Telemetry
from residency._runtime._tools import IMPLICIT_REEXPANSION
from tests._timing import STEP
from tests.gateway.conftest import agent, config, reason, running, served_over_http

pytestmark = pytest.mark.anyio

MISSING_COMMAND = "/nonexistent/residency-no-such-server"
BROKEN = {"broken": {"command": MISSING_COMMAND}}
UPDATE = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition, by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def metrics(telemetry: Telemetry) -> str:
    body, content_type = telemetry.prometheus()
    assert content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


# -- the Telemetry object ------------------------------------------------------------------------


def test_each_event_moves_its_own_metric() -> None:
    t = Telemetry(Secrets())
    t.forwarded("s1", "get_incident", "desk", 0.002, ok=True)
    t.forwarded("s1", "get_incident", "desk", 0.004, ok=True)
    t.forwarded("s2", "update_incident", "desk", 3.0, ok=False)
    t.forwarded("s2", "now", "time", 0.0001, ok=True)
    t.refused("s1", "update_incident", "tool_not_resident")
    t.refused("s1", "update_incident", "tool_not_resident")
    t.refused("s2", "get_runbook", "arguments_invalid")
    t.reexpanded("s1", ["update_incident", "get_runbook"], implicit=False)
    t.reexpanded("s2", ["list_deploys"], implicit=True)
    t.listed("s1", 900, 2000)
    t.listed("s2", 700, 2000)
    t.list_changed("s1")
    t.set_catalog(14, 1918)
    t.set_sessions(2)
    text = metrics(t)

    assert value(text, "residency_calls_forwarded_total", upstream="desk", outcome="ok") == 2
    assert value(text, "residency_calls_forwarded_total", upstream="desk", outcome="error") == 1
    assert value(text, "residency_calls_forwarded_total", upstream="time", outcome="ok") == 1
    assert value(text, "residency_calls_refused_total", reason="tool_not_resident") == 2
    assert value(text, "residency_calls_refused_total", reason="arguments_invalid") == 1
    assert value(text, "residency_reexpansions_total", kind="explicit") == 2
    assert value(text, "residency_reexpansions_total", kind="implicit") == 1
    assert value(text, "residency_tool_list_changes_total") == 1
    assert value(text, "residency_listed_tokens_total") == 1600
    assert value(text, "residency_listed_catalog_tokens_total") == 4000
    assert value(text, "residency_catalog_tools") == 14
    assert value(text, "residency_catalog_tokens") == 1918
    assert value(text, "residency_sessions_open") == 2
    assert value(text, "residency_call_seconds_count", upstream="desk") == 3
    assert value(text, "residency_call_seconds_sum", upstream="desk") == pytest.approx(3.006)
    assert value(text, "residency_call_seconds_bucket", upstream="desk", le="0.0025") == 1
    assert value(text, "residency_call_seconds_bucket", upstream="desk", le="0.005") == 2
    assert value(text, "residency_call_seconds_bucket", upstream="desk", le="+Inf") == 3
    # Session keys and tool names stay out of the labels.
    assert "s1" not in text and "get_incident" not in text


def test_two_gateways_in_one_process_count_apart() -> None:
    first, second = Telemetry(Secrets()), Telemetry(Secrets())
    first.refused("s", "t", "tool_not_resident")
    assert value(metrics(first), "residency_calls_refused_total", reason="tool_not_resident") == 1
    assert value(metrics(second), "residency_calls_refused_total", reason="tool_not_resident") is None
    assert value(metrics(second), "residency_reexpansions_total", kind="explicit") == 0


def test_each_event_writes_one_redacted_info_line(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetry(Secrets(["hunter2-secret"]))
    caplog.set_level(logging.INFO, logger="residency.gateway")
    t.forwarded("K", "get_incident", "desk", 0.0123, ok=True)
    t.forwarded("K", "update_incident", "desk", 0.5, ok=False)
    t.refused("K", "update_incident", "tool_not_resident")
    t.reexpanded("K", ["a", "b"], implicit=True)
    t.reexpanded("K", ["c"], implicit=False)
    t.listed("K", 900, 2000)
    t.list_changed("K")
    t.refused("bearer-hunter2-secret", "x", "arguments_invalid")
    lines = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("residency.gateway", logging.INFO, line)
        for line in (
            "call forwarded session=K tool=get_incident upstream=desk 12.3ms ok",
            "call forwarded session=K tool=update_incident upstream=desk 500.0ms error",
            "call refused session=K tool=update_incident reason=tool_not_resident",
            "re-expanded session=K tools=a,b (implicit)",
            "re-expanded session=K tools=c (explicit)",
            "tools listed session=K tokens=900 catalog=2000",
            "tool list changed session=K",
            "call refused session=bearer-*** tool=x reason=arguments_invalid",
        )
    ]


def test_nothing_is_logged_below_the_info_level(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetry(Secrets())
    caplog.set_level(logging.WARNING, logger="residency.gateway")
    t.forwarded("K", "get_incident", "desk", 0.01, ok=True)
    t.refused("K", "update_incident", "tool_not_resident")
    assert caplog.records == []
    assert value(metrics(t), "residency_calls_forwarded_total", upstream="desk", outcome="ok") == 1


# -- a live gateway (needs the telemetry calls in the gateway) -----------------------------------


async def test_a_live_gateway_counts_what_its_session_did() -> None:
    desk = IncidentDesk()
    # Seed 000 by list: the budget tombstones update_incident, and the list changes as it goes.
    seed_000 = {"delivery": "list", "budget": {"schema_tokens": 700}, "minify": "compact"}
    async with running(seed_000, desk=desk) as gw, agent(gw, "legacy") as a:
        session = gw.session(a.key)
        assert not (await a.use("update_incident", UPDATE)).is_error
        for name, arguments in SCENARIO_READS:
            assert not (await a.use(name, arguments)).is_error
            if session.state("update_incident") is not ToolState.RESIDENT:
                break
        assert session.state("update_incident") is ToolState.TOMBSTONED
        refused = await a.call("update_incident", UPDATE)
        assert reason(refused) == "tool_not_resident"
        assert not (await a.call("reexpand_tools", {"names": ["update_incident"]})).is_error
        tools = await a.tools()
        text = metrics(gw.telemetry)

    events = session.events()
    implicit = [e for e in events if e.kind is EventKind.REEXPANDED and e.detail == IMPLICIT_REEXPANSION]
    explicit = [e for e in events if e.kind is EventKind.REEXPANDED and e.detail != IMPLICIT_REEXPANSION]
    assert value(text, "residency_calls_forwarded_total", upstream="desk", outcome="ok") == len(desk.calls)
    assert value(text, "residency_call_seconds_count", upstream="desk") == len(desk.calls)
    assert value(text, "residency_calls_refused_total", reason="tool_not_resident") == 1
    assert value(text, "residency_reexpansions_total", kind="implicit") == len(implicit)
    assert value(text, "residency_reexpansions_total", kind="explicit") == len(explicit) >= 1
    assert (value(text, "residency_tool_list_changes_total") or 0) >= 1
    assert value(text, "residency_catalog_tools") == 14
    assert value(text, "residency_sessions_open") == 1
    # Schema residency pays: the lists served cost less than the full catalog would have.
    listed = value(text, "residency_listed_tokens_total") or 0
    catalog = value(text, "residency_listed_catalog_tokens_total") or 0
    assert 0 < listed < catalog
    assert catalog % (value(text, "residency_catalog_tokens") or 1) == 0  # whole lists
    assert len(tools) > 3


# -- residency://upstreams -----------------------------------------------------------------------


async def test_the_upstreams_resource_shows_a_failed_and_a_connected_upstream() -> None:
    async with running({}, desk=IncidentDesk(), servers=BROKEN) as gw, agent(gw, "legacy") as a:
        direct = json.loads(
            res.read_resource(
                res.UPSTREAMS, gw.session(a.key), gw.catalog, upstreams=gw.upstreams, secrets=gw.secrets
            ).text
        )
        uris = [str(r.uri) for r in (await a.client.list_resources()).resources]
        served = json.loads(await a.read(res.UPSTREAMS))  # needs the gateway to pass upstreams=
    broken, desk = served
    assert broken["name"] == "broken" and broken["kind"] == "stdio"
    assert broken["status"] == "failed" and broken["tools"] == 0 and broken["protocol_version"] is None
    assert broken["starts"] >= 1 and "FileNotFoundError" in broken["last_error"]
    assert desk["name"] == "desk" and desk["kind"] == "in-process"
    assert desk["status"] == "connected" and desk["tools"] == 14 and desk["protocol_version"]
    assert desk["last_error"] == "" and desk["starts"] == 1
    assert direct == served
    assert res.UPSTREAMS in uris


async def test_upstream_errors_are_redacted() -> None:
    # The failing command's own path is a configured secret value: it must not come back out.
    secret = "no-such-server"
    servers = {"broken": {"command": MISSING_COMMAND, "env": {"API_KEY": secret}}}
    async with running({}, servers=servers) as gw:
        [entry] = res.upstream_status(gw.upstreams, gw.secrets)
    assert entry["status"] == "failed"
    assert secret not in entry["last_error"] and "***" in entry["last_error"]


def test_reading_upstreams_without_them_is_not_found() -> None:
    from residency import Session
    from residency._errors import NotFound
    from residency._gateway._aggregate import Catalog

    with pytest.raises(NotFound):
        res.read_resource(res.UPSTREAMS, Session(), Catalog())


# -- /healthz and /metrics over HTTP -------------------------------------------------------------


@asynccontextmanager
async def http_gateway(
    servers: Mapping[str, Any] | None = None, token: str | None = None
) -> AsyncIterator[tuple[Gateway, str]]:
    """The desk in-process plus ``servers``, served on an ephemeral loopback port; yields the base URL."""
    gateway = Gateway(config({}, servers), upstreams={"desk": IncidentDesk().server})
    async with gateway, served_over_http(gateway, token=token) as url:
        yield gateway, url.removesuffix("/mcp")


@pytest.mark.slow
async def test_healthz_is_ok_and_metrics_count_calls_made_over_http() -> None:
    async with http_gateway() as (_, base), httpx2.AsyncClient(timeout=STEP) as http:
        health = await http.get(f"{base}/healthz")
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert [(u["name"], u["status"]) for u in health.json()["upstreams"]] == [("desk", "connected")]

        with anyio.fail_after(STEP):
            async with (
                httpx2.AsyncClient(
                    headers={"Residency-Session": "h1"}, timeout=httpx2.Timeout(STEP, read=None)
                ) as c,
                Client(streamable_http_client(f"{base}/mcp", http_client=c), mode="legacy") as client,
            ):
                await client.list_tools()
                assert not (await client.call_tool("get_incident", {"incident_id": "INC-1"})).is_error

        scraped = await http.get(f"{base}/metrics")
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert value(scraped.text, "residency_calls_forwarded_total", upstream="desk", outcome="ok") == 1
        assert value(scraped.text, "residency_catalog_tools") == 14
        assert (value(scraped.text, "residency_listed_tokens_total") or 0) > 0


@pytest.mark.slow
async def test_healthz_is_503_and_degraded_while_an_upstream_has_failed() -> None:
    async with http_gateway(BROKEN) as (_, base), httpx2.AsyncClient(timeout=STEP) as http:
        health = await http.get(f"{base}/healthz")
        scraped = await http.get(f"{base}/metrics")
    # Before any MCP request the catalog gauges already hold the tools of the upstream that runs.
    assert value(scraped.text, "residency_catalog_tools") == 14
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "degraded"
    assert {u["name"]: u["status"] for u in body["upstreams"]} == {"broken": "failed", "desk": "connected"}


@pytest.mark.slow
async def test_health_and_metrics_follow_the_token_and_host_rules_of_mcp() -> None:
    token = "t0ken-for-tests"
    async with http_gateway(token=token) as (_, base), httpx2.AsyncClient(timeout=STEP) as http:
        for path in ("/healthz", "/metrics"):
            assert (await http.get(f"{base}{path}")).status_code == 401
            wrong = {"Authorization": "Bearer nope"}
            assert (await http.get(f"{base}{path}", headers=wrong)).status_code == 401
            good = {"Authorization": f"Bearer {token}"}
            assert (await http.get(f"{base}{path}", headers=good)).status_code == 200
            foreign = {**good, "Host": "evil.example:80"}
            assert (await http.get(f"{base}{path}", headers=foreign)).status_code == 421
