"""The kernel's own numbers the self-test holds the exporter's against.

The victim and the bully share one CPU. While the victim waits on it, what runs there
is the bully or whatever else the kernel put on that CPU; so the share of the victim's
wait that belongs to the bully is, to first order, the bully's share of the CPU time
that CPU spent on anything but the victim: ``bully CPU / (CPU busy - victim CPU)``
from the bully's and the victim's ``cpu.stat`` and the CPU's line of ``/proc/stat``.
These are the kernel's accounting, independent of the scheduler probe and of the
exporter's sampler.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def usage_s(v2_dir: str) -> float:
    """CPU seconds a cgroup has used (``usage_usec`` of its cgroup2 ``cpu.stat``)."""
    with open(os.path.join(v2_dir, "cpu.stat")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k == "usage_usec":
                return int(v) / 1e6
    raise ValueError(f"no usage_usec in {v2_dir}/cpu.stat")


def cpu_busy_s(cpu: int, procfs: str = "/proc") -> float:
    """Seconds CPU ``cpu`` has been busy (not idle, not iowait), from ``/proc/stat``."""
    want = f"cpu{cpu}"
    with open(os.path.join(procfs, "stat")) as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == want:
                t = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
                return (t[0] + t[1] + t[2] + t[5] + t[6] + t[7]) / os.sysconf("SC_CLK_TCK")
    raise ValueError(f"no {want} line in {procfs}/stat")


@dataclass(frozen=True, slots=True)
class Reading:
    at: float
    victim_s: float
    bully_s: float
    cpu_s: float


@dataclass(frozen=True, slots=True)
class Truth:
    seconds: float
    victim_cores: float
    bully_cores: float
    cpu_busy_cores: float

    @property
    def bully_share(self) -> float | None:
        """The bully's share of the CPU time not spent on the victim (None: none)."""
        others = self.cpu_busy_cores - self.victim_cores
        if others <= 0:
            return None
        return min(1.0, self.bully_cores / others)


class CpuTruth:
    """Readings of the two cgroups and the CPU they share, taken when asked."""

    def __init__(self, victim_dir: str, bully_dir: str, cpu: int, procfs: str = "/proc"):
        self.victim_dir, self.bully_dir, self.cpu, self.procfs = victim_dir, bully_dir, cpu, procfs

    def read(self) -> Reading:
        return Reading(
            time.monotonic(),
            usage_s(self.victim_dir),
            usage_s(self.bully_dir),
            cpu_busy_s(self.cpu, self.procfs),
        )

    @staticmethod
    def between(a: Reading, b: Reading) -> Truth:
        dt = max(b.at - a.at, 1e-9)
        return Truth(
            dt,
            (b.victim_s - a.victim_s) / dt,
            (b.bully_s - a.bully_s) / dt,
            (b.cpu_s - a.cpu_s) / dt,
        )
