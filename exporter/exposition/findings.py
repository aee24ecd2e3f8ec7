"""The ``contention_finding`` gauge: one series per active finding, value 1.

Labels match the generated alerts (kind, severity, the victim's per-container labels,
and the culprit's labels when one is named), so a dashboard can show the exporter's
own verdicts next to Alertmanager's.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..findings.model import Finding
from ..identity import IDENTITY_LABELS
from ..probe.culprit import CULPRIT_LABELS

FINDING_LABELS = ("kind", "severity", *IDENTITY_LABELS, *CULPRIT_LABELS)


def finding_labels(f: Finding) -> tuple[str, ...]:
    v = f.victim.identity
    c = f.culprit
    ci = c.identity if c else None
    return (
        f.kind.value,
        f.severity.value,
        v.cgroup,
        v.namespace,
        v.pod,
        v.container,
        c.kind if c else "",
        c.ref if c else "",
        ci.cgroup if ci else "",
        ci.namespace if ci else "",
        ci.pod if ci else "",
        ci.container if ci else "",
    )


def finding_families(findings: Sequence[Finding], evaluated_at: float) -> list[Metric]:
    """The findings of one pass: always present (empty when nothing fires), with the
    time of the pass they were evaluated for."""
    g = GaugeMetricFamily(
        "contention_finding",
        "An active finding (1): its kind, severity, victim and named culprit, if any.",
        labels=FINDING_LABELS,
    )
    seen: set[tuple[str, ...]] = set()
    for f in findings:
        labels = finding_labels(f)
        if labels not in seen:  # two findings never share a label set, but be safe
            seen.add(labels)
            g.add_metric(labels, 1.0)
    at = GaugeMetricFamily(
        "contention_findings_pass_timestamp_seconds",
        "Unix time of the sampler pass contention_finding was evaluated for: the same "
        "pass as every other series of the scrape "
        "(contention_sampler_last_pass_timestamp_seconds).",
    )
    at.add_metric([], evaluated_at)
    return [g, at]
