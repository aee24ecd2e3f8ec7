"""Generate the Prometheus rule pack from the threshold config.

The alerts encode docs/findings.md's gating logic over the raw exported metrics, with
the same per-minute arithmetic as the Python evaluator (``exporter.findings``):

* each minute's stall is recorded once (``cgroup:contention_cpu_stalled:rate1m``, the
  memory and node flags likewise) from ``rate(x[1m])``, and "stalled for two
  consecutive minutes" reads that flag now and ``offset 1m`` (no ``for:``), so the
  alert state is a pure function of the data, exactly like the evaluator's verdict.
  Reading a recorded flag back a minute later needs an evaluation a minute earlier:
  the group interval must divide 1m;
* the throttling gate is ``unless on(<node>, cgroup) (throttled ratio >= max)``;
* a culprit is dropped ``unless`` its usage is at or below its own request; usage is
  ``rate(usage[w]) / rate(contention_sampled_seconds_total[w])``, the average over the
  part of the window the culprit was watched, so a young culprit is not understated,
  and only while the culprit still runs (a gone one's use is not known: it stays a
  culprit, as in the evaluator);
* when no container passes alone, a workload (``contention_workload_blame_share``: its
  containers' summed share) can: dropped ``unless`` its running containers' summed
  usage is at or below their summed requests (``contention_cgroup_info``'s
  ``workload`` label says whose they are);
* a victim is judged only once it has been watched for ``sustainMinutes``
  (``contention_sampled_seconds_total offset <sustain>m`` exists for the same label
  set): before that the per-minute rates would cover a series younger than their range;
* node memory pressure is joined ``on(<node labels>)``, minus the victim's own memory
  stall in minutes it hit its own limit (node PSI includes the victim's stall).

The PromQL facts shared with the dashboards (metric names, the throttle ratio, ``num``
...) are in ``exporter.promql``. Users customise the thresholds file, never the
generated YAML.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import promql as pq
from ..findings.model import (
    CULPRIT_HYPERVISOR,
    CULPRIT_WORKLOAD,
    NAMEABLE_CULPRIT_KINDS,
    REMEDIATION,
    Kind,
)
from ..findings.remediation import (
    MIB,
    MILLI,
    PAGE_BYTES,
    ROUNDING_SLACK,
    TEXT_UNDER_STEAL,
    TEXT_WITH_VALUE,
    TEXT_WITHOUT_VALUE,
    TEXT_WORKLOAD_CULPRIT,
)
from ..findings.thresholds import Thresholds, duration_ms
from ..identity import IDENTITY_LABELS
from ..probe.histogram import RUNQ_BOUNDS_S, le_label
from ..promql import num
from . import health, inhibit
from .alert import alerting_rule, check_disabled, enabled

GROUP = "contention"
ALERT_PREFIX = "Contention"

ALERT_NAMES = {
    Kind.CPU_THROTTLED: "ContentionCPUThrottled",
    Kind.NOISY_NEIGHBOR: "ContentionNoisyNeighbor",
    Kind.CPU_CONTENDED: "ContentionCPUContended",
    Kind.MEMORY_PRESSURE: "ContentionMemoryPressure",
    Kind.MEMORY_LIMIT_THRASH: "ContentionMemoryLimitThrash",
    Kind.CPU_STEAL: "ContentionCPUSteal",
}
KIND_OF_ALERT = {v: k for k, v in ALERT_NAMES.items()}

SUMMARIES = {
    Kind.CPU_THROTTLED: "Container is throttled by its own CPU limit.",
    Kind.NOISY_NEIGHBOR: "Container is starved of CPU by a named neighbour.",
    Kind.CPU_CONTENDED: "Container is starved of CPU and no single neighbour is the cause.",
    Kind.MEMORY_PRESSURE: "Container is stalled on memory while the node is under memory pressure.",
    Kind.MEMORY_LIMIT_THRASH: "Container is thrashing under its own memory limit.",
    Kind.CPU_STEAL: "The hypervisor is taking the node's CPU while containers stall.",
}

# Labels an alert always carries: cpu-steal names the hypervisor, which has no series.
STATIC_LABELS = {
    Kind.CPU_STEAL: {"culprit_kind": CULPRIT_HYPERVISOR, "culprit": CULPRIT_HYPERVISOR},
}

# Recording rule names: level:metric:operations (Prometheus's naming practice; a metric
# divided by another is <a>_per_<b>:ratio). Signals, for dashboards and descriptions:
R_PSI_SOME = "cgroup:contention_cpu_pressure_waiting_seconds:rate1m"
R_PSI_FULL = "cgroup:contention_cpu_pressure_stalled_seconds:rate1m"
R_THROTTLE = "cgroup:contention_cpu_cfs_throttled_periods:ratio_rate{w}"
R_THROTTLE_S = "cgroup:contention_cpu_cfs_throttled_seconds:rate{w}"
R_P99 = "cgroup:contention_runqueue_latency_seconds:p99_rate1m"
R_RUNQ_EVENTS = "cgroup:contention_runqueue_latency_seconds_count:rate1m"
R_USAGE = "cgroup:contention_cpu_usage_per_sampled_seconds:ratio_rate{w}"
R_USAGE_OVER_REQ = "cgroup:contention_cpu_usage_per_request_cores:ratio_rate{w}"
R_MEM_SOME = "cgroup:contention_memory_pressure_waiting_seconds:rate1m"
R_MEM_FULL = "cgroup:contention_memory_pressure_stalled_seconds:rate1m"
R_REFAULTS = "cgroup:contention_memory_workingset_refaults:rate1m"
R_NODE_MEM_SOME = "node:contention_node_memory_pressure_waiting_seconds:rate1m"
R_STEAL = "node:contention_node_cpu_steal_seconds_per_cpu_cores:ratio_rate1m"
R_OVERAGE = "cgroup:contention_memory_working_set_bytes:over_request"
R_OVERAGE_SHARE = "cgroup:contention_memory_overage_per_node_overage:ratio"
R_MEM_CULPRIT = "node:contention_memory_overage_per_node_overage:top1"
R_WATCHED = "cgroup:contention_sampled_seconds:watched_sustain"
# Per-minute flags (value 1 when the minute just ended qualifies), recorded once and
# read back with offset for the earlier minutes:
R_RUNQ_SLOW_1M = "cgroup:contention_runqueue_latency_seconds:p99_over_stall_rate1m"
R_RUNQ_CRIT_1M = "cgroup:contention_runqueue_latency_seconds:p99_over_critical_rate1m"
R_CPU_STALLED_1M = "cgroup:contention_cpu_stalled:rate1m"
R_MEM_STALLED_1M = "cgroup:contention_memory_stalled:rate1m"
R_LIMIT_HITS_1M = "cgroup:contention_memory_limit_hits:rate1m"
# Per victim: node memory pressure beyond the victim's own stall (docs/findings.md).
R_NODE_MEM_1M = "cgroup:contention_node_memory_pressure_beyond_self:rate1m"
R_STEAL_1M = "node:contention_node_cpu_steal:rate1m"
# Decisions (value 1):
R_CPU_STALLED = "cgroup:contention_cpu_stalled:sustained"
R_CPU_VICTIM = "cgroup:contention_cpu_unthrottled_stall:sustained"
R_CPU_CRIT = "cgroup:contention_cpu_severity_critical:rate1m"
R_CPU_BOTH = "cgroup:contention_cpu_stall_both_signals:rate1m"
R_BLAME_CULPRIT = "cgroup:contention_blame_share:culprit"
R_WORKLOAD_CULPRIT = "cgroup:contention_workload_blame_share:culprit"
# A workload's running containers: summed usage and summed requests (docs/findings.md).
R_WL_USAGE = "workload:contention_cpu_usage_per_sampled_seconds:sum_ratio_rate{w}"
R_WL_REQUEST = "workload:contention_cpu_request_cores:sum"
R_MEM_PRESSURE = "cgroup:contention_memory_pressure:sustained"
R_MEM_THRASH = "cgroup:contention_memory_limit_thrash:sustained"
R_MEM_CRIT = "cgroup:contention_memory_severity_critical:rate1m"
R_STEAL_SUSTAINED = "node:contention_node_cpu_steal:sustained"
# Remediation values (docs/findings.md#remediation-with-numbers), for the annotations:
R_FIX_CPU_LIMIT = "cgroup:contention_cpu_demand_millicores:ceil_rate{w}"
R_FIX_CPU_REQUEST = "cgroup:contention_cpu_usage_millicores:ceil_ratio_rate{w}"
R_FIX_WL_REQUEST = "workload:contention_cpu_usage_millicores:ceil_sum_ratio_rate{w}"
R_FIX_NODE_CPU = "node:contention_runqueue_wait_millicores:ceil_increase{w}"
R_FIX_MEM_LIMIT = "cgroup:contention_memory_working_set_refaulted_mebibytes:ceil_increase1m"
R_FIX_MEM_REQUEST = "cgroup:contention_memory_working_set_mebibytes:ceil"

INF_SEL = 'le="+Inf"'


@dataclass(frozen=True, slots=True)
class RuleTerms:
    """The rules' PromQL terms for one threshold config."""

    th: Thresholds

    @property
    def node(self) -> str:
        return ", ".join(self.th.join_labels)

    @property
    def m(self) -> tuple[str, ...]:
        """The config's ``selector``: on every raw series the rules read."""
        return self.th.matchers

    def s(self, metric: str, *matchers: str) -> str:
        return pq.sel(metric, *self.m, *matchers)

    def rate(self, metric: str, window: str, *matchers: str, k: int = 0) -> str:
        return pq.rate(metric, window, *self.m, *matchers, k=k)

    @property
    def w(self) -> str:
        return f"{self.th.window_minutes}m"

    def on(self, *extra: str) -> str:
        return pq.on(self.th.join_labels, *extra)

    def runq_le(self, bound_s: float, k: int) -> str:
        le = f'le="{le_label(bound_s)}"'
        return f"sum without(le) ({self.rate(pq.RUNQ_BUCKET, '1m', le, k=k)})"

    def runq_slow(self, bound_s: float, k: int) -> str:
        """p99 >= bound over enough events (or any overflow wait) in minute -k."""
        inf = f"sum without(le) ({self.rate(pq.RUNQ_BUCKET, '1m', INF_SEL, k=k)})"
        top = self.runq_le(RUNQ_BOUNDS_S[-1], k)
        return (
            f"(\n    ({self.runq_le(bound_s, k)}\n    / {inf}) <= 0.99\n  )\n  and (\n"
            f"    ({pq.runq_events_per_minute(*self.m, k=k)} >= {num(self.th.min_runq_events)})\n"
            f"    or ({inf}\n    - {top} > 0)\n  )"
        )

    def psi_some(self, k: int = 0) -> str:
        return self.rate(pq.CPU_SOME, "1m", k=k)

    def psi_full(self, k: int = 0) -> str:
        return self.rate(pq.CPU_FULL, "1m", k=k)

    def cpu_stalled(self) -> str:
        """The minute just ended: PSI some over the threshold, or a slow run queue."""
        return f"({self.psi_some()} >= {num(self.th.stall_some)}) or {R_RUNQ_SLOW_1M}"

    def mem_stalled(self) -> str:
        return (
            f"({self.rate(pq.MEM_SOME, '1m')} >= {num(self.th.mem_stall_some)})"
            f" or ({pq.refaults('1m', *self.m)} >= {pq.per_second(self.th.refault_per_min)})"
        )

    def node_mem(self) -> str:
        """Per memory-stalled container, the minute just ended: the node's memory stall
        minus the container's own when it hit its limit (node PSI includes it), at or
        above the node threshold. Others keep the node's (``+ 0``: same label set)."""
        node = self.rate(pq.NODE_MEM_SOME, "1m")
        own = f"{self.rate(pq.MEM_SOME, '1m')} and {R_LIMIT_HITS_1M}"
        return (
            f"(\n    ({node}\n    - {self.on()} group_right() ({own}))\n  or\n"
            f"    ({node}\n    + {self.on()} group_right() (0 * {R_MEM_STALLED_1M}))\n"
            f"  ) >= {num(self.th.node_mem_stall_some)}"
        )

    def limit_hits(self) -> str:
        hits = self.rate(pq.MEM_EVENTS, "1m", 'event=~"high|max"')
        return f"sum without(event) ({hits}) > 0"

    def each_sustain_minute(self, term: str) -> str:
        """``term`` for every sustain minute, newest first (``{off}`` marks where each
        minute's offset goes), and-ed together."""
        parts = [term.format(off=pq.offset(k)) for k in range(self.th.sustain_minutes)]
        return "\n  and\n  ".join(f"({p})" for p in parts)


