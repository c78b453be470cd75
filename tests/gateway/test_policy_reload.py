"""``residency serve`` reloads its tool policy on SIGHUP, and refuses a file that does not load.

The process is the subject: a real ``residency serve`` over stdio with the desk as a stdio
upstream, spoken to in raw JSON lines (``test_serve_cli.served``), its config file rewritten
between signals.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._timing import SERVING, STEP
from tests.gateway.test_serve_cli import Served, _desk_upstream_config, served

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def with_policy(path: Path, rules: list[dict[str, Any]]) -> None:
    config = json.loads(path.read_text())
    config["residency"]["policy"] = {"rules": rules}
    config["residency"]["budget"] = {"schema_tokens": 100_000}  # every allowed tool listed
    path.write_text(json.dumps(config))


async def names(gateway: Served) -> set[str]:
    listed = await gateway.request("tools/list")
    return {t["name"] for t in listed["result"]["tools"]}


async def logged(gateway: Served, text: bytes, after: int) -> None:
    with anyio.fail_after(STEP):
        while text not in gateway.stderr[after:]:
            await anyio.sleep(0.05)


async def test_sighup_applies_a_new_policy_and_refuses_a_bad_one(tmp_path: Path) -> None:
    path = _desk_upstream_config(tmp_path)
    with_policy(path, [{"allow": ["desk/*"]}])
    async with served("--config", str(path), "--delivery", "list") as gateway:
        with anyio.fail_after(SERVING + STEP):
            assert "page_oncall" in await gateway.handshake()
        with_policy(path, [{"allow": ["desk/*"], "deny": ["desk/page_oncall"]}])
        mark = len(gateway.stderr)
        gateway.process.send_signal(signal.SIGHUP)
        await logged(gateway, b"1 rules in force", mark)
        now = await names(gateway)
        assert "page_oncall" not in now and "get_incident" in now
        path.write_text(path.read_text().replace('"desk/page_oncall"', '"page_oncall"'))
        mark = len(gateway.stderr)
        gateway.process.send_signal(signal.SIGHUP)
        await logged(gateway, b"policy reload refused, the policy in force keeps serving", mark)
        assert b"server/tool" in gateway.stderr[mark:]
        now = await names(gateway)
        assert "page_oncall" not in now and "get_incident" in now
        assert gateway.process.returncode is None
