"""Each structural rewrite of the minifier, and the constraint counter that checks them."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import validators

from benchmarks.bench._seed003 import seed003_prune
from residency._core._minify import minify_schema
from residency._core._minify_constraints import (
    constraint_atoms,
    constraints_added,
    constraints_lost,
    count_constraints,
)
from residency._core._minify_rewrites import dialect_neutral, is_noop, null_union

SAMPLES: list[object] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.5,
    "",
    "a",
    "abcdef",
    [],
    [1],
    ["a", "a"],
    {},
    {"a": 1},
]


def same_verdicts(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether both schemas judge every sample, wrapped as the value of ``p``, alike."""
    va = validators.validator_for(a, default=validators.Draft202012Validator)(a)
    vb = validators.validator_for(b, default=validators.Draft202012Validator)(b)
    return all(va.is_valid({"p": x}) == vb.is_valid({"p": x}) for x in SAMPLES)


def wrap(prop: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"p": prop}, **root}


def minified(schema: dict[str, Any], level: str = "full-text") -> dict[str, Any]:
    return minify_schema(schema, level)[0]  # type: ignore[arg-type]


# --- no-op keywords ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "noop",
    [
        {"required": []},
        {"minLength": 0},
        {"minItems": 0},
        {"minProperties": 0},
        {"uniqueItems": False},
        {"additionalProperties": True},
        {"additionalProperties": {}},
        {"patternProperties": {}},
        {"properties": {}},
        {"allOf": []},
    ],
)
def test_keywords_equal_to_their_default_are_dropped_with_the_same_verdicts(noop: dict[str, Any]) -> None:
    schema = wrap({"type": ["object", "string", "array"], "items": {}, **noop})
    out = minified(schema)
    assert next(iter(noop)) not in out["properties"]["p"]
    assert same_verdicts(schema, out)


def test_a_zero_that_is_not_a_default_stays() -> None:
    assert not is_noop("maxLength", 0)
    assert not is_noop("minLength", False)  # not the number 0
    assert minified(wrap({"type": "string", "maxLength": 0}))["properties"]["p"]["maxLength"] == 0


# --- null unions -------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
@pytest.mark.parametrize("first", [True, False])
def test_a_null_union_becomes_a_type_list(keyword: str, first: bool) -> None:
    branch = {"type": "string", "minLength": 2, "pattern": "^a"}
    branches = [branch, {"type": "null"}] if first else [{"type": "null"}, branch]
    schema = wrap({keyword: branches, "description": "x"})
    out = minified(schema)["properties"]["p"]
    types = ["string", "null"] if first else ["null", "string"]
    assert out == {"type": types, "minLength": 2, "pattern": "^a", "description": "x"}
    assert same_verdicts(schema, minified(schema))
    assert not constraints_lost(schema, minified(schema))


@pytest.mark.parametrize(
    "prop",
    [
        {"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "null"}]},  # enum judges null too
        {"anyOf": [{"type": "string", "minLength": 2}, {"type": "null"}], "type": "string"},  # own type
        {"anyOf": [{"type": "string", "minLength": 2}, {"type": "null"}], "minLength": 1},  # collision
        {"anyOf": [{"type": "string", "not": {"const": "a"}}, {"type": "null"}]},  # not judges null
        {"anyOf": [{"type": ["string", "integer"]}, {"type": "null"}]},  # no single type
        {"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]},  # three branches
        {"anyOf": [{"type": "integer", "minLength": 1}, {"type": "null"}]},  # minLength is not numeric
    ],
)
def test_null_unions_that_are_not_equivalent_as_a_type_list_stay(prop: dict[str, Any]) -> None:
    schema = wrap(prop)
    out = minified(schema, "minimal")["properties"]["p"]
    assert ("anyOf" in out) == ("anyOf" in prop)
    assert same_verdicts(schema, minified(schema, "minimal"))


def test_a_described_null_branch_keeps_its_prose_at_full_text() -> None:
    schema = wrap({"anyOf": [{"type": "string"}, {"type": "null", "description": "none means all"}]})
    assert "anyOf" in minified(schema, "full-text")["properties"]["p"]
    assert minified(schema, "minimal")["properties"]["p"] == {"type": ["string", "null"]}


def test_a_union_a_ref_points_into_is_left_where_it_is() -> None:
    schema = wrap(
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        **{
            "$defs": {},
            "properties": {
                "p": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "q": {"$ref": "#/properties/p/anyOf/0"},
            },
        },
    )
    out = minified(schema, "minimal")
    assert "anyOf" in out["properties"]["p"]
    assert null_union(schema["properties"]["p"]) is not None


# --- definitions -------------------------------------------------------------------------------


def test_unused_definitions_go_and_used_ones_stay_transitively() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}},
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "integer", "minimum": 3},
            "Unused": {"type": "string"},
        },
    }
    out, changes = minify_schema(schema, "minimal")
    assert set(out["$defs"]) == {"A", "B"}
    assert changes["unused definition"] == 1
    assert not constraints_lost(schema, out)


