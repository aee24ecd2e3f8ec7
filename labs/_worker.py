"""A lab workload process: joins its cgroups first, then burns or ticks, bounded in time.

Run by path (``python -I _worker.py ...``), so it imports nothing but the standard
library and starts fast. Contract with :mod:`labs.workers`:

* argv: ``--procs FILE`` (repeatable: the ``cgroup.procs`` files to join, in order),
  ``--seconds S`` (hard wall-clock bound), then a mode: ``busy --threads N`` or
  ``periodic --work-ms W --period-ms P``; optional ``--result FILE``.
* It writes its own PID into every ``cgroup.procs`` file **before** doing any work, so
  the first CPU it burns is accounted to the lab cgroup (:mod:`labs.workers` has a
  shell join them even before the interpreter starts; joining again is harmless);
  then it prints one JSON line
  (``{"pid": ..., "children": [...]}``) on stdout and never writes stdout again.
* It ends by itself at ``--seconds`` even if whoever started it has died: every loop
  checks a monotonic deadline. Busy children also ask the kernel for SIGKILL when
  their parent (the worker) dies, so killing the worker's process group or the worker
  alone leaves nothing burning.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_GRACE_SECONDS = 2.0


def _join(procs_files: list[str]) -> None:
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the deadline still bounds us


def _burn_until(deadline: float) -> None:
    x = 0
    while time.monotonic() < deadline:
        for _ in range(20000):
            x += 1


def _ready(children: list[int]) -> None:
    sys.stdout.write(json.dumps({"pid": os.getpid(), "children": children}) + "\n")
    sys.stdout.flush()
    # Never write stdout again: the harness closes its end after this line.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _busy(threads: int, deadline: float) -> dict[str, object]:
    children: list[int] = []
    parent = os.getpid()
    for _ in range(threads):
        pid = os.fork()
        if pid == 0:
            try:
                _die_with_parent()
                if os.getppid() != parent:  # parent died before prctl took effect
                    os._exit(0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _burn_until(deadline)
            finally:
                os._exit(0)
        children.append(pid)
    _ready(children)
    left = set(children)
    while left and time.monotonic() < deadline + _GRACE_SECONDS:
        pid, _status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.05)
        else:
            left.discard(pid)
    for pid in left:  # our own children only, by PID
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
    return {"mode": "busy", "threads": threads, "stragglers_killed": len(left)}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    i = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[i]


def _periodic(work_ms: float, period_ms: float, deadline: float) -> dict[str, object]:
    """Do ``work_ms`` of CPU every ``period_ms``; record how late each tick started and
    how much wall time each tick's CPU work took (the "in-app stretch")."""
    _ready([])
    period = period_ms / 1000.0
    work = work_ms / 1000.0
    lateness: list[float] = []
    stretch: list[float] = []
    missed = 0
    start = time.monotonic()
    k = 0
    while True:
        due = start + k * period
        now = time.monotonic()
        if due >= deadline or now >= deadline:
            break
        if due > now:
            time.sleep(due - now)
        woke = time.monotonic()
        lateness.append(woke - due)
        cpu0 = time.thread_time()
        x = 0
        while time.thread_time() - cpu0 < work and time.monotonic() < deadline:
            for _ in range(2000):
                x += 1
        stretch.append(time.monotonic() - woke)
        # Skip the periods we overran instead of bursting to catch up.
        nk = int((time.monotonic() - start) / period) + 1
        missed += max(0, nk - k - 1)
        k = nk

    def stats(v: list[float]) -> dict[str, float]:
        return {
            "p50": _percentile(v, 0.50),
            "p99": _percentile(v, 0.99),
            "max": max(v) if v else 0.0,
            "mean": sum(v) / len(v) if v else 0.0,
        }

    return {
        "mode": "periodic",
        "ticks": len(lateness),
        "missed_periods": missed,
        "work_ms": work_ms,
        "period_ms": period_ms,
        "lateness_seconds": stats(lateness),
        "tick_wall_seconds": stats(stretch),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="contention-lab-worker")
    ap.add_argument("--procs", action="append", default=[], required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--result", default=None)
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("busy")
    b.add_argument("--threads", type=int, required=True)
    p = sub.add_parser("periodic")
    p.add_argument("--work-ms", type=float, required=True)
    p.add_argument("--period-ms", type=float, required=True)
    a = ap.parse_args(argv)

    deadline = time.monotonic() + a.seconds
    _join(a.procs)  # before any work: the first CPU we burn is the lab cgroup's
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if a.mode == "busy":
        result = _busy(a.threads, deadline)
    else:
        result = _periodic(a.work_ms, a.period_ms, deadline)
    if a.result:
        tmp = a.result + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(result, f)
            os.replace(tmp, a.result)
        except OSError:
            pass  # the lab was removed before we finished: nobody wants the result
    return 0


if __name__ == "__main__":
    sys.exit(main())
