"""The sampler: one pass over every tracked cgroup, deltas, and the 5-minute window.

``snapshot`` holds what a pass produces, ``entitlement`` the policy a container's use
is measured against, ``loop`` the pass and the loop that repeats it.
"""

from .entitlement import Entitlement
from .loop import SKIP_REASONS, Sampler
from .snapshot import CollectorStatus, ContainerSample, NodeSample, Snapshot

__all__ = [
    "SKIP_REASONS",
    "CollectorStatus",
    "ContainerSample",
    "Entitlement",
    "NodeSample",
    "Sampler",
    "Snapshot",
]
