"""A private, throwaway PostgreSQL server, for tests that stop and restart PostgreSQL.

The server behind ``RESIDENCY_PG_URL`` is shared by every test, so a test that must restart
PostgreSQL gets a server of its own: ``initdb`` into a fresh temporary directory (trust auth,
superuser ``postgres``, fsync off), listening on 127.0.0.1 on a free port, its unix socket in
that directory. ``pg_ctl`` starts, stops (``-m fast``) and restarts it, always waiting (``-w``).
When the test ends, passed or failed, the server is stopped and the directory removed, under a
shielded, bounded cleanup.

PostgreSQL refuses to run as root: as root its programs run as the ``postgres`` user
(``runuser -u postgres --``), which owns the directory; otherwise they run as the current user.
Without ``initdb`` and ``pg_ctl`` (on ``PATH`` or in ``/usr/lib/postgresql/*/bin``), or without
a way to run them, the test skips with the reason; when ``CI`` is set it fails instead.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import NoReturn

import anyio
import pytest

from tests._timing import CLEANUP, START

__all__ = ["Cluster", "private_cluster"]

SERVER_USER = "postgres"
"""The OS user the server runs as when the tests run as root (PostgreSQL refuses root)."""


def _unavailable(reason: str) -> NoReturn:
    reason = f"a private PostgreSQL server cannot be run: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this is a failure, not a skip")
    pytest.skip(reason)


def _programs() -> tuple[str, str]:
    """``initdb`` and ``pg_ctl``, from ``PATH`` or the newest ``/usr/lib/postgresql/N/bin``."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for bin_dir in reversed(versions):
        if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file():
            return str(bin_dir / "initdb"), str(bin_dir / "pg_ctl")
    _unavailable("initdb and pg_ctl are not on PATH nor in /usr/lib/postgresql/*/bin (install PostgreSQL)")


def _run_as() -> tuple[list[str], pwd.struct_passwd | None]:
    """The argv prefix that runs a server program, and the user to hand the directory to."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    if runuser is None:
        _unavailable(f"running as root, PostgreSQL must run as {SERVER_USER!r}, and runuser is missing")
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        _unavailable(f"running as root, PostgreSQL must run as another user; {SERVER_USER!r} does not exist")
    return [runuser, "-u", SERVER_USER, "--"], user


def _free_port() -> int:
    """A loopback port nobody listens on, below the ephemeral range when possible.

    Below that range, no outgoing connection (of this test or another) is given the port as its
    local port while the server is stopped, so a restart finds it free again.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = [random.randrange(20000, low) for _ in range(50)] if low > 21000 else []
    for port in [*candidates, 0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError("no free port on 127.0.0.1")


class Cluster:
    """A running private PostgreSQL server (see the module docstring).

    Attributes:
        directory: the temporary directory: ``data`` (the cluster), ``server.log``, the socket.
        port: the TCP port on 127.0.0.1; it stays the same across restarts.
        url: a URL for its ``postgres`` database as superuser ``postgres`` (trust auth).
    """

    def __init__(self, directory: Path, pg_ctl: str, run_as: Sequence[str]) -> None:
        self.directory = directory
        self.port = 0
        self._pg_ctl = pg_ctl
        self._run_as = list(run_as)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    def log(self) -> str:
        """The server's log so far (for failure messages)."""
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def running(self) -> bool:
        """Whether a postmaster holds the data directory (its ``postmaster.pid`` exists)."""
        return (self.data / "postmaster.pid").exists()

    async def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        await self._pg_ctl_run("start", "-l", str(self.log_file))

    async def stop(self) -> None:
        """Stop the server (``-m fast``: its connections are closed) and wait until it is gone."""
        await self._pg_ctl_run("stop", "-m", "fast")

    async def restart(self) -> None:
        """Stop the server (``-m fast``) and start it again on the same port; wait for both."""
        await self._pg_ctl_run("restart", "-m", "fast", "-l", str(self.log_file))

    def configure(self, port: int) -> None:
        """Listen on 127.0.0.1:``port`` only, the socket in the directory, fsync off."""
        self.port = port
        (self.data / "residency_test.conf").write_text(
            f"listen_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{self.directory}'\n"
            "fsync = off\n"
            "synchronous_commit = off\n"
            "full_page_writes = off\n"
        )

    async def _pg_ctl_run(self, *args: str) -> None:
        wait = int(START)
        argv = [*self._run_as, self._pg_ctl, "-D", str(self.data), "-w", "-t", str(wait), *args]
        with anyio.fail_after(wait + CLEANUP):
            done = await anyio.run_process(argv, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {args[0]} failed (exit {done.returncode}): "
                f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}\n"
                f"server log:\n{self.log()[-4000:]}"
            )

    async def _discard(self) -> None:
        """Stop the server however it can be stopped, then remove the directory."""
        if self.running():
            with suppress(Exception):
                await self._pg_ctl_run("stop", "-m", "immediate")
        if self.running():  # pg_ctl could not stop it: end the postmaster itself
            with suppress(OSError, ValueError, IndexError):
                pid = int((self.data / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown: the postmaster ends its children
                with anyio.move_on_after(CLEANUP):
                    while _alive(pid):
                        await anyio.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@asynccontextmanager
async def private_cluster() -> AsyncIterator[Cluster]:
    """A fresh PostgreSQL server of the test's own, started; stopped and removed at the end.

    Skips the test (fails it when ``CI`` is set) if PostgreSQL's programs are missing or cannot
    be run.

    Raises:
        RuntimeError: the server was created but would not start (its log is in the message).
    """
    initdb, pg_ctl = _programs()
    run_as, user = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="residency-pg-"))
    cluster = Cluster(directory, pg_ctl, run_as)
    try:
        if user is not None:
            os.chown(directory, user.pw_uid, user.pw_gid)
        argv = [*run_as, initdb, "-D", str(cluster.data), "-A", "trust", "-U", "postgres"]
        argv += ["-E", "UTF8", "--locale=C", "--no-sync"]
        with anyio.fail_after(START):
            done = await anyio.run_process(argv, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            output = done.stderr.decode(errors="replace").strip()[-2000:]
            _unavailable(f"initdb failed (exit {done.returncode}): {output}")
        with (cluster.data / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude = 'residency_test.conf'\n")
        for attempt in range(3):  # a port taken between the probe and the start: another port
            cluster.configure(_free_port())
            try:
                await cluster.start()
                break
            except RuntimeError:
                if attempt == 2 or "already in use" not in cluster.log():
                    raise
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            await cluster._discard()
