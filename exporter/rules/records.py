"""The names of the pack's recording rules, read by the rules that follow them, the
alerts and their annotations (and by anyone querying Prometheus by hand).

``level:metric:operations`` (Prometheus's naming practice; a metric divided by another
is ``<a>_per_<b>:ratio``). ``{w}`` stands for the findings window (``5m``). The
expressions are in ``recording``.
"""

from __future__ import annotations

from .. import promql as pq


def _counter(family: str) -> str:
    """A counter's name without ``_total``: what a record of its rate is named after."""
    return family.removesuffix("_total")


# Signals, for dashboards and descriptions:
R_PSI_SOME = f"cgroup:{_counter(pq.CPU_SOME)}:rate1m"
R_PSI_FULL = f"cgroup:{_counter(pq.CPU_FULL)}:rate1m"
R_THROTTLE = "cgroup:contention_cpu_cfs_throttled_periods:ratio_rate{w}"
R_THROTTLE_S = "cgroup:contention_cpu_cfs_throttled_seconds:rate{w}"
R_P99 = "cgroup:contention_runqueue_latency_seconds:p99_rate1m"
R_RUNQ_EVENTS = "cgroup:contention_runqueue_latency_seconds_count:rate1m"
R_USAGE = "cgroup:contention_cpu_usage_per_sampled_seconds:ratio_rate{w}"
R_USAGE_OVER_REQ = "cgroup:contention_cpu_usage_per_request_cores:ratio_rate{w}"
R_MEM_SOME = f"cgroup:{_counter(pq.MEM_SOME)}:rate1m"
R_MEM_FULL = f"cgroup:{_counter(pq.MEM_FULL)}:rate1m"
R_REFAULTS = "cgroup:contention_memory_workingset_refaults:rate1m"
R_NODE_MEM_SOME = f"node:{_counter(pq.NODE_MEM_SOME)}:rate1m"
R_STEAL = "node:contention_node_cpu_steal_seconds_per_cpu_cores:ratio_rate1m"
R_OVERAGE = "cgroup:contention_memory_working_set_bytes:over_request"
R_OVERAGE_SHARE = "cgroup:contention_memory_overage_per_node_overage:ratio"
# How much the overage grew over the window (the memory culprit is who grew most).
R_OVERAGE_GROWTH = "cgroup:contention_memory_working_set_bytes:over_request_delta{w}"
R_MEM_CULPRIT = "node:contention_memory_overage_per_node_overage:top1"
# The node's memory culprit was named for its growth (absent: for its overage).
R_MEM_CULPRIT_GREW = "node:contention_memory_working_set_bytes:over_request_delta{w}_top1"
R_WATCHED = "cgroup:contention_sampled_seconds:watched_sustain"
# Per-minute flags (value 1 when the minute just ended qualifies), recorded once and
# read back with offset for the earlier minutes:
R_RUNQ_SLOW_1M = "cgroup:contention_runqueue_latency_seconds:p99_over_stall_rate1m"
R_RUNQ_CRIT_1M = "cgroup:contention_runqueue_latency_seconds:p99_over_critical_rate1m"
R_CPU_STALLED_1M = "cgroup:contention_cpu_stalled:rate1m"
R_MEM_STALLED_1M = "cgroup:contention_memory_stalled:rate1m"
R_LIMIT_HITS_1M = "cgroup:contention_memory_limit_hits:rate1m"
# Per victim: node memory pressure beyond the victim's own stall (docs/findings.md).
R_NODE_MEM_1M = "cgroup:contention_node_pressure_memory_beyond_self:rate1m"
R_STEAL_1M = "node:contention_node_cpu_steal:rate1m"
# Decisions (value 1):
R_CPU_STALLED = "cgroup:contention_cpu_stalled:sustained"
R_CPU_VICTIM = "cgroup:contention_cpu_unthrottled_stall:sustained"
R_CPU_CRIT = "cgroup:contention_cpu_severity_critical:rate1m"
R_CPU_BOTH = "cgroup:contention_cpu_stall_both_signals:rate1m"
# Culprits inside their request over the window (value: the usage), and those of them
# inside it at every earlier minute boundary of the sustain too (docs/findings.md).
R_WITHIN_REQ = "cgroup:contention_cpu_usage_per_sampled_seconds:within_request_rate{w}"
R_ENTITLED = "cgroup:contention_cpu_usage_per_sampled_seconds:entitled_rate{w}"
R_BLAME_CULPRIT = "cgroup:contention_blame_ratio:culprit"
# The victim's wait the probe could not attribute (its culprit_kind="unknown" shares,
# summed), where at least blameShare: attribution broken or partial (docs/findings.md).
R_UNATTRIBUTED = "cgroup:contention_blame_ratio:unattributed"
R_WORKLOAD_CULPRIT = "cgroup:contention_workload_blame_ratio:culprit"
# A workload's running containers: summed usage and summed requests (docs/findings.md).
R_WL_USAGE = "workload:contention_cpu_usage_per_sampled_seconds:sum_ratio_rate{w}"
R_WL_REQUEST = "workload:contention_cpu_request_cores:sum"
R_WL_WITHIN = "workload:contention_cpu_usage_per_sampled_seconds:sum_within_request_rate{w}"
R_WL_ENTITLED = "workload:contention_cpu_usage_per_sampled_seconds:sum_entitled_rate{w}"
R_MEM_PRESSURE = "cgroup:contention_memory_pressure:sustained"
R_MEM_THRASH = "cgroup:contention_memory_limit_thrash:sustained"
R_MEM_CRIT = "cgroup:contention_memory_severity_critical:rate1m"
R_STEAL_SUSTAINED = "node:contention_node_cpu_steal:sustained"
# Remediation values (docs/findings.md#remediation-with-numbers), for the annotations:
R_FIX_CPU_LIMIT = "cgroup:contention_cpu_demand_millicores:ceil_rate{w}"
# ... in the bursty case: the fewest cores (a burst bucket bound) its threads wanting a
# CPU at once exceeded in less than throttledRatioMax of the times one was queued
R_FIX_CPU_LIMIT_BURST = "cgroup:contention_runnable_threads:limit_increase{w}"
R_FIX_CPU_REQUEST = "cgroup:contention_cpu_usage_millicores:ceil_ratio_rate{w}"
R_FIX_WL_REQUEST = "workload:contention_cpu_usage_millicores:ceil_sum_ratio_rate{w}"
R_FIX_NODE_CPU = "node:contention_runqueue_wait_millicores:ceil_increase{w}"
R_FIX_MEM_LIMIT = "cgroup:contention_memory_working_set_refaulted_mebibytes:ceil_increase1m"
R_FIX_MEM_REQUEST = "cgroup:contention_memory_working_set_mebibytes:ceil"
