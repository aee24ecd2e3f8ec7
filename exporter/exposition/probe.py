"""The ``probe`` collector: the scheduler probe's families, built once per pass
(families and labels: ``exporter.catalog.probe``).

Per victim (its identity labels, ``Identity.series_labels``): the run-queue histogram
(cumulative, every bound present: ``probe.histogram.cumulative_buckets``), the burst
demand's (``probe.burst``, when the kernel counts it), and its top-K
culprits' shares, single containers and workloads together (``probe.blame.top_culprits``
over the pass's blame window: ``findings.aggregates.exported_blame``). Per node: the
top antagonists (``probe.blame.antagonists``), the unknown share
(``probe.blame.unknown_blame_ratio``), the probe's state and its maps' and programs'
counters (``probe.model.ProbeTotals``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric

from ..catalog import probe as P
from ..findings.aggregates import identities as window_identities
from ..identity import Identity, Names
from ..probe.blame import (
    DEFAULT_ANTAGONIST_TOP_K,
    DEFAULT_TOP_K,
    antagonists,
    top_culprits,
    unknown_blame_ratio,
)
from ..probe.burst import BURST_BOUNDS_F
from ..probe.culprit import ROOT_CGROUP_ID
from ..probe.histogram import RUNQ_BOUNDS_S, cumulative_buckets
from ..probe.model import ProbeTotals, RunqHistogram
from ..probe.status import ProbeStatus
from ..window.model import CulpritKey
from .inputs import Context
from .series import add, add_histogram, new, new_histogram


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
    burst: bool = False,
) -> list[Metric]:
    """All probe families of one pass. ``identities`` names culprits (tracked
    containers plus the window's ``others``); ``ambiguous``: names two tracked cgroups
    share in this pass (``identity.ambiguous_names``), which keep their path label;
    ``caused_total_s``: the probe's cumulative wait caused per culprit cgroup id
    (``ProbeSnapshot.caused``); ``burst``: the kernel counts burst demand
    (``ProbeSnapshot.burst_measured``), so each victim's is exported."""
    loaded = new(P.PROBE_LOADED)
    loaded.add_metric([status.loader, status.reason], 1.0 if status.loaded else 0.0)
    families: list[Metric] = [loaded]
    if not status.loaded:
        return families

    hist = new_histogram(P.RUNQUEUE_LATENCY_SECONDS)
    threads = new_histogram(P.RUNNABLE_THREADS)
    share = new(P.BLAME_RATIO, top_k=top_k)
    workload = new(P.WORKLOAD_BLAME_RATIO, top_k=top_k)
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
            if burst:
                levels = cumulative_buckets(v.runq.burst, BURST_BOUNDS_F)
                add_histogram(threads, labels, levels, float(v.runq.burst_sum))
        windows.append(v.blame_window_s)
        top = top_culprits(v.blame_window_s, identities, v.cgroup_id, top_k, root_ids)
        for b in top.containers:
            add(share, {**labels, **b.culprit.labels(ambiguous)}, b.share)
        for ws in top.workloads:
            add(workload, {**labels, **ws.labels()}, ws.share)
    families += [hist, threads, share, workload] if burst else [hist, share, workload]

    antagonist = new(P.ANTAGONIST_WAIT_SECONDS, antagonist_top_k=antagonist_top_k)
    for a in antagonists(by_victim, caused_total_s or {}, identities, antagonist_top_k, root_ids):
        add(antagonist, a.culprit.labels(ambiguous), a.total_s)
    families.append(antagonist)

    ratio = unknown_blame_ratio(windows, identities, root_ids)
    unknown = new(P.PROBE_UNKNOWN_BLAME_RATIO)
    unknown.add_metric([], ratio if ratio is not None else 0.0)
    families.append(unknown)

    if totals is not None:
        families += _node_families(totals)
    return families


def _node_families(t: ProbeTotals) -> list[Metric]:
    entries = new(P.PROBE_MAP_ENTRIES)
    capacity = new(P.PROBE_MAP_CAPACITY)
    failures = new(P.PROBE_MAP_UPDATE_FAILURES)
    for m in sorted(t.map_capacity):
        capacity.add_metric([m], float(t.map_capacity[m]))
        entries.add_metric([m], float(t.map_entries.get(m, 0)))
        failures.add_metric([m], float(t.update_failures.get(m, 0)))
    switches = new(P.PROBE_SCHED_SWITCHES)
    switches.add_metric([], float(t.context_switches))
    migrated = new(P.PROBE_MIGRATED_WAITS)
    migrated.add_metric([], float(t.migrated_waits))
    run_s = new(P.PROBE_PROGRAM_RUN_SECONDS)
    runs = new(P.PROBE_PROGRAM_RUNS)
    for name in sorted(t.programs):
        p = t.programs[name]
        run_s.add_metric([name], p.run_time_ns / 1e9)
        runs.add_metric([name], float(p.run_count))
    return [entries, capacity, failures, switches, migrated, run_s, runs]


def probe(ctx: Context) -> list[Metric]:
    """The ``probe`` collector: nothing when no probe is configured."""
    result, snap = ctx.result, ctx.snapshot
    p = snap.probe
    if p is None:
        return []
    victims = [
        VictimProbeData(
            identity=c.identity,
            runq=p.runq.get(c.cgroup_id),
            blame_window_s=result.blame.get(c.cgroup_id, {}),
            cgroup_id=c.cgroup_id,
        )
        for c in snap.containers
    ]
    names = window_identities(result.window) if result.window is not None else {}
    return build_probe_families(
        victims,
        names,
        p.status,
        p.totals,
        top_k=result.top_k,
        ambiguous=ctx.ambiguous,
        caused_total_s=p.caused,
        antagonist_top_k=result.antagonist_top_k,
        burst=p.burst_measured,
    )
