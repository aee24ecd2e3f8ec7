"""The node's families: its cgroup layout and kernel features, size, context switches,
steal and node-wide PSI. Built by ``exporter.exposition.node``."""

from __future__ import annotations

from .containers import full_help, some_help
from .model import BYTES, CORES, FROM_PASS, NO_UNIT, SECONDS, Family, Label, Scope, Type

N = Scope.NODE
COUNTER, GAUGE = Type.COUNTER, Type.GAUGE
REASON = Label("reason")

NODE_INFO = Family(
    "contention_node_info",
    GAUGE,
    NO_UNIT,
    "Node facts detected at start: the cgroup layout in use (always 1).",
    "node",
    N,
    (Label("cgroup_mode", ("v2", "hybrid", "v1", "none")),),
    doc="the cgroup layout in use",
    source="`/sys/fs/cgroup`",
    constant=True,
)
NODE_COMPUTE_SUPPORTED = Family(
    "contention_node_compute_supported",
    GAUGE,
    NO_UNIT,
    "1 if this node supports the usage and stall layers (cgroup2 with PSI); "
    "0 with the reason otherwise.",
    "node",
    N,
    (REASON,),
    doc="1 when usage and stall layers work here; 0 with why (v1-only node, no PSI)",
)
NODE_PSI_AVAILABLE = Family(
    "contention_node_psi_available",
    GAUGE,
    NO_UNIT,
    "1 if pressure stall information is available per cgroup; 0 with the reason.",
    "node",
    N,
    (REASON,),
    doc="per-cgroup PSI available",
    source="`/proc/pressure`, `cpu.pressure`",
)
NODE_BTF_AVAILABLE = Family(
    "contention_node_btf_available",
    GAUGE,
    NO_UNIT,
    "1 if the kernel exposes BTF (/sys/kernel/btf/vmlinux).",
    "node",
    N,
    doc="kernel BTF present",
    source="`/sys/kernel/btf/vmlinux`",
)
NODE_CPU_CORES = Family(
    "contention_node_cpu_cores",
    GAUGE,
    CORES,
    "CPUs of the node (the entitlement of last resort).",
    "node",
    N,
    doc="CPUs (entitlement of last resort)",
    source="`/proc/stat`",
)
NODE_MEMORY_BYTES = Family(
    "contention_node_memory_bytes",
    GAUGE,
    BYTES,
    "Memory of the node (MemTotal in /proc/meminfo).",
    "node",
    N,
    doc="memory",
    source="`/proc/meminfo` `MemTotal`",
)
NODE_CONTEXT_SWITCHES = Family(
    "contention_node_context_switches_total",
    COUNTER,
    NO_UNIT,
    f"Context switches on the node (/proc/stat ctxt).{FROM_PASS}",
    "node",
    N,
    doc="context switches",
    source="`/proc/stat` `ctxt`",
)
NODE_CPU_STEAL_SECONDS = Family(
    "contention_node_cpu_steal_seconds_total",
    COUNTER,
    SECONDS,
    "CPU time the hypervisor gave to other guests, summed over CPUs (/proc/stat "
    f"steal).{FROM_PASS}",
    "node",
    N,
    doc="time the hypervisor ran other guests, summed over CPUs (the `cpu-steal` "
    "finding's signal, divided by `contention_node_cpu_cores`). Absent, with one log "
    'line, when `/proc/stat` has no steal column (kernels before 2.6.11): never a 0 for "unknown"',
    source="`/proc/stat` steal",
)


def _psi(resource: str, full: bool) -> Family:
    """Node-wide PSI of ``resource`` (cpu, memory, io): *some*, or *full*."""
    word, text = ("stalled", full_help) if full else ("waiting", some_help)
    return Family(
        f"contention_node_pressure_{resource}_{word}_seconds_total",
        COUNTER,
        SECONDS,
        text("Node-wide", resource),
        "node",
        N,
        doc=f"node PSI {resource} *{'full' if full else 'some'}*",
        source=f"`/proc/pressure/{resource}`",
    )


NODE_CPU_PRESSURE_WAITING_SECONDS = _psi("cpu", full=False)
NODE_CPU_PRESSURE_STALLED_SECONDS = _psi("cpu", full=True)
NODE_MEMORY_PRESSURE_WAITING_SECONDS = _psi("memory", full=False)
NODE_MEMORY_PRESSURE_STALLED_SECONDS = _psi("memory", full=True)
NODE_IO_PRESSURE_WAITING_SECONDS = _psi("io", full=False)
NODE_IO_PRESSURE_STALLED_SECONDS = _psi("io", full=True)

FAMILIES = (
    NODE_INFO,
    NODE_COMPUTE_SUPPORTED,
    NODE_PSI_AVAILABLE,
    NODE_BTF_AVAILABLE,
    NODE_CPU_CORES,
    NODE_MEMORY_BYTES,
    NODE_CONTEXT_SWITCHES,
    NODE_CPU_STEAL_SECONDS,
    NODE_CPU_PRESSURE_WAITING_SECONDS,
    NODE_CPU_PRESSURE_STALLED_SECONDS,
    NODE_MEMORY_PRESSURE_WAITING_SECONDS,
    NODE_MEMORY_PRESSURE_STALLED_SECONDS,
    NODE_IO_PRESSURE_WAITING_SECONDS,
    NODE_IO_PRESSURE_STALLED_SECONDS,
)
