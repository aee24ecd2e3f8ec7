"""The findings group's recording rules: docs/findings.md's gating logic over the raw
exported metrics, with the same per-minute arithmetic as the Python evaluator
(``exporter.findings``). The alerts (``finding_alerts``) only combine these decisions.

* each minute's stall is recorded once (``cgroup:contention_cpu_stalled:rate1m``, the
  memory and node flags likewise) from ``rate(x[1m])``, and "stalled for two
  consecutive minutes" reads that flag now and ``offset 1m`` (no ``for:``), so the
  alert state is a pure function of the data, exactly like the evaluator's verdict.
  Reading a recorded flag back a minute later needs an evaluation a minute earlier:
  the group interval must divide 1m (``pack.check_interval``);
* the throttling gate is ``unless on(<node>, cgroup) (throttled ratio >= max)``;
* a culprit is dropped ``unless`` its usage is at or below its own request; usage is
  ``rate(usage[w]) / rate(contention_sampled_seconds_total[w])``, the average over the
  part of the window the culprit was watched, so a young culprit is not understated,
  and only while the culprit still runs (a gone one's use is not known: it stays a
  culprit, as in the evaluator);
* when no container passes alone, a workload (``contention_workload_blame_ratio``: its
  containers' summed share) can: dropped ``unless`` its running containers' summed
  usage is at or below their summed requests (``contention_cgroup_info``'s
  ``workload`` label says whose they are);
* a victim is judged only once it has been watched for ``sustainMinutes``
  (``contention_sampled_seconds_total offset <sustain>m`` exists for the same label
  set): before that the per-minute rates would cover a series younger than their range;
* node memory pressure is joined ``on(<node labels>)``, minus the victim's own memory
  stall in minutes it hit its own limit (node PSI includes the victim's stall).

The rule names are in ``records``; users customise the thresholds file, never the
generated YAML.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import promql as pq
from ..findings.beyond_request import earlier_boundaries
from ..findings.model import CULPRIT_UNKNOWN, NAMEABLE_CULPRIT_KINDS
from ..findings.remediation import MIB, MILLI, PAGE_BYTES, ROUNDING_SLACK
from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS
from ..probe.burst import BURST_BOUNDS
from ..probe.histogram import le_label
from ..promql import CULPRIT_IDENTITY, WORKLOAD_CULPRIT_LABELS, num
from .records import (
    R_BLAME_CULPRIT,
    R_CPU_BOTH,
    R_CPU_CRIT,
    R_CPU_STALLED,
    R_CPU_STALLED_1M,
    R_CPU_VICTIM,
    R_ENTITLED,
    R_FIX_CPU_LIMIT,
    R_FIX_CPU_LIMIT_BURST,
    R_FIX_CPU_REQUEST,
    R_FIX_MEM_LIMIT,
    R_FIX_MEM_REQUEST,
    R_FIX_NODE_CPU,
    R_FIX_WL_EACH,
    R_FIX_WL_REQUEST,
    R_LIMIT_HITS_1M,
    R_MEM_CRIT,
    R_MEM_CULPRIT,
    R_MEM_CULPRIT_GREW,
    R_MEM_FULL,
    R_MEM_PRESSURE,
    R_MEM_SOME,
    R_MEM_STALLED_1M,
    R_MEM_THRASH,
    R_NODE_MEM_1M,
    R_NODE_MEM_SOME,
    R_OVERAGE,
    R_OVERAGE_GROWTH,
    R_OVERAGE_SHARE,
    R_P99,
    R_PSI_FULL,
    R_PSI_SOME,
    R_REFAULTS,
    R_RUNQ_CRIT_1M,
    R_RUNQ_EVENTS,
    R_RUNQ_SLOW_1M,
    R_STEAL,
    R_STEAL_1M,
    R_STEAL_SUSTAINED,
    R_THROTTLE,
    R_THROTTLE_S,
    R_UNATTRIBUTED,
    R_USAGE,
    R_USAGE_OVER_REQ,
    R_WATCHED,
    R_WITHIN_REQ,
    R_WL_ENTITLED,
    R_WL_MEMBER_REQUEST,
    R_WL_MEMBER_USE,
    R_WL_MEMBERS_WITHIN,
    R_WL_REQUEST,
    R_WL_RUNNING,
    R_WL_USAGE,
    R_WL_WITHIN,
    R_WORKLOAD_CULPRIT,
)
from .terms import RuleTerms, flag, with_culprit_labels

Rule = dict[str, Any]


def recording_rules(th: Thresholds) -> list[Rule]:
    """Every recording rule of the findings group, in evaluation order: a rule reads
    only the ones before it (rules in a group run in order at one timestamp)."""
    terms = RuleTerms(th)
    return [
        *signal_rules(terms),
        *minute_flag_rules(terms),
        *cpu_decision_rules(terms),
        *workload_culprit_rules(terms),
        *memory_and_steal_decision_rules(terms),
        *remediation_rules(terms),
    ]


def _record(name: str, expr: str) -> Rule:
    return {"record": name, "expr": expr}


def _victim_on(terms: RuleTerms) -> str:
    """How a cgroup's series meet its other series: the node, then its identity."""
    return terms.on(*IDENTITY_LABELS)


