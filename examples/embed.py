"""Embed residency in your own agent loop: no MCP, no server, just the Session.

Your host owns the transcript, so it applies both halves of each plan: it shows ``plan.tools``
to the model as its tool list, puts ``plan.new_tombstones`` in the transcript (with the result
of the call the plan follows: the tool list stays the same, and so does the prompt cache), and
drops the arguments of ``plan.evictions`` from the transcript. Calls go through
``authorize_call`` first and are recorded after they run.

The default planner keeps the list stable: it adds what the model needs and cuts only once the
tools shown pass 1.5 times the schema budget (``Budget(..., planner="greedy")`` keeps the list
to the budget on every turn instead).
"""

from __future__ import annotations

from residency import Budget, Session, ToolNotResident
from residency.demo import desk_tools


def main() -> None:
    session = Session()  # Session(SQLiteStore("agent.db"), session_id="a1") keeps it across restarts
    session.register_tools(desk_tools())
    budget = Budget(schema_tokens=500, argument_tokens=2_000)

    plan = session.plan_turn(budget)
    print(f"turn {plan.turn}: {len(plan.tools)} schemas shown ({plan.schema_tokens} tokens)")

    update = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
    if "update_incident" not in plan.tool_names:
        session.reexpand("update_incident")
    session.authorize_call("update_incident", update)
    session.record_call("update_incident", update)

    for name, arguments in [
        ("get_timeline", {"incident_id": "INC-7"}),
        ("get_service_health", {"service": "api"}),
        ("list_deploys", {"service": "api"}),
        ("query_metrics", {"service": "api", "metric": "error_rate"}),
        ("search_runbooks", {"query": "rollback"}),
    ]:
        plan = session.plan_turn(budget)
        if name not in plan.tool_names:
            session.reexpand(name)
        session.authorize_call(name, arguments)
        session.record_call(name, arguments)

    plan = session.plan_turn(budget)
    print(f"turn {plan.turn}: tombstones for the transcript:", *plan.new_tombstones, sep="\n  ")
    print("evict these call arguments from the transcript:", list(plan.evictions))
    try:
        session.authorize_call("update_incident", {"incident_id": "INC-7", "severity": "SEV-1"})
    except ToolNotResident as refused:
        print("refused:", refused)


if __name__ == "__main__":
    main()
