"""The scheduler probe: in-kernel run-queue latency and victim -> culprit blame.

Two C programs in ``bpf/``, one design: ``sched_probe.bpf.c``, compiled once into the
CO-RE object ``sched_probe.bpf.o`` that libbpf loads against the kernel's BTF (``core``,
through the ctypes binding in ``libbpf``), and ``sched_probe.c``, which BCC compiles on
the node (``bcc``, the fallback). This package picks a loader (``select``), loads it
(``loader``, ``config``), reads and edits the maps the same way for both loaders
(``kernel_maps``), decodes and diffs them (``decode``, ``diff``, ``model``), does the
histogram maths (``histogram``), names culprits (``culprit``), splits a victim's wait
among them (``blame``) and folds each pass's deltas into the window (``fold``). Plain
data only: ``exporter.exposition.probe`` turns it into Prometheus families.
"""

from .blame import DEFAULT_TOP_K, BlameShare, blame_shares, unknown_blame_ratio
from .config import ProbeConfig, open_probe
from .culprit import ROOT_CGROUP_ID, CulpritKind, NamedCulprit, classify_culprit
from .fold import ProbeFolds, ProbeSnapshot
from .histogram import RUNQ_BOUNDS_S, RUNQ_SLOTS, cumulative_buckets, estimate_quantile
from .loader import SchedProbe
from .model import BlameCell, ProbeDelta, ProbeTotals, ProgramStats, RunqDelta, RunqHistogram
from .status import REASONS, ProbeStatus

__all__ = [
    "DEFAULT_TOP_K",
    "REASONS",
    "ROOT_CGROUP_ID",
    "RUNQ_BOUNDS_S",
    "RUNQ_SLOTS",
    "BlameCell",
    "BlameShare",
    "CulpritKind",
    "NamedCulprit",
    "ProbeConfig",
    "ProbeDelta",
    "ProbeFolds",
    "ProbeSnapshot",
    "ProbeStatus",
    "ProbeTotals",
    "ProgramStats",
    "RunqDelta",
    "RunqHistogram",
    "SchedProbe",
    "blame_shares",
    "classify_culprit",
    "cumulative_buckets",
    "estimate_quantile",
    "open_probe",
    "unknown_blame_ratio",
]
