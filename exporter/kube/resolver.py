"""Name cgroups after pods: identity resolution over this node's pod index.

:class:`KubeIdentityResolver` is the Kubernetes mode's
:class:`exporter.identity.IdentityResolver`: a background list+watch
(:class:`~exporter.kube.watch.PodWatch`) keeps this node's pods in a
:class:`~exporter.kube.index.PodIndex`, and each cgroup is named from it by container
ID, else by pod UID. A pod that leaves the API is kept as a *tombstone* for
``deleted_grace_seconds`` so a cgroup that outlives its pod keeps its name (and its
series) until it goes; a cgroup nobody has told us about is named by
:func:`exporter.identity.identity_from_ref` (``pod:<uid8>``) until the API does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..cgroupfs.discovery import CgroupRef
from ..identity import Identity, identity_from_ref
from .index import PodIndex
from .pods import PodMeta
from .watch import ApiFactory, KubeStatus, PodWatch, WatchState

SANDBOX_CONTAINER = "POD"  # the name cAdvisor/kubelet conventions give the pod sandbox


class KubeIdentityResolver:
    """An :class:`exporter.identity.IdentityResolver` backed by the Kubernetes API."""

    def __init__(
        self,
        node_name: str,
        api_factory: ApiFactory,
        *,
        watch_timeout_seconds: int = 300,
        read_timeout_margin: float = 30.0,
        connect_timeout: float = 10.0,
        list_timeout: float = 60.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        deleted_grace_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._index = PodIndex(float(deleted_grace_seconds))
        self._watch = PodWatch(
            node_name,
            api_factory,
            self._index,
            watch_timeout_seconds=watch_timeout_seconds,
            read_timeout_margin=read_timeout_margin,
            connect_timeout=connect_timeout,
            list_timeout=list_timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            clock=clock,
        )
        self.node_name = node_name
        self._clock = clock

    # -- IdentityResolver -------------------------------------------------------------

    def refresh(self) -> None:
        """Once per pass: forget deleted pods whose grace period is over (the watch
        thread keeps the rest of the index current)."""
        self._index.expire(self._clock())

    def resolve(self, ref: CgroupRef) -> Identity:
        k = ref.k8s
        if k is None or not (k.pod_uid or k.container_id):
            return identity_from_ref(ref)
        idx = self._index
        now = self._clock()
        pod: PodMeta | None = None
        name = ""
        if k.container_id:
            hit = idx.by_container(k.container_id, now)
            if hit is not None:
                pod, name = hit
        if pod is None and k.pod_uid:
            pod = idx.by_uid(k.pod_uid, now)
            if pod is not None and k.container_id:
                # A container cgroup of a known pod whose ID the API has not listed: the
                # sandbox once every container has an ID, else one not reported yet.
                name = SANDBOX_CONTAINER if pod.all_ids_known else ""
        if pod is None:
            return identity_from_ref(ref)
        base = identity_from_ref(ref)
        c = pod.containers.get(name) if name else None
        return Identity(
            cgroup=base.cgroup,
            kind=base.kind,
            namespace=pod.namespace,
            pod=pod.name,
            container=name,
            pod_uid=pod.uid,
            container_id=base.container_id,
            runtime=base.runtime,
            qos=pod.qos or base.qos,
            cpu_request_cores=c.cpu_request_cores if c else None,
            cpu_limit_cores=c.cpu_limit_cores if c else None,
            memory_request_bytes=c.memory_request_bytes if c else None,
            memory_limit_bytes=c.memory_limit_bytes if c else None,
            opted_out=pod.opted_out,
            workload=pod.workload,
        )

    def staleness_seconds(self) -> float | None:
        """0 while the list/watch is healthy; else seconds since it last was."""
        return self._watch.staleness_seconds()

    # -- state for metrics ------------------------------------------------------------

    def watch_state(self) -> WatchState:
        return self._watch.watch_state()

    @property
    def synced(self) -> bool:
        return self._watch.synced

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list has succeeded (or ``timeout``); True if it has."""
        return self._watch.wait_synced(timeout)

    def status(self) -> KubeStatus:
        return self._watch.status()

    def pods(self) -> list[PodMeta]:
        """The pods currently known on this node."""
        return self._index.pods()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self._watch.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._watch.stop(timeout)