def _flag(expr: str) -> str:
    return f"group without() (\n  {expr}\n)"


def recording_rules(th: Thresholds) -> list[dict[str, Any]]:
    q = RuleTerms(th)
    w = q.w
    cgroup_on = q.on(*IDENTITY_LABELS)
    nameable = f'culprit_kind=~"{"|".join(NAMEABLE_CULPRIT_KINDS)}"'

    def rl(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr}

    label_copies = expr_culprit_labels(
        f"topk by({q.node}) (1, {R_OVERAGE_SHARE}) >= {num(th.mem_culprit_share)}"
    )
    usage = R_USAGE.format(w=w)
    # a culprit's usage only while it runs: a gone culprit's use over the window is not
    # known (the evaluator has no window for it), so it is never excused by it
    running = f"({usage} and {q.s(pq.USAGE)})"
    ws, mem_req = q.s(pq.WORKING_SET), q.s(pq.MEM_REQUEST)
    wl_on = q.on(*WORKLOAD_LABELS)
    return [
        # Signals, for dashboards and alert descriptions.
        rl(R_PSI_SOME, q.psi_some()),
        rl(R_PSI_FULL, q.psi_full()),
        rl(R_THROTTLE.format(w=w), pq.throttle_ratio(w, *q.m)),
        rl(R_THROTTLE_S.format(w=w), q.rate(pq.THROTTLED_SECONDS, w)),
        rl(R_P99, pq.runq_p99("1m", *q.m)),
        rl(R_RUNQ_EVENTS, q.rate(pq.RUNQ_COUNT, "1m")),
        # Matched on every label, not on(cgroup): while the API names a new pod, a
        # cgroup has two label sets in the range, and a one-to-one on(cgroup) match
        # would fail the whole rule. The two counters always carry the same labels.
        rl(usage, pq.usage_cores(w, *q.m)),
        rl(
            R_USAGE_OVER_REQ.format(w=w),
            f"{usage} / {cgroup_on} group_left() {q.s(pq.CPU_REQUEST)}",
        ),
        rl(R_MEM_SOME, q.rate(pq.MEM_SOME, "1m")),
        rl(R_MEM_FULL, q.rate(pq.MEM_FULL, "1m")),
        rl(R_REFAULTS, pq.refaults("1m", *q.m)),
        rl(R_NODE_MEM_SOME, q.rate(pq.NODE_MEM_SOME, "1m")),
        rl(R_STEAL, pq.steal_ratio("1m", *q.m)),
        # Memory beyond request (all of it without a request) and its share of the node's.
        rl(
            R_OVERAGE,
            f"clamp_min({ws} - {cgroup_on} group_left() {mem_req}, 0)"
            f"\nor\n({ws} unless {cgroup_on} {mem_req})",
        ),
        rl(
            R_OVERAGE_SHARE,
            f"{R_OVERAGE} / {q.on()} group_left() sum by({q.node}) ({R_OVERAGE})",
        ),
        rl(R_MEM_CULPRIT, f"max without(cgroup, namespace, pod, container) (\n  {label_copies}\n)"),
        # Victims old enough to judge: watched since the start of the sustain minutes.
        # Joined on every label: the per-minute rates are per series, so a cgroup whose
        # labels changed (the API named its pod) has a young series to wait for.
        rl(R_WATCHED, _flag(f"{q.s(pq.SAMPLED)} offset {th.sustain_minutes}m")),
        # Each minute's flags, recorded once (read back below with offset).
        rl(R_RUNQ_SLOW_1M, _flag(q.runq_slow(th.runq_bound_s, 0))),
        rl(R_RUNQ_CRIT_1M, _flag(q.runq_slow(th.critical_runq_bound_s, 0))),
        rl(R_CPU_STALLED_1M, _flag(q.cpu_stalled())),
        rl(R_MEM_STALLED_1M, _flag(q.mem_stalled())),
        rl(R_LIMIT_HITS_1M, _flag(q.limit_hits())),
        rl(R_NODE_MEM_1M, _flag(q.node_mem())),
        rl(R_STEAL_1M, _flag(f"{R_STEAL} >= {num(th.cpu_steal_ratio)}")),
        # Decisions (value 1), docs/findings.md's gating, one term per sustain minute.
        rl(
            R_CPU_STALLED,
            _flag(q.each_sustain_minute(R_CPU_STALLED_1M + "{off}")) + f"\nand {R_WATCHED}",
        ),
        rl(
            R_CPU_VICTIM,
            f"{R_CPU_STALLED}\nunless {cgroup_on}\n"
            f"({R_THROTTLE.format(w=w)} >= {num(th.throttled_ratio_max)})",
        ),
        rl(
            R_CPU_CRIT,
            _flag(f"({q.psi_full()} >= {num(th.critical_cpu_full)}) or {R_RUNQ_CRIT_1M}"),
        ),
        rl(R_CPU_BOTH, _flag(f"({q.psi_some()} >= {num(th.stall_some)}) and {R_RUNQ_SLOW_1M}")),
        rl(
            R_BLAME_CULPRIT,
            f"({q.s(pq.BLAME_SHARE, nameable)} >= {num(th.blame_share)})\n"
            # never the victim itself: drop rows whose culprit is their own cgroup
            f"unless {q.on(*IDENTITY_LABELS, *CULPRIT_IDENTITY)}\n"
            f"{expr_culprit_labels(q.s(pq.USAGE))}\n"
            # a culprit at or below its own request is entitled to the CPU
            f"unless {q.on(*CULPRIT_IDENTITY)}\n"
            + expr_culprit_labels(f"{running} <= {cgroup_on} group_left() {q.s(pq.CPU_REQUEST)}"),
        ),
        # Workloads: their running containers' usage and requests, summed.
        rl(R_WL_USAGE.format(w=w), _per_workload(q, running)),
        rl(
            R_WL_REQUEST,
            _per_workload(q, f"({q.s(pq.CPU_REQUEST)} and {cgroup_on} {running})"),
        ),
        rl(
            R_WORKLOAD_CULPRIT,
            f"({q.s(pq.WORKLOAD_BLAME_SHARE)} >= {num(th.blame_share)})\n"
            # inside the sum of its running containers' requests: entitled to the CPU
            f"unless {wl_on}\n"
            f"(\n  ({R_WL_USAGE.format(w=w)} <= {R_WL_REQUEST})\n  and ({R_WL_REQUEST} > 0)\n)",
        ),
        rl(
            R_MEM_PRESSURE,
            _flag(q.each_sustain_minute(f"{R_MEM_STALLED_1M}{{off}} and {R_NODE_MEM_1M}{{off}}"))
            + f"\nand {R_WATCHED}",
        ),
        rl(
            R_MEM_THRASH,
            _flag(
                q.each_sustain_minute(
                    f"({R_MEM_STALLED_1M}{{off}} and {R_LIMIT_HITS_1M}{{off}})"
                    f" unless {R_NODE_MEM_1M}{{off}}"
                )
            )
            + f"\nand {R_WATCHED}",
        ),
        rl(R_MEM_CRIT, _flag(f"{q.rate(pq.MEM_FULL, '1m')} >= {num(th.critical_mem_full)}")),
        rl(R_STEAL_SUSTAINED, _flag(q.each_sustain_minute(R_STEAL_1M + "{off}"))),
        *remediation_rules(th),
    ]