def test_definitions_stay_when_a_reference_uses_an_anchor() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#num"}},
        "$defs": {"N": {"$anchor": "num", "type": "integer"}, "Other": {"type": "string"}},
    }
    out, _ = minify_schema(schema, "minimal")
    assert set(out["$defs"]) == {"N", "Other"}


# --- dialect -----------------------------------------------------------------------------------

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def test_schema_uri_goes_when_the_schema_means_the_same_under_2020_12() -> None:
    schema = wrap({"type": "array", "items": {"type": "string"}}, **{"$schema": DRAFT7})
    assert dialect_neutral(schema)
    out = minified(schema)
    assert "$schema" not in out and same_verdicts(schema, out)


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "array", "items": [{"type": "string"}]},  # tuple form changes meaning
        {"$ref": "#/$defs/S", "maxLength": 1},  # draft-07 ignores $ref siblings
        {"type": "object", "dependencies": {"a": ["b"]}},
    ],
)
def test_schema_uri_stays_when_the_dialect_matters(prop: dict[str, Any]) -> None:
    schema = wrap(prop, **{"$schema": DRAFT7, "$defs": {"S": {"type": "string"}}})
    assert not dialect_neutral(schema)
    out = minified(schema)
    assert out["$schema"] == DRAFT7
    assert same_verdicts(schema, out)


def test_an_unknown_or_old_dialect_is_kept() -> None:
    assert not dialect_neutral({"$schema": "http://json-schema.org/draft-04/schema#"})
    assert not dialect_neutral({"$schema": "https://example.com/my-dialect"})
    assert dialect_neutral({"type": "object"})


# --- the constraint counter --------------------------------------------------------------------


def test_the_counter_counts_at_every_depth_and_ignores_annotations() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 3, "title": "A"},
            "b": {"type": "string", "description": "words", "default": "x", "minLength": 0},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    # object, 2 required, false; a: array, maxItems; a/items: integer, minimum; b: string
    assert count_constraints(schema) == 9


def test_the_counter_follows_references_and_survives_cycles() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
    }
    atoms = constraint_atoms(schema)
    assert ("/properties/n", "type", "object") in atoms
    assert ("/properties/n/properties/next", "$ref cycle", "/$defs/Node") in atoms


def test_a_type_implied_by_enum_is_not_a_separate_constraint() -> None:
    assert count_constraints({"type": "string", "enum": ["a", "b"]}) == 1
    assert count_constraints({"type": "string", "enum": ["a", 1]}) == 2


def test_a_null_union_counts_the_same_in_either_spelling() -> None:
    union = wrap({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]})
    listed = wrap({"type": ["string", "null"], "maxLength": 3})
    assert constraint_atoms(union) == constraint_atoms(listed)


def test_the_seed_pruner_loses_nested_constraints_and_invents_types() -> None:
    tool: dict[str, Any] = {
        "name": "t",
        "description": "Find items, e.g. docs. More.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "q": {"type": "object", "properties": {"x": {"type": "integer", "maximum": 3}}},
                "v": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            },
        },
    }
    pruned = seed003_prune(tool)
    assert pruned["description"] == "Find items, e"
    assert sum(constraints_lost(tool["inputSchema"], pruned["inputSchema"]).values()) == 4
    assert ("/properties/v", "type", "string") in constraints_added(
        tool["inputSchema"], pruned["inputSchema"]
    )
