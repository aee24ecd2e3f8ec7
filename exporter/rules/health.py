"""The self-monitoring group: alerts about the exporter itself (docs/runbook.md).

A broken exporter does not page on its own: findings silently stop, or alerts quietly
stop naming culprits. These alerts say so, per target (the target labels, and the
label that says what failed: ``reason``, ``collector``, ``map``). Each waits its own
``...For`` duration from the thresholds file, so a restart or a rollout stays quiet.
They read only the exporter's own series (docs/metrics.md, "The exporter itself") and
Prometheus's ``up``, all through the config's ``selector``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import promql as pq
from ..findings.thresholds import Thresholds
from ..promql import num
from .alert import alerting_rule

GROUP = "contention-exporter"
Rule = dict[str, Any]

EXPORTER_DOWN = "ContentionExporterDown"
EXPORTER_ABSENT = "ContentionExporterAbsent"
PROBE_NOT_LOADED = "ContentionProbeNotLoaded"
SAMPLER_STALE = "ContentionSamplerStale"
COLLECTOR_FAILING = "ContentionCollectorFailing"
PROBE_MAP_FAILURES = "ContentionProbeMapUpdateFailures"
UNKNOWN_BLAME = "ContentionProbeUnknownBlameHigh"
TARGET_LABELS = "ContentionTargetLabelsOnSeries"
LABELS_RENAMED = "ContentionSeriesLabelsRenamed"

ALERTS = (
    EXPORTER_DOWN,
    EXPORTER_ABSENT,
    PROBE_NOT_LOADED,
    SAMPLER_STALE,
    COLLECTOR_FAILING,
    PROBE_MAP_FAILURES,
    UNKNOWN_BLAME,
    TARGET_LABELS,
    LABELS_RENAMED,
)

# A probe turned off on purpose (--no-probe, the chart's probe.loader: off) is fine.
NOT_DISABLED = 'reason!="disabled"'
TARGET_T = "{{ $labels.instance }} (job {{ $labels.job }})"

SUMMARIES = {
    EXPORTER_DOWN: "contention-exporter target is down.",
    EXPORTER_ABSENT: "No contention-exporter target is up.",
    PROBE_NOT_LOADED: "The scheduler probe is not loaded: no culprit can be named.",
    SAMPLER_STALE: "contention-exporter serves old data: its sampler has stopped.",
    COLLECTOR_FAILING: "A part of contention-exporter's pass keeps failing.",
    PROBE_MAP_FAILURES: "The scheduler probe is losing events: a BPF map is full.",
    UNKNOWN_BLAME: "The scheduler probe cannot attribute most run-queue wait.",
    TARGET_LABELS: "The scrape stamps the exporter's own pod on its series.",
    LABELS_RENAMED: "The scrape replaced the measured containers' labels with the exporter's.",
}

# The labels that name a measured container. The exporter puts them on a container's
# series only, never on contention_build_info; the scrape target's (the exporter's own
# pod under the Prometheus Operator) must not reach any series (docs/kube-prometheus-stack.md).
OWN_LABELS = ("namespace", "pod", "container")
FIX = (
    "Drop the target's namespace, pod and container labels in the scrape's relabelings "
    "(a labeldrop of namespace|pod|container, as the chart's ServiceMonitor does) and "
    "scrape with honor_labels: true; docs/kube-prometheus-stack.md."
)


def health_rules(th: Thresholds) -> list[dict[str, Any]]:
    """Every self-monitoring alert (disabled ones included; the pack filters them)."""
    m = th.matchers

    def sel(metric: str, *extra: str) -> str:
        return pq.sel(metric, *m, *extra)

    def rule(name: str, expr: str, for_: str, description: str) -> dict[str, Any]:
        return alerting_rule(
            th,
            name,
            expr,
            "warning",
            summary=SUMMARIES[name],
            description=description,
            for_=for_,
        )

    return [
        rule(
            EXPORTER_DOWN,
            f"{sel(pq.UP)} == 0",
            th.exporter_down_for,
            f"Prometheus has failed to scrape {TARGET_T} for {th.exporter_down_for}: no "
            "findings and no contention alerts for that node meanwhile.",
        ),
        rule(
            EXPORTER_ABSENT,
            f"absent({sel(pq.UP)} == 1)",
            th.exporter_down_for,
            f"No target matching {{{th.selector}}} has been up for {th.exporter_down_for}: "
            "the exporter is not running anywhere, or Prometheus does not scrape it under "
            "that selector (the thresholds file's `selector` must match the scrape job), "
            "and no contention alert can fire.",
        ),
        rule(
            PROBE_NOT_LOADED,
            f"{sel(pq.PROBE_LOADED, NOT_DISABLED)} == 0",
            th.probe_not_loaded_for,
            f"The scheduler probe on {TARGET_T} is not loaded ({{{{ $labels.reason }}}}). "
            "Stall findings still fire, but no culprit can be named: noisy neighbours show "
            "as ContentionCPUContended.",
        ),
        rule(
            SAMPLER_STALE,
            f"time() - {sel(pq.LAST_PASS)} > {num(th.sampler_stale_seconds)}",
            th.sampler_stale_for,
            f"The latest sampler pass of {TARGET_T} is {{{{ $value | humanizeDuration }}}} "
            "old: the exporter answers scrapes with old numbers, and findings and "
            "contention alerts for that node are frozen.",
        ),
        rule(
            COLLECTOR_FAILING,
            f"{sel(pq.COLLECTOR_SUCCESS)} == 0",
            th.collector_failing_for,
            f"The {{{{ $labels.collector }}}} part of every pass of {TARGET_T} has failed "
            f"for {th.collector_failing_for}: its series are missing or stale (the "
            "exporter's log says why).",
        ),
        rule(
            PROBE_MAP_FAILURES,
            f"{pq.rate(pq.PROBE_MAP_FAILURES, '5m', *m)} > 0",
            th.probe_map_failures_for,
            f"The scheduler probe on {TARGET_T} has been failing inserts into its "
            f"{{{{ $labels.map }}}} map for {th.probe_map_failures_for} (now "
            "{{ $value | humanize }} a second): the map is full, run-queue waits or "
            "culprits are lost, and blame shares are understated.",
        ),
        rule(
            UNKNOWN_BLAME,
            f"{sel(pq.UNKNOWN_BLAME)} >= {num(th.unknown_blame_ratio)}",
            th.unknown_blame_for,
            f"{{{{ $value | humanizePercentage }}}} of the run-queue wait on {TARGET_T} "
            f"is blamed on cgroups the exporter cannot name or on nobody (at least "
            f"{th.unknown_blame_ratio * 100:g}% for {th.unknown_blame_for}): culprit "
            "attribution on that node is unreliable.",
        ),
        *_scrape_label_rules(th, rule),
    ]


def _scrape_label_rules(th: Thresholds, rule: Callable[[str, str, str, str], Rule]) -> list[Rule]:
    """The scrape puts the target's labels (the exporter's own pod) on the exporter's
    series: stamped where a series lacks them (``contention_build_info`` never has
    them), or, scraped without ``honor_labels``, in place of the measured container's,
    which Prometheus renames ``exported_*`` (one alert or the other, not both)."""
    m = th.matchers
    target = pq.by(th.join_labels, "job")
    on = pq.on(th.join_labels, "job")

    def any_of(metric: str, prefix: str = "") -> str:
        return " or ".join(pq.sel(metric, *m, f'{prefix}{lab}!=""') for lab in OWN_LABELS)

    renamed = f"count {target} (\n  {any_of(pq.SAMPLED, 'exported_')}\n)"
    stamped = (
        f"group {pq.by(th.join_labels, 'job', *OWN_LABELS)} (\n  {any_of(pq.BUILD_INFO)}\n)"
        f"\nunless {on}\n{renamed}"
    )
    return [
        rule(
            TARGET_LABELS,
            stamped,
            th.target_labels_for,
            f"The series of {TARGET_T} carry the scrape target's own labels "
            '(namespace="{{ $labels.namespace }}", pod="{{ $labels.pod }}", '
            'container="{{ $labels.container }}" on '
            f"{pq.BUILD_INFO}, which the "
            "exporter never labels so): Prometheus adds them to every series that lacks "
            "them, so the node's own cgroups (the kubelet, the runtime) and pods not named "
            "yet are reported as the exporter's pod, their alerts route to its namespace, "
            f"and culprits are not matched to their own series. {FIX}",
        ),
        rule(
            LABELS_RENAMED,
            renamed,
            th.target_labels_for,
            f"{{{{ $value }}}} of the per-container series of {TARGET_T} have "
            "exported_namespace, exported_pod or exported_container: Prometheus scrapes "
            "without honor_labels, so the target's labels (the exporter's own pod) replaced "
            "the measured containers' names, which it renamed, and every contention alert "
            f"names the exporter's pod instead of the container it is about. {FIX}",
        ),
    ]
