"""The names of the pack's recording rules, read by the rules that follow them, the
alerts and their annotations (and by anyone querying Prometheus by hand).

``level:metric:operations`` (Prometheus's naming practice; a metric divided by another
is ``<a>_per_<b>:ratio``). ``{w}`` stands for the findings window (``5m``). The
expressions are in ``recording``. A record named after a family is built from the
family's name in ``promql`` (from the catalog), so the two cannot drift apart.
"""

from __future__ import annotations

from .. import promql as pq


def _counter(family: str) -> str:
    """A counter's name without ``_total``: what a record of its rate is named after."""
    return family.removesuffix("_total")


def _less(name: str, *, prefix: str = "", suffix: str = "") -> str:
    """``name`` without ``prefix`` and ``suffix``, which it must have: a family renamed
    so that they no longer fit fails at import instead of naming a record after a
    family that no longer exists."""
    if not (name.startswith(prefix) and name.endswith(suffix)):
        raise ValueError(f"{name!r} does not have the prefix {prefix!r} and suffix {suffix!r}")
    return name[len(prefix) : len(name) - len(suffix)]


def _per(numerator: str, denominator: str, shared: str) -> str:
    """``<a>_per_<b>``: a ratio's record, ``b`` without the prefix it shares with ``a``."""
    return f"{numerator}_per_{_less(denominator, prefix=shared)}"


# CPU usage over sampled seconds (or over a request) is cores: the usage is named
# without its seconds, and its ratio records after the sampled seconds.
_USAGE = _less(_counter(pq.USAGE), suffix="_seconds")
_USAGE_RATIO = _per(_USAGE, _counter(pq.SAMPLED), "contention_")
_WORKING_SET = _less(pq.WORKING_SET, suffix="_bytes")  # in other units: mebibytes

