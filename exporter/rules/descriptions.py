"""The findings alerts' ``description`` annotations: what was seen, with the victim's
and the node's numbers read from the recording rules when the alert is sent."""

from __future__ import annotations

from ..findings.model import CULPRIT_WORKLOAD, Kind
from ..findings.thresholds import Thresholds
from .records import (
    R_MEM_CULPRIT_GREW,
    R_MEM_SOME,
    R_NODE_MEM_SOME,
    R_P99,
    R_PSI_SOME,
    R_STEAL,
    R_STEAL_SUSTAINED,
    R_UNATTRIBUTED,
)
from .templates import (
    MEM_CULPRIT_T,
    VICTIM_T,
    node_query_t,
    node_with_t,
    victim_query_t,
    victim_with_t,
)


def descriptions(th: Thresholds) -> dict[Kind, str]:
    psi = victim_query_t(th, R_PSI_SOME, "humanizePercentage")
    steal = node_query_t(th, R_STEAL, "humanizePercentage")
    p99 = victim_query_t(th, R_P99, "humanizeDuration")
    mem = victim_query_t(th, R_MEM_SOME, "humanizePercentage")
    node_mem = node_query_t(th, R_NODE_MEM_SOME, "humanizePercentage")
    w = th.window_minutes
    x = f"{th.mem_culprit_share * 100:g}"
    return {
        Kind.CPU_THROTTLED: (
            f"{VICTIM_T} was throttled in {{{{ $value | humanizePercentage }}}} of its CFS "
            f"periods over the last {w}m (threshold {th.throttled_ratio * 100:g}%). It waits "
            "on its own CPU limit, not on a neighbour."
        ),
        Kind.NOISY_NEIGHBOR: (
            f"{VICTIM_T} is stalled waiting for CPU (cpu pressure some {psi}, run-queue p99 "
            f"{p99} in the latest minute). {{{{ $labels.culprit }}}} "
            "({{ $labels.culprit_kind }}) caused {{ $value | humanizePercentage }} of its "
            f"run-queue wait over the last {w}m while using more CPU than it requested "
            "(or having no request)."
            f'{{{{ if eq $labels.culprit_kind "{CULPRIT_WORKLOAD}" }}}} That is all the '
            "workload's containers together, running or gone: no single one of them "
            "passes the culprit test.{{ end }}"
            + node_with_t(
                th,
                R_STEAL_SUSTAINED,
                f" The hypervisor also took {steal} of the node's CPU time (steal) in the "
                "latest minute.",
            )
        ),
        Kind.CPU_CONTENDED: (
            f"{VICTIM_T} is stalled waiting for CPU (cpu pressure some {psi}, run-queue p99 "
            f"{p99} in the latest minute), but no single neighbour (nor one workload's "
            f"containers together) caused {th.blame_share * 100:g}% of its wait while "
            "running beyond its CPU request: "
            + node_with_t(
                th,
                R_STEAL_SUSTAINED,
                f"the hypervisor took {steal} of the node's CPU time (steal) in the latest "
                "minute, so the CPU it misses went to other guests on the host, not to an "
                "oversubscribed node (see ContentionCPUSteal).",
                victim_with_t(
                    th,
                    R_UNATTRIBUTED,
                    "{{ . | first | value | humanizePercentage }} of its run-queue wait over "
                    f"the last {w}m could not be attributed (culprit_kind unknown): the "
                    "scheduler probe's attribution is broken or partial on this node, so a "
                    "neighbour may be hidden in it. This is not evidence that the node is "
                    "oversubscribed (see the runbook).",
                    "the node is oversubscribed.",
                ),
            )
        ),
        Kind.MEMORY_PRESSURE: (
            f"{VICTIM_T} is stalled on memory (memory pressure some {mem} in the latest "
            f"minute) while the node is under memory pressure ({node_mem}). "
            "{{ if or $labels.culprit_pod $labels.culprit_cgroup }}Heuristic culprit: "
            f"{MEM_CULPRIT_T}, "
            + node_with_t(
                th,
                R_MEM_CULPRIT_GREW.format(w=f"{w}m"),
                f"the container that grew most beyond its memory request over the last {w}m, "
                "holding {{ $value | humanizePercentage }} of the node's memory beyond "
                "requests.",
                "{{ $value | humanizePercentage }} of the node's memory beyond requests (no "
                f"container grew by {x}% of it over the last {w}m).",
            )
            + f"{{{{ else }}}}No container grew by {x}% of the node's memory beyond requests "
            f"over the last {w}m, nor holds {x}% of it.{{{{ end }}}}"
        ),
        Kind.MEMORY_LIMIT_THRASH: (
            f"{VICTIM_T} is stalled on memory (memory pressure some {mem} in the latest "
            "minute) while hitting its own memory limit (memory.events high/max rising); "
            "the node is not under memory pressure beyond its own stall."
        ),
        Kind.CPU_STEAL: (
            "The hypervisor took {{ $value | humanizePercentage }} of the node's CPU time "
            f"(steal) in the latest minute, at least {th.cpu_steal_ratio * 100:g}% in each "
            f"of the last {th.sustain_minutes} minutes, while containers on the node were "
            "stalled waiting for CPU. The host is running other guests on this node's CPUs: "
            "no workload on the node is the cause."
        ),
    }
