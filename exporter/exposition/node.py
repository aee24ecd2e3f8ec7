"""The ``build_info`` and ``node`` collectors: build info; node facts, CPU and memory
size, context switches, steal and node-wide PSI, from one sampler snapshot. Families:
``exporter.catalog.own`` and ``exporter.catalog.node``. Conversions to base units
happen in the exposition modules and nowhere else."""

from __future__ import annotations

import platform

from prometheus_client.core import Metric

from .. import __version__
from ..catalog import node as N
from ..catalog.own import BUILD_INFO
from ..cgroupfs.model import Pressure
from ..cgroupfs.procfs import USER_HZ
from ..revision import revision
from ..sampler.snapshot import Snapshot
from .inputs import Context
from .series import Sampled, new, one


def build_info(_ctx: Context | None = None) -> list[Metric]:
    m = new(BUILD_INFO)
    m.add_metric([__version__, revision(), platform.python_version()], 1)
    return [m]


def _pressure(some: Sampled, full: Sampled, p: Pressure | None) -> list[Metric]:
    if p is not None:
        some.add_metric([], p.some.total_usec / 1e6)
        if p.full is not None:
            full.add_metric([], p.full.total_usec / 1e6)
    return [some, full]


def node(ctx: Context) -> list[Metric]:
    return node_families(ctx.snapshot)


def node_families(snap: Snapshot) -> list[Metric]:
    f, n = snap.facts, snap.node
    out = [
        one(N.NODE_INFO, 1, (f.mode.value,)),
        one(N.NODE_COMPUTE_SUPPORTED, 1 if f.supported else 0, (f.reason,)),
        one(N.NODE_PSI_AVAILABLE, 1 if f.psi else 0, (f.psi_reason,)),
        one(N.NODE_BTF_AVAILABLE, 1 if f.btf else 0),
        one(N.NODE_CPU_CORES, n.cpu_cores),
    ]
    if n.memory_bytes:
        out.append(one(N.NODE_MEMORY_BYTES, n.memory_bytes))
    if n.proc_stat is not None:
        out.append(one(N.NODE_CONTEXT_SWITCHES, n.proc_stat.ctxt))
        if n.proc_stat.steal_ticks is not None:
            out.append(one(N.NODE_CPU_STEAL_SECONDS, n.proc_stat.steal_ticks / USER_HZ))
    psi = (
        (N.NODE_CPU_PRESSURE_WAITING_SECONDS, N.NODE_CPU_PRESSURE_STALLED_SECONDS, n.cpu_pressure),
        (
            N.NODE_MEMORY_PRESSURE_WAITING_SECONDS,
            N.NODE_MEMORY_PRESSURE_STALLED_SECONDS,
            n.memory_pressure,
        ),
        (N.NODE_IO_PRESSURE_WAITING_SECONDS, N.NODE_IO_PRESSURE_STALLED_SECONDS, n.io_pressure),
    )
    for some, full, p in psi:
        out += _pressure(new(some), new(full), p)
    return out
