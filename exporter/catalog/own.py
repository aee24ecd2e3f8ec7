"""The exporter's own families: build info, the sampler's passes, the configuration
files, the Kubernetes pod watch, the HTTP front. Built by the collectors of the same
names: build info by ``exporter.exposition.node``, the passes and how each part went
by ``exporter.exposition.status``, the files by ``exporter.exposition.config``, the pod
watch by ``exporter.exposition.kube``, the HTTP front by ``exporter.exposition.http``."""

from __future__ import annotations

from .model import NO_UNIT, SECONDS, Family, Label, Scope, Type

E = Scope.EXPORTER
COUNTER, GAUGE = Type.COUNTER, Type.GAUGE

BUILD_INFO = Family(
    "contention_build_info",
    GAUGE,
    NO_UNIT,
    "Version of contention-exporter, the source revision it was built from and the "
    "Python running it (always 1).",
    "build_info",
    E,
    tuple(Label(n) for n in ("version", "revision", "python_version")),
    doc="`revision`: the git commit the wheel or image was built from (`-modified` when "
    "the tree differed from it); from a source checkout, its `HEAD`; `unknown` only when "
    "neither says (a wheel built from a tarball without `CONTENTION_REVISION`)",
    constant=True,
)

# -- the sampler and the parts of the pass (status) --------------------------------------

SAMPLER_READY = Family(
    "contention_sampler_ready",
    GAUGE,
    NO_UNIT,
    "1 once the first sampler pass has completed, 0 before.",
    "status",
    E,
    doc="0 until the first pass completes",
)
SAMPLER_PASSES = Family(
    "contention_sampler_passes_total",
    COUNTER,
    NO_UNIT,
    "Sampler passes completed since start.",
    "status",
    E,
    doc="passes completed",
)
SAMPLER_FAILED_PASSES = Family(
    "contention_sampler_failed_passes_total",
    COUNTER,
    NO_UNIT,
    "Sampler passes that failed as a whole (logged). Before the first pass completes, "
    "a value above 0 means it failed rather than that it is still pending.",
    "status",
    E,
    doc="passes that failed as a whole (logged); before the first pass completes, above "
    '0 means "failed", not "pending" (`/healthz` says why)',
)
SAMPLER_LAST_PASS_TIMESTAMP_SECONDS = Family(
    "contention_sampler_last_pass_timestamp_seconds",
    GAUGE,
    SECONDS,
    "Unix time of the pass this scrape shows (how fresh the numbers are).",
    "status",
    E,
    doc="when the pass shown was taken",
)
SAMPLER_PASS_DURATION_SECONDS = Family(
    "contention_sampler_pass_duration_seconds",
    GAUGE,
    SECONDS,
    "Wall time of the last sampler pass (reading the node and every cgroup).",
    "status",
    E,
    doc="wall time of the last pass",
)
SAMPLER_SKIPPED_CGROUPS = Family(
    "contention_sampler_skipped_cgroups_total",
    COUNTER,
    NO_UNIT,
    "Cgroups not sampled in a pass, by reason: vanished (removed while being read), "
    "malformed (a file not in the kernel's format or range, or not a regular file), "
    "implausible (counters moved in a way the kernel cannot produce), unreadable "
    "(permission denied; a directory that cannot be listed counts once for all the "
    "cgroups below it), error (anything else). All but vanished are logged.",
    "status",
    E,
    (Label("reason", ("vanished", "malformed", "implausible", "unreadable", "error")),),
    doc="cgroups not sampled in a pass, one count per cgroup and pass: removed while "
    "being read; a file not in the kernel's format or range, or not a regular file; "
    "counters that moved as the kernel cannot make them move; permission denied, or a "
    "directory of cgroups that cannot be listed (one count for its whole subtree); "
    "anything else. All but `vanished` are logged once per cgroup and reason, until it "
    "reads again ([below](#what-the-exporter-refuses))",
)
TRACKED_CGROUPS = Family(
    "contention_tracked_cgroups",
    GAUGE,
    NO_UNIT,
    "Cgroups sampled in the last pass.",
    "status",
    E,
    doc="cgroups sampled in the last pass",
)
COLLECTOR = Label("collector", ("node", "cgroups", "probe", "findings", "exposition"))
COLLECTOR_SUCCESS = Family(
    "contention_collector_success",
    GAUGE,
    NO_UNIT,
    "1 if this part of the last pass succeeded: node (/proc), cgroups (every cgroup "
    "found was sampled or had vanished, every directory could be listed), probe (the "
    "scheduler probe's maps), findings (evaluation), exposition (every family of "
    "this response was built).",
    "status",
    E,
    (COLLECTOR,),
    doc="1 if that part of the pass shown succeeded: reading `/proc`; the cgroups "
    "(every cgroup found was sampled or had vanished, and every directory could be "
    "listed); the probe's maps; evaluating the findings; building every family of this "
    "exposition (a part that fails loses only its own families)",
)
COLLECTOR_DURATION_SECONDS = Family(
    "contention_collector_duration_seconds",
    GAUGE,
    SECONDS,
    "Duration of this part of the last pass (exposition: building this response's "
    "families, before they are rendered as text).",
    "status",
    E,
    (COLLECTOR,),
    doc="its duration (`exposition`: building the families, before they are rendered as " "text)",
)
METADATA_STALENESS_SECONDS = Family(
    "contention_metadata_staleness_seconds",
    GAUGE,
    SECONDS,
    "Seconds since the identity source (Kubernetes API) was last known good.",
    "status",
    E,
    doc="Kubernetes mode: seconds since the API was last known good",
)

