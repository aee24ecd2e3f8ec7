"""Prometheus families of the scheduler probe, built once per pass.

Per victim (its identity labels, ``Identity.series_labels``):

* ``contention_runqueue_latency_seconds`` histogram (cumulative, every bound present;
  its ``_sum`` is the total wait);
* ``contention_blame_share`` gauge: culprits' shares of the victim's wait over the
  window, with ``culprit_kind``, ``culprit`` and the culprit's own identity labels
  prefixed ``culprit_`` (join on the culprit's series);
* ``contention_workload_blame_share`` gauge: workloads' shares (all their containers
  together, running or gone), with ``culprit_kind="workload"``, ``culprit``,
  ``culprit_namespace`` and ``culprit_workload`` (docs/findings.md#workload-culprits);
  the two together carry the victim's top-K culprits (``top_culprits``).

Per node: ``contention_antagonist_wait_seconds_total`` (the top-K culprits by the wait
they caused to other victims over the window, with the cumulative count),
``contention_probe_loaded{loader, reason}``, ``contention_probe_unknown_blame_ratio``,
map occupancy, capacity and update failures, sched_switch events seen, waits split by
a migration, and the programs' kernel run time (non-zero only with ``kernel.bpf_stats_enabled=1``).

Series per victim: len(RUNQ_BOUNDS_S) + 3 (histogram: the buckets, +Inf, _count,
_sum) + top-K (blame and workload shares together) = 11 with K = 3.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..identity import Identity, Names
from ..probe.blame import (
    DEFAULT_ANTAGONIST_TOP_K,
    DEFAULT_TOP_K,
    antagonists,
    top_culprits,
    unknown_blame_ratio,
)
from ..probe.culprit import ROOT_CGROUP_ID
from ..probe.histogram import RUNQ_BOUNDS_S, cumulative_buckets
from ..probe.model import ProbeTotals, RunqHistogram
from ..probe.status import ProbeStatus
from ..window.model import CulpritKey
from .series import add, add_histogram


@dataclass(frozen=True, slots=True)
class VictimProbeData:
    """What the exposition knows about one tracked victim in a pass."""

    identity: Identity
    runq: RunqHistogram | None  # cumulative since the exporter started (None: no data)
    blame_window_s: Mapping[CulpritKey, float]  # wait seconds per culprit key, window
    cgroup_id: int = 0  # its own cgroup id (its wait behind itself is caused to no one)


def build_probe_families(
    victims: Iterable[VictimProbeData],
    identities: Mapping[int, Identity],
    status: ProbeStatus,
    totals: ProbeTotals | None,
    *,
    top_k: int = DEFAULT_TOP_K,
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
    bounds_s: tuple[float, ...] = RUNQ_BOUNDS_S,
    ambiguous: frozenset[Names] = frozenset(),
    caused_total_s: Mapping[int, float] | None = None,
    antagonist_top_k: int = DEFAULT_ANTAGONIST_TOP_K,
) -> list[Metric]:
    """All probe families of one pass. ``identities`` names culprits (tracked
    containers plus the window's ``others``); ``ambiguous``: names two tracked cgroups
    share in this pass (``identity.ambiguous_names``), which keep their path label;
    ``caused_total_s``: the probe's cumulative wait caused per culprit cgroup id
    (``ProbeSnapshot.caused``)."""
    loaded = GaugeMetricFamily(
        "contention_probe_loaded",
        "1 when the scheduler probe is attached; loader says which (core or bcc), reason "
        "why not, or why the preferred CO-RE loader did not when BCC loaded instead.",
        labels=["loader", "reason"],
    )
    loaded.add_metric([status.loader, status.reason], 1.0 if status.loaded else 0.0)
    families: list[Metric] = [loaded]
    if not status.loaded:
        return families

    hist = HistogramMetricFamily(
        "contention_runqueue_latency_seconds",
        "Time tasks of the cgroup spent runnable before getting a CPU (per wakeup); "
        "_sum is the total run-queue wait.",
    )
    share = GaugeMetricFamily(
        "contention_blame_share",
        "Share of the victim's run-queue wait over the window spent behind this culprit "
        f"(one of the victim's top {top_k} culprits, workloads included).",
    )
    workload = GaugeMetricFamily(
        "contention_workload_blame_share",
        "Share of the victim's run-queue wait over the window spent behind the containers "
        "of one workload together (Deployment, CronJob, StatefulSet, ...), running or "
        f"gone (one of the victim's top {top_k} culprits, single containers included).",
    )
    windows: list[Mapping[CulpritKey, float]] = []
    by_victim: dict[int, Mapping[CulpritKey, float]] = {}
    seen: set[tuple[tuple[str, str], ...]] = set()
    for v in victims:
        labels = v.identity.series_labels(ambiguous)
        key = tuple(sorted(labels.items()))
        if key in seen:  # one series per victim identity
            continue
        seen.add(key)
        by_victim[v.cgroup_id] = v.blame_window_s
        if v.runq is not None:
            buckets = cumulative_buckets(v.runq.counts, bounds_s)
            add_histogram(hist, labels, buckets, v.runq.sum_s)
        windows.append(v.blame_window_s)
        top = top_culprits(v.blame_window_s, identities, v.cgroup_id, top_k, root_ids)
        for b in top.containers:
            add(share, {**labels, **b.culprit.labels(ambiguous)}, b.share)
        for ws in top.workloads:
            add(workload, {**labels, **ws.labels()}, ws.share)
    families += [hist, share, workload]

    antagonist = CounterMetricFamily(
        "contention_antagonist_wait_seconds",
        "Run-queue wait this culprit caused to the other tracked containers since the "
        f"exporter started; exported for the top {antagonist_top_k} culprits by the wait "
        "they caused over the window.",
    )
    for a in antagonists(by_victim, caused_total_s or {}, identities, antagonist_top_k, root_ids):
        add(antagonist, a.culprit.labels(ambiguous), a.total_s)
    families.append(antagonist)

    ratio = unknown_blame_ratio(windows, identities, root_ids)
    unknown = GaugeMetricFamily(
        "contention_probe_unknown_blame_ratio",
        "Share of all victims' wait over the window blamed on unknown culprits "
        "(unresolved cgroup ids, or wait the slice ring did not cover).",
    )
    unknown.add_metric([], ratio if ratio is not None else 0.0)
    families.append(unknown)

    if totals is not None:
        families += _node_families(totals)
    return families


def _node_families(t: ProbeTotals) -> list[Metric]:
    entries = GaugeMetricFamily(
        "contention_probe_map_entries", "Entries in each probe map.", labels=["map"]
    )
    capacity = GaugeMetricFamily(
        "contention_probe_map_capacity", "Maximum entries of each probe map.", labels=["map"]
    )
    failures = CounterMetricFamily(
        "contention_probe_map_update_failures",
        "Inserts into a probe map that failed (map full): events lost.",
        labels=["map"],
    )
    for m in sorted(t.map_capacity):
        capacity.add_metric([m], float(t.map_capacity[m]))
        entries.add_metric([m], float(t.map_entries.get(m, 0)))
        failures.add_metric([m], float(t.update_failures.get(m, 0)))
    switches = CounterMetricFamily(
        "contention_probe_sched_switches",
        "Context switches (sched_switch events) the probe processed.",
    )
    switches.add_metric([], float(t.context_switches))
    migrated = CounterMetricFamily(
        "contention_probe_migrated_waits",
        "Waits of tracked tasks split by a migration: the part spent queued on the CPU "
        "the task left was attributed to that CPU's run slices (counted per migration).",
    )
    migrated.add_metric([], float(t.migrated_waits))
    run_s = CounterMetricFamily(
        "contention_probe_program_run_seconds",
        "Kernel time spent in each probe program (needs kernel.bpf_stats_enabled=1).",
        labels=["program"],
    )
    runs = CounterMetricFamily(
        "contention_probe_program_runs",
        "Runs of each probe program (needs kernel.bpf_stats_enabled=1).",
        labels=["program"],
    )
    for name in sorted(t.programs):
        p = t.programs[name]
        run_s.add_metric([name], p.run_time_ns / 1e9)
        runs.add_metric([name], float(p.run_count))
    return [entries, capacity, failures, switches, migrated, run_s, runs]