def _running_usage(terms: RuleTerms) -> str:
    """A culprit's usage only while it runs: a gone culprit's use over the window is not
    known (the evaluator has no window for it), so it is never excused by it."""
    return f"({R_USAGE.format(w=terms.window)} and {terms.select(pq.USAGE)})"


def _unthrottled(terms: RuleTerms, expr: str) -> str:
    """``expr`` without the cgroups whose own CPU limit explains their wait."""
    throttled = f"{R_THROTTLE.format(w=terms.window)} >= {num(terms.th.throttled_ratio_max)}"
    return f"{expr}\nunless {_victim_on(terms)}\n({throttled})"


def signal_rules(terms: RuleTerms) -> list[Rule]:
    """The signals, for dashboards and alert descriptions, and the memory culprit."""
    w = terms.window
    cgroup_on = _victim_on(terms)
    usage = R_USAGE.format(w=w)
    ws, mem_req = terms.select(pq.WORKING_SET), terms.select(pq.MEM_REQUEST)
    growth = R_OVERAGE_GROWTH.format(w=w)
    grown = R_MEM_CULPRIT_GREW.format(w=w)
    share = num(terms.th.mem_culprit_share)
    # The container that grew most beyond its request, if that growth is memCulpritShare
    # of the node's overage; else the largest overage, if it holds that share
    # (exporter.findings.aggregates.memory_culprit).
    grew = (
        f"topk {terms.by()} (1,\n    {growth} / {terms.on()} group_left() sum {terms.by()} "
        f"({R_OVERAGE})\n  ) >= {share}"
    )
    top_share = (
        f"({R_OVERAGE_SHARE} and {cgroup_on} {grown})\n  or\n  "
        f"((topk {terms.by()} (1, {R_OVERAGE_SHARE}) >= {share})\n  unless {terms.on()} {grown})"
    )
    then = f"{ws}{pq.offset(terms.th.window_minutes - 1)}"  # no "offset 0m" at 1m: invalid
    return [
        _record(R_PSI_SOME, terms.psi_some()),
        _record(R_PSI_FULL, terms.psi_full()),
        _record(R_THROTTLE.format(w=w), pq.throttle_ratio(w, *terms.matchers)),
        _record(R_THROTTLE_S.format(w=w), terms.rate(pq.THROTTLED_SECONDS, w)),
        _record(R_P99, pq.runq_p99("1m", *terms.matchers)),
        _record(R_RUNQ_EVENTS, terms.rate(pq.RUNQ_COUNT, "1m")),
        # Matched on every label, not on(cgroup): while the API names a new pod, a
        # cgroup has two label sets in the range, and a one-to-one on(cgroup) match
        # would fail the whole rule. The two counters always carry the same labels.
        _record(usage, pq.usage_cores(w, *terms.matchers)),
        _record(
            R_USAGE_OVER_REQ.format(w=w),
            f"{usage} / {cgroup_on} group_left() {terms.select(pq.CPU_REQUEST)}",
        ),
        _record(R_MEM_SOME, terms.rate(pq.MEM_SOME, "1m")),
        _record(R_MEM_FULL, terms.rate(pq.MEM_FULL, "1m")),
        _record(R_REFAULTS, pq.refaults("1m", *terms.matchers)),
        _record(R_NODE_MEM_SOME, terms.rate(pq.NODE_MEM_SOME, "1m")),
        _record(R_STEAL, pq.steal_ratio("1m", *terms.matchers)),
        # Memory beyond request (all of it without a request) and its share of the node's.
        _record(
            R_OVERAGE,
            f"clamp_min({ws} - {cgroup_on} group_left() {mem_req}, 0)"
            f"\nor\n({ws} unless {cgroup_on} {mem_req})",
        ),
        _record(
            R_OVERAGE_SHARE,
            f"{R_OVERAGE} / {terms.on()} group_left() sum {terms.by()} ({R_OVERAGE})",
        ),
        # ... minus the first window minute's (none then: all of it is growth)
        _record(
            growth,
            f"clamp_min(\n  {R_OVERAGE}\n  - (\n"
            f"    clamp_min({then} - {cgroup_on} group_left() {mem_req}, 0)\n"
            f"    or\n    ({then} unless {cgroup_on} {mem_req})\n  ),\n  0\n)"
            f"\nor\n{R_OVERAGE}",
        ),
        _record(grown, grew),
        _record(
            R_MEM_CULPRIT,
            "max without(cgroup, namespace, pod, container) (\n"
            f"  {with_culprit_labels(top_share)}\n)",
        ),
    ]


