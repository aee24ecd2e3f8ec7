"""Where lab threads ran and waited, per CPU, from the kernel's per-task accounting.

Samples, every ``interval_s``, each thread's ``/proc/<tid>/schedstat`` (CPU time and
run-queue wait, ns: the accounting behind delay accounting) and the CPU it is on
(``/proc/<tid>/stat`` field 39, ``processor``). The time a thread ran between two
samples is put on the CPU it is on at the second; the time it waited, which the
kernel adds to ``run_delay`` only when a wait ends, on that CPU too, unless the thread
moved between the samples: then on the CPU it left, where the wait that the migration
ended was spent. Exact for a thread that stayed on one CPU between two samples (the
migrations seen are counted and reported); a thread that moved twice between two
samples is seen as not having moved. Intervals are kept apart so
that the truth can follow placement as it changes within a window. Used by the
unpinned accuracy tests (docs/probe.md, "Accuracy with nothing pinned"); runs in the
test process, so its own small CPU use lands in the root cgroup like the rest of the
harness.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

PerCpu = dict[int, float]
K = TypeVar("K", bound=Hashable)


def read_task(tid: int) -> tuple[int, int, int] | None:
    """(cpu, run ns, wait ns) of one task, or None once it is gone."""
    try:
        with open(f"/proc/{tid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{tid}/schedstat") as f:
            run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # fields from 3 (state) on
    return int(fields[36]), run_ns, wait_ns


@dataclass
class Placement(Generic[K]):
    """One sampling interval, per key (a lab cgroup): seconds run and waited on each
    CPU, and the migrations seen."""

    run_s: dict[K, PerCpu] = field(default_factory=dict)
    wait_s: dict[K, PerCpu] = field(default_factory=dict)
    migrations: dict[K, int] = field(default_factory=dict)


class PlacementSampler(Generic[K]):
    """Samples the given threads in a background thread until :meth:`stop`."""

    def __init__(self, tids: Mapping[K, Sequence[int]], interval_s: float = 0.02):
        self._tids = {k: list(v) for k, v in tids.items()}
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last: dict[int, tuple[int, int, int]] = {}
        self._acc: list[Placement[K]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placement", daemon=True)

    def start(self) -> None:
        self._sample()  # the baseline
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def take(self) -> list[Placement[K]]:
        """The intervals sampled since the last call (or the start), oldest first."""
        self._sample()
        with self._lock:
            got, self._acc = self._acc, []
        return got

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self) -> None:
        with self._lock:
            acc = Placement[K]()
            for key, tids in self._tids.items():
                for tid in tids:
                    now = read_task(tid)
                    if now is None:
                        continue
                    before = self._last.get(tid)
                    self._last[tid] = now
                    if before is None:
                        continue
                    cpu = now[0]
                    run = acc.run_s.setdefault(key, defaultdict(float))
                    wait = acc.wait_s.setdefault(key, defaultdict(float))
                    run[cpu] += (now[1] - before[1]) / 1e9
                    # The kernel adds a wait to run_delay when it ends: when the task
                    # gets the CPU, or when it is dequeued to migrate. The lab's
                    # starved victims and busy culprits are always runnable, so a task
                    # seen on a new CPU was migrated while queued, and the wait that
                    # migration ended was spent on the CPU it left: putting it on the
                    # new one moved a whole wait (~150 ms for a starved victim) to the
                    # other CPU's culprits. (A sleeper woken onto another CPU would be
                    # misplaced by this; the unpinned tests have none that matter.)
                    moved = cpu != before[0]
                    wait[before[0] if moved else cpu] += (now[2] - before[2]) / 1e9
                    if moved:
                        acc.migrations[key] = acc.migrations.get(key, 0) + 1
            if acc.run_s:
                self._acc.append(acc)
