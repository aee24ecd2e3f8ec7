"""Prometheus families describing the pod-metadata watch (Kubernetes mode only).

``contention_metadata_staleness_seconds`` itself comes from the sampler snapshot (it is
part of the :class:`~exporter.identity.IdentityResolver` protocol); these add why.
Built once per pass from one :meth:`KubeIdentityResolver.status` snapshot.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..kube.resolver import KubeIdentityResolver, WatchState


def metric_families(
    resolver: KubeIdentityResolver,
) -> list[GaugeMetricFamily | CounterMetricFamily]:
    st = resolver.status()
    state = GaugeMetricFamily(
        "contention_kube_watch_state",
        "State of the pod list+watch against the Kubernetes API (1 for the current state).",
        labels=["state"],
    )
    for s in WatchState:
        state.add_metric([s.value], 1.0 if st.state is s else 0.0)
    synced = GaugeMetricFamily(
        "contention_kube_synced",
        "1 once the pods of this node have been listed at least once.",
        value=1.0 if st.synced else 0.0,
    )
    pods = GaugeMetricFamily(
        "contention_kube_pods",
        "Pods on this node known from the Kubernetes API.",
        value=float(st.pods),
    )
    lists = CounterMetricFamily(
        "contention_kube_lists",
        "Successful pod list requests (initial sync and relists).",
        value=float(st.lists_total),
    )
    expired = CounterMetricFamily(
        "contention_kube_watch_expired",
        "Watches that ended with 410 Gone (expired resourceVersion) and forced a relist.",
        value=float(st.expired_total),
    )
    errors = CounterMetricFamily(
        "contention_kube_api_errors",
        "Failed list or watch requests (API down, 5xx, RBAC, TLS); each is retried "
        "with backoff.",
        value=float(st.errors_total),
    )
    malformed = CounterMetricFamily(
        "contention_kube_malformed_pods",
        "Pod objects (or watch lines) from the API that could not be read: each costs "
        "only that pod, which is named by its cgroup path until a good version arrives "
        "(logged once per pod).",
        value=float(st.malformed_total),
    )
    events = CounterMetricFamily(
        "contention_kube_watch_events",
        "Pod watch events received, by type.",
        labels=["type"],
    )
    for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        events.add_metric([t], float(st.events_total.get(t, 0)))
    return [state, synced, pods, lists, expired, errors, malformed, events]