def minute_flag_rules(terms: RuleTerms) -> list[Rule]:
    """Whether each victim may be judged yet, and each minute's flags, recorded once
    (the decisions read them back with offset)."""
    th = terms.th
    return [
        # Victims old enough to judge: watched since the start of the sustain minutes.
        # Joined on every label: the per-minute rates are per series, so a cgroup whose
        # labels changed (the API named its pod) has a young series to wait for.
        _record(R_WATCHED, flag(f"{terms.select(pq.SAMPLED)} offset {th.sustain_minutes}m")),
        _record(R_RUNQ_SLOW_1M, flag(terms.runq_slow(th.runq_bound_s, 0))),
        _record(R_RUNQ_CRIT_1M, flag(terms.runq_slow(th.critical_runq_bound_s, 0))),
        _record(R_CPU_STALLED_1M, flag(terms.cpu_stalled())),
        _record(R_MEM_STALLED_1M, flag(terms.mem_stalled())),
        _record(R_LIMIT_HITS_1M, flag(terms.limit_hits())),
        _record(R_NODE_MEM_1M, flag(terms.node_mem())),
        _record(R_STEAL_1M, flag(f"{R_STEAL} >= {num(th.cpu_steal_ratio)}")),
    ]


def _unless_above_earlier(
    terms: RuleTerms, within: str, on: str, above: Callable[[int], str]
) -> str:
    """``within`` (inside its request over the window) without those above it at an
    earlier minute boundary of the sustain (``above(k)``: the window up to ``k``
    minutes before its end; exporter.findings.beyond_request)."""
    earlier = [above(k) for k in earlier_boundaries(terms.th)]
    if not earlier:
        return within
    return f"{within}\nunless {on}\n(\n  " + "\n  or\n  ".join(earlier) + "\n)"


