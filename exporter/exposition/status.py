"""The ``status`` collector: sampler readiness and freshness, skipped cgroups, and how
each part of the pass went (``contention_collector_*``; families:
``exporter.catalog.own``). It runs last: the ``exposition`` part is every collector
before it."""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client.core import Metric

from ..catalog import own as O
from ..sampler.snapshot import CollectorStatus, Snapshot
from .inputs import Context
from .series import new, one


def not_ready(failed_passes: int = 0) -> list[Metric]:
    """What a scrape shows before the first pass has been published."""
    return [one(O.SAMPLER_READY, 0), one(O.SAMPLER_FAILED_PASSES, failed_passes)]


def status(ctx: Context) -> list[Metric]:
    """The snapshot's own parts (node, cgroups, probe), the findings evaluation and the
    exposition: whether every collector before this one built its families."""
    parts = dict(ctx.snapshot.collectors)
    parts["findings"] = ctx.result.evaluation
    parts["exposition"] = CollectorStatus(not ctx.failed, time.perf_counter() - ctx.started)
    return status_families(ctx.snapshot, parts)


def status_families(snap: Snapshot, collectors: Mapping[str, CollectorStatus]) -> list[Metric]:
    """``collectors``: every part of the pass, the snapshot's own (node, cgroups,
    probe) and what came after it (findings, exposition)."""
    skipped = new(O.SAMPLER_SKIPPED_CGROUPS)
    for reason, n in sorted(snap.skipped_total.items()):
        skipped.add_metric([reason], n)
    out = [
        one(O.SAMPLER_READY, 1),
        skipped,
        one(O.SAMPLER_PASSES, snap.passes_total),
        one(O.SAMPLER_FAILED_PASSES, snap.failed_passes_total),
        one(O.SAMPLER_LAST_PASS_TIMESTAMP_SECONDS, snap.taken_at),
        one(O.SAMPLER_PASS_DURATION_SECONDS, snap.pass_duration_s),
        one(O.TRACKED_CGROUPS, len(snap.containers)),
    ]
    if snap.identity_staleness_s is not None:
        out.append(one(O.METADATA_STALENESS_SECONDS, snap.identity_staleness_s))
    ok, d = new(O.COLLECTOR_SUCCESS), new(O.COLLECTOR_DURATION_SECONDS)
    for name, st in sorted(collectors.items()):
        ok.add_metric([name], 1 if st.success else 0)
        d.add_metric([name], st.duration_s)
    return [*out, ok, d]
