"""The public tool-search query set (``benchmarks.bench._public``): its labels, its size, its tools."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks.bench._public import PublicSet, load_public_set, public_catalog_path
from benchmarks.bench.search import Query, corpus_catalog, label_names, load_queries
from residency._gateway import Catalog


@pytest.fixture(scope="module")
def public() -> PublicSet:
    return load_public_set()


@pytest.fixture(scope="module")
def catalog(public: PublicSet) -> Catalog:
    return corpus_catalog(public.servers)


@pytest.fixture(scope="module")
def queries(public: PublicSet) -> list[Query]:
    return load_queries(public.queries)


def test_every_label_names_a_tool_of_the_public_catalog(catalog: Catalog, queries: list[Query]) -> None:
    names = label_names(catalog)
    unknown = [(q.text, label) for q in queries for label in q.relevant if label not in names]
    assert not unknown
    assert all(names[label] in catalog for q in queries for label in q.relevant)
    assert all(q.relevant for q in queries)


def test_the_public_set_has_at_least_150_queries_over_at_least_500_tools(
    public: PublicSet, catalog: Catalog, queries: list[Query]
) -> None:
    assert len(queries) >= 150
    assert len(catalog) == sum(len(tools) for tools in public.servers.values()) >= 500


def test_every_public_tool_has_a_name_and_an_object_input_schema(public: PublicSet) -> None:
    for server, tools in public.servers.items():
        assert tools, server
        for tool in tools:
            assert isinstance(tool.get("name"), str) and tool["name"], (server, tool)
            schema = tool.get("inputSchema")
            assert isinstance(schema, dict) and schema.get("type") == "object", (server, tool["name"])
            assert isinstance(schema.get("properties", {}), dict), (server, tool["name"])
        assert len({t["name"] for t in tools}) == len(tools), f"{server} lists a name twice"


def test_no_query_of_the_public_set_is_listed_twice(queries: list[Query]) -> None:
    repeated = [text for text, n in Counter(q.text for q in queries).items() if n > 1]
    assert not repeated


def test_the_public_files_record_their_source_and_license(public: PublicSet) -> None:
    catalog = json.loads(public_catalog_path().read_text(encoding="utf-8"))
    for data in (catalog, json.loads(public.queries.read_text(encoding="utf-8"))):
        assert "github:THUNLP-MT/StableToolBench@" in data["source"]
        assert data["license"].startswith("Apache-2.0")
    assert public.license.startswith("Apache-2.0")