def _above(value: str, on: str, setting: str, scale: str) -> str:
    """``value`` where it exceeds the current ``setting`` (in the value's unit), or where
    there is no such setting: a suggestion never lowers what is set."""
    above = f"(\n  {value}\n  > {on} group_left() ({setting} {scale})\n)"
    return f"{above}\nor\n({value} unless {on} {setting})"


def remediation_rules(th: Thresholds) -> list[dict[str, Any]]:
    """The suggested values, in the arithmetic order of ``exporter.findings.suggest``."""
    q = RuleTerms(th)
    w = q.w
    cgroup_on = q.on(*IDENTITY_LABELS)
    slack = num(ROUNDING_SLACK)
    ws = q.s(pq.WORKING_SET)
    demand = (
        f"ceil(\n  ({q.rate(pq.USAGE, w)} + {q.rate(pq.THROTTLED_SECONDS, w)})\n"
        f"  / {q.rate(pq.SAMPLED, w)} * {MILLI} - {slack}\n)"
    )
    refaults = f"({pq.increase_refaults('1m', *q.m)} or {ws} * 0)"
    mem_limit = f"ceil(({ws} + {refaults} * {PAGE_BYTES}) / {MIB} - {slack})"
    unthrottled_wait = (
        f"{pq.increase(pq.RUNQ_SUM, w, *q.m)}\n    unless {cgroup_on}\n"
        f"    ({R_THROTTLE.format(w=w)} >= {num(th.throttled_ratio_max)})"
    )
    return [
        {
            "record": R_FIX_CPU_LIMIT.format(w=w),
            "expr": _above(demand, cgroup_on, q.s(pq.CPU_LIMIT), f"* {MILLI}"),
        },
        {
            "record": R_FIX_CPU_REQUEST.format(w=w),
            # only while the culprit still runs: a gone one's use over the window is unknown
            "expr": f"ceil({R_USAGE.format(w=w)} * {MILLI} - {slack})\n"
            f"and present_over_time({q.s(pq.USAGE)}[1m])",
        },
        {
            # a workload culprit: its running containers' summed use (rows only while
            # one of them has a measured use, as the evaluator's)
            "record": R_FIX_WL_REQUEST.format(w=w),
            "expr": f"ceil({R_WL_USAGE.format(w=w)} * {MILLI} - {slack})",
        },
        {
            "record": R_FIX_NODE_CPU.format(w=w),
            "expr": f"ceil(\n  sum by({q.node}) (\n    {unthrottled_wait}\n  )"
            f" / {num(th.window_s)} * {MILLI} - {slack}\n) > 0",
        },
        {
            "record": R_FIX_MEM_LIMIT,
            "expr": _above(mem_limit, cgroup_on, q.s(pq.MEM_LIMIT), f"/ {MIB}"),
        },
        {"record": R_FIX_MEM_REQUEST, "expr": f"ceil({ws} / {MIB} - {slack})"},
    ]