def cpu_decision_rules(terms: RuleTerms) -> list[Rule]:
    """The CPU decisions (value 1), docs/findings.md's gating, one term per sustain
    minute, and the containers named as culprits."""
    th = terms.th
    w = terms.window
    cgroup_on = _victim_on(terms)
    nameable = f'culprit_kind=~"{"|".join(NAMEABLE_CULPRIT_KINDS)}"'
    unknown = f'culprit_kind="{CULPRIT_UNKNOWN}"'
    request = terms.select(pq.CPU_REQUEST)
    within_request = f"{_running_usage(terms)} <= {cgroup_on} group_left() {request}"
    entitled = _unless_above_earlier(
        terms,
        R_WITHIN_REQ.format(w=w),
        cgroup_on,
        lambda k: f"(\n  {terms.usage_cores(k)}\n  ) > {cgroup_on} group_left() {request}",
    )
    stalled = flag(terms.each_sustain_minute(R_CPU_STALLED_1M + "{off}"))
    return [
        _record(R_CPU_STALLED, f"{stalled}\nand {R_WATCHED}"),
        _record(R_CPU_VICTIM, _unthrottled(terms, R_CPU_STALLED)),
        _record(
            R_CPU_CRIT,
            flag(f"({terms.psi_full()} >= {num(th.critical_cpu_full)}) or {R_RUNQ_CRIT_1M}"),
        ),
        _record(
            R_CPU_BOTH, flag(f"({terms.psi_some()} >= {num(th.stall_some)}) and {R_RUNQ_SLOW_1M}")
        ),
        _record(R_WITHIN_REQ.format(w=w), within_request),
        _record(R_ENTITLED.format(w=w), entitled),
        _record(
            R_BLAME_CULPRIT,
            f"({terms.select(pq.BLAME_RATIO, nameable)} >= {num(th.blame_share)})\n"
            # never the victim itself: drop rows whose culprit is their own cgroup
            f"unless {terms.on(*IDENTITY_LABELS, *CULPRIT_IDENTITY)}\n"
            f"{with_culprit_labels(terms.select(pq.USAGE))}\n"
            # a culprit at or below its own request is entitled to the CPU
            f"unless {terms.on(*CULPRIT_IDENTITY)}\n" + with_culprit_labels(R_ENTITLED.format(w=w)),
        ),
        _record(
            R_UNATTRIBUTED,
            f"sum {terms.by(*IDENTITY_LABELS)} (\n  {terms.select(pq.BLAME_RATIO, unknown)}\n)"
            f" >= {num(th.blame_share)}",
        ),
    ]


def workload_culprit_rules(terms: RuleTerms) -> list[Rule]:
    """Workloads: their running containers' usage and requests, summed, and the
    workloads named as culprits (docs/findings.md#workload-culprits)."""
    w = terms.window
    usage = R_WL_USAGE.format(w=w)

    def requests(running: str, k: int = 0) -> str:
        asked = terms.select(pq.CPU_REQUEST)
        if k:
            asked = terms.in_boundary_minute("last_over_time", pq.CPU_REQUEST, k)
        return f"({asked} and {_victim_on(terms)} {running})"

    def above(k: int) -> str:
        # the members that ran in the minute before that boundary, gone ones too
        ran = terms.in_boundary_minute("present_over_time", pq.USAGE, k)
        running = f"(\n  {terms.usage_cores(k)}\n  and {ran}\n  )"
        used = terms.per_workload(running, k)
        asked = terms.per_workload(requests(running, k), k)
        return f"(\n  {used}\n  > {asked}\n)\nand\n(\n  {asked}\n  > 0\n)"

    wl_on = terms.on(*WORKLOAD_CULPRIT_LABELS)
    # each member's own use over the window, gone ones included (their owner as it last
    # was within it), and their requests, over their count: the evaluator's arithmetic
    member_use = R_USAGE.format(w=w)
    measured = terms.per_workload(flag(member_use), over=w)
    asked = f"last_over_time({terms.select(pq.CPU_REQUEST)}[{w}])"
    member_asked = f"({asked} and {_victim_on(terms)} {member_use})"
    member_request = R_WL_MEMBER_REQUEST.format(w=w)
    return [
        _record(usage, terms.per_workload(_running_usage(terms))),
        _record(R_WL_RUNNING, terms.per_workload(flag(terms.select(pq.USAGE)))),
        _record(
            R_WL_MEMBER_USE.format(w=w),
            f"{terms.per_workload(member_use, over=w)}\n/\n{measured}",
        ),
        _record(member_request, f"{terms.per_workload(member_asked, over=w)}\n/\n{measured}"),
        _record(
            R_WL_MEMBERS_WITHIN.format(w=w),
            f"({R_WL_MEMBER_USE.format(w=w)} <= {member_request})\nand ({member_request} > 0)",
        ),
        _record(R_WL_REQUEST, terms.per_workload(requests(_running_usage(terms)))),
        # inside the sum of its running containers' requests: entitled to the CPU
        _record(R_WL_WITHIN.format(w=w), f"({usage} <= {R_WL_REQUEST})\nand ({R_WL_REQUEST} > 0)"),
        _record(
            R_WL_ENTITLED.format(w=w),
            _unless_above_earlier(terms, R_WL_WITHIN.format(w=w), wl_on, above),
        ),
        _record(
            R_WORKLOAD_CULPRIT,
            f"({terms.select(pq.WORKLOAD_BLAME_RATIO)} >= {num(terms.th.blame_share)})\n"
            f"unless {wl_on} {R_WL_ENTITLED.format(w=w)}",
        ),
    ]


