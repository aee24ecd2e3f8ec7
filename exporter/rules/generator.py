"""Generate the Prometheus rule pack from the threshold config.

The alerts encode seed 000's gating logic over the raw exported metrics, with the
same per-minute arithmetic as the Python evaluator (``exporter.findings``):

* per-minute stall terms are ``rate(x[1m] offset Nm)`` for each sustain minute, so
  "stalled for two consecutive minutes" is part of the expression (no ``for:``): the
  alert state is a pure function of the data, exactly like the evaluator's verdict;
* the throttling gate is ``unless on(<node>, cgroup) (throttled ratio >= max)``;
* a culprit is dropped ``unless`` its usage is at or below its own request; usage is
  ``rate(usage[w]) / rate(contention_sampled_seconds_total[w])``, the average over the
  part of the window the culprit was watched, so a young culprit is not understated;
* a victim is judged only once it has been watched for ``sustainMinutes``
  (``contention_sampled_seconds_total offset <sustain>m`` exists for the same label
  set): before that the per-minute rates would cover a series younger than their range;
* node memory pressure is joined ``on(<node labels>)``.

Users customise the thresholds file, never the generated YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..findings.model import NAMEABLE_CULPRIT_KINDS, Kind
from ..findings.thresholds import Thresholds
from ..probe.histogram import RUNQ_BOUNDS_S, le_label

GROUP = "contention"
ALERT_PREFIX = "Contention"

ALERT_NAMES = {
    Kind.CPU_THROTTLED: "ContentionCPUThrottled",
    Kind.NOISY_NEIGHBOR: "ContentionNoisyNeighbor",
    Kind.CPU_CONTENDED: "ContentionCPUContended",
    Kind.MEMORY_PRESSURE: "ContentionMemoryPressure",
    Kind.MEMORY_LIMIT_THRASH: "ContentionMemoryLimitThrash",
}
KIND_OF_ALERT = {v: k for k, v in ALERT_NAMES.items()}

SUMMARIES = {
    Kind.CPU_THROTTLED: "Container is throttled by its own CPU limit.",
    Kind.NOISY_NEIGHBOR: "Container is starved of CPU by a named neighbour.",
    Kind.CPU_CONTENDED: "Container is starved of CPU on an oversubscribed node.",
    Kind.MEMORY_PRESSURE: "Container is stalled on memory while the node is under memory pressure.",
    Kind.MEMORY_LIMIT_THRASH: "Container is thrashing under its own memory limit.",
}

# Recording rule names (level:metric:operations).
R_PSI_SOME = "cgroup:contention_cpu_pressure_waiting:ratio_rate1m"
R_PSI_FULL = "cgroup:contention_cpu_pressure_stalled:ratio_rate1m"
R_THROTTLE = "cgroup:contention_cpu_cfs_throttled_periods:ratio_rate{w}"
R_THROTTLE_S = "cgroup:contention_cpu_cfs_throttled_seconds:rate{w}"
R_P99 = "cgroup:contention_runqueue_latency_seconds:p99_rate1m"
R_RUNQ_EVENTS = "cgroup:contention_runqueue_events:rate1m"
R_USAGE = "cgroup:contention_cpu_usage:rate{w}"
R_WATCHED = "cgroup:contention_sampled_seconds:watched_sustain"
R_USAGE_OVER_REQ = "cgroup:contention_cpu_usage_over_request:ratio_rate{w}"
R_MEM_SOME = "cgroup:contention_memory_pressure_waiting:ratio_rate1m"
R_MEM_FULL = "cgroup:contention_memory_pressure_stalled:ratio_rate1m"
R_REFAULTS = "cgroup:contention_memory_workingset_refaults:rate1m"
R_NODE_MEM_SOME = "node:contention_memory_pressure_waiting:ratio_rate1m"
R_OVERAGE = "cgroup:contention_memory_working_set_bytes:over_request"
R_OVERAGE_SHARE = "cgroup:contention_memory_overage:share"
R_MEM_CULPRIT = "node:contention_memory_culprit:share"
R_CPU_STALLED = "cgroup:contention_cpu_stalled:sustained"
R_CPU_VICTIM = "cgroup:contention_cpu_unthrottled_stall:sustained"
R_CPU_CRIT = "cgroup:contention_cpu_severity_critical:rate1m"
R_CPU_BOTH = "cgroup:contention_cpu_stall_both_signals:rate1m"
R_BLAME_CULPRIT = "cgroup:contention_blame_share:culprit"
R_MEM_PRESSURE = "cgroup:contention_memory_pressure:sustained"
R_MEM_THRASH = "cgroup:contention_memory_limit_thrash:sustained"
R_MEM_CRIT = "cgroup:contention_memory_severity_critical:rate1m"

M_BUCKET = "contention_runqueue_latency_seconds_bucket"
M_COUNT = "contention_runqueue_latency_seconds_count"
INF_SEL = '{le="+Inf"}'


def num(x: float) -> str:
    """A float literal PromQL parses to the same double (also used by the dashboards)."""
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))


@dataclass(frozen=True, slots=True)
class Q:
    """PromQL fragment builders for one threshold config."""

    th: Thresholds

    @property
    def node(self) -> str:
        return ", ".join(self.th.node_labels)

    @property
    def w(self) -> str:
        return f"{self.th.window_minutes}m"

    def on(self, *extra: str) -> str:
        return f"on({', '.join((*self.th.node_labels, *extra))})"

    @staticmethod
    def off(k: int) -> str:
        return f" offset {k}m" if k else ""

    def rate1(self, metric: str, k: int, sel: str = "") -> str:
        return f"rate({metric}{sel}[1m]{self.off(k)})"

    def runq_le(self, bound_s: float, k: int) -> str:
        sel = f'{{le="{le_label(bound_s)}"}}'
        return f"sum without(le) ({self.rate1(M_BUCKET, k, sel)})"

    def runq_slow(self, bound_s: float, k: int) -> str:
        """p99 >= bound over enough events (or any overflow wait) in minute -k."""
        inf = f"sum without(le) ({self.rate1(M_BUCKET, k, INF_SEL)})"
        top = self.runq_le(RUNQ_BOUNDS_S[-1], k)
        return (
            f"(({self.runq_le(bound_s, k)} / {inf}) <= 0.99"
            f" and (({self.rate1(M_COUNT, k)} * 60 >= {num(self.th.min_runq_events)})"
            f" or ({inf} - {top} > 0)))"
        )

    def psi_some(self, k: int) -> str:
        return self.rate1("contention_cpu_pressure_waiting_seconds_total", k)

    def psi_full(self, k: int) -> str:
        return self.rate1("contention_cpu_pressure_stalled_seconds_total", k)

    def cpu_stalled(self, k: int) -> str:
        return (
            f"({self.psi_some(k)} >= {num(self.th.stall_some)})"
            f" or {self.runq_slow(self.th.runq_bound_s, k)}"
        )

    def throttle_ratio(self) -> str:
        return (
            f"rate(contention_cpu_cfs_throttled_periods_total[{self.w}])"
            f" / rate(contention_cpu_cfs_periods_total[{self.w}])"
        )

    def mem_stalled(self, k: int) -> str:
        return (
            f"({self.rate1('contention_memory_pressure_waiting_seconds_total', k)}"
            f" >= {num(self.th.mem_stall_some)})"
            " or (sum without(type) ("
            f"{self.rate1('contention_memory_workingset_refaults_total', k)})"
            f" >= {num(self.th.refault_per_min / 60)})"
        )

    def node_mem(self, k: int) -> str:
        return (
            f"({self.rate1('contention_node_memory_pressure_waiting_seconds_total', k)}"
            f" >= {num(self.th.node_mem_stall_some)})"
        )

    def limit_hits(self, k: int) -> str:
        sel = '{event=~"high|max"}'
        return f"(sum without(event) ({self.rate1('contention_memory_events_total', k, sel)}) > 0)"


def _flag(expr: str) -> str:
    return f"group without() (\n  {expr}\n)"


def _and_minutes(parts: list[str]) -> str:
    return "\n  and\n  ".join(f"({p})" for p in parts)


def recording_rules(th: Thresholds) -> list[dict[str, Any]]:
    q = Q(th)
    w = q.w
    sustain = range(th.sustain_minutes)
    cgroup_on = q.on("cgroup")
    nameable = "|".join(NAMEABLE_CULPRIT_KINDS)

    def rl(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr}

    label_copies = expr_culprit_labels(
        f"topk by({q.node}) (1, {R_OVERAGE_SHARE}) >= {num(th.mem_culprit_share)}"
    )
    return [
        # Signals, for dashboards and alert descriptions.
        rl(R_PSI_SOME, q.psi_some(0)),
        rl(R_PSI_FULL, q.psi_full(0)),
        rl(R_THROTTLE.format(w=w), q.throttle_ratio()),
        rl(R_THROTTLE_S.format(w=w), f"rate(contention_cpu_cfs_throttled_seconds_total[{w}])"),
        rl(R_P99, f"histogram_quantile(0.99, rate({M_BUCKET}[1m]))"),
        rl(R_RUNQ_EVENTS, f"rate({M_COUNT}[1m])"),
        # Matched on every label, not on(cgroup): while the API names a new pod, a
        # cgroup has two label sets in the range, and a one-to-one on(cgroup) match
        # would fail the whole rule. The two counters always carry the same labels.
        rl(
            R_USAGE.format(w=w),
            f"rate(contention_cpu_usage_seconds_total[{w}])\n/\n"
            f"rate(contention_sampled_seconds_total[{w}])",
        ),
        rl(
            R_USAGE_OVER_REQ.format(w=w),
            f"{R_USAGE.format(w=w)} / {cgroup_on} group_left() contention_cpu_request_cores",
        ),
        rl(R_MEM_SOME, q.rate1("contention_memory_pressure_waiting_seconds_total", 0)),
        rl(R_MEM_FULL, q.rate1("contention_memory_pressure_stalled_seconds_total", 0)),
        rl(
            R_REFAULTS,
            f"sum without(type) ({q.rate1('contention_memory_workingset_refaults_total', 0)})",
        ),
        rl(R_NODE_MEM_SOME, q.rate1("contention_node_memory_pressure_waiting_seconds_total", 0)),
        # Memory beyond request (all of it without a request) and its share of the node's.
        rl(
            R_OVERAGE,
            f"clamp_min(contention_memory_working_set_bytes - {cgroup_on} group_left()"
            f" contention_memory_request_bytes, 0)\nor\n(contention_memory_working_set_bytes"
            f" unless {cgroup_on} contention_memory_request_bytes)",
        ),
        rl(
            R_OVERAGE_SHARE,
            f"{R_OVERAGE} / {q.on()} group_left() sum by({q.node}) ({R_OVERAGE})",
        ),
        rl(R_MEM_CULPRIT, f"max without(cgroup, namespace, pod, container) (\n  {label_copies}\n)"),
        # Victims old enough to judge: watched since the start of the sustain minutes.
        # Joined on every label: the per-minute rates are per series, so a cgroup whose
        # labels changed (the API named its pod) has a young series to wait for.
        rl(
            R_WATCHED,
            _flag(f"contention_sampled_seconds_total offset {th.sustain_minutes}m"),
        ),
        # Decisions (value 1), seed 000's gating, one term per sustain minute.
        rl(
            R_CPU_STALLED,
            _flag(_and_minutes([q.cpu_stalled(k) for k in sustain])) + f"\nand {R_WATCHED}",
        ),
        rl(
            R_CPU_VICTIM,
            f"{R_CPU_STALLED}\nunless {cgroup_on}\n"
            f"({R_THROTTLE.format(w=w)} >= {num(th.throttled_ratio_max)})",
        ),
        rl(
            R_CPU_CRIT,
            _flag(
                f"({q.psi_full(0)} >= {num(th.critical_cpu_full)})"
                f" or {q.runq_slow(th.critical_runq_bound_s, 0)}"
            ),
        ),
        rl(
            R_CPU_BOTH,
            _flag(
                f"({q.psi_some(0)} >= {num(th.stall_some)})"
                f" and {q.runq_slow(th.runq_bound_s, 0)}"
            ),
        ),
        rl(
            R_BLAME_CULPRIT,
            f'(contention_blame_share{{culprit_kind=~"{nameable}"}} >= {num(th.blame_share)})\n'
            # never the victim itself: drop rows whose culprit_cgroup equals their cgroup
            f"unless {q.on('cgroup', 'culprit_cgroup')}\n"
            'label_replace(contention_cpu_usage_seconds_total, "culprit_cgroup", "$1", "cgroup",'
            ' "(.*)")\n'
            # a culprit at or below its own request is entitled to the CPU
            f"unless {q.on('culprit_cgroup')}\n"
            f"label_replace({R_USAGE.format(w=w)} <= {cgroup_on} group_left()"
            ' contention_cpu_request_cores, "culprit_cgroup", "$1", "cgroup", "(.*)")',
        ),
        rl(
            R_MEM_PRESSURE,
            _flag(
                _and_minutes(
                    [f"({q.mem_stalled(k)}) and {q.on()} {q.node_mem(k)}" for k in sustain]
                )
            )
            + f"\nand {R_WATCHED}",
        ),
        rl(
            R_MEM_THRASH,
            _flag(
                _and_minutes(
                    [
                        f"(({q.mem_stalled(k)}) and {q.limit_hits(k)}) unless {q.on()} "
                        f"{q.node_mem(k)}"
                        for k in sustain
                    ]
                )
            )
            + f"\nand {R_WATCHED}",
        ),
        rl(
            R_MEM_CRIT,
            _flag(
                f"{q.rate1('contention_memory_pressure_stalled_seconds_total', 0)}"
                f" >= {num(th.critical_mem_full)}"
            ),
        ),
    ]


def expr_culprit_labels(expr: str) -> str:
    out = expr
    for lab in ("cgroup", "namespace", "pod", "container"):
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
    sel = ",".join(f"{lab}=%q" for lab in (*th.node_labels, "cgroup"))
    args = " ".join(f"$labels.{lab}" for lab in (*th.node_labels, "cgroup"))
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{{{{ . | first | value | {fmt} }}}}{{{{ else }}}}n/a{{{{ end }}}}"
    )


def _node_query_t(th: Thresholds, record: str, fmt: str) -> str:
    sel = ",".join(f"{lab}=%q" for lab in th.node_labels)
    args = " ".join(f"$labels.{lab}" for lab in th.node_labels)
    return (
        f'{{{{ with printf "{record}{{{sel}}}" {args} | query }}}}'
        f"{{{{ . | first | value | {fmt} }}}}{{{{ else }}}}n/a{{{{ end }}}}"
    )


def descriptions(th: Thresholds) -> dict[Kind, str]:
    psi = _query_t(th, R_PSI_SOME, "humanizePercentage")
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
        ),
        Kind.CPU_CONTENDED: (
            f"{VICTIM_T} is stalled waiting for CPU (cpu pressure some {psi}, run-queue p99 "
            f"{p99} in the latest minute), but no single neighbour caused "
            f"{th.blame_share * 100:g}% of its wait while running beyond its CPU request: "
            "the node is oversubscribed."
        ),
        Kind.MEMORY_PRESSURE: (
            f"{VICTIM_T} is stalled on memory (memory pressure some {mem} in the latest "
            f"minute) while the node is under memory pressure ({node_mem}). "
            f"{{{{ if $labels.culprit_cgroup }}}}Heuristic culprit: {MEM_CULPRIT_T}, "
            "{{ $value | humanizePercentage }} of the node's memory beyond requests."
            "{{ else }}No single container dominates the node's memory beyond requests."
            "{{ end }}"
        ),
        Kind.MEMORY_LIMIT_THRASH: (
            f"{VICTIM_T} is stalled on memory (memory pressure some {mem} in the latest "
            "minute) while hitting its own memory limit (memory.events high/max rising); "
            "the node is not under memory pressure."
        ),
    }


def runbook_anchor(kind: Kind) -> str:
    return ALERT_NAMES[kind].lower()


def alert_rules(th: Thresholds) -> list[dict[str, Any]]:
    q = Q(th)
    on_v = q.on("cgroup")
    desc = descriptions(th)
    mem_labels = "culprit_cgroup, culprit_namespace, culprit_pod, culprit_container"

    nn = f"{R_BLAME_CULPRIT} and {on_v} {R_CPU_VICTIM}"
    contended = f"{R_CPU_VICTIM} unless {on_v} {R_BLAME_CULPRIT}"
    throttled = f"{R_THROTTLE.format(w=q.w)} >= {num(th.throttled_ratio)}\nand {R_WATCHED}"
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
    ]
    out: list[dict[str, Any]] = []
    for kind, variants in plan:
        for severity, expr in variants:
            out.append(
                {
                    "alert": ALERT_NAMES[kind],
                    "expr": expr,
                    "labels": {"severity": severity, "finding": kind.value},
                    "annotations": {
                        "summary": SUMMARIES[kind],
                        "description": desc[kind],
                        "runbook_url": f"{th.runbook_url}#{runbook_anchor(kind)}",
                    },
                }
            )
    return out


DEFAULT_INTERVAL = "1m"
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")


def check_interval(interval: str) -> str:
    """A Prometheus duration for the group's ``interval`` (ValueError otherwise)."""
    if not _DURATION.match(interval) or not any(c in "123456789" for c in interval):
        raise ValueError(f"interval {interval!r} is not a Prometheus duration like 30s or 1m")
    return interval


def rule_groups(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> dict[str, Any]:
    """One group: rules in a group run in order at one timestamp, so the alerts see
    this evaluation's recorded decisions (across groups they could lag a minute).

    ``interval``: how often Prometheus evaluates it. The rules are minute-based, so
    1m is enough for the verdicts; a shorter interval only fires and resolves sooner."""
    rules = recording_rules(th) + alert_rules(th)
    return {"groups": [{"name": GROUP, "interval": check_interval(interval), "rules": rules}]}


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


def render_files(th: Thresholds, interval: str = DEFAULT_INTERVAL) -> dict[Path, str]:
    """Every file ``rules generate`` writes, by path relative to the repository root."""
    return {
        RULE_FILE: render_rule_file(th, interval),
        MANIFEST: render_prometheus_rule(th, interval),
    }
