"""What both loaders do with the kernel maps (exporter/probe/kernel_maps.py), driven
through maps held in dicts: the bytes written are the kernel's layouts, and the real
maps behind both loaders run the same code in tests/integration/test_probe_kernel.py."""

from __future__ import annotations

import errno

import pytest

from exporter.probe.backend import ProbeKnobs
from exporter.probe.decode import (
    BLAME_KEY,
    BLAME_VALUE,
    BURST_SLOTS,
    CPU_STATS,
    PID_STATE,
    RUNQ_EPOCH_OFFSET,
    RUNQ_MAX_SLOTS,
    RUNQ_VALUE,
    STAT_NAMES,
    U32,
    U64,
)
from exporter.probe.kernel_maps import KernelMaps


class DictMaps(KernelMaps):
    """Raw map access on dicts; ``full`` names maps whose inserts fail as the kernel's
    do when a map is full."""

    loader = "core"

    def __init__(self, knobs: ProbeKnobs) -> None:
        super().__init__(knobs, "dicts")
        self.maps: dict[str, dict[bytes, bytes]] = {}
        self.full: set[str] = set()
        self.cpus = [[0] * len(STAT_NAMES) for _ in range(2)]

    def _lookup(self, name: str, key: bytes) -> bytes | None:
        return self.maps.get(name, {}).get(key)

    def _update(self, name: str, key: bytes, value: bytes) -> None:
        m = self.maps.setdefault(name, {})
        if name in self.full and key not in m:
            raise OSError(errno.E2BIG, f"{name} is full")
        m[key] = value

    def _delete(self, name: str, key: bytes) -> bool:
        return self.maps.get(name, {}).pop(key, None) is not None

    def _items(self, name: str) -> list[tuple[bytes, bytes]]:
        return list(self.maps.get(name, {}).items())

    def _per_cpu_stats(self) -> list[bytes]:
        return [CPU_STATS.pack(*cpu) for cpu in self.cpus]

    def program_fds(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        self.maps.clear()

    # what the kernel side would do
    def gen(self) -> int:
        return int(U32.unpack(self.maps["tracked_gen"][U32.pack(0)])[0])

    def slot_of(self, cgroup_id: int) -> int | None:
        raw = self.maps.get("tracked", {}).get(U64.pack(cgroup_id))
        return None if raw is None else int(U32.unpack(raw)[0])

    def epoch(self, slot: int) -> int:
        raw = self.maps["runq"][U32.pack(slot)]
        return int(U32.unpack_from(raw, RUNQ_EPOCH_OFFSET)[0])

    def record(self, slot: int, bucket: int, n: int, sum_ns: int) -> None:
        vals = list(RUNQ_VALUE.unpack(self.maps["runq"][U32.pack(slot)]))
        vals[1 + bucket] += n
        vals[1 + RUNQ_MAX_SLOTS] += sum_ns
        self.maps["runq"][U32.pack(slot)] = RUNQ_VALUE.pack(*vals)


KNOBS = ProbeKnobs(max_cgroups=2, max_pids=100)


def test_a_victim_gets_an_owned_zeroed_slot_and_every_change_bumps_the_generation() -> None:
    m = DictMaps(KNOBS)
    m.track(500)
    slot = m.slot_of(500)
    assert slot is not None and m.gen() == 2
    width = len(KNOBS.bounds_s) + 2 + BURST_SLOTS + 1  # waits + sum, burst + sum
    assert m.read_runq() == {500: (0,) * width}
    m.record(slot, 1, 3, 7000)
    got = m.read_runq()[500]
    nwait = len(KNOBS.bounds_s) + 1
    assert got[1] == 3 and got[nwait] == 7000 and len(got) == width
    epoch = m.epoch(slot)
    m.untrack(500)
    assert m.slot_of(500) is None and m.gen() == 3
    # untracked: its counts stay in the kernel, unread, until the slot is reassigned
    assert m.read_runq() == {} and m.delete_runq(500)
    m.track(600)
    assert m.slot_of(600) == slot and m.read_runq() == {600: (0,) * width}
    assert not m.delete_runq(600)
    # every assignment has its own epoch, never 0: a task counted in the burst level
    # under the old one cannot decrement the new one's (bpf/sched_probe.h)
    assert 0 < epoch < m.epoch(slot)
    m.untrack(600)
    m.track(500)
    assert m.slot_of(500) == slot and m.epoch(slot) > epoch + 1


def test_a_full_map_raises_and_gives_the_slot_back() -> None:
    m = DictMaps(KNOBS)
    m.full.add("tracked")
    with pytest.raises(OSError, match="tracked is full"):
        m.track(500)
    assert "tracked_gen" not in m.maps  # nothing changed for the kernel's caches
    m.full.clear()
    m.track(600)
    m.track(700)  # both slots: the failed track did not keep one
    assert {m.slot_of(600), m.slot_of(700)} == {0, 1}
    with pytest.raises(OSError, match="histogram slot"):
        m.track(800)


def test_blame_stats_and_pids_decode_from_the_kernels_bytes() -> None:
    m = DictMaps(KNOBS)
    m.maps["blame"] = {BLAME_KEY.pack(5, 6): BLAME_VALUE.pack(1000, 2)}
    assert m.read_blame() == {(5, 6): (1000, 2)}
    assert m.delete_blame(5, 6) and not m.delete_blame(5, 6)
    m.cpus[0][STAT_NAMES.index("switches")] = 4
    m.cpus[1][STAT_NAMES.index("switches")] = 5
    assert m.read_stats()[STAT_NAMES.index("switches")] == 9
    entry = PID_STATE.pack(42, 1000, 42, 1000, 0, 0, 2, 0)
    m.maps["pid_direct"] = {U32.pack(7): entry}
    m.maps["pid_hashed"] = {U32.pack(700): entry}
    assert m.read_pid(7) == m.read_pid(700) == (42, 1000, 42)
    assert m.read_pid(8) is None and m.read_pid(701) is None
