"""The equivalence check: it finds every kind of lost constraint, deterministically."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from residency import SchemaError, minify_tool
from residency._verify import generate_instances, verify_levels, verify_tool

TOOL: dict[str, Any] = {
    "name": "create_item",
    "inputSchema": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2},
            "meta": {
                "type": "object",
                "properties": {"owner": {"type": "string", "pattern": "^[a-z]+$"}},
                "required": ["owner"],
                "additionalProperties": False,
            },
        },
        "required": ["count", "kind"],
        "additionalProperties": False,
    },
}


def broken(edit: Any) -> dict[str, Any]:
    tool = copy.deepcopy(TOOL)
    edit(tool["inputSchema"])
    return tool


@pytest.mark.parametrize(
    ("edit", "path", "kinds"),
    [
        (lambda s: s["properties"]["count"].pop("maximum"), "/count", {"maximum bound"}),
        (lambda s: s.pop("additionalProperties"), "/__extra__", {"extra property"}),
        (lambda s: s["required"].remove("kind"), "/kind", {"missing required"}),
        (lambda s: s["properties"]["kind"].pop("enum"), "/kind", {"bad enum"}),
        (lambda s: s["properties"]["tags"]["items"].pop("type"), "/tags/0", {"wrong type"}),
        (
            lambda s: s["properties"]["meta"]["properties"]["owner"].pop("pattern"),
            "/meta/owner",
            {"pattern/format"},
        ),
        (lambda s: s["properties"]["meta"].pop("required"), "/meta/owner", {"missing required"}),
        (lambda s: s["properties"]["tags"].pop("maxItems"), "/tags", {"maxItems bound"}),
    ],
    ids=[
        "maximum",
        "additionalProperties",
        "required",
        "enum",
        "nested type",
        "pattern",
        "nested required",
        "maxItems",
    ],
)
def test_a_lost_constraint_is_reported_by_tool_and_path(edit: Any, path: str, kinds: set[str]) -> None:
    result = verify_tool(TOOL, broken(edit), max_examples=0)
    assert not result.ok
    found = {(d.path, d.kind) for d in result.disagreements}
    assert any(p == path and k in kinds for p, k in found), found
    assert all(d.tool == "create_item" for d in result.disagreements)


def test_an_added_constraint_is_reported_too() -> None:
    result = verify_tool(
        TOOL, broken(lambda s: s["properties"]["count"].update(multipleOf=2)), max_examples=0
    )
    assert any(d.original_valid and not d.minified_valid for d in result.disagreements)


def test_every_minify_level_agrees_with_drawn_and_mutated_instances() -> None:
    levels = {level: minify_tool(TOOL, level) for level in ("full-text", "compact", "minimal")}
    results = verify_levels(TOOL, levels, max_examples=15)
    for result in results.values():
        assert result.ok
        assert result.accepted > 0 and result.instances > result.accepted
        assert result.generator.startswith("hypothesis-jsonschema (15)")


def test_instances_are_deterministic_and_only_objects() -> None:
    first = generate_instances(TOOL["inputSchema"], max_examples=10)
    second = generate_instances(TOOL["inputSchema"], max_examples=10)
    assert first == second
    assert all(isinstance(instance, dict) for _, _, instance in first[0])


def test_a_schema_hypothesis_jsonschema_cannot_draw_from_falls_back_to_mutations() -> None:
    recursive = {
        "name": "tree",
        "inputSchema": {
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/Node"}},
                    "required": ["v"],
                }
            },
        },
    }
    result = verify_tool(recursive, minify_tool(recursive, "minimal"), max_examples=5)
    assert result.ok
    assert result.generator.startswith("mutations only")
    assert result.instances > 0


def test_drawing_stops_at_the_time_limit() -> None:
    result = verify_tool(TOOL, TOOL, max_examples=50, time_limit=0.0)
    assert result.timed_out and result.ok


def test_a_non_object_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        verify_tool({"name": "t", "inputSchema": []}, TOOL)


def test_equal_schemas_are_judged_once_and_keep_their_own_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    from residency import _verify

    built: list[object] = []
    real_judge = _verify._judge

    def counting_judge(schema: Any) -> Any:
        built.append(schema)
        return real_judge(schema)

    monkeypatch.setattr(_verify, "_judge", counting_judge)
    lost_max = broken(lambda s: s["properties"]["count"].pop("maximum"))
    levels = {
        "same": copy.deepcopy(TOOL),
        "lost": lost_max,
        "lost again": copy.deepcopy(lost_max),
        "other": broken(lambda s: s["properties"]["kind"].pop("enum")),
    }
    results = verify_levels(TOOL, levels, max_examples=0)
    # The original, then one judge for each schema not seen before.
    assert built == [TOOL["inputSchema"], lost_max["inputSchema"], levels["other"]["inputSchema"]]
    assert results["same"].ok and results["same"].instances > 0
    assert not results["lost"].ok and results["lost again"] == results["lost"]
    alone = verify_tool(TOOL, levels["other"], max_examples=0)
    assert results["other"] == alone and not alone.ok
