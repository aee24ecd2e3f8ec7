"""What a loader (CO-RE or BCC) hands the probe: the knobs it was built with, and an
object that reads and edits the kernel maps. ``SchedProbe`` does the rest (diffing,
pruning, totals) the same way for both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .decode import RING_MAX_SLOTS, RUNQ_MAX_BOUNDS
from .histogram import RUNQ_BOUNDS_S, bounds_ns

ATTRIBUTIONS = ("occupancy", "last-runner")


def find_bpf_file(name: str, bpf_dir: str | None = None) -> Path | None:
    """``name`` from ``bpf/``: ``bpf_dir`` or ``$CONTENTION_BPF_DIR`` when given, else
    next to the package (``exporter/bpf``, in a wheel), else the repository's."""
    here = Path(__file__).resolve()
    dirs = [Path(d) for d in (bpf_dir, os.environ.get("CONTENTION_BPF_DIR")) if d]
    dirs += [here.parents[1] / "bpf", here.parents[2] / "bpf"]
    for d in dirs:
        if (d / name).is_file():
            return d / name
    return None


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """The highest possible CPU number + 1 (what ``libbpf_num_possible_cpus()``
    returns): the size of a map indexed by CPU. The file holds ranges: ``0-3,6``."""
    text = Path(path).read_text().strip()
    return 1 + max(int(part.split("-")[-1]) for part in text.split(",") if part)


@dataclass(frozen=True, slots=True)
class ProbeKnobs:
    """Every number the kernel side uses, validated once. The loaders pass them on:
    as ``-D`` cflags (BCC) or as read-only globals and map sizes (CO-RE)."""

    attribution: str = "occupancy"
    min_wait_us: float = 50.0
    ring_slots: int = 256
    max_cgroups: int = 4096
    max_pids: int = 65536
    max_blame: int = 32768
    bounds_s: tuple[float, ...] = RUNQ_BOUNDS_S
    burst: bool = True  # count running + runnable tasks per victim (exporter/probe/burst.py)

    def __post_init__(self) -> None:
        if self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"attribution must be one of {ATTRIBUTIONS}, not {self.attribution!r}")
        if self.min_wait_us < 0:
            raise ValueError("min_wait_us must be >= 0")
        rs = self.ring_slots
        if rs < 2 or rs & (rs - 1) or rs > RING_MAX_SLOTS:
            raise ValueError(f"ring_slots must be a power of two from 2 to {RING_MAX_SLOTS}")
        for name in ("max_cgroups", "max_pids", "max_blame"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if len(self.bounds_s) > RUNQ_MAX_BOUNDS:
            raise ValueError(f"at most {RUNQ_MAX_BOUNDS} histogram bounds")
        bounds_ns(self.bounds_s)  # validates

    @property
    def occupancy(self) -> bool:
        return self.attribution == "occupancy"

    @property
    def bounds_ns(self) -> tuple[int, ...]:
        return bounds_ns(self.bounds_s)

    @property
    def min_wait_ns(self) -> int:
        return round(self.min_wait_us * 1000)


class ProbeLoadError(Exception):
    """A loader could not load the probe: a reason (a ``contention_probe_loaded``
    label value, see ``status.py``) and a detail for humans."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ProbeMaps(Protocol):
    """A loaded, attached probe's kernel side. Reads return whole maps (decoded);
    ``close()`` detaches every program and frees the maps."""

    loader: str  # "core" or "bcc"
    detail: str  # for the status line: how it loaded

    def track(self, cgroup_id: int) -> None: ...  # raises OSError when full

    def untrack(self, cgroup_id: int) -> None: ...

    def read_runq(self) -> dict[int, tuple[int, ...]]: ...  # victim -> slots + sum_ns

    def read_blame(self) -> dict[tuple[int, int], tuple[int, ...]]: ...

    def read_stats(self) -> tuple[int, ...]: ...  # summed over CPUs, STAT_NAMES order

    def delete_runq(self, victim: int) -> bool: ...

    def delete_blame(self, victim: int, culprit: int) -> bool: ...

    def read_pid(self, pid: int) -> tuple[int, ...] | None: ...  # (cgroup, since, victim)

    def program_fds(self) -> dict[str, int]: ...  # tracepoint -> program fd

    def close(self) -> None: ...
