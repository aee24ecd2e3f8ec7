"""Kubernetes mode: name cgroups after pods, with requests and the opt-out annotation.

Optional (``pip install 'contention-exporter[kube]'``). Importing this package does
not import ``kubernetes``; only :func:`build_resolver` does, and only when the
:class:`KubeConfig` enables it, so host mode never needs the client::

    resolver = kube.build_resolver(KubeConfig(enabled=True, node_name="n1"))  # started

``pods`` reads a pod object, ``index`` holds this node's pods, ``watch`` keeps the
index current from the API (list+watch, on a thread), ``resolver`` names cgroups from
it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .resolver import KubeIdentityResolver

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
NODE_NAME_ENV = "NODE_NAME"


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Kubernetes mode's settings. Default: off (host mode, no API access at all)."""

    enabled: bool = False
    kubeconfig: str | None = None  # None: in-cluster service account, else the default
    node_name: str = ""  # only this node's pods are watched ("": $NODE_NAME)
    deleted_grace_s: float = 300.0  # keep naming a deleted pod's cgroups this long


def make_api_factory(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A zero-argument callable returning a ``kubernetes.client.CoreV1Api``.

    Auth: ``kubeconfig`` if given; else the in-cluster service account when
    ``KUBERNETES_SERVICE_HOST`` is set; else the default kubeconfig. Called (and so
    retried) by the watch thread, so a missing token at start is not fatal.
    """

    def factory() -> Any:
        import kubernetes.client
        import kubernetes.config

        # Typed as Any: the client's annotations differ between its generations.
        client: Any = kubernetes.client
        config: Any = kubernetes.config
        cfg = client.Configuration()
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        elif os.environ.get(IN_CLUSTER_ENV):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(context=context, client_configuration=cfg)
        api_client = client.ApiClient(cfg)
        api_client.user_agent = "contention-exporter"
        return client.CoreV1Api(api_client)

    return factory


def build_resolver(cfg: KubeConfig) -> KubeIdentityResolver | None:
    """The started Kubernetes resolver, or None in host mode (``cfg.enabled`` false).

    Raises ValueError for a usage error (no node name, client not installed).
    """
    if not cfg.enabled:
        return None
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise ValueError(
            "--kubernetes needs the Kubernetes client: pip install 'contention-exporter[kube]'"
        ) from None
    node = cfg.node_name or os.environ.get(NODE_NAME_ENV, "")
    if not node:
        raise ValueError(
            "--kubernetes needs this node's name: pass --kubernetes.node-name or set NODE_NAME "
            "(the DaemonSet sets it from spec.nodeName)"
        )
    resolver = KubeIdentityResolver(
        node,
        make_api_factory(cfg.kubeconfig),
        deleted_grace_seconds=cfg.deleted_grace_s,
    )
    resolver.start()
    return resolver
