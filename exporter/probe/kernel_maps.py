"""The probe's kernel maps behind ``ProbeMaps``, written once for both loaders.

What userspace does with the maps is the same whichever loader loaded the program
(the layouts are ``bpf/sched_probe.h``'s, decoded by ``decode.py``): a victim's
histogram slot gets its owner, with zero counts, before the victim becomes visible in
``tracked``; every change to the tracked set bumps the generation the kernel's per-pid
caches are checked against; a histogram is read only while its slot belongs to a
victim tracked now. A loader supplies raw access to a map by name, keys and values
as the bytes the kernel holds, and the per-CPU counters: ``core.CoreMaps`` through
libbpf file descriptors, ``bcc.BccMaps`` through BCC's tables.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
from collections.abc import Iterable

from .backend import ProbeKnobs
from .decode import (
    BLAME_KEY,
    NO_GEN,
    U32,
    U64,
    blame_item,
    pid_value,
    runq_initial,
    runq_value,
    sum_stats,
)


class TrackedSlots:
    """Which histogram slot each tracked victim has (userspace assigns them; the kernel
    reads them from the ``tracked`` map), and the tracked-set generation the kernel's
    per-pid caches are checked against. One per loaded probe."""

    # Never the kernel's invalid-generation marker (NO_GEN, bpf/sched_probe.h says
    # why), nor 0, what the kernel reads before the first write.
    MAX_GEN = NO_GEN - 1

    def __init__(self, capacity: int) -> None:
        self.slot: dict[int, int] = {}  # victim cgroup id -> slot
        self._free = list(range(capacity - 1, -1, -1))
        self.gen = 1
        self.epoch = 0  # of the latest slot assignment (bpf/sched_probe.h: runq_hist)

    def assign(self, cgroup_id: int) -> int:
        if cgroup_id in self.slot:
            return self.slot[cgroup_id]
        if not self._free:
            raise OSError(errno.ENOSPC, "every histogram slot is taken (max_cgroups)")
        s = self._free.pop()
        self.slot[cgroup_id] = s
        return s

    def release(self, cgroup_id: int) -> None:
        s = self.slot.pop(cgroup_id, None)
        if s is not None:
            self._free.append(s)

    def next_epoch(self) -> int:
        """A number for a new slot assignment, 1 .. 2**32-1 (0: counted nowhere)."""
        self.epoch = self.epoch + 1 if self.epoch < 0xFFFFFFFF else 1
        return self.epoch

    def next_gen(self) -> int:
        self.gen = self.gen + 1 if self.gen < self.MAX_GEN else 1
        return self.gen

    def owned(self, slot: int, owner: int) -> bool:
        """The kernel's slot holds the histogram of a victim tracked now."""
        return owner != 0 and self.slot.get(owner) == slot


class KernelMaps(ABC):
    """A loaded, attached probe's maps (``ProbeMaps``), over a loader's raw access."""

    loader: str  # "core" or "bcc"

    def __init__(self, knobs: ProbeKnobs, detail: str) -> None:
        self.detail = detail  # for the status line: how it loaded
        self._max_pids = knobs.max_pids
        self._nslots = len(knobs.bounds_s) + 1
        self._slots = TrackedSlots(knobs.max_cgroups)

    # -- what a loader supplies --------------------------------------------------------

    @abstractmethod
    def _lookup(self, name: str, key: bytes) -> bytes | None:
        """The value at ``key`` in map ``name``, None when there is none."""

    @abstractmethod
    def _update(self, name: str, key: bytes, value: bytes) -> None:
        """Write ``value`` at ``key``; raises OSError (a full map too)."""

    @abstractmethod
    def _delete(self, name: str, key: bytes) -> bool:
        """Delete ``key``; False when it was not there."""

    @abstractmethod
    def _items(self, name: str) -> Iterable[tuple[bytes, bytes]]:
        """Every entry of map ``name`` (batch lookups where the kernel has them)."""

    @abstractmethod
    def _per_cpu_stats(self) -> Iterable[bytes]:
        """Each CPU's ``struct cpu_stats``."""

    @abstractmethod
    def program_fds(self) -> dict[str, int]:
        """Tracepoint -> program fd."""

    @abstractmethod
    def close(self) -> None:
        """Detach every program and free the maps."""

    # -- the same for both -------------------------------------------------------------

    def track(self, cgroup_id: int) -> None:
        """Start recording ``cgroup_id``'s waits; raises OSError when a map is full."""
        # The slot gets its owner (and zero counts) before the victim becomes visible.
        slot = self._slots.assign(cgroup_id)
        try:
            initial = runq_initial(cgroup_id, self._slots.next_epoch())
            self._update("runq", U32.pack(slot), initial)
            self._update("tracked", U64.pack(cgroup_id), U32.pack(slot))
        except OSError:
            self._slots.release(cgroup_id)
            raise
        self._bump_gen()

    def untrack(self, cgroup_id: int) -> None:
        self._delete("tracked", U64.pack(cgroup_id))
        self._slots.release(cgroup_id)
        self._bump_gen()

    def _bump_gen(self) -> None:
        self._update("tracked_gen", U32.pack(0), U32.pack(self._slots.next_gen()))

    def read_runq(self) -> dict[int, tuple[int, ...]]:
        """Victim -> its wait bucket counts and sum_ns, then its burst bucket counts and
        their sum (``decode.runq_value``), for victims tracked now."""
        out = {}
        for k, v in self._items("runq"):
            owner, values = runq_value(v, self._nslots)
            if self._slots.owned(U32.unpack(k)[0], owner):
                out[owner] = values
        return out

    def read_blame(self) -> dict[tuple[int, int], tuple[int, ...]]:
        return dict(blame_item(k, v) for k, v in self._items("blame"))

    def read_stats(self) -> tuple[int, ...]:
        """The counters summed over CPUs, in STAT_NAMES order."""
        return sum_stats(self._per_cpu_stats())

    def delete_runq(self, victim: int) -> bool:
        # A victim's slot is released when it is untracked; its counts stay in the
        # kernel until the slot is reassigned (and are not read meanwhile).
        return victim not in self._slots.slot

    def delete_blame(self, victim: int, culprit: int) -> bool:
        return self._delete("blame", BLAME_KEY.pack(victim, culprit))

    def read_pid(self, pid: int) -> tuple[int, ...] | None:
        """One pid's entry, (cgroup, since, victim) (diagnostics and tests)."""
        name = "pid_direct" if pid < self._max_pids else "pid_hashed"
        raw = self._lookup(name, U32.pack(pid))
        return None if raw is None else pid_value(raw)
