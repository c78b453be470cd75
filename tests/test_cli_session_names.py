"""``inspect``, ``view`` and ``admin`` name a session the same way, in a store a real gateway wrote.

What ``inspect`` lists (``gateway/newbie``) and the key the gateway was served with
(``--session newbie``) both work in every command; an unknown or ambiguous name is exit 2 with
the near or matching ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from residency import Session, SQLiteStore
from residency._cli import main
from residency._cli._session_names import find_session, session_key_of
from residency._errors import NotFound
from residency._gateway import Gateway, IncidentDesk
from residency._gateway._connection import token_identity
from tests._timing import START
from tests.gateway.conftest import config
from tests.incident_tools import incident_tools

KEY = "newbie"


async def _serve(path: Path) -> None:
    """A gateway served with ``--session newbie`` journals one client's calls to ``path``."""
    store = SQLiteStore(path)
    try:
        with anyio.fail_after(START):
            gateway = Gateway(
                config({"delivery": "list"}),
                upstreams={"desk": IncidentDesk().server},
                store=store,
                default_session=KEY,
            )
            async with gateway, Client(gateway.server, mode="legacy") as client:
                await client.list_tools()
                result = await client.call_tool("get_incident", {"incident_id": "INC-7"})
                assert not result.is_error
    finally:
        store.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("names") / "gateway.db"
    anyio.run(_serve, path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_lists_the_gateway_session_with_its_key(
    served: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "inspect", str(served), "--json")
    assert code == 0 and json.loads(out) == {"sessions": [f"gateway/{KEY}"]}
    code, out, _ = _run(capsys, "inspect", str(served))
    assert code == 0 and out.split() == [f"gateway/{KEY}", "(key", f"{KEY})"]


@pytest.mark.parametrize("name", [KEY, f"gateway/{KEY}"])
def test_every_reader_accepts_the_listed_id_and_the_served_key(
    served: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "inspect", str(served), "--session", name, "--json")
    assert (code, err) == (0, "")
    assert "get_incident" in json.loads(out)["tools"]
    code, out, err = _run(capsys, "view", "--store", str(served), "--session", name, "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["session"] == f"gateway/{KEY}"
    code, out, err = _run(capsys, "admin", str(served), "revoke", "--session", name)
    assert (code, err) == (0, "")
    assert out.strip() == "(nothing to revoke)"


@pytest.mark.parametrize("command", ["inspect", "view", "admin"])
def test_an_unknown_name_is_exit_2_with_the_nearest_ids(
    served: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "inspect": ["inspect", str(served), "--session", "newbee"],
        "view": ["view", "--store", str(served), "--session", "newbee"],
        "admin": ["admin", str(served), "readmit", "get_incident", "--session", "newbee"],
    }[command]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert f"did you mean gateway/{KEY}?" in err
    assert err.startswith(f"residency {command}: no session 'newbee'")


def _add(path: Path, session_id: str) -> None:
    store = SQLiteStore(path)
    try:
        Session(store, session_id=session_id).register_tools(incident_tools())
    finally:
        store.close()


def test_a_key_named_under_two_tokens_is_ambiguous_until_an_id_is_given(
    served: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.db"
    path.write_bytes(served.read_bytes())
    ids = [f"gateway/{token_identity(t)}/shared" for t in ("a" * 32, "b" * 32)]
    for sid in ids:
        _add(path, sid)
    code, out, err = _run(capsys, "inspect", str(path), "--session", "shared")
    assert code == 2 and out == ""
    assert "ambiguous" in err and all(sid in err for sid in ids)
    for sid in ids:  # the id inspect lists, and the key under its token identity
        assert _run(capsys, "inspect", str(path), "--session", sid, "--json")[0] == 0
        assert _run(capsys, "inspect", str(path), "--session", sid.removeprefix("gateway/"))[0] == 0


def test_a_key_under_one_token_is_found_by_the_key_alone() -> None:
    sid = f"gateway/{token_identity('t' * 32)}/mine"
    known = ["desk", f"gateway/{KEY}", sid]
    assert session_key_of(sid) == "mine" and session_key_of("desk") is None
    assert find_session(known, "mine", where="s.db") == sid
    assert find_session(known, "desk", where="s.db") == "desk"
    with pytest.raises(NotFound):
        find_session(known, "nobody-at-all", where="s.db")
