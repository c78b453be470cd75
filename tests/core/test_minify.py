"""minify_tool: levels, prose rules, provider validity and bad input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from residency import InvalidInput, MinifyReport, SchemaError, minify_tool, minify_tool_with_report
from residency._core._minify import LEVELS
from residency._core._minify_constraints import constraints_lost
from residency._core._minify_text import opening, parameter_note, sentences
from tests._tiers import examples

KEYWORD_NAMED = {
    "name": "keyword_named",
    "description": "Create a page.\n\nLonger explanation that only the full text keeps.",
    "inputSchema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "KeywordNamedArguments",
        "type": "object",
        "properties": {
            "title": {"type": "string", "title": "Title", "maxLength": 80, "description": "The title"},
            "description": {"type": "string", "minLength": 1, "examples": ["x"]},
            "default": {"type": "integer", "default": None, "minimum": 0},
            "examples": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 3},
            "page": {"type": "integer", "description": "Page number, 1-indexed.", "default": 1},
        },
        "required": ["title", "description"],
        "additionalProperties": False,
        "$comment": "generated",
    },
}


@pytest.mark.parametrize("level", LEVELS)
def test_properties_named_like_keywords_survive_every_level(level: str) -> None:
    schema = minify_tool(KEYWORD_NAMED, level)["inputSchema"]  # type: ignore[arg-type]
    assert list(schema["properties"]) == ["title", "description", "default", "examples", "page"]
    assert schema["properties"]["title"]["maxLength"] == 80
    assert schema["properties"]["examples"]["items"]["pattern"] == "^[a-z]+$"
    assert schema["required"] == ["title", "description"]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("level", LEVELS)
def test_decoration_goes_at_every_level(level: str) -> None:
    schema = minify_tool(KEYWORD_NAMED, level)["inputSchema"]  # type: ignore[arg-type]
    text = json.dumps(schema)
    assert "KeywordNamedArguments" not in text and "generated" not in text
    assert "title" not in schema["properties"]["title"]
    assert "examples" not in schema["properties"]["description"]
    assert "default" not in schema["properties"]["default"]  # a null default says nothing
    assert "$schema" not in schema


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_keeps_every_constraint(level: str) -> None:
    out = minify_tool(KEYWORD_NAMED, level)  # type: ignore[arg-type]
    assert not constraints_lost(KEYWORD_NAMED["inputSchema"], out["inputSchema"])  # type: ignore[arg-type]


def test_full_text_keeps_every_description_and_default() -> None:
    out = minify_tool(KEYWORD_NAMED, "full-text")
    assert out["description"] == KEYWORD_NAMED["description"]
    page = out["inputSchema"]["properties"]["page"]
    assert page == {"type": "integer", "description": "Page number, 1-indexed.", "default": 1}
    assert out["inputSchema"]["properties"]["title"]["description"] == "The title"


def test_compact_keeps_only_informative_parameter_descriptions() -> None:
    out = minify_tool(KEYWORD_NAMED, "compact")
    props = out["inputSchema"]["properties"]
    assert "description" not in props["title"]  # "The title" of "title": nothing new
    assert props["page"]["description"] == "Page number, 1-indexed."
    assert props["page"]["default"] == 1
    assert out["description"] == "Create a page."


def test_minimal_keeps_no_description_or_default_inside_the_schema() -> None:
    out = minify_tool(KEYWORD_NAMED, "minimal")
    assert out["inputSchema"]["properties"]["page"] == {"type": "integer"}
    assert out["description"] == "Create a page."


def test_other_tool_keys_pass_through_in_order() -> None:
    tool = {
        "name": "t",
        "title": "T",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    out = minify_tool(tool)
    assert list(out) == ["name", "title", "inputSchema", "annotations"]
    assert out["annotations"] == {"readOnlyHint": True}


def test_enum_const_and_unknown_keywords_are_copied_verbatim() -> None:
    values = [{"title": "kept", "description": "kept"}, None]
    tool = {
        "name": "t",
        "inputSchema": {
            "type": "object",
            "properties": {
                "a": {"enum": values, "x-vendor": {"title": "kept"}},
                "b": {"const": {"title": 1}},
            },
        },
    }
    out = minify_tool(tool, "minimal")["inputSchema"]["properties"]
    assert out["a"] == {"enum": values, "x-vendor": {"title": "kept"}}
    assert out["b"] == {"const": {"title": 1}}


def test_the_input_is_not_changed() -> None:
    before = copy.deepcopy(KEYWORD_NAMED)
    for level in LEVELS:
        minify_tool(KEYWORD_NAMED, level)
    assert before == KEYWORD_NAMED


def test_report_names_what_was_removed() -> None:
    out, report = minify_tool_with_report(KEYWORD_NAMED, "minimal")
    assert isinstance(report, MinifyReport)
    changes = dict(report.changes)
    assert report.tool == "keyword_named" and report.level == "minimal"
    assert changes["title"] == 2 and changes["examples"] == 1 and changes["$comment"] == 1
    assert changes["default null"] == 1 and changes["default"] == 1 and changes["$schema"] == 1
    assert "title x2" in report.summary()
    assert out["inputSchema"]["type"] == "object"


# --- provider validity -------------------------------------------------------------------------


def test_an_array_without_items_gets_items() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"type": ["array", "null"]}}}}
    assert minify_tool(tool)["inputSchema"]["properties"]["a"]["items"] == {}


def test_a_root_without_type_gets_type_object() -> None:
    out = minify_tool({"name": "t", "inputSchema": {"properties": {"a": {"type": "string"}}}})
    assert out["inputSchema"]["type"] == "object"
    assert minify_tool({"name": "t"})["inputSchema"] == {"type": "object"}


def test_a_non_object_root_is_a_schema_error() -> None:
    with pytest.raises(SchemaError) as info:
        minify_tool({"name": "t", "inputSchema": {"type": "string"}})
    assert info.value.where == "/inputSchema"


# --- bad input ---------------------------------------------------------------------------------


def test_an_unresolvable_ref_names_tool_and_json_path() -> None:
    tool = {
        "name": "t",
        "inputSchema": {"type": "object", "properties": {"a/b": {"$ref": "#/$defs/missing"}}},
    }
    with pytest.raises(SchemaError) as info:
        minify_tool_with_report(tool, where="/tools/4")
    assert info.value.where == "/tools/4/inputSchema/properties/a~1b/$ref"
    assert "'t'" in str(info.value)


def test_a_remote_ref_cannot_be_resolved() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"$ref": "https://x/s.json"}}}}
    with pytest.raises(SchemaError):
        minify_tool(tool)


@pytest.mark.parametrize(
    "tool",
    [{"inputSchema": {"type": "object"}}, {"name": ""}, {"name": 3}, "not a tool"],
    ids=["no name", "empty name", "number name", "not an object"],
)
def test_a_tool_without_a_name_is_invalid_input(tool: Any) -> None:
    with pytest.raises(InvalidInput):
        minify_tool(tool)


def test_a_non_object_input_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError) as info:
        minify_tool({"name": "t", "inputSchema": ["type", "object"]})
    assert info.value.where == "/inputSchema"


def test_a_non_schema_subschema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError) as info:
        minify_tool({"name": "t", "inputSchema": {"type": "object", "properties": {"a": 3}}})
    assert info.value.where == "/inputSchema/properties/a"


def test_an_unknown_level_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        minify_tool({"name": "t"}, "tiny")  # type: ignore[arg-type]


# --- prose -------------------------------------------------------------------------------------


def test_sentences_do_not_end_at_abbreviations_versions_or_file_names() -> None:
    text = "Use a key, e.g. PROJ-1 or i.e. KEY. Needs v1.2 and file.txt to run! Done"
    assert sentences(text) == [
        "Use a key, e.g. PROJ-1 or i.e. KEY.",
        "Needs v1.2 and file.txt to run!",
        "Done",
    ]


def test_a_blank_line_or_a_list_item_ends_a_sentence() -> None:
    assert sentences("First part\n\nSecond part\n- item one\n- item two") == [
        "First part",
        "Second part",
        "- item one",
        "- item two",
    ]


def test_the_opening_is_the_first_sentence_of_the_first_paragraph() -> None:
    assert (
        opening("\n    Stop an active search.\n\n    It stops the background job.")
        == "Stop an active search."
    )
    assert (
        opening("# Heading\n\nTiny one. A second sentence here. Third.")
        == "Tiny one. A second sentence here."
    )
    assert opening("Get issue details, e.g. status. More.") == "Get issue details, e.g. status."


@pytest.mark.parametrize(
    ("name", "text", "kept"),
    [
        ("owner", "The repository owner", None),
        ("issue_number", "The issue number to update", None),
        ("timeout", "Timeout in milliseconds. Longer text.", "Timeout in milliseconds."),
        ("line", "Line to start from. It is 1-indexed.", "It is 1-indexed."),
        ("path", "Path to the file. Must be absolute.", "Must be absolute."),
        ("limit", "How many results (default 10).", "How many results (default 10)."),
        ("date", "The day, format YYYY-MM-DD.", "The day, format YYYY-MM-DD."),
    ],
)
def test_parameter_descriptions_stay_only_for_what_name_and_type_do_not_say(
    name: str, text: str, kept: str | None
) -> None:
    assert parameter_note(text, name) == kept


# --- property: any level, any schema of a small grammar, same verdicts -------------------------

_leaf = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("string")}, optional={"minLength": st.integers(0, 3), "title": st.text()}
    ),
    st.fixed_dictionaries(
        {"type": st.just("integer")}, optional={"minimum": st.integers(-2, 2), "default": st.none()}
    ),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(["a", "b", 1, None]), min_size=1, unique=True)}),
    st.builds(lambda s: {"anyOf": [s, {"type": "null"}]}, st.fixed_dictionaries({"type": st.just("string")})),
)
_schemas = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(
            lambda props, req, extra: {
                "type": "object",
                "properties": props,
                "required": sorted(set(req) & set(props)),
                "additionalProperties": extra,
                "description": "Some words here. More words, e.g. this.",
            },
            st.dictionaries(st.sampled_from(["title", "a", "default", "description"]), inner, max_size=3),
            st.lists(st.sampled_from(["title", "a", "default"])),
            st.sampled_from([True, False, {}]),
        ),
        st.builds(lambda item: {"type": "array", "items": item, "minItems": 0}, inner),
    ),
    max_leaves=6,
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "a", "abcd"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["title", "a", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas, st.lists(_json, min_size=1, max_size=6), st.sampled_from(LEVELS))
def test_minified_schemas_judge_every_instance_as_the_original(
    prop: dict[str, Any], instances: list[object], level: str
) -> None:
    schema = {"type": "object", "properties": {"p": prop}}
    out = minify_tool({"name": "t", "inputSchema": schema}, level)["inputSchema"]  # type: ignore[arg-type]
    original, minified = Draft202012Validator(schema), Draft202012Validator(out)
    for value in instances:
        instance = {"p": value}
        assert original.is_valid(instance) == minified.is_valid(instance), (schema, out, instance)
    assert not constraints_lost(schema, out)
