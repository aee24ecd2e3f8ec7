"""A self-test load process: burns or ticks in its cgroup, bounded in time.

Run by path (``python -I _load.py ...``; standard library only, starts fast) from a
shell that has already written its PID into the role's ``cgroup.procs`` files, so all
the CPU it uses is its cgroup's. It ends by itself at ``--seconds``, and the kernel
kills it (``PR_SET_PDEATHSIG``) the moment the self-test that started it dies, however
it dies; its own busy children die with it the same way.

argv: ``--seconds S --cpu N [--nice N]`` then ``busy --threads N`` or
``periodic --work-ms W --period-ms P``. It prints one line, ``ready``, once every
process is running, and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # else the deadline still bounds us
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _burn(deadline: float) -> None:
    x = 0
    while time.monotonic() < deadline:
        for _ in range(20000):
            x += 1


def _busy(threads: int, deadline: float) -> None:
    me = os.getpid()
    for _ in range(threads):
        if os.fork() == 0:
            try:
                _die_with_parent(me)
                _burn(deadline)
            finally:
                os._exit(0)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while time.monotonic() < deadline:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _periodic(work_ms: float, period_ms: float, deadline: float) -> None:
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    period, work = period_ms / 1000.0, work_ms / 1000.0
    start = time.monotonic()
    k = 0
    while True:
        due = start + k * period
        now = time.monotonic()
        if due >= deadline:
            return
        if due > now:
            time.sleep(due - now)
        cpu0 = time.thread_time()
        x = 0
        while time.thread_time() - cpu0 < work and time.monotonic() < deadline:
            for _ in range(2000):
                x += 1
        k = int((time.monotonic() - start) / period) + 1  # skip overrun periods


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="contention-selftest-load")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--nice", type=int, default=None)  # a weight without a cpu controller
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("busy")
    b.add_argument("--threads", type=int, required=True)
    p = sub.add_parser("periodic")
    p.add_argument("--work-ms", type=float, required=True)
    p.add_argument("--period-ms", type=float, required=True)
    a = ap.parse_args(argv)
    if not 0 < a.seconds <= 900:
        ap.error("--seconds must be in (0, 900]")
    deadline = time.monotonic() + a.seconds
    _die_with_parent(a.parent)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    if a.nice is not None:
        os.nice(a.nice)
    if a.mode == "busy":
        _busy(a.threads, deadline)
    else:
        _periodic(a.work_ms, a.period_ms, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
