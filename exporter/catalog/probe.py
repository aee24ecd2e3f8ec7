"""The scheduler probe's families: per victim container, the node's antagonists, and
the probe's own state (docs/probe.md). Built by ``exporter.exposition.probe``."""

from __future__ import annotations

from .model import NO_UNIT, RATIO, SECONDS, Family, Label, Scope, Type

COUNTER, GAUGE = Type.COUNTER, Type.GAUGE
# A culprit's labels: its kind and name, and its own series' identity labels prefixed
# (docs/metrics.md, "Scheduler probe").
CULPRIT_LABELS = tuple(
    Label(n)
    for n in (
        "culprit_kind",
        "culprit",
        "culprit_namespace",
        "culprit_pod",
        "culprit_container",
        "culprit_cgroup",
    )
)
CULPRIT_LABELS_DOC = (
    "`culprit_kind`, `culprit`, and the culprit's identity labels prefixed: "
    "`culprit_namespace`, `culprit_pod`, `culprit_container`, or `culprit_cgroup`"
)

PROBE_LOADED = Family(
    "contention_probe_loaded",
    GAUGE,
    NO_UNIT,
    "1 when the scheduler probe is attached; loader says which (core or bcc), reason "
    "why not, or why the preferred CO-RE loader did not when BCC loaded instead.",
    "probe",
    Scope.NODE,
    (Label("loader", ("core", "bcc")), Label("reason")),
    doc="1 when the probe is attached, `loader` says how (`core`: the precompiled CO-RE "
    "object; `bcc`: compiled on the node); `reason` is empty, or, when BCC loaded as the "
    "fallback, why CO-RE did not. 0 when nothing loaded, and why: `disabled`, "
    "`not-root`, `no-btf`, `libbpf-missing`, `libbpf-too-old`, `no-object`, "
    "`no-tracepoint`, `verifier`, `load-error`, `no-tracefs`, `no-headers`, `no-bcc`, "
    "`compile-error`, `attach-error` ([troubleshooting.md](troubleshooting.md))",
)
RUNQUEUE_LATENCY_SECONDS = Family(
    "contention_runqueue_latency_seconds",
    Type.HISTOGRAM,
    SECONDS,
    "Time tasks of the cgroup spent runnable before getting a CPU (per wakeup); "
    "_sum is the total run-queue wait.",
    "probe",
    Scope.VICTIM,
    doc="time its tasks spent runnable before getting a CPU, per wakeup; `_sum` is the "
    "total wait. Bounds 5, 20, 50, 200 ms and 1 s (0.02 and 0.2 are the findings' "
    "thresholds, exactly); waits longer than 1 s count only in `+Inf`",
)
RUNNABLE_THREADS = Family(
    "contention_runnable_threads",
    Type.HISTOGRAM,
    NO_UNIT,
    "Threads of the cgroup running or runnable at once, observed each time one of them "
    "is put on a run queue (woken, created or preempted), itself included; _sum is the "
    "sum of the observed counts.",
    "probe",
    Scope.VICTIM,
    doc="burst demand: how many of its threads were running or runnable (on a CPU or "
    "queued for one, throttled ones included) at once, observed each time one of them "
    "is put on a run queue (woken, created or preempted), itself included: per event, "
    "not per second. Bounds 1, 2, 3, 4, 6, 8, 12, 16, 24, 32 threads; N busy threads "
    "observe N ([probe.md](probe.md#burst-demand))",
)
BLAME_RATIO = Family(
    "contention_blame_ratio",
    GAUGE,
    RATIO,
    "Share of the victim's run-queue wait over the window spent behind this culprit "
    "(one of the victim's top {top_k} culprits, workloads included).",
    "probe",
    Scope.VICTIM,
    CULPRIT_LABELS,
    doc="share (0–1) of the victim's wait spent behind this culprit over the window's "  # noqa: RUF001 (markdown: a range)
    "complete minutes and the minute in progress (so a young victim has blame as soon "
    "as it has waited). Any kind ranks: `idle`, `unknown`, `kernel` and the victim's "
    "own cgroup too. Only the victim's `--probe.top-k` (3) largest culprits are "
    "exported, this family and `contention_workload_blame_ratio` together "
    "([Cardinality](#cardinality))",
    top_k=True,
    labels_doc=CULPRIT_LABELS_DOC,
)
WORKLOAD_BLAME_RATIO = Family(
    "contention_workload_blame_ratio",
    GAUGE,
    RATIO,
    "Share of the victim's run-queue wait over the window spent behind the containers "
    "of one workload together (Deployment, CronJob, StatefulSet, ...), running or "
    "gone (one of the victim's top {top_k} culprits, single containers included).",
    "probe",
    Scope.VICTIM,
    tuple(Label(n) for n in ("culprit_kind", "culprit", "culprit_namespace", "culprit_workload")),
    doc="share (0–1) of the victim's wait spent behind all the containers of one "  # noqa: RUF001 (markdown: a range)
    "workload together, running or gone (still named while their blame is in the "
    "window), over the same minutes as `contention_blame_ratio`; the victim's own "
    "cgroup never counts. Only containers whose `workload` is known "
    "([findings.md](findings.md#workload-culprits)), and only workloads with at least "
    "two containers in the victim's blame (one is that container's "
    "`contention_blame_ratio`). Exported when it is among the victim's `--probe.top-k` "
    "(3) largest culprits, single ones and workloads together: the two families carry "
    "at most K series per victim between them",
    top_k=True,
    labels_doc='`culprit_kind="workload"`, `culprit` (`<namespace>/<Kind>/<name>`), '
    "`culprit_namespace`, `culprit_workload` (`Deployment/web`, `CronJob/backup`, …)",
)
ANTAGONIST_WAIT_SECONDS = Family(
    "contention_antagonist_wait_seconds_total",
    COUNTER,
    SECONDS,
    "Run-queue wait this culprit caused to the other tracked containers since the "
    "exporter started; exported for the top {antagonist_top_k} culprits by the wait "
    "they caused over the window.",
    "probe",
    Scope.ANTAGONIST,
    CULPRIT_LABELS,
    doc="run-queue wait this culprit caused to the *other* tracked containers, summed "
    "over all of them, since the exporter started: the time their tasks waited for a "
    "CPU while it ran (the blame matrix's column). Top `--probe.antagonists` (10) "
    "culprits",
    labels_doc=CULPRIT_LABELS_DOC,
)
PROBE_UNKNOWN_BLAME_RATIO = Family(
    "contention_probe_unknown_blame_ratio",
    GAUGE,
    RATIO,
    "Share of all victims' wait over the window blamed on unknown culprits "
    "(unresolved cgroup ids, or wait the slice ring did not cover).",
    "probe",
    Scope.NODE,
    doc="share of all victims' wait blamed on `unknown`; if it climbs, attribution on "
    "this node is broken",
    source="BPF",
)
MAP = Label("map")
PROBE_MAP_ENTRIES = Family(
    "contention_probe_map_entries",
    GAUGE,
    NO_UNIT,
    "Entries in each probe map.",
    "probe",
    Scope.NODE,
    (MAP,),
    doc="entries in each probe map",
    source="BPF",
)
PROBE_MAP_CAPACITY = Family(
    "contention_probe_map_capacity",
    GAUGE,
    NO_UNIT,
    "Maximum entries of each probe map.",
    "probe",
    Scope.NODE,
    (MAP,),
    doc="the most entries each probe map holds",
    source="BPF",
)
PROBE_MAP_UPDATE_FAILURES = Family(
    "contention_probe_map_update_failures_total",
    COUNTER,
    NO_UNIT,
    "Inserts into a probe map that failed (map full): events lost.",
    "probe",
    Scope.NODE,
    (MAP,),
    doc="inserts that failed (map full): events lost",
    source="BPF",
)
PROBE_SCHED_SWITCHES = Family(
    "contention_probe_sched_switches_total",
    COUNTER,
    NO_UNIT,
    "Context switches (sched_switch events) the probe processed.",
    "probe",
    Scope.NODE,
    doc="context switches the probe processed",
    source="BPF",
)
PROBE_MIGRATED_WAITS = Family(
    "contention_probe_migrated_waits_total",
    COUNTER,
    NO_UNIT,
    "Waits of tracked tasks split by a migration: the part spent queued on the CPU "
    "the task left was attributed to that CPU's run slices (counted per migration).",
    "probe",
    Scope.NODE,
    doc="waits of tracked tasks split by a migration: the part spent queued on the CPU "
    "the task left was attributed to that CPU's run slices, the rest to the CPU it ran "
    "on (counted per migration; occupancy mode; [probe.md](probe.md#attribution))",
    source="BPF",
)
PROGRAM = Label("program")
PROBE_PROGRAM_RUN_SECONDS = Family(
    "contention_probe_program_run_seconds_total",
    COUNTER,
    SECONDS,
    "Kernel time spent in each probe program (needs kernel.bpf_stats_enabled=1).",
    "probe",
    Scope.NODE,
    (PROGRAM,),
    doc="kernel time per BPF program (needs `kernel.bpf_stats_enabled=1`); divided by "
    "`contention_probe_program_runs_total`, the cost per event",
    source="BPF",
)
PROBE_PROGRAM_RUNS = Family(
    "contention_probe_program_runs_total",
    COUNTER,
    NO_UNIT,
    "Runs of each probe program (needs kernel.bpf_stats_enabled=1).",
    "probe",
    Scope.NODE,
    (PROGRAM,),
    doc="runs per BPF program (needs `kernel.bpf_stats_enabled=1`)",
    source="BPF",
)

FAMILIES = (
    RUNQUEUE_LATENCY_SECONDS,
    RUNNABLE_THREADS,
    BLAME_RATIO,
    WORKLOAD_BLAME_RATIO,
    ANTAGONIST_WAIT_SECONDS,
    PROBE_LOADED,
    PROBE_UNKNOWN_BLAME_RATIO,
    PROBE_MAP_ENTRIES,
    PROBE_MAP_CAPACITY,
    PROBE_MAP_UPDATE_FAILURES,
    PROBE_SCHED_SWITCHES,
    PROBE_MIGRATED_WAITS,
    PROBE_PROGRAM_RUN_SECONDS,
    PROBE_PROGRAM_RUNS,
)
