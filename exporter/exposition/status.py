"""The exporter's own state: sampler readiness and freshness, skipped cgroups, and how
each part of the pass went (``contention_collector_*``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..sampler.snapshot import CollectorStatus, Snapshot

READY_HELP = "1 once the first sampler pass has completed, 0 before."
FAILED_HELP = (
    "Sampler passes that failed as a whole (logged). Before the first pass completes, "
    "a value above 0 means it failed rather than that it is still pending."
)


def not_ready(failed_passes: int = 0) -> list[Metric]:
    """What a scrape shows before the first pass has been published."""
    up = GaugeMetricFamily("contention_sampler_ready", READY_HELP)
    up.add_metric([], 0)
    failed = CounterMetricFamily("contention_sampler_failed_passes_total", FAILED_HELP)
    failed.add_metric([], failed_passes)
    return [up, failed]


def status_families(snap: Snapshot, collectors: Mapping[str, CollectorStatus]) -> Iterator[Metric]:
    """``collectors``: every part of the pass, the snapshot's own (node, cgroups,
    probe) and what came after it (findings, exposition)."""
    ready = GaugeMetricFamily("contention_sampler_ready", READY_HELP)
    ready.add_metric([], 1)
    yield ready
    skipped = CounterMetricFamily(
        "contention_sampler_skipped_cgroups_total",
        "Cgroups not sampled in a pass, by reason: vanished (removed while being read), "
        "malformed (a file not in the kernel's format or range, or not a regular file), "
        "implausible (counters moved in a way the kernel cannot produce), unreadable "
        "(permission denied; a directory that cannot be listed counts once for all the "
        "cgroups below it), error (anything else). All but vanished are logged.",
        labels=["reason"],
    )
    for reason, n in sorted(snap.skipped_total.items()):
        skipped.add_metric([reason], n)
    yield skipped
    passes = CounterMetricFamily(
        "contention_sampler_passes_total", "Sampler passes completed since start."
    )
    passes.add_metric([], snap.passes_total)
    yield passes
    failed = CounterMetricFamily("contention_sampler_failed_passes_total", FAILED_HELP)
    failed.add_metric([], snap.failed_passes_total)
    yield failed
    last = GaugeMetricFamily(
        "contention_sampler_last_pass_timestamp_seconds",
        "Unix time of the pass this scrape shows (how fresh the numbers are).",
    )
    last.add_metric([], snap.taken_at)
    yield last
    dur = GaugeMetricFamily(
        "contention_sampler_pass_duration_seconds",
        "Wall time of the last sampler pass (reading the node and every cgroup).",
    )
    dur.add_metric([], snap.pass_duration_s)
    yield dur
    tracked = GaugeMetricFamily("contention_tracked_cgroups", "Cgroups sampled in the last pass.")
    tracked.add_metric([], len(snap.containers))
    yield tracked
    if snap.identity_staleness_s is not None:
        st = GaugeMetricFamily(
            "contention_metadata_staleness_seconds",
            "Seconds since the identity source (Kubernetes API) was last known good.",
        )
        st.add_metric([], snap.identity_staleness_s)
        yield st
    ok = GaugeMetricFamily(
        "contention_collector_success",
        "1 if this part of the last pass succeeded: node (/proc), cgroups (every cgroup "
        "found was sampled or had vanished, every directory could be listed), probe (the "
        "scheduler probe's maps), findings (evaluation), exposition (every family of "
        "this response was built).",
        labels=["collector"],
    )
    d = GaugeMetricFamily(
        "contention_collector_duration_seconds",
        "Duration of this part of the last pass (exposition: building this response's "
        "families, before they are rendered as text).",
        labels=["collector"],
    )
    for name, st_ in sorted(collectors.items()):
        ok.add_metric([name], 1 if st_.success else 0)
        d.add_metric([name], st_.duration_s)
    yield ok
    yield d
