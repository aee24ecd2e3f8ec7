"""What the Prometheus Operator makes of a ServiceMonitor or PodMonitor: the scrape job
its config generator writes (``pkg/prometheus/promcfg.go`` of the v0.78 era, as read
in the issue-24 research notes), with a static target standing in for Kubernetes
service discovery.

The static target carries the ``__meta_kubernetes_*`` labels the endpoints (or pod)
role gives the exporter's pod, so Prometheus's own relabelling runs the operator's
``relabel_configs`` on exactly what it would see in a cluster. What is reproduced, in
the generator's order: the job name, ``honor_labels``, the selector and port
filters, the operator's target labels (node/pod from the endpoint's target,
namespace, service, pod, container), the running filter, ``job`` and ``endpoint``,
the monitor's own relabelings, and the sharding rules with ``$(SHARD)`` as the
config reloader expands it for one shard. Not reproduced (the chart sets none of
them): ``targetLabels``/``podTargetLabels``, ``jobLabel``, scrape classes,
``enforcedNamespaceLabel``, the endpointslice role.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Doc = dict[str, Any]

# CRD field -> Prometheus relabel_config key (promcfg.go's generateRelabelConfig).
_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def label_name(name: str) -> str:
    """A Kubernetes label key as the ``__meta_kubernetes_*_label_<key>`` suffix."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def relabel_config(rule: Mapping[str, Any]) -> Doc:
    """One CRD RelabelConfig as Prometheus's: the CRD defaults ``action`` to replace
    and the generator writes it lower-cased."""
    out = {_RELABEL_KEYS[k]: v for k, v in rule.items()}
    out["action"] = str(rule.get("action", "replace")).lower()
    return out


@dataclass(frozen=True, slots=True)
class ExporterPod:
    """The scraped pod as service discovery sees it."""

    name: str
    namespace: str
    node: str
    labels: Mapping[str, str]
    address: str  # host:port Prometheus connects to
    container: str = "exporter"
    service: str = ""
    service_labels: Mapping[str, str] = field(default_factory=dict)


def _meta(pod: ExporterPod, role: str) -> dict[str, str]:
    meta = {
        "__meta_kubernetes_namespace": pod.namespace,
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_node_name": pod.node,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_name": pod.container,
        "__meta_kubernetes_pod_container_port_name": "metrics",
    }
    for k, v in pod.labels.items():
        meta[f"__meta_kubernetes_pod_label_{label_name(k)}"] = v
        meta[f"__meta_kubernetes_pod_labelpresent_{label_name(k)}"] = "true"
    if role == "endpoints":
        meta |= {
            "__meta_kubernetes_service_name": pod.service,
            "__meta_kubernetes_endpoint_port_name": "metrics",
            "__meta_kubernetes_endpoint_address_target_kind": "Pod",
            "__meta_kubernetes_endpoint_address_target_name": pod.name,
        }
        for k, v in pod.service_labels.items():
            meta[f"__meta_kubernetes_service_label_{label_name(k)}"] = v
            meta[f"__meta_kubernetes_service_labelpresent_{label_name(k)}"] = "true"
    return meta


def _selector_rules(match_labels: Mapping[str, str], prefix: str) -> list[Doc]:
    return [
        {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_{prefix}_label_{label_name(k)}",
                f"__meta_kubernetes_{prefix}_labelpresent_{label_name(k)}",
            ],
            "regex": f"({match_labels[k]});true",
        }
        for k in sorted(match_labels)
    ]


_RUNNING = {
    "action": "drop",
    "source_labels": ["__meta_kubernetes_pod_phase"],
    "regex": "(Failed|Succeeded)",
}
_SHARDING = [
    {
        "source_labels": ["__address__"],
        "target_label": "__tmp_hash",
        "modulus": 1,
        "action": "hashmod",
    },
    # "$(SHARD)" in the operator's Secret; the config reloader writes the shard, 0.
    {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},
]


def _service_monitor_rules(monitor: Doc, ep: Doc) -> list[Doc]:
    target = [
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name",
    ]
    return [
        *_selector_rules(monitor["spec"]["selector"]["matchLabels"], "service"),
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": ep["port"],
        },
        {
            "source_labels": target,
            "separator": ";",
            "regex": "Node;(.*)",
            "replacement": "${1}",
            "target_label": "node",
        },
        {
            "source_labels": target,
            "separator": ";",
            "regex": "Pod;(.*)",
            "replacement": "${1}",
            "target_label": "pod",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        _RUNNING,
        {
            "source_labels": ["__meta_kubernetes_service_name"],
            "target_label": "job",
            "replacement": "${1}",
        },
        {"target_label": "endpoint", "replacement": ep["port"]},
    ]


def _pod_monitor_rules(monitor: Doc, ep: Doc) -> list[Doc]:
    meta = monitor["metadata"]
    return [
        _RUNNING,
        *_selector_rules(monitor["spec"]["selector"]["matchLabels"], "pod"),
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": ep["port"],
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
        {"target_label": "endpoint", "replacement": ep["port"]},
    ]


def scrape_job(monitor: Doc, pods: Sequence[ExporterPod]) -> Doc:
    """The operator's scrape job for the monitor's first endpoint, discovering ``pods``
    as static targets."""
    kind = monitor["kind"]
    if kind == "ServiceMonitor":
        (ep,) = monitor["spec"]["endpoints"]
        role, own = "endpoints", _service_monitor_rules
    elif kind == "PodMonitor":
        (ep,) = monitor["spec"]["podMetricsEndpoints"]
        role, own = "pod", _pod_monitor_rules
    else:
        raise ValueError(f"not a ServiceMonitor or PodMonitor: {kind}")
    meta = monitor["metadata"]
    prefix = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    job: Doc = {
        "job_name": f"{prefix}/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": bool(ep.get("honorLabels", False)),
        "static_configs": [{"targets": [p.address], "labels": _meta(p, role)} for p in pods],
    }
    for crd, prom in (("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout")):
        if crd in ep:
            job[prom] = ep[crd]
    if "path" in ep:
        job["metrics_path"] = ep["path"]
    job["relabel_configs"] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        *own(monitor, ep),
        *(relabel_config(r) for r in ep.get("relabelings", [])),
        *_SHARDING,
    ]
    metric = [relabel_config(r) for r in ep.get("metricRelabelings", [])]
    if metric:
        job["metric_relabel_configs"] = metric
    return job
