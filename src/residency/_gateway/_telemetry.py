"""What the gateway did, for an operator: one log line per event and Prometheus metrics.

Each event (a call forwarded or refused, a re-expansion, a ``tools/list`` answer, a change of
a session's tool list) writes one ``info`` line on the ``residency.gateway`` logger, scrubbed
by ``Secrets.redact`` and escaped by ``printable`` (no newline or terminal control in a name
reaches the log), and moves the metrics below. Gauges are set by the gateway when what they
measure changes.

====================================================  =========  ==============================
metric                                                type       meaning
====================================================  =========  ==============================
``residency_calls_forwarded_total{upstream,outcome}``  counter    calls sent upstream; outcome
                                                                 ``ok`` or ``error``
``residency_calls_via_call_tool_total``                counter    forwarded calls the model made
                                                                 through ``call_tool``
``residency_calls_refused_total{reason}``              counter    calls refused by the gateway
                                                                 (``_meta["residency/error"]``
                                                                 reason), never forwarded
``residency_reexpansions_total{kind}``                 counter    tools re-expanded, ``explicit``
                                                                 (``reexpand_tools``) or
                                                                 ``implicit`` (a valid call)
``residency_tool_list_changes_total``                  counter    changes of a session's list
``residency_listed_tokens_total``                      counter    tokens of the tool lists served
``residency_listed_catalog_tokens_total``              counter    what the full, unminified
                                                                 catalog would have cost for
                                                                 the same answers
``residency_catalog_tools`` / ``_catalog_tokens``      gauge      the aggregated catalog
``residency_sessions_open``                            gauge      sessions held in memory
``residency_call_seconds{upstream}``                   histogram  upstream call latency
====================================================  =========  ==============================

Session keys and tool names go to the log only, never to labels: labels stay few (one series
per upstream, outcome, reason or kind).

Every metric lives on the ``Telemetry``'s own ``CollectorRegistry``, never the process-wide
one: one process may run many gateways (tests do). The per-call methods run on the gateway's
hot path, so labelled children are looked up once and kept, and a log line is only formatted
when the logger would write it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from residency._gateway._config import Secrets
from residency._gateway._meta_tools import LIST_META_TOOLS, meta_tool_definitions
from residency._text import printable
from residency._tokens import count_tokens

__all__ = ["CALL_BUCKETS", "Telemetry", "count_tokens_aside", "meta_tool_tokens"]

logger = logging.getLogger("residency.gateway")

CALL_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) of ``residency_call_seconds``: an in-process upstream answers in
well under a millisecond, a subprocess or remote one in milliseconds to a minute (the default
call timeout)."""


@functools.cache
def meta_tool_tokens(names: tuple[str, ...] = LIST_META_TOOLS) -> int:
    """Tokens of the meta-tools ``names`` as listed (``meta_tool_definitions``' variant for them;
    when omitted, every one a session delivered by list may be shown), counted tool by tool like
    ``ToolSpec.tokens``, once per process and set of names."""
    return sum(count_tokens(d) for d in meta_tool_definitions(names))


