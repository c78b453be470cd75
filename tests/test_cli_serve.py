"""``residency serve``'s own answers: a taken port, and the stderr of other libraries."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from residency._cli import main
from residency._cli._serve import configure_logging


@pytest.mark.usefixtures("restore_logging")
def test_a_taken_port_is_one_line_naming_the_address_and_port_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {}, "residency": {"ready_wait": 0, "search_wait": 0}}))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--config", str(config), "--transport", "http", "--port", str(port)])
    assert code == 1
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("residency serve: ")]
    assert f"127.0.0.1:{port}" in line and "already in use" in line and "--port 0" in line


@pytest.mark.usefixtures("restore_logging")
def test_bm25s_debug_lines_stay_off_stderr_even_at_log_level_debug(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import bm25s

    configure_logging("debug")
    # What importing bm25s does to its logger, here after serve configured logging (the search
    # index imports it when the first catalog is built).
    logging.getLogger("bm25s").setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="bm25s"):
        bm25s.BM25().index([["list", "open", "incidents"], ["update", "incident"]], show_progress=False)
        logging.getLogger("residency.gateway").debug("a line of our own")
    assert any(r.name == "bm25s" and r.levelno == logging.DEBUG for r in caplog.records)  # it did log
    err = capsys.readouterr().err
    assert "residency: DEBUG a line of our own" in err
    assert "Building index" not in err and "bm25s" not in err
