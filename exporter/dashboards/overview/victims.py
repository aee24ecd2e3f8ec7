"""Overview row: the ten worst victims by CPU pressure, run-queue p99 and throttling,
and the culprits that hurt the node most."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge

from ... import promql as pq
from ...promql import num, rate
from ..layout import Context, Row
from ..links import field_link
from ..panels import BLUE, ORANGE, RED, Query, bar_gauge_panel
from ..selectors import VICTIM_LEGEND, named


def _worst(expr: str) -> Query:
    """The ten containers with the highest ``expr``, named."""
    return Query(f"topk(10, {named(expr)})", VICTIM_LEGEND, instant=True)


def cpu_pressure(context: Context) -> bargauge.Panel:
    th = context.th
    psi_some = rate(pq.CPU_SOME, "1m", context.selectors.overview)
    return bar_gauge_panel(
        context.ids,
        "Worst CPU pressure (some, last minute)",
        "The ten containers whose tasks spent the largest share of the last minute "
        "runnable but waiting for a CPU (cgroup cpu.pressure 'some'). Red: at or above "
        f"stallSome ({th.stall_some:.0%}), the share at which a minute counts as CPU "
        "stalled for the noisy-neighbor and cpu-contended findings. A red container "
        "that is also throttled is waiting on its own limit; otherwise open the "
        "drill-down to see who ran while it waited.",
        "percentunit",
        [_worst(f"{psi_some} > 0")],
        [(th.stall_some, RED)],
        width=8,
        height=10,
        max_val=1,
    ).data_links(field_link(context.selectors))


def runqueue_p99(context: Context) -> bargauge.Panel:
    th = context.th
    containers = context.selectors.overview
    events = pq.runq_events_per_minute(containers)
    p99 = f"{pq.runq_p99('1m', containers)} and ({events} >= {num(th.min_runq_events)})"
    return bar_gauge_panel(
        context.ids,
        "Worst run-queue p99 (last minute)",
        "The ten containers with the highest 99th percentile wait between wakeup and "
        "running on a CPU (scheduler probe), counting only containers with at least "
        f"minRunqEvents ({th.min_runq_events}) wakeups in the minute, as the findings "
        f"do. Orange: at or above runqP99Ms ({th.runq_p99_ms:g} ms), a stalled minute. "
        f"Red: at or above criticalRunqP99Ms ({th.critical_runq_p99_ms:g} ms), the critical "
        "level. Open the drill-down to see the culprits. Empty when the probe is not "
        "loaded (see probe health below).",
        "s",
        [_worst(p99)],
        [(th.runq_bound_s, ORANGE), (th.critical_runq_bound_s, RED)],
        width=8,
        height=10,
    ).data_links(field_link(context.selectors))


def throttling(context: Context) -> bargauge.Panel:
    th = context.th
    window = th.window_minutes
    ratio = pq.throttle_ratio(context.selectors.window, context.selectors.overview)
    return bar_gauge_panel(
        context.ids,
        f"Worst CPU throttling ({window}m window)",
        "The ten containers throttled in the largest share of their CFS periods over "
        f"the {window}-minute window. Orange: at or above throttledRatioMax "
        f"({th.throttled_ratio_max:.0%}): the container is never blamed on a neighbour, "
        "its own limit explains its wait. Red: at or above throttledRatio "
        f"({th.throttled_ratio:.0%}): the cpu-throttled finding fires. Fix: raise or "
        "remove the container's CPU limit.",
        "percentunit",
        [_worst(f"({ratio}) > 0")],
        [(th.throttled_ratio_max, ORANGE), (th.throttled_ratio, RED)],
        width=8,
        height=10,
        max_val=1,
    ).data_links(field_link(context.selectors))


def top_culprits(context: Context) -> bargauge.Panel:
    window = context.th.window_minutes
    caused = rate(pq.ANTAGONIST_WAIT, context.selectors.window, context.selectors.node)
    return bar_gauge_panel(
        context.ids,
        f"Who is hurting this node most ({window}m window)",
        "The culprits that caused the most run-queue wait to the other containers on "
        f"the node over the {window}-minute window, summed over every victim (scheduler "
        "probe: who was on the CPU while they waited). The value is seconds of waiting "
        "per second: 1.5 means that on average one and a half tasks of other "
        "containers were waiting behind it. Only the exporter's top culprits are "
        "exported (--probe.antagonists). A culprit running inside its own CPU request "
        "is entitled to that CPU: check the noisy-neighbor findings above before "
        "acting. Empty when the probe is not loaded.",
        "short",
        [Query(f"topk(10, {caused} > 0)", "{{culprit}} ({{culprit_kind}})", instant=True)],
        [(0, BLUE)],
        width=24,
        height=8,
    )


ROW = Row("Worst victims", (cpu_pressure, runqueue_p99, throttling, top_culprits))