class Telemetry:
    """The gateway's log lines and metrics (see the module docstring).

    Args:
        secrets: values scrubbed from every log line (session keys or tool names could carry
            one).
    """

    def __init__(self, secrets: Secrets) -> None:
        redact = secrets.redact
        self._redact: Callable[[str], str] = lambda line: printable(redact(line))
        self.registry = CollectorRegistry()
        r = self.registry
        self._forwarded = Counter(
            "residency_calls_forwarded",
            "Tool calls forwarded to an upstream, by upstream and outcome (ok or error).",
            ["upstream", "outcome"],
            registry=r,
        )
        self._refused = Counter(
            "residency_calls_refused",
            "Tool calls the gateway refused without forwarding them, by reason.",
            ["reason"],
            registry=r,
        )
        self._via_call_tool = Counter(
            "residency_calls_via_call_tool",
            "Forwarded tool calls the model made through call_tool rather than by the tool's name.",
            registry=r,
        )
        reexpansions = Counter(
            "residency_reexpansions",
            "Tools re-expanded: explicit (reexpand_tools) or implicit (a call that validated).",
            ["kind"],
            registry=r,
        )
        self._explicit = reexpansions.labels(kind="explicit")
        self._implicit = reexpansions.labels(kind="implicit")
        self._list_changes = Counter(
            "residency_tool_list_changes",
            "Changes of a session's tool list announced to its client.",
            registry=r,
        )
        self._listed = Counter(
            "residency_listed_tokens", "Tokens of the tool lists served (tools/list answers).", registry=r
        )
        self._listed_catalog = Counter(
            "residency_listed_catalog_tokens",
            "Tokens the full, unminified catalog would have cost for the same tools/list answers.",
            registry=r,
        )
        self._catalog_tools = Gauge("residency_catalog_tools", "Tools in the aggregated catalog.", registry=r)
        self._catalog_tokens = Gauge(
            "residency_catalog_tokens", "Tokens of the aggregated catalog's full definitions.", registry=r
        )
        self._sessions = Gauge("residency_sessions_open", "Downstream sessions held in memory.", registry=r)
        self._seconds = Histogram(
            "residency_call_seconds",
            "Seconds an upstream took to answer a forwarded call.",
            ["upstream"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        # Labelled children, made on first use and kept: a label lookup costs more than the
        # increment itself.
        self._forwarded_children: dict[tuple[str, bool], Counter] = {}
        self._refused_children: dict[str, Counter] = {}
        self._seconds_children: dict[str, Histogram] = {}

    # -- events ------------------------------------------------------------------------------

    def forwarded(
        self, session: str, tool: str, upstream: str, seconds: float, *, ok: bool, via: str = ""
    ) -> None:
        """A call was forwarded and answered (``ok``) or failed (an error result or no answer);
        ``via``: the proxy tool it came through (``call_tool``), if any."""
        if via:
            self._via_call_tool.inc()
        key = (upstream, ok)
        counter = self._forwarded_children.get(key)
        if counter is None:
            counter = self._forwarded.labels(upstream=upstream, outcome="ok" if ok else "error")
            self._forwarded_children[key] = counter
        counter.inc()
        histogram = self._seconds_children.get(upstream)
        if histogram is None:
            histogram = self._seconds_children[upstream] = self._seconds.labels(upstream=upstream)
        histogram.observe(seconds)
        if logger.isEnabledFor(logging.INFO):
            outcome = "ok" if ok else "error"
            logger.info(
                "%s",
                self._redact(
                    f"call forwarded session={session} tool={tool} upstream={upstream} "
                    f"{seconds * 1000:.1f}ms {outcome}" + (f" via={via}" if via else "")
                ),
            )

    def refused(self, session: str, tool: str, reason: str) -> None:
        """A call was refused (``reason``: the refusal's ``_meta["residency/error"]["reason"]``)."""
        counter = self._refused_children.get(reason)
        if counter is None:
            counter = self._refused_children[reason] = self._refused.labels(reason=reason)
        counter.inc()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", self._redact(f"call refused session={session} tool={tool} reason={reason}"))

    def reexpanded(self, session: str, names: Sequence[str], *, implicit: bool) -> None:
        """Tools were re-expanded: by ``reexpand_tools``, or implicitly by a call that validated."""
        (self._implicit if implicit else self._explicit).inc(len(names))
        if logger.isEnabledFor(logging.INFO):
            kind = "implicit" if implicit else "explicit"
            logger.info("%s", self._redact(f"re-expanded session={session} tools={','.join(names)} ({kind})"))

    def listed(self, session: str, shown_tokens: int, catalog_tokens: int) -> None:
        """One ``tools/list`` answer: its tokens, and what the full catalog would have cost."""
        self._listed.inc(shown_tokens)
        self._listed_catalog.inc(catalog_tokens)
        if logger.isEnabledFor(logging.INFO):
            line = f"tools listed session={session} tokens={shown_tokens} catalog={catalog_tokens}"
            logger.info("%s", self._redact(line))

    def list_changed(self, session: str) -> None:
        """A session's tool list changed and its client was told."""
        self._list_changes.inc()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", self._redact(f"tool list changed session={session}"))

    # -- gauges ------------------------------------------------------------------------------

    def set_catalog(self, tools: int, tokens: int) -> None:
        """The catalog was rebuilt: its tool count and the tokens of its full definitions."""
        self._catalog_tools.set(tools)
        self._catalog_tokens.set(tokens)

    def set_sessions(self, open_sessions: int) -> None:
        """The number of sessions held in memory."""
        self._sessions.set(open_sessions)

    # -- exposition --------------------------------------------------------------------------

    def prometheus(self) -> tuple[bytes, str]:
        """The metrics in the Prometheus text format, and that format's content type."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4


def count_tokens_aside(definitions: Sequence[Mapping[str, Any]]) -> Future[int]:
    """The tokens of ``definitions``, counted in a daemon thread of its own."""
    future: Future[int] = Future()

    def count() -> None:
        try:
            future.set_result(sum(count_tokens(d) for d in definitions))
        except BaseException as exc:  # handed to whoever asks for the count
            future.set_exception(exc)

    threading.Thread(target=count, name="residency-catalog-tokens", daemon=True).start()
    return future
