"""Bounded workloads for lab containers.

Each worker is a separate process (``_worker.py`` run by path, standard library only)
that writes its own PID into the lab's ``cgroup.procs`` files before it does any work,
so all the CPU it burns is accounted to the lab cgroup. "Threads" are forked processes:
Python threads would share one GIL and never put more than one runnable task on the
run queue, which is exactly what the labs need to do.

Workers run in their own session (process group = the worker's PID), end by
themselves at their deadline even if this process dies, and are stopped only through
the handle that started them.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cgroups import LabCgroup, LabError

WORKER_SCRIPT = str(Path(__file__).with_name("_worker.py"))
MEMORY_WORKER_SCRIPT = str(Path(__file__).with_name("_memory_worker.py"))
READY_TIMEOUT = 30.0  # a cold start in the VM lane's TCG guest on a busy host takes >10 s


@dataclass
class Worker:
    """Handle on one started workload process (and, for ``busy``, its children)."""

    popen: subprocess.Popen[bytes]
    kind: str
    cgroup: str
    seconds: float
    children: list[int] = field(default_factory=list)
    result_path: str | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Exit status, or ``None`` if still running after ``timeout`` seconds."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def run_delay_ns(self) -> int:
        """The kernel's own run-queue wait of this worker's process, all threads: field
        2 of ``/proc/<pid>/task/*/schedstat`` (the accounting behind delay accounting),
        which the scheduler probe's waits are checked against."""
        total = 0
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        return total

    def remaining(self) -> float:
        """Seconds until the worker's own deadline."""
        return max(0.0, self.seconds - (time.monotonic() - self.started))

    def stop(self, timeout: float = 5.0) -> None:
        """Kill this worker and its children: SIGKILL to its own process group while the
        worker is still unreaped (so the group id cannot have been reused)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)

    def discard_result(self) -> None:
        """Delete the worker's result file (the lab calls this when it is removed)."""
        if self.result_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.result_path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.result_path + ".tmp")

    def result(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The JSON summary the worker wrote when it finished (``periodic``: tick
        lateness and stretch percentiles), or ``None`` if it has not (yet)."""
        if timeout:
            self.wait(timeout)
        if self.result_path is None:
            return None
        try:
            with open(self.result_path) as f:
                data: dict[str, Any] = json.load(f)
        except (OSError, ValueError):
            return None
        return data


_JOIN_SH = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'


def _spawn(
    lab: LabCgroup,
    seconds: float,
    mode_args: list[str],
    kind: str,
    script: str = WORKER_SCRIPT,
    ready_timeout: float = READY_TIMEOUT,
) -> Worker:
    if lab.removed:
        raise LabError(f"{lab.path} was removed")
    if not 0 < seconds <= 3600:
        raise ValueError("a lab worker runs between 0 and 3600 seconds")
    # The interpreter starts inside the lab's cgroup (below), so under its quota: a cold
    # start that takes 10 s of a whole CPU in the TCG guest takes 50 s under 200m.
    quota = lab.quota_cores()
    if quota is not None:
        ready_timeout /= min(1.0, max(quota, 0.05))
    os.makedirs(lab.results_dir(), mode=0o755, exist_ok=True)
    fd, result_path = tempfile.mkstemp(prefix=f"{kind}-", suffix=".json", dir=lab.results_dir())
    os.close(fd)
    os.unlink(result_path)
    # A shell joins the cgroups and execs the worker, so that the interpreter's own
    # start-up (tens of ms of CPU) runs in the lab cgroup, not in the harness's: there,
    # in the unpinned 32-cgroup test, it showed up as wait blamed on the root cgroup.
    # The worker joins again (harmless) and reports; exit 97 = the join failed.
    procs = lab.procs_files()
    argv = ["/bin/sh", "-c", _JOIN_SH, "sh", *procs, "--", sys.executable, "-I", script]
    for f in procs:
        argv += ["--procs", f]
    argv += ["--seconds", f"{seconds:.3f}", "--result", result_path, *mode_args]
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=None,
        start_new_session=True,
        close_fds=True,
    )
    worker = Worker(popen, kind, lab.path, seconds, result_path=result_path)
    lab.workers.append(worker)  # from here on lab.remove() stops it
    assert popen.stdout is not None
    line = b""
    deadline = time.monotonic() + ready_timeout
    try:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"{kind} worker for {lab.path} not ready in {ready_timeout:.0f}s")
            r, _, _ = select.select([popen.stdout], [], [], min(left, 0.2))
            if r:
                chunk = os.read(popen.stdout.fileno(), 4096)
                if not chunk:
                    rc = popen.wait(2)
                    raise LabError(
                        f"{kind} worker for {lab.path} exited (rc={rc}) before joining: "
                        "see its stderr above"
                    )
                line += chunk
        info = json.loads(line)
        worker.children = [int(c) for c in info.get("children", [])]
    except BaseException:
        worker.stop()
        raise
    finally:
        popen.stdout.close()
    return worker


def spawn_busy(lab: LabCgroup, threads: int = 1, seconds: float = 10.0) -> Worker:
    """``threads`` busy loops (separate processes) in ``lab`` for ``seconds`` wall time.

    Returns once every loop is in the cgroup (the worker joins before it forks)."""
    if not 1 <= threads <= 256:
        raise ValueError("threads must be between 1 and 256")
    return _spawn(lab, seconds, ["busy", "--threads", str(threads)], "busy")


def spawn_periodic(
    lab: LabCgroup, work_ms: float = 5.0, period_ms: float = 50.0, seconds: float = 10.0
) -> Worker:
    """A latency-sensitive light load: ``work_ms`` of CPU every ``period_ms``.

    Its :meth:`Worker.result` reports how late ticks started and how long each tick's
    CPU work took in wall time, i.e. the stretch a victim feels."""
    if not 0 < work_ms <= period_ms:
        raise ValueError("need 0 < work_ms <= period_ms")
    return _spawn(
        lab,
        seconds,
        ["periodic", "--work-ms", str(work_ms), "--period-ms", str(period_ms)],
        "periodic",
    )


def spawn_memory(
    lab: LabCgroup, mode_args: list[str], seconds: float, ready_timeout: float = 120.0
) -> Worker:
    """A memory workload (``_memory_worker.py``: ``anon``, ``scan`` or ``fill`` and its
    options) in ``lab`` for ``seconds``. A ``scan`` is ready once its file is written,
    which can take a while on a slow machine: hence the longer ``ready_timeout``."""
    return _spawn(
        lab, seconds, mode_args, f"memory-{mode_args[0]}", MEMORY_WORKER_SCRIPT, ready_timeout
    )
