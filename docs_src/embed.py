from residency import Budget, Session, ToolNotResident
from residency.demo import desk_tools

session = Session()  # in memory; Session(SQLiteStore("agent.db")) persists
session.register_tools(desk_tools())  # the tools/list entries of your MCP servers
budget = Budget.greedy(schema_tokens=300, argument_tokens=20_000)
update = {"incident_id": "INC-7", "severity": "SEV-2", "assignee": {"id": "u-42"}, "notify": True}
for name, arguments in [("update_incident", update), ("get_timeline", {"incident_id": "INC-7"})]:
    session.plan_turn(budget)  # a turn: what the model is shown now
    session.admit_call(name, arguments, reexpand_evicted=True)  # checked against the schema, recorded
print(session.plan_turn(budget).new_tombstones)  # update_incident withheld, its arguments visible
try:
    session.admit_call("update_incident", {**update, "severity": "SEV-1"})
except ToolNotResident:  # refused with its tombstone: re-expand first
    print(session.reexpand("update_incident")["name"])
