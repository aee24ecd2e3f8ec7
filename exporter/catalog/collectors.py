"""Every collector: its name, whether it is on by default, what it exports.

The ones off by default are the per-container families cAdvisor or kube-state-metrics
already export and no rule, dashboard or finding reads (``--collector.<name>``;
docs/metrics.md, "Optional collectors"). The order here is the docs' and ``--help``'s;
the exposition's order is its registry's (``exporter.exposition.registry``).
"""

from __future__ import annotations

from .model import Collector

COLLECTORS: tuple[Collector, ...] = (
    Collector("build_info", True, "the exporter's version, revision and Python"),
    Collector("node", True, "the node's cgroup layout, size, context switches, steal and PSI"),
    Collector("containers", True, "every tracked container's usage, requests, throttling, PSI"),
    Collector(
        "cpu_spec",
        False,
        "CPU limit and weight",
        flag_help="contention_cpu_limit_cores, contention_cpu_weight (cAdvisor: "
        "container_spec_cpu_quota/_period/_shares; kube-state-metrics: resource limits)",
        elsewhere="cAdvisor `container_spec_cpu_quota`/`_period`/`_shares`; "
        "kube-state-metrics `kube_pod_container_resource_limits`",
    ),
    Collector(
        "memory_spec",
        False,
        "memory limit and high boundary",
        flag_help="contention_memory_limit_bytes, contention_memory_high_bytes "
        "(cAdvisor: container_spec_memory_limit_bytes)",
        elsewhere="cAdvisor `container_spec_memory_limit_bytes`",
    ),
    Collector(
        "memory_usage",
        False,
        "memory usage and major faults",
        flag_help="contention_memory_usage_bytes, contention_memory_major_faults_total "
        "(cAdvisor: container_memory_usage_bytes, container_memory_failures_total)",
        elsewhere="cAdvisor `container_memory_usage_bytes`, "
        '`container_memory_failures_total{failure_type="pgmajfault"}`',
    ),
    Collector(
        "memory_oom",
        False,
        "the memory events below the limit and the OOM kills",
        flag_help="contention_memory_events_total for low, oom and oom_kill; high and max "
        "are always exported, the rules read them (cAdvisor: container_oom_events_total)",
        elsewhere="cAdvisor `container_oom_events_total`",
    ),
    Collector(
        "io_pressure",
        False,
        "IO pressure",
        flag_help="contention_pressure_io_{waiting,stalled}_seconds_total (cAdvisor with "
        "PSI: container_pressure_io_*)",
        elsewhere="cAdvisor with PSI (`container_pressure_io_*`)",
    ),
    Collector("probe", True, "the scheduler probe's state and, when it is loaded, its data"),
    Collector("findings", True, "the findings of the pass"),
    Collector(
        "process",
        True,
        "the standard families of every exporter: the exporter's own CPU seconds, RSS, "
        "open and maximum fds, start time, garbage collections (prometheus_client), "
        "collected when the pass is rendered, like the rest. Always read from the "
        "exporter's own `/proc/self`, whatever `--path.procfs` points to (that is the "
        "node's). `--web.disable-exporter-metrics` leaves them out",
        foreign=("process_*", "python_gc_*"),
    ),
    Collector("kube", True, "the Kubernetes pod watch's health (`--kubernetes`)"),
    Collector("config", True, "the configuration files' reload state (with such a file)"),
    Collector("http", True, "the HTTP front's connections and responses (when serving)"),
    Collector("selftest", True, "the last self-test's verdict and figures (once one ran)"),
    Collector("status", True, "the sampler's passes and how each part of the pass went"),
)
