"""The ``process`` collector: ``process_*`` and ``python_gc_*``, the standard families
of every exporter (prometheus_client names them), collected with each pass."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector

from .inputs import Context

OWN_PROCFS = "/proc"  # where this process sees itself


def own_process() -> Callable[[], Iterable[Metric]]:
    """The exporter's own CPU, RSS, fds and garbage collections. Always from this
    process's own /proc, never --path.procfs: that is the node's (a host mount or a
    fixture tree), where "self" may not be this process."""
    own = CollectorRegistry()
    ProcessCollector(registry=own, proc=OWN_PROCFS)
    GCCollector(registry=own)
    return own.collect


def process(ctx: Context) -> Iterable[Metric]:
    families = ctx.sources.process
    return () if families is None else families()
