"""Process cleanup for the tests: killed, reaped and closed even when the test is cancelled.

A test that times out is cancelled where it stands; a cleanup that awaits a process's exit in
that cancelled scope gives up at once, leaves the process running and its pipes open, and the
``ResourceWarning`` then fails whatever test comes next. So every cleanup here runs in a
shielded scope, kills before it waits, and bounds each wait by :data:`tests._timing.CLEANUP`.
"""

from __future__ import annotations

from contextlib import suppress

import anyio
import anyio.abc

from tests._timing import CLEANUP

__all__ = ["reap"]


async def reap(process: anyio.abc.Process) -> None:
    """SIGKILL ``process`` if it still runs, wait for it and close its pipes, shielded.

    The wait is bounded by ``CLEANUP`` seconds.
    """
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            with suppress(ProcessLookupError):
                process.kill()
        with anyio.move_on_after(CLEANUP):
            await process.aclose()