def memory_and_steal_decision_rules(terms: RuleTerms) -> list[Rule]:
    """The memory decisions and the node's sustained steal (value 1)."""
    pressure = f"{R_MEM_STALLED_1M}{{off}} and {R_NODE_MEM_1M}{{off}}"
    thrash = (
        f"({R_MEM_STALLED_1M}{{off}} and {R_LIMIT_HITS_1M}{{off}}) unless {R_NODE_MEM_1M}{{off}}"
    )
    critical = f"{terms.rate(pq.MEM_FULL, '1m')} >= {num(terms.th.critical_mem_full)}"
    return [
        _record(R_MEM_PRESSURE, flag(terms.each_sustain_minute(pressure)) + f"\nand {R_WATCHED}"),
        _record(R_MEM_THRASH, flag(terms.each_sustain_minute(thrash)) + f"\nand {R_WATCHED}"),
        _record(R_MEM_CRIT, flag(critical)),
        _record(R_STEAL_SUSTAINED, flag(terms.each_sustain_minute(R_STEAL_1M + "{off}"))),
    ]


def _above(value: str, on: str, setting: str, scale: str) -> str:
    """``value`` where it exceeds the current ``setting`` (in the value's unit), or where
    there is no such setting: a suggestion never lowers what is set. ``setting`` is an
    always-exported series (the entitlement whose basis is the limit), never an optional
    collector's: with default flags the guard must still see the limit."""
    above = f"(\n  {value}\n  > {on} group_left() ({setting} {scale})\n)"
    return f"{above}\nor\n({value} unless {on} {setting})"


def _burst_limit(terms: RuleTerms, cpu_limit: str) -> str:
    """cpu-throttled whose average cannot size a limit (no steady-demand record): the first
    burst bound ``b`` (ascending; ``or`` keeps the first) whose share of the window's
    observations with more threads at once is below throttledRatioMax, in cores (threads),
    where more than the limit and no more than the node's CPUs
    (exporter.findings.suggest.burst_limit)."""
    w = terms.window
    count = pq.increase(pq.RUNNABLE_COUNT, w, *terms.matchers)
    bounds = []
    for b in BURST_BOUNDS:
        le = f'le="{le_label(float(b))}"'
        at_most = f"sum without(le) ({pq.increase(pq.RUNNABLE_BUCKET, w, *terms.matchers, le)})"
        share = f"({count} - {at_most}) / {count}"
        bounds.append(f"(\n    {share}\n    < {num(terms.th.throttled_ratio_max)}\n  ) * 0 + {b}")
    fewest = "(\n  " + "\n  or\n  ".join(bounds) + "\n)"
    on = _victim_on(terms)
    # more threads than the node has CPUs: no limit the node can honour (no value)
    beyond_node = f"{fewest} > {terms.on()} group_left() {terms.select(pq.NODE_CORES)}"
    return (
        f"(\n  {fewest} * {MILLI}\n  > {on} group_left() ({cpu_limit} * {MILLI})\n) / {MILLI}\n"
        f"unless {on} {R_FIX_CPU_LIMIT.format(w=w)}\n"
        f"unless {on} (\n  {beyond_node}\n)\n"
        f"and {on} {R_THROTTLE_S.format(w=w)}"
    )


