"""An abandoned tool chain, archived so that no later session re-assembles it."""

from residency import Session

session = Session()  # sessions of one store share an archive scope ("default")
session.register_tools(
    [
        {"name": name, "inputSchema": {"type": "object"}}
        for name in ("search_api_v2", "html_parser", "llm_extractor")
    ]
)
record = session.archive_chain(
    topology=["search_api_v2", "html_parser", "llm_extractor"],
    failure="llm_extractor: timeout after 120 s on payload",
    constraint={"tool": "html_parser", "argument": "payload_bytes", "op": ">", "value": 5_000_000},
    credentials=["scraper-api-key"],
    deterministic=True,
)
verdict = session.check_chain(["search_api_v2", "html_parser"], arguments=[{}, {"payload_bytes": 8_000_000}])
print(verdict.safe)  # False: this run would feed the parser what killed the chain
small = session.check_chain(["search_api_v2", "html_parser"], arguments=[{}, {"payload_bytes": 20_000}])
print(small.safe)  # True: the constraint does not hold
print({name: session.state(name).value for name in record.topology})  # the fatal prefix is archived
