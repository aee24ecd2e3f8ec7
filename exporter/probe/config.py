"""The scheduler probe's settings, as the commands hand them down (no argparse here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .blame import DEFAULT_ANTAGONIST_TOP_K, DEFAULT_TOP_K
from .core import DEFAULT_BTF
from .loader import ATTRIBUTIONS, SchedProbe
from .select import LOADER_CHOICES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    enabled: bool = True
    attribution: str = "occupancy"  # one of ATTRIBUTIONS
    min_wait_us: float = 50.0  # shorter waits stay out of the blame matrix
    kernel_source: str | None = None  # BCC headers; None: status.find_kernel_source()
    top_k: int = DEFAULT_TOP_K  # culprits exported (and judged) per victim, workloads included
    antagonist_top_k: int = DEFAULT_ANTAGONIST_TOP_K  # culprits ranked per node
    loader: str = "auto"  # one of LOADER_CHOICES: CO-RE, else BCC (docs/probe.md)
    btf_path: str = DEFAULT_BTF  # the kernel BTF the CO-RE object is relocated against

    def __post_init__(self) -> None:
        if self.loader not in LOADER_CHOICES:
            raise ValueError(f"probe loader must be one of {LOADER_CHOICES}")
        if self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"probe attribution must be one of {ATTRIBUTIONS}")
        if self.top_k < 1:
            raise ValueError("probe top-k must be >= 1")
        if self.antagonist_top_k < 1:
            raise ValueError("probe antagonists top-k must be >= 1")


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
        loader=cfg.loader,
        btf_path=cfg.btf_path,
    )
    probe.load()  # logs one line: which loader loaded it, or why none did
    return probe
