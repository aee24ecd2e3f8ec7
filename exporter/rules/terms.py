"""The PromQL terms the pack's rules are written in, for one threshold config.

Every raw series is read through the config's ``selector`` and joined on its
``nodeLabels`` (and ``clusterLabel``); each minute's signals have the evaluator's
arithmetic (docs/findings.md). The facts shared with the dashboards (metric names, the
throttle ratio, ``num`` ...) are in ``exporter.promql``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS
from ..probe.histogram import RUNQ_BOUNDS_S, le_label
from ..promql import num
from .records import R_LIMIT_HITS_1M, R_MEM_STALLED_1M, R_RUNQ_SLOW_1M

INF_SEL = 'le="+Inf"'


@dataclass(frozen=True, slots=True)
class RuleTerms:
    """The rules' PromQL terms for one threshold config."""

    th: Thresholds

    @property
    def matchers(self) -> tuple[str, ...]:
        """The config's ``selector``: on every raw series the rules read."""
        return self.th.matchers

    def select(self, metric: str, *matchers: str) -> str:
        return pq.sel(metric, *self.matchers, *matchers)

    def rate(self, metric: str, window: str, *matchers: str, k: int = 0) -> str:
        return pq.rate(metric, window, *self.matchers, *matchers, k=k)

    @property
    def window(self) -> str:
        """The findings window as a range (``5m``)."""
        return f"{self.th.window_minutes}m"

    def usage_cores(self, k: int = 0) -> str:
        """CPU cores used over the window up to ``k`` minutes before its end (the part
        of the window the cgroup was watched; ``k`` > 0: an earlier minute boundary of
        the sustain, ``exporter.findings.beyond_request``)."""
        return pq.usage_cores(f"{self.th.window_minutes - k}m", *self.matchers, k=k)

    def on(self, *extra: str) -> str:
        return pq.on(self.th.join_labels, *extra)

    def by(self, *extra: str) -> str:
        return pq.by(self.th.join_labels, *extra)

    def runq_le(self, bound_s: float, k: int) -> str:
        le = f'le="{le_label(bound_s)}"'
        return f"sum without(le) ({self.rate(pq.RUNQ_BUCKET, '1m', le, k=k)})"

    def runq_slow(self, bound_s: float, k: int) -> str:
        """p99 >= bound over enough events (or any overflow wait) in minute -k."""
        inf = f"sum without(le) ({self.rate(pq.RUNQ_BUCKET, '1m', INF_SEL, k=k)})"
        top = self.runq_le(RUNQ_BOUNDS_S[-1], k)
        events = pq.runq_events_per_minute(*self.matchers, k=k)
        return (
            f"(\n    ({self.runq_le(bound_s, k)}\n    / {inf}) <= 0.99\n  )\n  and (\n"
            f"    ({events} >= {num(self.th.min_runq_events)})\n"
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
        refaults = pq.refaults("1m", *self.matchers)
        return (
            f"({self.rate(pq.MEM_SOME, '1m')} >= {num(self.th.mem_stall_some)})"
            f" or ({refaults} >= {pq.per_second(self.th.refault_per_min)})"
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

    def in_boundary_minute(self, func: str, metric: str, k: int, *matchers: str) -> str:
        """``func(metric[1m] offset km)``: the series as it was in the minute before an
        earlier boundary, so a member that ran in that minute and was replaced seconds
        before the boundary still counts (exporter.findings.beyond_request)."""
        return f"{func}({self.select(metric, *matchers)}[1m]{pq.offset(k)})"

    def per_workload(self, expr: str, k: int = 0, over: str = "") -> str:
        """``expr`` (per container) summed per workload, labelled as the workload blame
        series are: ``culprit_namespace`` and ``culprit_workload``; with ``k``, by what
        owned each container in the minute before ``k`` minutes ago, or with ``over``
        (a range: the window) by what last owned it within that range (a member gone
        since is still named; one ``workload`` per container, should it have changed)."""
        info = self.select(pq.CGROUP_INFO, 'workload!=""')
        if k or over:
            last = f"last_over_time({info}[{over or '1m'}]{pq.offset(k)})"
            info = f"topk {self.by(*IDENTITY_LABELS)} (1, {last})"
        owned = f"{expr}\n  * {self.on(*IDENTITY_LABELS)} group_left(workload)\n  {info}"
        labelled = (
            f'label_replace(\n  label_replace(\n  {owned},\n  "culprit_workload", "$1", '
            f'"workload", "(.+)"),\n  "culprit_namespace", "$1", "namespace", "(.*)")'
        )
        return f"sum {self.by(*pq.WORKLOAD_CULPRIT_LABELS)} (\n  {labelled}\n)"


def flag(expr: str) -> str:
    """``expr`` as a flag: value 1 for each series it returns, its labels kept."""
    return f"group without() (\n  {expr}\n)"


def with_culprit_labels(expr: str) -> str:
    """``expr`` with its identity labels copied to ``culprit_<label>`` (an absent one
    stays absent), to join a culprit's own series with the blame shares naming it."""
    out = expr
    for lab in IDENTITY_LABELS:
        out = f'label_replace({out}, "culprit_{lab}", "$1", "{lab}", "(.*)")'
    return out
