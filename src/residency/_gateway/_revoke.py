"""The revocation hook: a command run once per credential reference of an archived chain.

The operator configures it as ``residency.revoke_command``, a program and its arguments, e.g.
``["vault-revoke", "--reason", "abandoned chain", "{ref}"]``. For each credential reference
of a chain an agent archives, every ``{ref}`` in an argument is replaced by the reference; when
no argument holds ``{ref}``, the reference is appended as the last argument. No shell runs, so
a reference is always one argument, and it cannot be read as an option: a reference starts
with a letter or a digit (``residency._core._chains``).

How a run goes:

* stdin is closed; stdout and stderr go together to a temporary file, never to the gateway's
  own streams (over stdio the gateway's stdout is the MCP stream, and one stray line from the
  hook would break the client's connection);
* exit status 0 means revoked. Any other status, a program that cannot start, or a run past the
  timeout is a failed revocation. At the timeout the hook's whole process group is killed, so
  nothing it started lingers;
* on failure the gateway logs the reference, the status and the last lines of the output, with
  the configuration's secrets scrubbed from them. Success logs one line without the output.

The gateway runs the hook after the ``archive_chain`` meta-tool has journaled the chain, once
per reference of that chain never tried before, in a worker thread (``revoke_off_loop``), so a
slow hook never stalls the gateway's other clients; each outcome is journaled
(``Session.record_revocation``). The agent's answer waits for the runs; ``revoke_timeout``
bounds each. A reference already running (the same chain archived twice at once) is not run
again. Replaying or reopening the session (a gateway restart, ``residency inspect``) reads the
outcomes and never runs the hook again; a session that adopts the chain from the archive scope
does not run it either (the session that archived the chain did). ``residency admin STORE
revoke --retry`` runs it again for the references whose last attempt failed (there the hook is
the ``revoke`` callback of the ``Session`` it opens).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import IO

import anyio.to_thread

from residency._runtime import Session

__all__ = ["OUTPUT_TAIL_BYTES", "REF_PLACEHOLDER", "command_revoker", "hook_argv", "revoke_off_loop"]

logger = logging.getLogger("residency.gateway")

REF_PLACEHOLDER = "{ref}"
"""Where the credential reference goes in the hook's arguments (appended when absent)."""

OUTPUT_TAIL_BYTES = 2000
"""How much of a failed run's output (its end) the gateway's log shows."""


def hook_argv(command: Sequence[str], reference: str) -> list[str]:
    """The argument vector one run of the hook gets for ``reference``.

    Args:
        command: the configured program and arguments.
        reference: a credential reference.

    Returns:
        ``command`` with ``{ref}`` replaced by ``reference`` in every argument, or with
        ``reference`` appended when no argument holds ``{ref}``.
    """
    if any(REF_PLACEHOLDER in arg for arg in command):
        return [arg.replace(REF_PLACEHOLDER, reference) for arg in command]
    return [*command, reference]


def command_revoker(
    command: Sequence[str], timeout: float, *, redact: Callable[[str], str] | None = None
) -> Callable[[str], bool]:
    """The revocation hook as the callback a ``Session`` takes (``revoke``).

    Args:
        command: the program and its arguments (see ``hook_argv`` for where the reference goes).
        timeout: seconds one run may take; past it the run's process group is killed and the
            revocation counts as failed.
        redact: scrubs secrets from the output before it is logged; None: the output of a
            failed run is not logged at all (it may quote a credential).

    Returns:
        A callable taking a credential reference and returning True when the hook exited 0.
    """
    argv = tuple(command)

    def revoke(reference: str) -> bool:
        status, output = _run(hook_argv(argv, reference), timeout)
        if status == 0:
            logger.info("revocation hook: %s revoked", reference)
            return True
        shown = redact(output).strip() if redact is not None and output else ""
        logger.warning(
            "revocation hook: %s not revoked (%s)%s", reference, status, f"; output: {shown}" if shown else ""
        )
        return False

    return revoke


async def revoke_off_loop(
    session: Session, revoker: Callable[[str], bool], references: Iterable[str], running: set[str]
) -> None:
    """Run the hook in a worker thread for each reference the session never tried; journal each.

    Args:
        session: the session that archived the chain (touched on the event loop only).
        revoker: the hook (``command_revoker``).
        references: the archived chain's credential references.
        running: references whose run is in progress in this gateway; shared by its sessions.
    """
    for reference in references:
        if reference in session.revocations() or reference in running:
            continue
        running.add(reference)
        try:
            try:
                revoked = await anyio.to_thread.run_sync(revoker, reference) is True
                error = "" if revoked else "revocation hook failed"
            except Exception as exc:  # the hook's own failure; its message may hold a secret
                revoked, error = False, type(exc).__name__
            session.record_revocation(reference, revoked, error)
        finally:
            running.discard(reference)


def _run(argv: list[str], timeout: float) -> tuple[int | str, str]:
    """Run ``argv`` once: (exit status, or why it has none; the end of its output)."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed whole at the timeout
            )
        except OSError as exc:
            return f"cannot start {argv[0]!r}: {exc.strerror or type(exc).__name__}", ""
        try:
            status: int | str = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            status = f"no exit within {timeout:g} s; killed"
        if isinstance(status, int) and status != 0:
            status = f"exit status {status}"
        return status, _tail(out)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone, or not allowed: the child itself at least
        proc.kill()
    proc.wait()


def _tail(out: IO[bytes]) -> str:
    out.seek(0, os.SEEK_END)
    size = out.tell()
    out.seek(max(0, size - OUTPUT_TAIL_BYTES))
    return out.read().decode("utf-8", errors="replace")
