"""Starting the self-test's load processes and its watchdog.

A load process is ``_load.py`` run by path under this interpreter, exec'd by a shell
that first writes its own PID into the role's ``cgroup.procs`` files: the interpreter's
start-up already runs in the self-test's cgroup. Every load process is bounded in time
and dies with the self-test (``_load.py``); the watchdog removes the cgroups if the
self-test dies before it could (``watchdog.py``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .hosting import EXIT_NO_PERMISSION, CannotHost

LOAD_SCRIPT = str(Path(__file__).with_name("_load.py"))
READY_TIMEOUT_S = 30.0  # a cold interpreter in a slow (emulated) guest
# The shell joins every cgroup.procs file it is given, then execs the rest; 97 = a
# write failed (its message is on stderr).
JOIN_FAILED = 97
_JOIN_SH = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'


class LoadError(RuntimeError):
    """A load process or the watchdog did not start."""


@dataclass
class Process:
    """One process the self-test started (it ends only these, by PID)."""

    name: str
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL to the process and its own group (it leads one) while unreaped."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5.0)


def _wait_ready(p: Process, timeout: float = READY_TIMEOUT_S) -> None:
    out = p.popen.stdout
    assert out is not None
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadError(f"{p.name} not ready after {timeout:.0f} s")
            r, _, _ = select.select([out], [], [], min(left, 0.2))
            if r:
                chunk = os.read(out.fileno(), 256)
                if not chunk:
                    rc = p.popen.wait(5.0)
                    if rc == JOIN_FAILED:
                        raise CannotHost(
                            EXIT_NO_PERMISSION,
                            f"cannot move the {p.name} process into the self-test's cgroup "
                            "(see the shell's message above): in a container with a cgroup "
                            "namespace of its own, the kernel refuses to move a process to a "
                            "cgroup outside it (docs/troubleshooting.md)",
                        )
                    raise LoadError(f"{p.name} exited (status {rc}) before it was ready")
                buf += chunk
    except BaseException:
        p.kill()
        raise
    finally:
        out.close()


def spawn_load(
    name: str,
    procs_files: list[str],
    seconds: float,
    cpu: int | None,
    mode: list[str],
    nice: int | None = None,
) -> Process:
    """Start one load process in the cgroups of ``procs_files``; returns once it runs."""
    argv = ["/bin/sh", "-c", _JOIN_SH, "sh", *procs_files, "--", sys.executable, "-I"]
    argv += [LOAD_SCRIPT, "--seconds", f"{seconds:.1f}", "--parent", str(os.getpid())]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    if nice is not None:
        argv += ["--nice", str(nice)]
    popen = subprocess.Popen(
        argv + mode,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    p = Process(name, popen)
    _wait_ready(p)
    return p


def spawn_watchdog(dirs: list[str]) -> tuple[Process, int]:
    """Start the watchdog for ``dirs``; returns it and the pipe's write end, which only
    this process holds: closing it (or dying) makes the watchdog clean up."""
    r, w = os.pipe()
    os.set_inheritable(r, True)
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-m", "exporter.selftest.watchdog", "--fd", str(r), *dirs],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(r,),
        )
    finally:
        os.close(r)
    os.set_inheritable(w, False)
    p = Process("watchdog", popen)
    try:
        _wait_ready(p)
    except BaseException:
        os.close(w)
        raise
    return p, w