# A culprit's identity labels on blame series: its own series' labels, prefixed.
CULPRIT_IDENTITY = tuple(f"culprit_{lab}" for lab in IDENTITY_LABELS)
# What names a workload culprit (contention_workload_blame_share).
WORKLOAD_LABELS = ("culprit_namespace", "culprit_workload")


def _per_workload(q: RuleTerms, expr: str) -> str:
    """``expr`` (per container) summed per workload, labelled as the workload blame
    series are: ``culprit_namespace`` and ``culprit_workload``."""
    info = q.s(pq.CGROUP_INFO, 'workload!=""')
    owned = f"{expr}\n  * {q.on(*IDENTITY_LABELS)} group_left(workload)\n  {info}"
    labelled = (
        f'label_replace(\n  label_replace(\n  {owned},\n  "culprit_workload", "$1", '
        f'"workload", "(.+)"),\n  "culprit_namespace", "$1", "namespace", "(.*)")'
    )
    return f"sum by({q.node}, {', '.join(WORKLOAD_LABELS)}) (\n  {labelled}\n)"


def expr_culprit_labels(expr: str) -> str:
    """``expr`` with its identity labels copied to ``culprit_<label>`` (an absent one
    stays absent), to join a culprit's own series with the blame shares naming it."""
    out = expr
    for lab in IDENTITY_LABELS:
        out = f'label_replace({out}, "culprit_{lab}", "$1", "{lab}", "(.*)")'
    return out


