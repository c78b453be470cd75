"""What the provider adapters share: the catalog walk, the name rule and the re-expand tool.

Pure: nothing here changes the session. The catalog is read in registration order, which a
session keeps across re-registration and journal replay, so a request built from an unchanged
catalog is the same bytes on every turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from residency._core._tools import JSONObject
from residency._errors import InvalidInput, NotFound
from residency._runtime import Session

__all__ = [
    "MAX_NAMES",
    "REEXPAND_DESCRIPTION",
    "REEXPAND_TOOL",
    "CatalogTool",
    "catalog",
    "check_name",
    "known_names",
    "reexpand_names",
    "reexpand_schema",
]

REEXPAND_TOOL = "reexpand_tools"
"""The default name of the re-expand tool, the name ``Session`` tombstones tell the model to call."""

MAX_NAMES = 20
"""The most tool names one re-expand call takes."""

REEXPAND_DESCRIPTION = (
    "Bring withheld tools back and make them callable by name. Call it with the names of "
    "tools whose schemas were withheld or whose calls were refused with a tombstone, then "
    "call them."
)

# Both providers document this rule for function names (letters, digits, underscore, hyphen;
# at most 64); a name outside it fails the whole request, so it is refused here, up front.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """One registered tool as every provider needs it: name, description, input schema."""

    name: str
    description: str | None
    input_schema: JSONObject


def check_name(name: str, where: str) -> None:
    """Refuse a tool name no provider accepts.

    Raises:
        InvalidInput: the name is not 1 to 64 letters, digits, ``_`` or ``-``.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidInput(
            f"{where}: tool name {name!r} is not accepted by the provider "
            "(1 to 64 letters, digits, '_' or '-'); rename or namespace it before registering",
            where=where,
        )


def catalog(session: Session, *, reserved: Iterable[str] = ()) -> list[CatalogTool]:
    """Every registered tool, in registration order, as the session shows it (minified).

    Every state is listed (resident, tombstoned, evicted, archived): what the model may call is
    decided elsewhere, so that this list depends on the catalog alone.

    Raises:
        InvalidInput: a tool name a provider refuses, a name taken by an adapter tool, or an
            input schema whose root is not ``type: object``.
    """
    taken = frozenset(reserved)
    out: list[CatalogTool] = []
    for name in session.tools():
        where = f"tools.{name}"
        check_name(name, where)
        if name in taken:
            raise InvalidInput(
                f"{where}: the name {name!r} is taken by a tool the adapter adds; "
                "choose another name for the adapter's tool",
                where=where,
            )
        shown = session.tool(name).shown
        schema = shown.get("inputSchema")
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            raise InvalidInput(
                f"{where}: the input schema's root must be 'type: object' for a provider to accept it",
                where=f"{where}.inputSchema",
            )
        description = shown.get("description")
        # A private copy: a host that edits the request must not reach the session's schemas.
        copy: JSONObject = json.loads(json.dumps(schema))
        out.append(CatalogTool(name, description if isinstance(description, str) else None, copy))
    return out


def known_names(session: Session, names: Iterable[str], where: str) -> list[str]:
    """``names`` without repeats, in order, each a registered tool.

    Raises:
        NotFound: a name the session does not know.
    """
    known = frozenset(session.tools())
    out = list(dict.fromkeys(names))
    for name in out:
        if name not in known:
            raise NotFound(f"{where}: unknown tool {name!r}")
    return out


def reexpand_schema() -> JSONObject:
    """The re-expand tool's input schema (a fresh copy each call)."""
    return {
        "type": "object",
        "properties": {
            "names": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 1,
                "maxItems": MAX_NAMES,
            }
        },
        "required": ["names"],
        "additionalProperties": False,
    }


def reexpand_names(arguments: object) -> list[str]:
    """The tool names a re-expand call asks for, without repeats, in order.

    Args:
        arguments: the call's input as the model sent it (a JSON object).

    Returns:
        The names; pass each to ``Session.reexpand`` before answering the call.

    Raises:
        InvalidInput: not an object with ``names``, a list of 1 to 20 non-empty strings
            (``where`` is ``names``).
    """
    names = arguments.get("names") if isinstance(arguments, Mapping) else None
    if (
        not isinstance(names, list)
        or not 1 <= len(names) <= MAX_NAMES
        or not all(isinstance(n, str) and n for n in names)
    ):
        raise InvalidInput(f"names: expected a list of 1 to {MAX_NAMES} tool names", where="names")
    return list(dict.fromkeys(names))
