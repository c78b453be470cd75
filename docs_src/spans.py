"""Context spans: a precondition leaves the window only as a pointer to its stored copy."""

from residency import Session, UnrecoverablePruneError

session = Session()
schema_dump = "CREATE TABLE orders (id INT PRIMARY KEY, total NUMERIC NOT NULL CHECK (total >= 0));"
span = session.add_span(schema_dump, tags={"constraint"}, source="tool:describe_table")

try:
    session.evict_span(span.id)  # a precondition with no stored copy cannot leave
except UnrecoverablePruneError as refused:
    print("refused:", refused)

key = session.externalize(span.id)  # written to the content store first; the window shows the key
session.evict_span(span.id)  # a precondition span leaves only as a pointer
print(session.span_state(span.id), key)
print(session.restore(span.id) == schema_dump)  # the original bytes, verified by sha256

notes = [session.add_span(text) for text in ("p99 rose at 14:02", "deploy 42 went out at 14:00")]
summary = session.summarize([n.id for n in notes], "deploy 42 likely caused the p99 rise")
print(summary.derivation_depth, summary.provenance)  # depth >= 1: re-ground before acting on it