# -- alerts ---------------------------------------------------------------------------

VICTIM_T = (
    "{{ if $labels.pod }}{{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }}"
    "{{ else }}{{ $labels.cgroup }}{{ end }}"
)
MEM_CULPRIT_T = (
    "{{ if $labels.culprit_pod }}{{ $labels.culprit_namespace }}/{{ $labels.culprit_pod }}/"
    "{{ $labels.culprit_container }}{{ else }}{{ $labels.culprit_cgroup }}{{ end }}"
)


def _query_t(th: Thresholds, record: str, fmt: str) -> str:
    """A description fragment: the victim's value of a recording rule, or n/a."""
    sel = ",".join(f"{lab}=%q" for lab in (*th.join_labels, *IDENTITY_LABELS))
    args = " ".join(f"$labels.{lab}" for lab in (*th.join_labels, *IDENTITY_LABELS))
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{{{{ . | first | value | {fmt} }}}}{{{{ else }}}}n/a{{{{ end }}}}"
    )


def _node_with_t(th: Thresholds, record: str, then: str, otherwise: str = "") -> str:
    """A description fragment: ``then`` when the node has a series of ``record`` (inside
    it, ``.`` is the query result), else ``otherwise``."""
    sel = ",".join(f"{lab}=%q" for lab in th.join_labels)
    args = " ".join(f"$labels.{lab}" for lab in th.join_labels)
    tail = f"{{{{ else }}}}{otherwise}" if otherwise else ""
    return f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}{then}{tail}{{{{ end }}}}'


