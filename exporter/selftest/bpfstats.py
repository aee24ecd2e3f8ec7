"""BPF run-time statistics for the duration of the self-test, restored afterwards.

The kernel counts each BPF program's run time only while statistics are on. The
self-test turns them on with ``BPF_ENABLE_STATS`` (libbpf's ``bpf_enable_stats``): the
kernel keeps them on for as long as the returned descriptor is open, and puts them back
as they were when it is closed, by us or by the kernel when this process dies, however
it dies. Where that is not possible it writes ``kernel.bpf_stats_enabled`` and writes
the previous value back when done (a SIGKILL then leaves them on: the summary says
which way was used).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

from ..probe.model import ProgramStats

SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
_BPF_STATS_RUN_TIME = 0


@dataclass
class StatsHold:
    """Statistics turned on by the self-test; :meth:`release` restores them."""

    how: str  # "bpf_enable_stats", "sysctl", "already on", or "off: <why>"
    _fd: int | None = None
    _restore: str | None = None

    @property
    def on(self) -> bool:
        return not self.how.startswith("off")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._restore is not None:
            with contextlib.suppress(OSError), open(SYSCTL, "w") as f:
                f.write(self._restore)
            self._restore = None


def _enable_fd() -> int | str:
    try:
        lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        fn = lib.bpf_enable_stats
    except (OSError, AttributeError) as e:
        return f"libbpf's bpf_enable_stats unavailable ({e})"
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int]
    fd = int(fn(_BPF_STATS_RUN_TIME))
    if fd < 0:
        return f"BPF_ENABLE_STATS: {os.strerror(-fd if fd < -1 else ctypes.get_errno())}"
    return fd


def enable_stats() -> StatsHold:
    """Turn BPF run-time statistics on for this process's lifetime (or until released)."""
    try:
        with open(SYSCTL) as f:
            before = f.read().strip()
    except OSError as e:
        return StatsHold(f"off: cannot read {SYSCTL}: {e.strerror}")
    if before != "0":
        return StatsHold("already on")
    fd = _enable_fd()
    if isinstance(fd, int):
        return StatsHold("bpf_enable_stats", _fd=fd)
    try:
        with open(SYSCTL, "w") as f:
            f.write("1")
    except OSError as e:
        return StatsHold(f"off: {fd}; writing {SYSCTL}: {e.strerror}")
    return StatsHold("sysctl", _restore=before)


def ns_per_switch(
    before: dict[str, ProgramStats], after: dict[str, ProgramStats], switches: int
) -> float | None:
    """Kernel time of all the probe's programs per context switch between two passes."""
    if switches <= 0 or not after:
        return None
    ns = sum(
        p.run_time_ns - before.get(k, ProgramStats(0, 0)).run_time_ns for k, p in after.items()
    )
    runs = sum(p.run_count - before.get(k, ProgramStats(0, 0)).run_count for k, p in after.items())
    if runs <= 0:
        return None  # statistics were not counting
    return ns / switches
