"""Kubernetes mode: name cgroups after pods, with requests and the opt-out annotation.

Optional (``pip install 'contention-exporter[kube]'``). Importing this package does
not import ``kubernetes``; only :func:`build_resolver` does, and only when
``--kubernetes`` is given, so host mode never needs the client.

Wiring (``exporter/cli.py``)::

    from . import kube
    kube.add_arguments(run_parser)
    resolver = kube.build_resolver(args)  # None unless --kubernetes; started
    if resolver is None:
        resolver = HostIdentityResolver()
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .resolver import KubeIdentityResolver

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Kubernetes flags. Default: off (host mode, no API access at all)."""
    g = parser.add_argument_group("kubernetes")
    g.add_argument(
        "--kubernetes",
        action="store_true",
        help="name cgroups after pods (namespace/pod/container, requests, QoS, opt-out) "
        "by watching this node's pods in the Kubernetes API",
    )
    g.add_argument(
        "--kubeconfig",
        metavar="FILE",
        default=None,
        help="kubeconfig to use (default: in-cluster service account when running in a "
        "pod, else $KUBECONFIG or ~/.kube/config)",
    )
    g.add_argument(
        "--node-name",
        metavar="NAME",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name as the API knows it; only its pods are watched "
        "(default: $NODE_NAME, set from the downward API in the DaemonSet)",
    )
    g.add_argument(
        "--kubernetes.deleted-grace",
        dest="kube_deleted_grace",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="keep naming a deleted pod's cgroups for this long while they linger "
        "(default: %(default)s)",
    )


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


def build_resolver(args: argparse.Namespace) -> KubeIdentityResolver | None:
    """The started Kubernetes resolver, or None in host mode (``--kubernetes`` absent).

    Raises ValueError for a usage error (no node name, client not installed).
    """
    if not getattr(args, "kubernetes", False):
        return None
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise ValueError(
            "--kubernetes needs the Kubernetes client: pip install 'contention-exporter[kube]'"
        ) from None
    from .resolver import KubeIdentityResolver

    node = getattr(args, "node_name", "") or os.environ.get("NODE_NAME", "")
    if not node:
        raise ValueError(
            "--kubernetes needs this node's name: pass --node-name or set NODE_NAME "
            "(the DaemonSet sets it from spec.nodeName)"
        )
    resolver = KubeIdentityResolver(
        node,
        make_api_factory(getattr(args, "kubeconfig", None)),
        deleted_grace_seconds=getattr(args, "kube_deleted_grace", 300.0),
    )
    resolver.start()
    return resolver