def _node_query_t(th: Thresholds, record: str, fmt: str) -> str:
    return _node_with_t(th, record, f"{{{{ . | first | value | {fmt} }}}}", "n/a")


def descriptions(th: Thresholds) -> dict[Kind, str]:
    psi = _query_t(th, R_PSI_SOME, "humanizePercentage")
    steal = _node_query_t(th, R_STEAL, "humanizePercentage")
    p99 = _query_t(th, R_P99, "humanizeDuration")
    mem = _query_t(th, R_MEM_SOME, "humanizePercentage")
    node_mem = _node_query_t(th, R_NODE_MEM_SOME, "humanizePercentage")
    w = th.window_minutes
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
            + _node_with_t(
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
            + _node_with_t(
                th,
                R_STEAL_SUSTAINED,
                f"the hypervisor took {steal} of the node's CPU time (steal) in the latest "
                "minute, so the CPU it misses went to other guests on the host, not to an "
                "oversubscribed node (see ContentionCPUSteal).",
                "the node is oversubscribed.",
            )
        ),
        Kind.MEMORY_PRESSURE: (
            f"{VICTIM_T} is stalled on memory (memory pressure some {mem} in the latest "
            f"minute) while the node is under memory pressure ({node_mem}). "
            "{{ if or $labels.culprit_pod $labels.culprit_cgroup }}Heuristic culprit: "
            f"{MEM_CULPRIT_T}, "
            "{{ $value | humanizePercentage }} of the node's memory beyond requests."
            "{{ else }}No single container dominates the node's memory beyond requests."
            "{{ end }}"
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


VALUE_T = '{{ . | first | value | printf "%.0f" }}'


def _fix_t(
    th: Thresholds,
    kind: Kind,
    record: str,
    whose: str | None,
    culprit_t: str = "",
    texts: tuple[str, str] | None = None,
    match: tuple[tuple[str, str], ...] | None = None,
) -> str:
    """The remediation sentence of ``kind`` with the recording rule's value for this
    alert: the victim's (``whose=""``), the culprit's (``"culprit_"``: its identity
    labels, prefixed) or the node's (None); or the sentence without a value.
    ``texts``: the (with value, without) sentences, by default the kind's.
    ``match``: (the record's label, the alert's label) pairs that pick the record's
    row instead of ``whose``'s identity labels."""
    if match is None:
        own = IDENTITY_LABELS if whose is not None else ()
        match = tuple((lab, f"{whose}{lab}") for lab in own)
    pairs = (*((lab, lab) for lab in th.join_labels), *match)
    sel = ",".join(f"{rec}=%q" for rec, _ in pairs)
    args = " ".join(f"$labels.{alert}" for _, alert in pairs)
    w = th.window_minutes
    with_text, without_text = texts or (TEXT_WITH_VALUE[kind], TEXT_WITHOUT_VALUE[kind])
    with_value = with_text.format(value=VALUE_T, culprit=culprit_t, w=w)
    without = without_text.format(culprit=culprit_t, w=w)
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{with_value}{{{{ else }}}}{without}{{{{ end }}}}"
    )


