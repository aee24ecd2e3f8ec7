"""The ``findings`` collector: the ``contention_finding`` gauge, one series per active
finding, value 1 (families: ``exporter.catalog.findings``; the findings:
``findings.evaluate``).

Labels match the generated alert's (the kind, the victim's per-container labels, and
the culprit's labels when one is named), with the finding's ``level``, its alert's
``level`` annotation (not a label there: it changes within an incident), so a
dashboard can show the exporter's own verdicts next to Alertmanager's.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.metrics_core import Metric

from ..catalog import findings as F
from ..findings.model import CULPRIT_WORKLOAD, NODE_KINDS, Finding
from ..identity import Names
from .inputs import Context
from .series import add, new


def finding_labels(f: Finding, ambiguous: frozenset[Names] = frozenset()) -> dict[str, str]:
    """kind, level, the victim's identity labels and, when one is named, the
    culprit's (``culprit_kind``, ``culprit`` and its identity labels prefixed): the
    labels of the alert the rules fire for it."""
    out = {"kind": f.kind.value, "level": f.severity.value}
    node_level = f.kind in NODE_KINDS  # about the node: no cgroup on either side
    if not node_level:
        out.update(f.victim.identity.series_labels(ambiguous))
    c = f.culprit
    if c is not None:
        out.update(culprit_kind=c.kind, culprit=c.ref)
        if c.kind == CULPRIT_WORKLOAD:  # as contention_workload_blame_ratio names it
            ns, wl = c.identity.namespace, c.identity.workload
            out.update({"culprit_namespace": ns} if ns else {})
            out["culprit_workload"] = wl
        elif not node_level:
            own = c.identity.series_labels(ambiguous)
            out.update((f"culprit_{k}", v) for k, v in own.items())
    return out


def findings(ctx: Context) -> list[Metric]:
    return finding_families(ctx.result.findings, ctx.result.at, ctx.ambiguous)


def finding_families(
    findings: Sequence[Finding], evaluated_at: float, ambiguous: frozenset[Names] = frozenset()
) -> list[Metric]:
    """The findings of one pass: always present (empty when nothing fires), with the
    time of the pass they were evaluated for."""
    g = new(F.FINDING)
    seen: set[tuple[tuple[str, str], ...]] = set()
    for f in findings:
        labels = finding_labels(f, ambiguous)
        key = tuple(sorted(labels.items()))
        if key not in seen:  # two findings never share a label set, but be safe
            seen.add(key)
            add(g, labels, 1.0)
    at = new(F.FINDINGS_PASS_TIMESTAMP_SECONDS)
    at.add_metric([], evaluated_at)
    return [g, at]
