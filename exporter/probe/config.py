"""The scheduler probe's settings, as the commands hand them down (no argparse here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .blame import DEFAULT_TOP_K
from .loader import ATTRIBUTIONS, SchedProbe

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    enabled: bool = True
    attribution: str = "occupancy"  # one of ATTRIBUTIONS
    min_wait_us: float = 50.0  # shorter waits stay out of the blame matrix
    kernel_source: str | None = None  # BCC headers; None: status.find_kernel_source()
    top_k: int = DEFAULT_TOP_K  # culprits exported per victim

    def __post_init__(self) -> None:
        if self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"probe attribution must be one of {ATTRIBUTIONS}")
        if self.top_k < 1:
            raise ValueError("probe top-k must be >= 1")


def open_probe(cfg: ProbeConfig, procfs: str = "/proc") -> SchedProbe:
    """A probe, loaded when ``cfg.enabled`` and this host allows it. Never raises for a
    host that cannot load it: ``probe.status`` says why (``contention_probe_loaded``)."""
    if not cfg.enabled:
        probe = SchedProbe(enabled=False)
        probe.load()  # records reason "disabled" for contention_probe_loaded
        return probe
    probe = SchedProbe(
        attribution=cfg.attribution,
        min_wait_us=cfg.min_wait_us,
        kernel_source=cfg.kernel_source,
        procfs=procfs,
    )
    probe.load()  # logs "loaded", or why not, itself
    return probe