def remediations(th: Thresholds) -> dict[Kind, str]:
    w = f"{th.window_minutes}m"
    mem = _fix_t(th, Kind.MEMORY_PRESSURE, R_FIX_MEM_REQUEST, "culprit_", MEM_CULPRIT_T)
    node_short = R_FIX_NODE_CPU.format(w=w)
    contended = Kind.CPU_CONTENDED
    return {
        Kind.CPU_THROTTLED: _fix_t(th, Kind.CPU_THROTTLED, R_FIX_CPU_LIMIT.format(w=w), ""),
        # a workload culprit's alert carries culprit_workload, a container's never does
        Kind.NOISY_NEIGHBOR: (
            "{{ if $labels.culprit_workload }}"
            + _fix_t(
                th,
                Kind.NOISY_NEIGHBOR,
                R_FIX_WL_REQUEST.format(w=w),
                "culprit_",
                "{{ $labels.culprit }}",
                TEXT_WORKLOAD_CULPRIT,
                tuple((lab, lab) for lab in WORKLOAD_LABELS),
            )
            + "{{ else }}"
            + _fix_t(
                th,
                Kind.NOISY_NEIGHBOR,
                R_FIX_CPU_REQUEST.format(w=w),
                "culprit_",
                "{{ $labels.culprit }}",
            )
            + "{{ end }}"
        ),
        # under sustained steal the sentence points at the VM's host first
        Kind.CPU_CONTENDED: _node_with_t(
            th,
            R_STEAL_SUSTAINED,
            _fix_t(th, contended, node_short, None, texts=TEXT_UNDER_STEAL[contended]),
            _fix_t(th, contended, node_short, None),
        ),
        Kind.MEMORY_PRESSURE: (
            "{{ if or $labels.culprit_pod $labels.culprit_cgroup }}"
            f"{mem}{{{{ else }}}}{TEXT_WITHOUT_VALUE[Kind.MEMORY_PRESSURE]}{{{{ end }}}}"
        ),
        Kind.MEMORY_LIMIT_THRASH: _fix_t(th, Kind.MEMORY_LIMIT_THRASH, R_FIX_MEM_LIMIT, ""),
        # no number: the fix is another host, which the node's figures cannot size
        Kind.CPU_STEAL: REMEDIATION[Kind.CPU_STEAL],
    }


