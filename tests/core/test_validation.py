"""The compiled validator accepts only what the reference accepts; where it may not, it is unused."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residency._core._validation import ArgumentValidator, scan_arguments, unsafe_reason
from residency._verify import generate_instances
from tests._tiers import examples
from tests.conftest import load_corpus

LIMIT = 64


def reference_valid(schema: dict[str, Any], instance: object) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return bool(cls(schema).is_valid(instance))


def verdict(validator: ArgumentValidator, instance: object) -> bool:
    _, plain = scan_arguments(instance, LIMIT)
    return validator.first_error(instance, plain=plain) is None


def compiled_verdict(validator: ArgumentValidator, instance: object) -> bool:
    compiled: Any = validator._compiled
    return bool(compiled.is_valid(instance))


def corpus_schemas() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{server}/{tool['name']}", tool["inputSchema"])
        for server, tools in load_corpus().items()
        for tool in tools
    ]


SHARDS = 4
"""The corpus is judged in this many parts (every fourth tool), so parallel workers share it."""


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_on_every_corpus_tool_the_compiled_verdict_equals_the_reference_verdict(shard: int) -> None:
    disagreements: list[str] = []
    judged = compiled_tools = 0
    schemas = corpus_schemas()[shard::SHARDS]
    for name, schema in schemas:
        validator = ArgumentValidator(schema)
        if not validator.compiled:
            continue
        compiled_tools += 1
        reference = jsonschema.validators.validator_for(schema)(schema)
        instances, _, _ = generate_instances(schema, max_examples=3, max_mutations=250)
        for path, kind, instance in instances:
            _, plain = scan_arguments(instance, LIMIT)
            if not plain:
                continue
            judged += 1
            fast, ref = compiled_verdict(validator, instance), reference.is_valid(instance)
            if fast != ref:
                disagreements.append(f"{name}: {kind} at {path or '/'}: compiled {fast}, reference {ref}")
    assert disagreements == []
    # The fast path serves most real tools, and the proof covers many instances (over 20,000
    # across the shards).
    assert compiled_tools > 0.8 * len(schemas)
    assert judged > 20_000 / SHARDS, judged


def test_corpus_tools_left_to_the_reference_are_those_with_a_stated_reason() -> None:
    for name, schema in corpus_schemas():
        validator = ArgumentValidator(schema)
        assert validator.compiled == (validator.why_reference is None), name


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)

HAND_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 10}}},
    {"type": "object", "properties": {"a": {"enum": [1, "1", True, None, [1], {"b": 1}]}}},
    {"type": "object", "properties": {"a": {"const": 1.0}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True, "maxItems": 3}}},
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 1, "maxLength": 2}}},
    {"type": "object", "additionalProperties": {"type": ["string", "null"]}, "minProperties": 1},
    {"type": "object", "properties": {"a": {"exclusiveMinimum": 0.5, "exclusiveMaximum": 2}}},
    {"type": "object", "properties": {"a": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}},
    {"type": "object", "propertyNames": {"maxLength": 2}, "dependentRequired": {"a": ["b"]}},
    {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{"type": "string"}],
                                            "items": False, "contains": {"type": "string"}}}},
    {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"maxProperties": 1}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "$defs": {"n": {"type": "number"}},
     "unevaluatedProperties": False},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
     "properties": {"a": {"type": "integer", "maximum": 5, "exclusiveMaximum": True}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"a": {"type": "array", "items": [{"type": "integer"}], "additionalItems": False}},
     "dependencies": {"a": {"required": ["b"]}}},
]  # fmt: skip


@pytest.mark.parametrize("schema", HAND_SCHEMAS, ids=range(len(HAND_SCHEMAS)))
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, key=st.sampled_from(["a", "b", "ab", "abc"]))
def test_on_drawn_values_the_verdict_is_the_references(
    schema: dict[str, Any], value: object, key: str
) -> None:
    validator = ArgumentValidator(schema)
    assert validator.compiled, validator.why_reference
    for instance in ({key: value}, {"a": value, "b": value}, value if isinstance(value, dict) else {}):
        expected = reference_valid(schema, instance)
        assert verdict(validator, instance) == expected
        _, plain = scan_arguments(instance, LIMIT)
        if plain and compiled_verdict(validator, instance):
            assert expected  # the one thing the fast path is trusted with


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"type": "object", "properties": {"a": {"multipleOf": 0.1}}}, {"a": 0.3}),
        ({"type": "object", "properties": {"a": {"type": "number"}}}, {"a": math.nan}),
        ({"type": "object", "properties": {"a": {"type": "number", "maximum": 1}}}, {"a": -math.inf}),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, {"a": (1, 2)}),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": "\ud800"}),
        ({"type": "object", "properties": {"a": {"maximum": 2**60}}}, {"a": 2**60 + 1}),
        ({"type": "object", "properties": {"a": {"type": "integer", "maximum": 5}}}, {"a": 10**30}),
        ({"type": "object"}, {1: "non-string key"}),
        ({"$schema": "https://example.com/unknown-dialect", "type": "object"}, {"a": 1}),
    ],
)
def test_where_the_two_validators_differ_the_reference_decides(
    schema: dict[str, Any], instance: object
) -> None:
    validator = ArgumentValidator(schema)
    assert verdict(validator, instance) == reference_valid(schema, instance)


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": {"pattern": "x"}}},
        {"$defs": {"x": {"patternProperties": {"^a": {}}}}},
        {"items": [{"multipleOf": 3}]},
        {"anyOf": [{"$dynamicRef": "#x"}]},
        {"properties": {"a": {"maximum": 2**60}}},
    ],
)
def test_schemas_with_keywords_read_differently_are_left_to_the_reference(schema: dict[str, Any]) -> None:
    assert unsafe_reason(schema) is not None
    assert not ArgumentValidator(schema).compiled


def test_property_names_that_look_like_keywords_do_not_matter() -> None:
    schema = {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "multipleOf": {"type": "integer"}},
        "required": ["pattern"],
        "$defs": {"patternProperties": {"type": "string"}},
    }
    assert unsafe_reason(schema) is None
    assert ArgumentValidator(schema).compiled


def test_data_a_reference_could_point_into_is_read_as_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/default/x"}},
        "default": {"x": {"pattern": "^a"}},
    }
    assert unsafe_reason(schema) is not None


def test_scanning_arguments_measures_depth_and_plainness() -> None:
    assert scan_arguments({}, LIMIT) == (1, True)
    assert scan_arguments({"a": [1, {"b": None}]}, LIMIT) == (3, True)
    assert scan_arguments("x", LIMIT) == (0, True)
    assert scan_arguments({"a": (1,)}, LIMIT)[1] is False
    assert scan_arguments({"a": 2**60}, LIMIT)[1] is False
    assert scan_arguments({"a": math.inf}, LIMIT)[1] is False
    deep: object = 0
    for _ in range(10_000):
        deep = [deep]
    depth, _ = scan_arguments(deep, LIMIT)
    assert depth == LIMIT + 1