# -- the configuration files (config) ----------------------------------------------------

CONFIG_FILE_LABELS = (Label("kind", ("thresholds", "metadata", "web")), Label("file"))
CONFIG_LAST_RELOAD_SUCCESSFUL = Family(
    "contention_config_last_reload_successful",
    GAUGE,
    NO_UNIT,
    "1 if the last read of this configuration file succeeded; 0 if its current "
    "contents are bad and the last good ones are in use (logged).",
    "config",
    E,
    CONFIG_FILE_LABELS,
    doc="1 if the last read of the `--config.file` / `--metadata.file` / `--web.config.file` "
    "file (for `web`, or of a certificate, key or CA it names) succeeded; 0 while a bad "
    "edit is ignored and the last good contents are used "
    "([configuration.md](configuration.md#validation-and-reloading), "
    "[serving.md](serving.md#tls-and-basic-auth))",
)
CONFIG_RELOAD_FAILURES = Family(
    "contention_config_reload_failures_total",
    COUNTER,
    NO_UNIT,
    "Edits of this configuration file that could not be used (each bad version "
    "counts once); the last good contents stayed in use.",
    "config",
    E,
    CONFIG_FILE_LABELS,
    doc="bad versions of that file seen while running (each counted once; logged once)",
)

# -- the Kubernetes pod watch (kube; docs/kubernetes.md) --------------------------------