# Signals, for dashboards and descriptions:
R_PSI_SOME = f"cgroup:{_counter(pq.CPU_SOME)}:rate1m"
R_PSI_FULL = f"cgroup:{_counter(pq.CPU_FULL)}:rate1m"
R_THROTTLE = f"cgroup:{_counter(pq.THROTTLED_PERIODS)}:ratio_rate{{w}}"
R_THROTTLE_S = f"cgroup:{_counter(pq.THROTTLED_SECONDS)}:rate{{w}}"
R_P99 = f"cgroup:{pq.RUNQ}:p99_rate1m"
R_RUNQ_EVENTS = f"cgroup:{pq.RUNQ_COUNT}:rate1m"
R_USAGE = f"cgroup:{_USAGE_RATIO}:ratio_rate{{w}}"
R_USAGE_OVER_REQ = f"cgroup:{_per(_USAGE, pq.CPU_REQUEST, 'contention_cpu_')}:ratio_rate{{w}}"
R_MEM_SOME = f"cgroup:{_counter(pq.MEM_SOME)}:rate1m"
R_MEM_FULL = f"cgroup:{_counter(pq.MEM_FULL)}:rate1m"
R_REFAULTS = f"cgroup:{_counter(pq.REFAULTS)}:rate1m"
R_NODE_MEM_SOME = f"node:{_counter(pq.NODE_MEM_SOME)}:rate1m"
R_STEAL = f"node:{_per(_counter(pq.NODE_STEAL), pq.NODE_CORES, 'contention_node_')}:ratio_rate1m"
R_OVERAGE = f"cgroup:{pq.WORKING_SET}:over_request"
R_OVERAGE_SHARE = "cgroup:contention_memory_overage_per_node_overage:ratio"
# How much the overage grew over the window (the memory culprit is who grew most).
R_OVERAGE_GROWTH = f"cgroup:{pq.WORKING_SET}:over_request_delta{{w}}"
R_MEM_CULPRIT = "node:contention_memory_overage_per_node_overage:top1"
# The node's memory culprit was named for its growth (absent: for its overage).
R_MEM_CULPRIT_GREW = f"node:{pq.WORKING_SET}:over_request_delta{{w}}_top1"
R_WATCHED = f"cgroup:{_counter(pq.SAMPLED)}:watched_sustain"
# Per-minute flags (value 1 when the minute just ended qualifies), recorded once and
# read back with offset for the earlier minutes:
R_RUNQ_SLOW_1M = f"cgroup:{pq.RUNQ}:p99_over_stall_rate1m"
R_RUNQ_CRIT_1M = f"cgroup:{pq.RUNQ}:p99_over_critical_rate1m"
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
R_WITHIN_REQ = f"cgroup:{_USAGE_RATIO}:within_request_rate{{w}}"
R_ENTITLED = f"cgroup:{_USAGE_RATIO}:entitled_rate{{w}}"
R_BLAME_CULPRIT = f"cgroup:{pq.BLAME_RATIO}:culprit"
# The victim's wait the probe could not attribute (its culprit_kind="unknown" shares,
# summed), where at least blameShare: attribution broken or partial (docs/findings.md).
R_UNATTRIBUTED = f"cgroup:{pq.BLAME_RATIO}:unattributed"
R_WORKLOAD_CULPRIT = f"cgroup:{pq.WORKLOAD_BLAME_RATIO}:culprit"
# A workload's running containers: summed usage and summed requests (docs/findings.md).
R_WL_USAGE = f"workload:{_USAGE_RATIO}:sum_ratio_rate{{w}}"
R_WL_REQUEST = f"workload:{pq.CPU_REQUEST}:sum"
R_WL_WITHIN = f"workload:{_USAGE_RATIO}:sum_within_request_rate{{w}}"
R_WL_ENTITLED = f"workload:{_USAGE_RATIO}:sum_entitled_rate{{w}}"
# ... how many of its containers run now, and the average of each member's own use over
# the window, gone ones included: what sizes its requests while none of its running
# containers has a measured use yet.
R_WL_RUNNING = f"workload:{_counter(pq.USAGE)}:count"
R_WL_MEMBER_USE = f"workload:{_USAGE_RATIO}:avg_ratio_rate{{w}}"
# ... the measured members' requests over their count, and those inside them
R_WL_MEMBER_REQUEST = f"workload:{pq.CPU_REQUEST}:avg_measured{{w}}"
R_WL_MEMBERS_WITHIN = f"workload:{_USAGE_RATIO}:avg_within_request_rate{{w}}"
R_MEM_PRESSURE = "cgroup:contention_memory_pressure:sustained"
R_MEM_THRASH = "cgroup:contention_memory_limit_thrash:sustained"
R_MEM_CRIT = "cgroup:contention_memory_severity_critical:rate1m"
R_STEAL_SUSTAINED = "node:contention_node_cpu_steal:sustained"
# Remediation values (docs/findings.md#remediation-with-numbers), for the annotations:
R_FIX_CPU_LIMIT = "cgroup:contention_cpu_demand_millicores:ceil_rate{w}"
# ... in the bursty case: the fewest cores (a burst bucket bound) its threads wanting a
# CPU at once exceeded in less than throttledRatioMax of the times one was queued
R_FIX_CPU_LIMIT_BURST = f"cgroup:{pq.RUNNABLE}:limit_increase{{w}}"
R_FIX_CPU_REQUEST = f"cgroup:{_USAGE}_millicores:ceil_ratio_rate{{w}}"
R_FIX_WL_REQUEST = f"workload:{_USAGE}_millicores:ceil_sum_ratio_rate{{w}}"
# ... sized from its members' use (none running measured yet): one member's, rounded up
R_FIX_WL_EACH = f"workload:{_USAGE}_millicores:ceil_avg_ratio_rate{{w}}"
R_FIX_NODE_CPU = "node:contention_runqueue_wait_millicores:ceil_increase{w}"
R_FIX_MEM_LIMIT = f"cgroup:{_WORKING_SET}_refaulted_mebibytes:ceil_increase1m"
R_FIX_MEM_REQUEST = f"cgroup:{_WORKING_SET}_mebibytes:ceil"
