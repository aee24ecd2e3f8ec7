"""Pod objects from the Kubernetes API, reduced to what naming a cgroup needs.

Pure functions over the JSON dicts the API server sends (no ``kubernetes`` import):
the resolver lists and watches pods as raw JSON, which is several times cheaper than
the client's model classes and keeps this module testable with plain dicts.

What a pod contributes:

* ``namespace``/``name``/``uid`` and the QoS class (``status.qosClass``, else derived
  from the spec the way the kubelet does);
* per container (regular, init, ephemeral) its CPU and memory requests and limits.
  Requests live only in the pod spec; the cgroup has none. When the API reports the
  resources actually applied to a running container (in-place resize,
  ``status.containerStatuses[].resources``) those win over the spec;
* the runtime container IDs from ``status.*ContainerStatuses``: the current one and the
  previous instance (``lastState.terminated``), so a restarted container keeps its name
  while the old cgroup lingers;
* the opt-out annotation and, for static pods, the kubelet's config hash (a static
  pod's cgroup is named after that hash, not after the mirror pod's API UID);
* the workload that owns it (:func:`workload_of`), from ``metadata.ownerReferences``
  and the ``pod-template-hash`` label alone: no other object is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..quantity import cpu_cores, memory_bytes, parse_quantity

# Per-pod opt-out: the pod is not sampled (no gauges) but can still be named as a culprit.
OPT_OUT_ANNOTATION = "contention-exporter.io/compute"
OPT_OUT_VALUES = frozenset({"off", "false", "disabled"})
# Static pods: the kubelet names the pod's cgroup after this hash (the kubelet-side UID);
# the API only holds a mirror pod with another UID and the hash in this annotation.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"

QOS_CLASSES = {"guaranteed", "burstable", "besteffort"}

# The label a Deployment's ReplicaSet and its pods carry: the ReplicaSet is named
# ``<deployment>-<this hash>``.
POD_TEMPLATE_HASH = "pod-template-hash"
# A CronJob names its Jobs ``<cronjob>-<scheduled time in minutes since the epoch>``.
_CRONJOB_JOB = re.compile(r"^(?P<cronjob>.+)-[0-9]{1,12}$")
# Controllers whose pods belong to the controller itself (no parent to look through).
# A mirror (static) pod's owner is its Node: every static pod of the node would be one
# "workload", so such a pod stands for itself.
_NOT_A_WORKLOAD = frozenset({"Node"})


class PodParseError(ValueError):
    """A pod object whose structure is not the API's (a field of the wrong type).
    ``pod`` names it as well as it can be named (``namespace/name``, else its UID)."""

    def __init__(self, pod: str, reason: str) -> None:
        super().__init__(f"pod {pod}: {reason}")
        self.pod = pod
        self.reason = reason


class _Shape(Exception):
    """A field of the wrong type, raised deep down and named by parse_pod."""


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Shape(f"{what} is {type(value).__name__}, not an object")
    return value


def _items(value: Any, what: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Shape(f"{what} is {type(value).__name__}, not a list")
    return [_obj(v, f"{what}[{i}]") for i, v in enumerate(value)]


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Shape(f"{what} is {type(value).__name__}, not a string")
    return value


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    name: str
    kind: str  # "container", "init" or "ephemeral"
    cpu_request_cores: float | None = None
    cpu_limit_cores: float | None = None
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PodMeta:
    uid: str
    namespace: str
    name: str
    node: str
    qos: str  # lower case, as cgroup paths spell it: guaranteed, burstable, besteffort
    opted_out: bool
    resource_version: str
    config_hash: str = ""  # static pods only: the UID the kubelet (and the cgroup) uses
    containers: Mapping[str, ContainerMeta] = field(default_factory=dict)
    # runtime container ID (no "containerd://" scheme) -> container name
    container_ids: Mapping[str, str] = field(default_factory=dict)
    # True when every regular container has a current runtime ID: a container cgroup of
    # this pod whose ID is still unknown is then the pod sandbox ("pause"), not a
    # container the API has yet to report.
    all_ids_known: bool = False
    workload: str = ""  # Kind/name of what owns the pod (workload_of)

    @property
    def static(self) -> bool:
        return bool(self.config_hash)


def _controller(owners: Any) -> Mapping[str, Any] | None:
    """The owner reference marked ``controller: true`` (the API allows at most one);
    with none marked, the only owner there is; else none (several, none in charge)."""
    if not isinstance(owners, list):
        return None
    refs = [o for o in owners if isinstance(o, Mapping)]
    marked = [o for o in refs if o.get("controller") is True]
    if len(marked) == 1:
        return marked[0]
    if not marked and len(refs) == 1:
        return refs[0]
    return None


def workload_of(meta: Mapping[str, Any]) -> str:
    """``Kind/name`` of the workload that owns a pod, from its own metadata only.

    * ReplicaSet -> ``Deployment/<name>`` when the ReplicaSet's name is
      ``<name>-<pod-template-hash>`` with the pod's own ``pod-template-hash`` label
      (what a Deployment creates), else ``ReplicaSet/<name>``;
    * Job -> ``CronJob/<name>`` when the Job's name is ``<name>-<digits>`` (how a
      CronJob names its Jobs). A heuristic: the exact parent is the Job's own
      ownerReference, which needs ``get`` on batch/jobs, a permission the exporter does
      not have (docs/kubernetes.md); a Job created by hand as ``x-123`` reads as
      ``CronJob/x``;
    * StatefulSet, DaemonSet, any other controller -> itself (``Kind/name``);
    * no owner, several with none the controller, or a Node (a static pod's mirror)
      -> ``Pod/<pod name>``.

    Never raises: odd shapes and names fall back to the pod itself ("" without a name).
    """
    pod = meta.get("name") if isinstance(meta.get("name"), str) else ""
    ref = _controller(meta.get("ownerReferences"))
    kind = ref.get("kind") if ref is not None else None
    name = ref.get("name") if ref is not None else None
    if not (isinstance(kind, str) and kind and isinstance(name, str) and name):
        return f"Pod/{pod}" if pod else ""
    if kind in _NOT_A_WORKLOAD:
        return f"Pod/{pod}" if pod else ""
    if kind == "ReplicaSet":
        labels = meta.get("labels")
        h = labels.get(POD_TEMPLATE_HASH) if isinstance(labels, Mapping) else None
        if isinstance(h, str) and h and name.endswith(f"-{h}") and len(name) > len(h) + 1:
            return f"Deployment/{name[: -len(h) - 1]}"
    elif kind == "Job":
        m = _CRONJOB_JOB.match(name)
        if m:
            return f"CronJob/{m['cronjob']}"
    return f"{kind}/{name}"


def strip_container_id(cid: str) -> str:
    """``containerd://abc`` -> ``abc`` (the form cgroup paths use)."""
    _, sep, rest = cid.partition("://")
    return rest if sep else cid


def _quantities(res: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(res, Mapping):
        return {}
    q = res.get(key)
    return q if isinstance(q, Mapping) else {}


def _cpu(q: Mapping[str, Any]) -> float | None:
    v = q.get("cpu")
    if v is None:
        return None
    try:
        return cpu_cores(v)
    except ValueError:
        return None


def _mem(q: Mapping[str, Any]) -> int | None:
    v = q.get("memory")
    if v is None:
        return None
    try:
        return memory_bytes(v)
    except ValueError:
        return None


def _container_meta(spec: Mapping[str, Any], kind: str, applied: Any) -> ContainerMeta:
    res = applied if isinstance(applied, Mapping) and applied else spec.get("resources")
    req, lim = _quantities(res, "requests"), _quantities(res, "limits")
    return ContainerMeta(
        name=_str(spec.get("name"), f"{kind} name"),
        kind=kind,
        cpu_request_cores=_cpu(req),
        cpu_limit_cores=_cpu(lim),
        memory_request_bytes=_mem(req),
        memory_limit_bytes=_mem(lim),
    )


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return str(a) == str(b)


def derive_qos(spec: Mapping[str, Any]) -> str:
    """The QoS class from the spec, by the kubelet's rules (used when status lacks it).

    Guaranteed: every regular and init container has CPU and memory limits equal to its
    requests (an unset request defaults to the limit). BestEffort: nobody sets any CPU
    or memory request or limit. Burstable: anything else.
    """
    containers = [
        c
        for key in ("containers", "initContainers")
        for c in (spec.get(key) or [])
        if isinstance(c, Mapping)  # parse_pod has refused anything else
    ]
    any_set = False
    guaranteed = bool(containers)
    for c in containers:
        res = c.get("resources")
        req, lim = _quantities(res, "requests"), _quantities(res, "limits")
        for name in ("cpu", "memory"):
            if name in req or name in lim:
                any_set = True
            if name not in lim or (name in req and not _same_quantity(req[name], lim[name])):
                guaranteed = False
    if guaranteed:
        return "guaranteed"
    return "burstable" if any_set else "besteffort"


def _statuses(status: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str], set[str]]:
    """From the container statuses: resources applied (by container name), container
    ids (current and last terminated, id -> name), names with a running container."""
    applied: dict[str, Any] = {}
    ids: dict[str, str] = {}
    running_named: set[str] = set()
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in _items(status.get(key), f"status.{key}"):
            name = _str(cs.get("name"), f"status.{key}[].name")
            terminated = _obj(_obj(cs.get("lastState"), "lastState").get("terminated"), "lastState")
            last = _str(terminated.get("containerID"), "lastState.terminated.containerID")
            if last:
                ids[strip_container_id(last)] = name
            cur = _str(cs.get("containerID"), f"status.{key}[].containerID")
            if cur:
                ids[strip_container_id(cur)] = name
                if key == "containerStatuses":
                    running_named.add(name)
            if cs.get("resources"):
                applied[name] = cs.get("resources")
    return applied, ids, running_named


def parse_pod(obj: Any) -> PodMeta:
    """Reduce one pod object (as JSON) to :class:`PodMeta`. Tolerates missing fields
    and quantities it cannot read (unknown, not fatal); raises :class:`PodParseError`
    for a structure that is not the API's (a field of the wrong type)."""
    if not isinstance(obj, Mapping):
        raise PodParseError("?", f"not an object but {type(obj).__name__}")
    meta = obj.get("metadata")
    m = meta if isinstance(meta, Mapping) else {}
    ns, name, uid = m.get("namespace"), m.get("name"), m.get("uid")
    who = f"{ns}/{name}" if isinstance(ns, str) and isinstance(name, str) else str(uid)[:64]
    try:
        return _parse_pod(obj)
    except _Shape as e:
        raise PodParseError(who, str(e)) from None


def _parse_pod(obj: Mapping[str, Any]) -> PodMeta:
    meta = _obj(obj.get("metadata"), "metadata")
    spec = _obj(obj.get("spec"), "spec")
    status = _obj(obj.get("status"), "status")
    annotations = _obj(meta.get("annotations"), "metadata.annotations")

    applied, ids, running_named = _statuses(status)
    containers: dict[str, ContainerMeta] = {}
    regular: list[str] = []
    for key, kind in (
        ("initContainers", "init"),
        ("containers", "container"),
        ("ephemeralContainers", "ephemeral"),
    ):
        for c in _items(spec.get(key), f"spec.{key}"):
            cm = _container_meta(c, kind, applied.get(_str(c.get("name"), f"spec.{key}[].name")))
            containers[cm.name] = cm
            if kind == "container":
                regular.append(cm.name)

    qos = _str(status.get("qosClass"), "status.qosClass").lower()
    if qos not in QOS_CLASSES:
        qos = derive_qos(spec)
    opt = _str(annotations.get(OPT_OUT_ANNOTATION), OPT_OUT_ANNOTATION).strip().lower()
    config_hash = _str(annotations.get(MIRROR_ANNOTATION), MIRROR_ANNOTATION)
    uid = _str(meta.get("uid"), "metadata.uid")
    if not config_hash and annotations.get(CONFIG_HASH_ANNOTATION):
        # Some kubelets only set config.hash on the mirror pod; a pod created through
        # the API also carries neither, so a hash different from the UID means static.
        h = _str(annotations[CONFIG_HASH_ANNOTATION], CONFIG_HASH_ANNOTATION)
        config_hash = h if h != uid else ""
    rv = meta.get("resourceVersion")
    return PodMeta(
        uid=uid,
        namespace=_str(meta.get("namespace"), "metadata.namespace"),
        name=_str(meta.get("name"), "metadata.name"),
        node=_str(spec.get("nodeName"), "spec.nodeName"),
        qos=qos,
        opted_out=opt in OPT_OUT_VALUES,
        resource_version=rv if isinstance(rv, str) else str(rv or ""),
        config_hash=config_hash,
        containers=containers,
        container_ids=ids,
        all_ids_known=bool(regular) and all(n in running_named for n in regular),
        workload=workload_of(meta),
    )


def merge_container_ids(old: PodMeta, new: PodMeta, keep: int = 32) -> PodMeta:
    """Carry container IDs the pod had before into its new version.

    A restart replaces ``containerID``; the previous one stays in ``lastState`` only
    until the next restart. Remembering a few more keeps a lingering old cgroup named
    after its container instead of flipping to ``pod:<uid>``. Bounded by ``keep``.
    """
    if old.uid != new.uid:
        return new
    merged = dict(old.container_ids)
    for cid, name in new.container_ids.items():
        merged.pop(cid, None)
        merged[cid] = name  # newest last
    if len(merged) > keep:
        merged = dict(list(merged.items())[-keep:])
    return new if merged == new.container_ids else replace(new, container_ids=merged)
