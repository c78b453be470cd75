"""Reference pages read from the code: config keys, the command line, meta-tools, resources,
error reasons and the lifecycle diagrams.

These read a few private names of the package (the config models, the CLI's parser, the
gateway's tables); the site documents what they hold, and the build breaks when they move.
"""

from __future__ import annotations

import argparse
import json
import os
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from docs_gen.config_keys import MEANINGS

__all__ = (
    "cli_reference",
    "config_keys",
    "config_reference",
    "error_reference",
    "lifecycle_diagram",
    "meta_tool_reference",
    "resource_reference",
)

GENERATED = "<!-- docs: generated -->"

# -- config --------------------------------------------------------------------------------------


def _type(annotation: Any) -> str:
    """The JSON type a config value takes, in words."""
    if annotation is type(None):
        return "`null`"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return ", ".join(f'`"{value}"`' for value in args)
    if isinstance(annotation, types.UnionType) or origin is typing.Union:
        return " or ".join(_type(arg) for arg in args)
    if origin is tuple:
        return f"list of {_type(args[0]).removesuffix('s') or 'value'}s"
    if origin is dict:
        if any(True for _ in _models_in(args[1])):
            return "object: name → server entry"
        return f"object: name → {_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", SecretStr: "string"}
    if annotation in names:
        return names[annotation]
    raise TypeError(f"no words for the config type {annotation!r}")


def _bounds(field: FieldInfo) -> str:
    words = []
    for item in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥")):
            value = getattr(item, attr, None)
            if value is not None:
                words.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
        if getattr(item, "pattern", None):
            words.append(f"matching `{item.pattern}`")
    return ", ".join(words)


def shown_default(value: Any) -> str:
    """A default as it is written in a config file."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def config_keys() -> dict[str, list[tuple[str, FieldInfo]]]:
    """Every key a config file may hold, by table (``top``, ``stdio``, ``http``, ``residency``),
    the residency section's nested sections flattened to dotted keys."""
    from residency._gateway._config import GatewayConfig, HTTPServer, ResidencySettings, StdioServer

    def flat(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
        for name, field in model.model_fields.items():
            yield prefix + name, field
            for inner in _models_in(field.annotation):
                yield from flat(inner, f"{prefix}{name}.")

    top = [
        (field.alias or name, field)
        for name, field in GatewayConfig.model_fields.items()
        if name != "source"  # set by the loader to name the file in errors; not a key of the file
    ]
    return {
        "top": top,
        "stdio": list(StdioServer.model_fields.items()),
        "http": list(flat(HTTPServer)),
        "residency": [(key, field) for key, field in flat(ResidencySettings) if key != "budget"],
    }


def config_table(table: str) -> str:
    meanings = MEANINGS[table]
    keys = config_keys()[table]
    unknown = set(meanings) - {key for key, _ in keys}
    if unknown:
        raise KeyError(f"docs_gen.config_keys names keys the config does not hold: {sorted(unknown)}")
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, field in keys:
        if key not in meanings:
            raise KeyError(f"the config key {table}:{key} has no meaning in docs_gen/config_keys.py")
        kind = _type(field.annotation)
        bounds = _bounds(field)
        if bounds:
            kind = f"{kind} ({bounds})"
        if field.is_required():
            default = f"required in `{key.rsplit('.', 1)[0]}`" if "." in key else "required"
        elif isinstance(field.default, BaseModel):
            default = "the defaults of its keys"
        else:
            default = shown_default(field.default)
        rows.append(f"| `{key}` | {kind} | {default} | {meanings[key]} |")
    return "\n".join(rows)


def config_reference(table: str) -> str:
    return config_table(table)


# -- command line --------------------------------------------------------------------------------


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each sub-command of ``parser`` (configured: the CLI adds a command's options when named)."""
    from residency._cli import LazyCommands

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if isinstance(action, LazyCommands):
                    configure = action._pending.pop(name, None)
                    if configure is not None:
                        configure(sub)
                yield name, sub


def cli_reference() -> str:
    """Every command's ``--help``, as the command prints it (80 columns)."""
    from residency._cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        parser = build_parser()
        parts = [_section("residency", parser, level=2)]

        def walk(parser: argparse.ArgumentParser, path: str, level: int) -> None:
            for name, sub in _commands(parser):
                parts.append(_section(f"{path} {name}", sub, level))
                walk(sub, f"{path} {name}", min(level + 1, 4))

        walk(parser, "residency", 2)
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n\n".join(parts)


def _section(title: str, parser: argparse.ArgumentParser, level: int) -> str:
    return f"{'#' * level} `{title}`\n\n{GENERATED}\n```text\n{_help(parser)}\n```"


# -- meta-tools and resources --------------------------------------------------------------------


def meta_tool_reference() -> str:
    """Each meta-tool's definition as a session by reference is shown it."""
    from residency._gateway._meta_tools import META_TOOLS, meta_tool_definitions

    parts = []
    for definition in meta_tool_definitions(META_TOOLS):
        name = definition["name"]
        parts.append(
            f"### `{name}`\n\n{definition.get('description', '')}\n\n"
            f"{GENERATED}\n```json\n{json.dumps(definition, indent=2, ensure_ascii=False)}\n```"
        )
    return "\n\n".join(parts)


def resource_reference() -> str:
    from residency._gateway._resources import resource_templates, resources

    rows = ["| URI | name | type | what it holds |", "|---|---|---|---|"]
    for resource in resources():
        rows.append(
            f"| `{resource.uri}` | {resource.name} | `{resource.mime_type}` | {resource.description} |"
        )
    for template in resource_templates():
        rows.append(
            f"| `{template.uri_template}` | {template.name} | `{template.mime_type}` | "
            f"{template.description} |"
        )
    return "\n".join(rows)


# -- errors --------------------------------------------------------------------------------------


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def error_tree() -> str:
    """The tree drawn in the errors module's docstring."""
    import residency._errors as errors

    doc = errors.__doc__ or ""
    start = doc.index("    ResidencyError")
    lines = [line[4:] for line in doc[start:].rstrip().splitlines()]
    return f"{GENERATED}\n```text\n" + "\n".join(lines) + "\n```"


def error_reference() -> str:
    """The gateway's table of errors: reason, delivery, JSON-RPC code, and when each is raised."""
    from residency._gateway._errors import RULES

    rows = [
        "| reason | error | reaches the client as | JSON-RPC code | when |",
        "|---|---|---|---:|---|",
    ]
    for rule in RULES:
        how = "an `isError` tool result" if rule.as_result else "a JSON-RPC error"
        rows.append(
            f"| `{rule.reason}` | `{rule.error.__name__}` | {how} | {rule.code} | "
            f"{_first_paragraph(rule.error.__doc__)} |"
        )
    return "\n".join(rows)


# -- lifecycles ----------------------------------------------------------------------------------


def lifecycle_diagram(kind: str) -> str:
    from residency import SPAN_LIFECYCLE, TOOL_LIFECYCLE

    lifecycle = TOOL_LIFECYCLE if kind == "tool" else SPAN_LIFECYCLE
    if kind not in ("tool", "span"):
        raise KeyError(f"no lifecycle named {kind!r} (tool, span)")
    return f"{GENERATED}\n```mermaid\n{lifecycle.mermaid()}\n```"
