"""What the probe's maps hold, byte for byte: one decoder for both loaders.

The layouts are those of ``bpf/sched_probe.h``, which the CO-RE program and the BCC
program both include, so a map read through libbpf or through BCC decodes the same
way. ``tests/unit/test_probe_decode.py`` checks every size and offset here against
the BTF of the compiled object (``bpf/sched_probe.bpf.o``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

# bpf/sched_probe.h
RUNQ_MAX_BOUNDS = 23
RUNQ_MAX_SLOTS = RUNQ_MAX_BOUNDS + 1
RING_MAX_SLOTS = 256
BURST_NBOUNDS = 10  # the burst demand's finite bounds (exporter/probe/burst.py)
BURST_SLOTS = BURST_NBOUNDS + 1

# Special culprit keys in the kernel.
IDLE_KEY = 0
UNATTRIBUTED_KEY = (1 << 64) - 1

# enum stat_index, in order.
STAT_NAMES = (
    "switches",
    "enqueues",
    "runq_events",
    "blame_events",
    "fail_pids",
    "fail_start",
    "fail_runq",
    "fail_blame",
    "pids_inserted",
    "pids_deleted",
    "start_inserted",
    "start_deleted",
    "unknown_pid",
    "ring_short",
    "migrated",
)
STAT = {name: i for i, name in enumerate(STAT_NAMES)}

U64 = struct.Struct("<Q")  # tracked keys (victim cgroup id)
U32 = struct.Struct("<I")  # array keys (runq slot, tracked_gen), tracked values (slot)
NO_SLOT = 0xFFFFFFFF
NO_GEN = 0xFFFFFFFF  # a pid entry's cache is valid for no generation
# struct runq_hist: owner, slots[RUNQ_MAX_SLOTS], sum_ns, active, epoch, pad,
# burst[BURST_SLOTS], burst_sum
RUNQ_VALUE = struct.Struct(f"<{RUNQ_MAX_SLOTS + 3}Q2I{BURST_SLOTS + 1}Q")
RUNQ_EPOCH_OFFSET = (RUNQ_MAX_SLOTS + 3) * 8
BLAME_KEY = struct.Struct("<QQ")  # struct blame_key: victim, culprit
BLAME_VALUE = struct.Struct("<QQ")  # struct blame_cell: wait_ns, events
RUN_SLICE = struct.Struct("<QQQ")
# struct cpu_ring (kernel-only; its size, for the layout test): last_switch, running,
# head, used, ring[RING_MAX_SLOTS]
CPU_RING_SIZE = 8 + 8 + 4 + 4 + RING_MAX_SLOTS * RUN_SLICE.size
# struct cpu_stats: stats[STAT_COUNT], one per CPU (cpu_stats, a per-CPU array)
CPU_STATS = struct.Struct(f"<{len(STAT_NAMES)}Q")
# struct pid_state: cgroup, since, victim, attr_since, victim_slot, slot, gen, counted
PID_STATE = struct.Struct("<QQQQIIII")
# struct probe_knobs: bounds_ns[RUNQ_MAX_BOUNDS], min_wait_ns, nbounds, ring_mask,
# max_pids, occupancy, switch_has_state, use_ktime, burst, pad
KNOBS = struct.Struct(f"<{RUNQ_MAX_BOUNDS}QQ8I")


def runq_value(raw: bytes, nslots: int) -> tuple[int, tuple[int, ...]]:
    """A ``struct runq_hist`` -> ``(owner, (slot_0 .. slot_{nslots-1}, sum_ns,
    burst_0 .. burst_{BURST_SLOTS-1}, burst_sum))``: the victim the histogram slot
    belongs to, the wait buckets in use (bounds + overflow) and their sum, then the
    burst demand's buckets and their sum; all counters (the level ``active`` is not)."""
    vals = RUNQ_VALUE.unpack_from(raw)
    sum_ns = vals[1 + RUNQ_MAX_SLOTS]
    burst = vals[RUNQ_MAX_SLOTS + 5 :]  # after sum_ns, active, epoch, pad
    return vals[0], (*vals[1 : 1 + nslots], sum_ns, *burst)


def runq_initial(owner: int, epoch: int) -> bytes:
    """The value userspace writes when it assigns a histogram slot: owner, the epoch of
    this assignment (1 .. 2**32-1, never 0), no counts, a level of 0."""
    if not 0 < epoch < 1 << 32:
        raise ValueError(f"epoch {epoch} out of range")
    return RUNQ_VALUE.pack(
        owner, *([0] * (RUNQ_MAX_SLOTS + 2)), epoch, 0, *([0] * (BURST_SLOTS + 1))
    )


def pid_value(raw: bytes) -> tuple[int, int, int] | None:
    """A ``struct pid_state`` -> ``(cgroup, since, victim)``, None for an empty slot."""
    cgroup, since, victim, *_ = PID_STATE.unpack_from(raw)
    return None if cgroup == 0 else (cgroup, since, victim)


def blame_item(key: bytes, value: bytes) -> tuple[tuple[int, int], tuple[int, int]]:
    victim, culprit = BLAME_KEY.unpack_from(key)
    wait_ns, events = BLAME_VALUE.unpack_from(value)
    return (victim, culprit), (wait_ns, events)


def sum_stats(per_cpu: Iterable[bytes]) -> tuple[int, ...]:
    """Counters summed over every CPU's ``struct cpu_stats``."""
    sums = [0] * len(STAT_NAMES)
    for raw in per_cpu:
        for i, v in enumerate(CPU_STATS.unpack_from(raw)):
            sums[i] += v
    return tuple(sums)


def split_per_cpu(raw: bytes, ncpu: int, value_size: int) -> list[bytes]:
    """A per-CPU map value as the kernel returns it: one copy per possible CPU, each
    rounded up to 8 bytes."""
    step = (value_size + 7) & ~7
    return [raw[i * step : i * step + value_size] for i in range(ncpu)]


def pack_knobs(
    bounds_ns: Sequence[int],
    min_wait_ns: int,
    ring_slots: int,
    max_pids: int,
    occupancy: bool,
    switch_has_state: bool,
    use_ktime: bool,
    burst: bool = True,
) -> bytes:
    if not 1 <= len(bounds_ns) <= RUNQ_MAX_BOUNDS:
        raise ValueError(f"1 to {RUNQ_MAX_BOUNDS} histogram bounds, not {len(bounds_ns)}")
    padded = [*bounds_ns, *([0] * (RUNQ_MAX_BOUNDS - len(bounds_ns)))]
    return KNOBS.pack(
        *padded,
        min_wait_ns,
        len(bounds_ns),
        ring_slots - 1,
        max_pids,
        int(occupancy),
        int(switch_has_state),
        int(use_ktime),
        int(burst),
        0,
    )