KUBE_WATCH_STATE = Family(
    "contention_kube_watch_state",
    GAUGE,
    NO_UNIT,
    "State of the pod list+watch against the Kubernetes API (1 for the current state).",
    "kube",
    E,
    (Label("state", ("starting", "listing", "watching", "backoff", "stopped"), True),),
    doc="the pod watch's state, 1 for the current one ([kubernetes.md](kubernetes.md))",
)
KUBE_SYNCED = Family(
    "contention_kube_synced",
    GAUGE,
    NO_UNIT,
    "1 once the pods of this node have been listed at least once.",
    "kube",
    E,
    doc="1 once the pods of this node have been listed at least once",
)
KUBE_PODS = Family(
    "contention_kube_pods",
    GAUGE,
    NO_UNIT,
    "Pods on this node known from the Kubernetes API.",
    "kube",
    E,
    doc="pods on this node the API knows of",
)
KUBE_LISTS = Family(
    "contention_kube_lists_total",
    COUNTER,
    NO_UNIT,
    "Successful pod list requests (initial sync and relists).",
    "kube",
    E,
    doc="successful pod lists (the first sync and relists)",
)
KUBE_WATCH_EXPIRED = Family(
    "contention_kube_watch_expired_total",
    COUNTER,
    NO_UNIT,
    "Watches that ended with 410 Gone (expired resourceVersion) and forced a relist.",
    "kube",
    E,
    doc="watches that ended with 410 Gone and forced a relist",
)
KUBE_API_ERRORS = Family(
    "contention_kube_api_errors_total",
    COUNTER,
    NO_UNIT,
    "Failed list or watch requests (API down, 5xx, RBAC, TLS); each is retried " "with backoff.",
    "kube",
    E,
    doc="failed list or watch requests (API down, 5xx, RBAC, TLS), each retried with backoff",
)
KUBE_MALFORMED_PODS = Family(
    "contention_kube_malformed_pods_total",
    COUNTER,
    NO_UNIT,
    "Pod objects (or watch lines) from the API that could not be read: each costs "
    "only that pod, which is named by its cgroup path until a good version arrives "
    "(logged once per pod).",
    "kube",
    E,
    doc="pod objects the API sent that could not be read: each costs only that pod, "
    "named by its cgroup path until a good version arrives",
)
KUBE_WATCH_EVENTS = Family(
    "contention_kube_watch_events_total",
    COUNTER,
    NO_UNIT,
    "Pod watch events received, by type.",
    "kube",
    E,
    (Label("type", ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"), True),),
    doc="pod watch events received, by type",
)

# -- the HTTP front (http; docs/serving.md) ------------------------------------------------

HTTP_CONNECTIONS_CLOSED = Family(
    "contention_http_connections_closed_total",
    COUNTER,
    NO_UNIT,
    "Connections the exporter closed or refused, by reason: header_timeout, "
    "idle_timeout, write_timeout, evicted (idle at the connection limit), refused "
    "(limit reached, all busy), bad_request, tls_error, tls_san (docs/serving.md).",
    "http",
    E,
    (
        Label(
            "reason",
            (
                "header_timeout",
                "idle_timeout",
                "write_timeout",
                "evicted",
                "refused",
                "bad_request",
                "tls_error",
                "tls_san",
            ),
            True,
        ),
    ),
    doc="connections the HTTP front closed or refused, and why "
    "([serving.md](serving.md#limits))",
)
HTTP_RESPONSES = Family(
    "contention_http_responses_total",
    COUNTER,
    NO_UNIT,
    "HTTP responses sent, by status code.",
    "http",
    E,
    (Label("code"),),
    doc="HTTP answers by status code (`401`: bad credentials, `429`: rate limit)",
)
HTTP_OPEN_CONNECTIONS = Family(
    "contention_http_open_connections",
    GAUGE,
    NO_UNIT,
    "Client connections open when the pass ended.",
    "http",
    E,
    doc="client connections open when the pass ended",
)

FAMILIES = (
    BUILD_INFO,
    SAMPLER_READY,
    SAMPLER_PASSES,
    SAMPLER_FAILED_PASSES,
    SAMPLER_LAST_PASS_TIMESTAMP_SECONDS,
    SAMPLER_PASS_DURATION_SECONDS,
    SAMPLER_SKIPPED_CGROUPS,
    TRACKED_CGROUPS,
    COLLECTOR_SUCCESS,
    COLLECTOR_DURATION_SECONDS,
    METADATA_STALENESS_SECONDS,
    CONFIG_LAST_RELOAD_SUCCESSFUL,
    CONFIG_RELOAD_FAILURES,
    KUBE_WATCH_STATE,
    KUBE_SYNCED,
    KUBE_PODS,
    KUBE_LISTS,
    KUBE_WATCH_EXPIRED,
    KUBE_API_ERRORS,
    KUBE_MALFORMED_PODS,
    KUBE_WATCH_EVENTS,
    HTTP_CONNECTIONS_CLOSED,
    HTTP_RESPONSES,
    HTTP_OPEN_CONNECTIONS,
)