def _workload_request_rules(terms: RuleTerms) -> list[Rule]:
    """A workload culprit's requests (exporter.findings.suggest.workload_request): its
    running containers' summed use (while one of them has a measured use, as the
    evaluator's, and it is above their requests); while none has, as many as run now
    (at least one) at the average of its members' own use, gone ones included, unless
    that is within the average of their requests."""
    w = terms.window
    slack = num(ROUNDING_SLACK)
    wl_on = terms.on(*WORKLOAD_CULPRIT_LABELS)
    wl_usage, each = R_WL_USAGE.format(w=w), R_FIX_WL_EACH.format(w=w)
    running = f"({R_WL_RUNNING} or {wl_on} {each} * 0 + 1)"
    return [
        _record(
            each,
            f"ceil({R_WL_MEMBER_USE.format(w=w)} * {MILLI} - {slack})\nunless {wl_on} {wl_usage}"
            f"\nunless {wl_on} {R_WL_MEMBERS_WITHIN.format(w=w)}",
        ),
        _record(
            R_FIX_WL_REQUEST.format(w=w),
            f"(\n  ceil({wl_usage} * {MILLI} - {slack})\n"
            f"  unless {wl_on} {R_WL_WITHIN.format(w=w)}\n)\nor\n(\n"
            f"  ceil({running} * {R_WL_MEMBER_USE.format(w=w)} * {MILLI} - {slack})\n"
            f"  and {wl_on} {each}\n)",
        ),
    ]


def remediation_rules(terms: RuleTerms) -> list[Rule]:
    """The suggested values (docs/findings.md#remediation-with-numbers), in the
    arithmetic order of ``exporter.findings.suggest``."""
    w = terms.window
    cgroup_on = _victim_on(terms)
    slack = num(ROUNDING_SLACK)
    ws = terms.select(pq.WORKING_SET)
    demand = (
        f"ceil(\n  ({terms.rate(pq.USAGE, w)} + {terms.rate(pq.THROTTLED_SECONDS, w)})\n"
        f"  / {terms.rate(pq.SAMPLED, w)} * {MILLI} - {slack}\n)"
    )
    refaults = f"({pq.increase_refaults('1m', *terms.matchers)} or {ws} * 0)"
    mem_limit = f"ceil(({ws} + {refaults} * {PAGE_BYTES}) / {MIB} - {slack})"
    unthrottled_wait = (
        f"{pq.increase(pq.RUNQ_SUM, w, *terms.matchers)}\n    unless {cgroup_on}\n"
        f"    ({R_THROTTLE.format(w=w)} >= {num(terms.th.throttled_ratio_max)})"
    )
    cpu_limit = terms.select(pq.CPU_ENTITLEMENT, pq.LIMIT_BASIS)
    mem_limit_set = terms.select(pq.MEM_ENTITLEMENT, pq.LIMIT_BASIS)
    return [
        _record(
            R_FIX_CPU_LIMIT.format(w=w),
            # steady demand only: throttled in nearly every period (Thresholds.
            # steady_throttled_ratio); bursts get the burst record's limit instead
            f"(\n{_above(demand, cgroup_on, cpu_limit, f'* {MILLI}')}\n)\nand {cgroup_on}"
            # (1 - max) written out, so the chart templates throttledRatioMax here too
            f" ({R_THROTTLE.format(w=w)} >= (1 - {num(terms.th.throttled_ratio_max)}))",
        ),
        _record(R_FIX_CPU_LIMIT_BURST.format(w=w), _burst_limit(terms, cpu_limit)),
        _record(
            R_FIX_CPU_REQUEST.format(w=w),
            # only while the culprit still runs: a gone one's use over the window is
            # unknown; and not once it has fallen to its request (named for an earlier
            # minute boundary: a request matching its use would change nothing)
            f"ceil({R_USAGE.format(w=w)} * {MILLI} - {slack})\n"
            f"and present_over_time({terms.select(pq.USAGE)}[1m])\n"
            f"unless {cgroup_on} {R_WITHIN_REQ.format(w=w)}",
        ),
        *_workload_request_rules(terms),
        _record(
            R_FIX_NODE_CPU.format(w=w),
            f"ceil(\n  sum {terms.by()} (\n    {unthrottled_wait}\n  )"
            f" / {num(terms.th.window_s)} * {MILLI} - {slack}\n) > 0",
        ),
        _record(R_FIX_MEM_LIMIT, _above(mem_limit, cgroup_on, mem_limit_set, f"/ {MIB}")),
        _record(R_FIX_MEM_REQUEST, f"ceil({ws} / {MIB} - {slack})"),
    ]