def alert_rules(th: Thresholds) -> list[dict[str, Any]]:
    q = RuleTerms(th)
    on_v = q.on(*IDENTITY_LABELS)
    desc = descriptions(th)
    fix = remediations(th)
    mem_labels = ", ".join(CULPRIT_IDENTITY)

    # a workload only when no container passes alone (docs/findings.md#workload-culprits)
    nn = (
        f"({R_BLAME_CULPRIT} and {on_v} {R_CPU_VICTIM})\nor\n"
        f"({R_WORKLOAD_CULPRIT} and {on_v} {R_CPU_VICTIM}\nunless {on_v} {R_BLAME_CULPRIT})"
    )
    contended = (
        f"{R_CPU_VICTIM} unless {on_v} {R_BLAME_CULPRIT}\nunless {on_v} {R_WORKLOAD_CULPRIT}"
    )
    throttled = f"{R_THROTTLE.format(w=q.w)} >= {num(th.throttled_ratio)}\nand {R_WATCHED}"
    steal = (
        f"{R_STEAL}\nand {q.on()} {R_STEAL_SUSTAINED}\n"
        f"and {q.on()} count by({q.node}) ({R_CPU_VICTIM})"
    )
    mp = (
        f"({R_MEM_PRESSURE} * {q.on()} group_left({mem_labels}) {R_MEM_CULPRIT})\n"
        f"or\n({R_MEM_PRESSURE} unless {q.on()} {R_MEM_CULPRIT})"
    )

    def cpu_sev(base: str) -> list[tuple[str, str]]:
        return [
            ("critical", f"({base})\nand {on_v} {R_CPU_CRIT}"),
            ("warning", f"({base})\nand {on_v} {R_CPU_BOTH}\nunless {on_v} {R_CPU_CRIT}"),
            ("info", f"({base})\nunless {on_v} {R_CPU_CRIT}\nunless {on_v} {R_CPU_BOTH}"),
        ]

    def mem_sev(base: str) -> list[tuple[str, str]]:
        return [
            ("critical", f"({base})\nand {on_v} {R_MEM_CRIT}"),
            ("warning", f"({base})\nunless {on_v} {R_MEM_CRIT}"),
        ]

    plan: list[tuple[Kind, list[tuple[str, str]]]] = [
        (Kind.CPU_THROTTLED, cpu_sev(throttled)),
        (Kind.NOISY_NEIGHBOR, cpu_sev(nn)),
        (Kind.CPU_CONTENDED, cpu_sev(contended)),
        (Kind.MEMORY_PRESSURE, mem_sev(mp)),
        (Kind.MEMORY_LIMIT_THRASH, mem_sev(R_MEM_THRASH)),
        (Kind.CPU_STEAL, [("warning", steal)]),
    ]
    return [
        alerting_rule(
            th,
            ALERT_NAMES[kind],
            expr,
            severity,
            summary=SUMMARIES[kind],
            description=desc[kind],
            remediation=fix[kind],
            labels={"finding": kind.value, **STATIC_LABELS.get(kind, {})},
        )
        for kind, variants in plan
        for severity, expr in variants
    ]


DEFAULT_INTERVAL = "1m"


def check_interval(interval: str) -> str:
    """A Prometheus duration for the group's ``interval`` that divides a minute: each
    minute's recorded flags are read back ``offset 1m``, which finds the evaluation a
    minute earlier only if there was one (ValueError otherwise)."""
    try:
        ms = duration_ms(interval)
    except ValueError:
        raise ValueError(
            f"interval {interval!r} is not a Prometheus duration like 30s or 1m"
        ) from None
    if 60_000 % ms:
        raise ValueError(
            f"interval {interval!r} must divide 1m (e.g. 15s, 20s, 30s, 1m): the rules "
            "read each minute's recorded flags back a minute later"
        )
    return interval


ALERTS = (*dict.fromkeys(ALERT_NAMES.values()), *health.ALERTS)


def rule_groups(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> dict[str, Any]:
    """The findings group, then the self-monitoring group (``exporter.rules.health``),
    without the alerts the config disables (ThresholdsError for an unknown name).

    The findings are one group: rules in a group run in order at one timestamp, so the
    alerts see this evaluation's recorded decisions (across groups they could lag a
    minute). ``interval``: how often Prometheus evaluates them. The rules are
    minute-based, so 1m is enough for the verdicts; a shorter interval only fires and
    resolves sooner."""
    check_disabled(th, ALERTS)
    every = check_interval(interval)
    findings = enabled(th, recording_rules(th) + alert_rules(th))
    own = enabled(th, health.health_rules(th))
    groups = [{"name": GROUP, "interval": every, "rules": findings}]
    if own:
        groups.append({"name": health.GROUP, "interval": every, "rules": own})
    return {"groups": groups}


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)

HEADER = (
    "# GENERATED by `contention-exporter rules generate` from the threshold config.\n"
    "# Do not edit: change thresholds (--config) and regenerate. CI fails on a diff.\n"
)


def dump_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


def render_rule_file(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> str:
    return HEADER + dump_yaml(rule_groups(th, interval))


def render_prometheus_rule(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> str:
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "contention-exporter",
            "labels": {
                "app.kubernetes.io/name": "contention-exporter",
                "app.kubernetes.io/component": "rules",
            },
        },
        "spec": rule_groups(th, interval),
    }
    return HEADER + dump_yaml(doc)


RULE_FILE = Path("rules/contention.rules.yaml")
MANIFEST = Path("deploy/prometheusrule.yaml")
INHIBIT_FILE = inhibit.INHIBIT_FILE


def render_inhibit_file(th: Thresholds) -> str:
    rules = inhibit.inhibit_rules(th, ALERT_NAMES[Kind.CPU_THROTTLED])
    return HEADER + inhibit.INHIBIT_HEADER + dump_yaml({"inhibit_rules": rules})


def render_files(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> dict[Path, str]:
    """Every file ``rules generate`` writes, by path relative to the repository root."""
    return {
        RULE_FILE: render_rule_file(th, interval),
        MANIFEST: render_prometheus_rule(th, interval),
        INHIBIT_FILE: render_inhibit_file(th),
    }
