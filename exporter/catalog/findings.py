"""The findings of a pass (docs/findings.md). Built by ``exporter.exposition.findings``."""

from __future__ import annotations

from .model import NO_UNIT, SECONDS, Family, Label, Scope, Type
from .probe import CULPRIT_LABELS

FINDING = Family(
    "contention_finding",
    Type.GAUGE,
    NO_UNIT,
    "An active finding (1): its kind, level, victim and named culprit, if any.",
    "findings",
    Scope.FINDING,
    (Label("kind"), Label("level"), *CULPRIT_LABELS, Label("culprit_workload")),
    doc="an active finding (see [findings.md](findings.md)): the labels of the alert the "
    "rules fire for it, and its level",
    constant=True,
    labels_doc="`kind`, `level` (`critical`, `warning` or `info`: its alert's `level` "
    "annotation, not its `severity`), the victim's identity labels, and when a culprit is "
    "named `culprit_kind`, `culprit` and its identity labels prefixed "
    "(`culprit_namespace`, `culprit_pod`, `culprit_container`, or `culprit_cgroup`; a "
    "workload culprit: `culprit_namespace`, `culprit_workload`)",
)
FINDINGS_PASS_TIMESTAMP_SECONDS = Family(
    "contention_findings_pass_timestamp_seconds",
    Type.GAUGE,
    SECONDS,
    "Unix time of the sampler pass contention_finding was evaluated for: the same "
    "pass as every other series of the scrape "
    "(contention_sampler_last_pass_timestamp_seconds).",
    "findings",
    Scope.FINDING,
    doc="the pass the findings were evaluated for: always equal to "
    "`contention_sampler_last_pass_timestamp_seconds` in the same scrape",
)

FAMILIES = (FINDING, FINDINGS_PASS_TIMESTAMP_SECONDS)
