"""Lab containers as Kubernetes pods: what the exporter sees on a node in Kubernetes mode.

In Kubernetes mode the exporter names a container from its cgroup path (the kubelet's
layout: pod UID and container ID) and the pod the API server has for that UID. A lab
run with a :class:`PodSink` (the test's API emulator) therefore gives each container
that has a CPU request a pod of its own: a Pod object (namespace ``lab``, the lab
container's pod name, its requests and limits, an owner when it belongs to a workload)
sent to the sink before its cgroup exists, and a kubelet-shaped cgroup
``<role>/kubepods/burstable/pod<uid>/<container id>`` under the lab's parent
(cgroupfs driver; the exporter recognises a kubelet root anywhere in the path).

Each container gets a kubelet root of its own, inside a directory carrying its weight,
so that on the CPU it competes with the lab's other containers exactly as in the
host-mode lab (its request's weight against theirs), whatever the kubelet's QoS
cgroups would add up to. A lab container without a request is not a pod: it stays a
plain cgroup, named by its path, like a host daemon (the lab's "neighbour with no
request"; the kubelet would give a BestEffort pod 2 shares, not the default weight).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

NODE_NAME = "lab-node"
CONTAINER_RUNTIME = "containerd"
# uuid5 namespace for the labs' pod UIDs: the same lab container always has the same
# UID, so a rerun finds what it expects and nothing else collides with it.
_UID_NAMESPACE = uuid.UUID("6c0d8f2a-9b1e-4e3c-8a7d-5f4b3a2c1d0e")


class PodSink(Protocol):
    """Where lab pods go: an API server (the tests' emulator) the exporter watches."""

    def create(self, pod: dict[str, Any]) -> None: ...

    def delete(self, ns: str, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class LabPod:
    """One lab container as a single-container pod."""

    namespace: str
    name: str
    container: str
    uid: str
    container_id: str
    cpu_request: float  # cores
    cpu_limit: float | None
    workload: str = ""  # "Deployment/<name>": owned through a ReplicaSet
    node: str = NODE_NAME

    @classmethod
    def of(
        cls,
        namespace: str,
        name: str,
        container: str,
        cpu_request: float,
        cpu_limit: float | None,
        workload: str = "",
    ) -> LabPod:
        key = f"{namespace}/{name}/{container}"
        uid = str(uuid.uuid5(_UID_NAMESPACE, key))
        cid = hashlib.sha256(key.encode()).hexdigest()
        return cls(namespace, name, container, uid, cid, cpu_request, cpu_limit, workload)

    @property
    def cgroup_chain(self) -> tuple[str, ...]:
        """The cgroup directories below the container's own weight directory."""
        return ("kubepods", "burstable", f"pod{self.uid}", self.container_id)

    def api_object(self) -> dict[str, Any]:
        """The Pod as the API server serves it (what the exporter reads)."""
        requests = {"cpu": _millicores(self.cpu_request)}
        resources: dict[str, Any] = {"requests": requests}
        if self.cpu_limit is not None:
            resources["limits"] = {"cpu": _millicores(self.cpu_limit)}
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "labels": {},
            "annotations": {},
            "ownerReferences": [],
        }
        if self.workload:
            kind, _, wl = self.workload.partition("/")
            if kind != "Deployment":
                raise ValueError(f"lab workloads are Deployments, not {kind}")
            rs_hash = hashlib.sha256(wl.encode()).hexdigest()[:10]
            meta["labels"]["pod-template-hash"] = rs_hash
            meta["ownerReferences"] = [
                {"kind": "ReplicaSet", "name": f"{wl}-{rs_hash}", "controller": True, "uid": "rs"}
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": self.node,
                "containers": [{"name": self.container, "image": "lab", "resources": resources}],
            },
            "status": {
                "phase": "Running",
                "qosClass": "Burstable",
                "containerStatuses": [
                    {
                        "name": self.container,
                        "ready": True,
                        "restartCount": 0,
                        "containerID": f"{CONTAINER_RUNTIME}://{self.container_id}",
                    }
                ],
            },
        }


def _millicores(cores: float) -> str:
    return f"{round(cores * 1000)}m"
