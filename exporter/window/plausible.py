"""What a kernel counter can do between two passes, and what it cannot.

Every counter the window folds is monotonic in the kernel (a u64 that only grows for
the life of the cgroup), and the time counters cannot grow faster than time itself:
CPU time by at most one second per CPU per second, a PSI stall total by at most one
second per second (it is a share of wall time), CFS periods by at most one per
millisecond (the shortest period). A change outside those limits is not contention
to report but a bad read: a transient negative, a value from another cgroup, a fixture
that went wrong. Folding it would, for example, report 200 s of CPU in 10 s on a
4-CPU node. The window refuses such a sample (the cgroup is skipped for that pass,
counted as ``implausible``) and keeps the last good one as the baseline; when the
counters stay "implausible" for :data:`STRIKES` passes in a row they are what the
kernel says now (a v1 controller recreated under the same path), and the sample
becomes the new baseline without a delta.

Pure arithmetic on plain data (docs/metrics.md, "What the exporter refuses").
"""

from __future__ import annotations

from typing import Protocol

from ..cgroupfs.model import CgroupReading, Pressure

# Timing slack: a pass's timestamp is taken when it starts, and a cgroup is read up to
# a pass duration later, so two reads of one cgroup can be further apart than the two
# passes' timestamps. Generous on purpose: it only has to catch the impossible.
SLACK_FACTOR = 1.5
SLACK_S = 2.0
# Consecutive refused samples after which the counters are taken as a new baseline.
STRIKES = 3
# The shortest CFS period the kernel allows is 1 ms: at most 1,000 periods a second.
MAX_PERIODS_PER_S = 1_000


class CounterSample(Protocol):
    """What one pass read of one cgroup, as the fold needs it (the sampler's
    ``ContainerSample`` is one). Throttling comes from v2 ``cpu.stat`` or the v1 cpu
    controller, so it is passed resolved rather than read from ``reading``."""

    reading: CgroupReading
    periods: int | None
    throttled_periods: int | None
    throttled_usec: int | None
    working_set_bytes: int | None


def span_s(elapsed_s: float) -> float:
    """The longest time two reads ``elapsed_s`` apart (pass timestamps) can cover."""
    return max(elapsed_s, 0.0) * SLACK_FACTOR + SLACK_S


def counter_problem(name: str, cur: int | None, prev: int | None, most: float | None) -> str | None:
    """Why ``prev -> cur`` is impossible for a monotonic counter that can grow by at
    most ``most`` (None: no limit), or None when it is possible (or unknown)."""
    if cur is None or prev is None:
        return None
    if cur < prev:
        return f"{name} went backwards ({prev} -> {cur})"
    if most is not None and cur - prev > most:
        return f"{name} rose by {cur - prev}, more than the {most:.0f} possible"
    return None


def sample_problem(
    cur: CounterSample, prev: CounterSample, elapsed_s: float, cpus: float
) -> str | None:
    """Why a cgroup's counters cannot have moved from ``prev`` to ``cur`` in
    ``elapsed_s`` seconds on a node with ``cpus`` CPUs (None: they can)."""
    span = span_s(elapsed_s)
    cpu_usec = cpus * span * 1e6
    r, p = cur.reading, prev.reading
    why = None
    if r.cpu_stat is not None and p.cpu_stat is not None:
        why = counter_problem("usage_usec", r.cpu_stat.usage_usec, p.cpu_stat.usage_usec, cpu_usec)
    why = why or counter_problem(
        "nr_periods", cur.periods, prev.periods, span * MAX_PERIODS_PER_S + 1
    )
    why = why or counter_problem(
        "nr_throttled", cur.throttled_periods, prev.throttled_periods, None
    )
    why = why or counter_problem(
        "throttled time", cur.throttled_usec, prev.throttled_usec, cpu_usec
    )
    stall_usec = span * 1e6
    for name, a, b in (
        ("cpu.pressure", r.cpu_pressure, p.cpu_pressure),
        ("memory.pressure", r.memory_pressure, p.memory_pressure),
        ("io.pressure", r.io_pressure, p.io_pressure),
    ):
        why = why or pressure_problem(name, a, b, stall_usec)
    ms, pms = r.memory_stat, p.memory_stat
    if ms is not None and pms is not None:
        why = why or counter_problem("workingset refaults", ms.refaults, pms.refaults, None)
        why = why or counter_problem("pgmajfault", ms.pgmajfault, pms.pgmajfault, None)
    me, pme = r.memory_events, p.memory_events
    if me is not None and pme is not None:
        for key in ("high", "max", "oom", "oom_kill"):
            why = why or counter_problem(
                f"memory.events {key}", getattr(me, key), getattr(pme, key), None
            )
    return why


def pressure_problem(
    name: str, cur: Pressure | None, prev: Pressure | None, most_usec: float
) -> str | None:
    """A PSI file's totals: monotonic, and a stall lasts no longer than wall time."""
    if cur is None or prev is None:
        return None
    why = counter_problem(
        f"{name} some total", cur.some.total_usec, prev.some.total_usec, most_usec
    )
    if why is None and cur.full is not None and prev.full is not None:
        why = counter_problem(
            f"{name} full total", cur.full.total_usec, prev.full.total_usec, most_usec
        )
    return why
