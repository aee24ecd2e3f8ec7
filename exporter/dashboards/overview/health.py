"""Overview row: the exporter's and the probe's health on the node: what the node
supports, whether the probe is loaded and can name culprits, the sampler, the
collectors, and the probe's cost and maps."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, stat, timeseries

from ... import promql as pq
from ...findings.thresholds import duration_ms
from ...promql import rate, sel
from ..layout import Context, Row
from ..panels import (
    BLUE,
    GREEN,
    ORANGE,
    RED,
    Query,
    bar_gauge_panel,
    stat_panel,
    timeseries_panel,
    value_map,
)
from ..selectors import RATE


def _per_node(context: Context, expr: str) -> list[Query]:
    """One number per node, named by its node label."""
    return [Query(expr, context.selectors.node_legend, instant=True)]


def usage_and_stall_layers(context: Context) -> stat.Panel:
    supported = sel(pq.COMPUTE_SUPPORTED, context.selectors.node)
    return stat_panel(
        context.ids,
        "Usage and stall layers",
        "Whether this node supports the usage and stall layers (cgroup2 with PSI; the "
        "name shows the reason when not). Red: no per-container series on this node; "
        "cgroup v1-only nodes and kernels booted with psi=0 are not supported.",
        "none",
        [Query(supported, "{{reason}}", instant=True)],
        mappings=[value_map({"1": ("supported", GREEN), "0": ("not supported", RED)})],
    )


def scheduler_probe(context: Context) -> stat.Panel:
    loaded = sel(pq.PROBE_LOADED, context.selectors.node)
    return stat_panel(
        context.ids,
        "Scheduler probe",
        "Whether the eBPF scheduler probe is attached. The name shows the loader (core: "
        "the CO-RE object through libbpf; bcc: the fallback) and the reason: why it is "
        "not loaded, or why CO-RE did not load when BCC did. Without it there is no "
        "run-queue latency and no blame: stall findings still fire, but never "
        "noisy-neighbor. Orange: check the exporter log and its capabilities (CAP_BPF, "
        "CAP_PERFMON), the kernel's BTF and libbpf (or, for BCC, kernel headers and "
        "tracefs); docs/troubleshooting.md lists every reason.",
        "none",
        [Query(loaded, "{{loader}} {{reason}}", instant=True)],
        mappings=[value_map({"1": ("loaded", GREEN), "0": ("not loaded", ORANGE)})],
    )


def unknown_blame(context: Context) -> stat.Panel:
    return stat_panel(
        context.ids,
        "Unknown blame share",
        "Share of all victims' run-queue wait over the window that the probe could not "
        "attribute to a known cgroup (unresolved ids, or wait its slice ring missed). "
        "Display bands 20% / 50%. Red: attribution on this node is unreliable, treat "
        "culprit names with care and check the exporter log.",
        "percentunit",
        _per_node(context, sel(pq.UNKNOWN_BLAME, context.selectors.node)),
        [(0.2, ORANGE), (0.5, RED)],
    )


def last_sampler_pass(context: Context) -> stat.Panel:
    """Coloured as ContentionSamplerStale stands: orange once the age is over
    ``samplerStaleSeconds`` (the alert pending), red once it has been for
    ``samplerStaleFor`` too (the alert firing: the age has grown by as much)."""
    th = context.th
    stale = th.sampler_stale_seconds
    firing = stale + duration_ms(th.sampler_stale_for) / 1000
    return stat_panel(
        context.ids,
        "Last sampler pass",
        "Seconds since the exporter's last complete pass over the cgroups. Orange (over "
        f"{stale:g} s, samplerStaleSeconds): the sampler is stuck or the exporter is "
        "overloaded, and ContentionSamplerStale is pending; red (over "
        f"{firing:g} s, after samplerStaleFor): it fires. The numbers on this dashboard "
        "are stale. Check /healthz and the exporter log.",
        "s",
        _per_node(context, f"time() - {sel(pq.LAST_PASS, context.selectors.node)}"),
        [(stale, ORANGE), (firing, RED)],
    )


def failing_collectors(context: Context) -> stat.Panel:
    selectors = context.selectors
    failing = f"sum {selectors.by()} (1 - {sel(pq.COLLECTOR_SUCCESS, selectors.node)})"
    return stat_panel(
        context.ids,
        "Failing collectors",
        f"Collectors whose last run failed ({pq.COLLECTOR_SUCCESS} == 0). Red: "
        "some series are missing; the exporter log names the collector and the error.",
        "none",
        _per_node(context, failing),
        [(1, RED)],
    )


def tracked_cgroups(context: Context) -> stat.Panel:
    return stat_panel(
        context.ids,
        "Tracked cgroups",
        "Cgroups sampled in the last pass (containers, systemd units, other leaf "
        "cgroups). Informational; a sudden drop to zero means discovery failed.",
        "none",
        _per_node(context, sel(pq.TRACKED_CGROUPS, context.selectors.node)),
        base=BLUE,
    )


def probe_cost(context: Context) -> timeseries.Panel:
    node = context.selectors.node
    per_run = f"{rate(pq.PROBE_RUN_SECONDS, RATE, node)} / {rate(pq.PROBE_RUNS, RATE, node)}"
    return timeseries_panel(
        context.ids,
        "Probe cost per event",
        "Average kernel time per run of each probe program (needs "
        "kernel.bpf_stats_enabled=1, else no data). Multiply by the context-switch "
        "rate for the probe's CPU cost. A few hundred nanoseconds is expected; "
        "microseconds mean the probe is a real load on a busy node.",
        "s",
        [Query(per_run, f"{context.selectors.node_legend} {{{{program}}}}")],
        width=8,
    )


def map_occupancy(context: Context) -> bargauge.Panel:
    node = context.selectors.node
    share = f"{sel(pq.PROBE_MAP_ENTRIES, node)} / {sel(pq.PROBE_MAP_CAPACITY, node)}"
    return bar_gauge_panel(
        context.ids,
        "Probe map occupancy",
        "Entries in each BPF map as a share of its capacity. Orange at 80%, red at 95%: "
        "a full map drops events (see update failures); raise the map size knob.",
        "percentunit",
        [Query(share, f"{context.selectors.node_legend} {{{{map}}}}", instant=True)],
        [(0.8, ORANGE), (0.95, RED)],
        width=8,
        height=8,
        max_val=1,
    )


def map_update_failures(context: Context) -> timeseries.Panel:
    failures = rate(pq.PROBE_MAP_FAILURES, RATE, context.selectors.node)
    return timeseries_panel(
        context.ids,
        "Probe map update failures",
        "Inserts into a probe map that failed per second (map full): those events are "
        "lost and blame is incomplete. Any sustained non-zero rate: raise that map's "
        "size.",
        "ops",
        [Query(failures, f"{context.selectors.node_legend} {{{{map}}}}")],
        width=8,
    )


ROW = Row(
    "Exporter and probe health",
    (
        usage_and_stall_layers,
        scheduler_probe,
        unknown_blame,
        last_sampler_pass,
        failing_collectors,
        tracked_cgroups,
        probe_cost,
        map_occupancy,
        map_update_failures,
    ),
)
