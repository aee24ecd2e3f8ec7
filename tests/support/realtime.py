"""Run a short block of the harness at real-time priority (SCHED_FIFO).

The unpinned accuracy tests starve everything but their culprits, the harness
included: reading the probe at a window's end took 100-700 ms of preemption, during
which victims' waits ended on either side of the boundary the probe saw and the one
the reference recorded (docs/probe.md, "Accuracy with nothing pinned"). Only the
calling thread is raised, and only for the block; the kernel's real-time throttling
(``kernel.sched_rt_runtime_us``) bounds it all the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def on_time(priority: int = 1) -> Iterator[None]:
    """The calling thread at SCHED_FIFO ``priority`` for the block (root only)."""
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    try:
        yield
    finally:
        os.sched_setscheduler(0, before[0], before[1])
