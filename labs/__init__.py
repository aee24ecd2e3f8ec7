"""Contention labs on the real kernel: lab containers (cgroups the labs create and
remove), bounded workloads, and a handle on a running exporter.

Used by the real-kernel tests, the scheduler-probe tests and the ``demo``. Nothing here
is imported by the exporter's sampling path.
"""

from .cgroups import (
    PREFIX,
    LabCgroup,
    LabError,
    LabLayout,
    LabUnavailable,
    cleanup_stale,
    detect_layout,
    kubelet_shares,
    shares_to_weight,
    unavailable_reason,
    weight_to_shares,
)
from .workers import Worker, spawn_busy, spawn_periodic

__all__ = [
    "PREFIX",
    "LabCgroup",
    "LabError",
    "LabLayout",
    "LabUnavailable",
    "Worker",
    "cleanup_stale",
    "detect_layout",
    "kubelet_shares",
    "shares_to_weight",
    "spawn_busy",
    "spawn_periodic",
    "unavailable_reason",
    "weight_to_shares",
]
