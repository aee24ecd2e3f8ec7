"""Who a cgroup is: the one interface between discovery and naming.

Discovery (``cgroupfs.discovery``) says what a cgroup *is* from its path alone (a
Kubernetes container with pod UID and container ID, a systemd unit, ...). An
:class:`IdentityResolver` turns that into the names and entitlements users see. Host
mode names a cgroup by its path; the Kubernetes resolver (``exporter.kube``) adds
namespace/pod/container and the requests from the pod spec, which the cgroup does not
hold. The sampler only ever talks to this interface.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .cgroupfs.discovery import CgroupKind, CgroupRef

# The labels that identify a cgroup on its series (docs/metrics.md): namespace, pod and
# container once a metadata source named it (the names cAdvisor and kube-state-metrics
# use, so series join with theirs as they are), else its cgroup path. Absent ones are
# left out, never sent empty.
IDENTITY_LABELS = ("cgroup", "namespace", "pod", "container")
# The CRI's container ID scheme per runtime, as pod status (and kube-state-metrics'
# container_id label) writes it.
_CRI_SCHEME = {"containerd": "containerd", "crio": "cri-o", "docker": "docker"}

Names = tuple[str, str, str]  # (namespace, pod, container)


@dataclass(frozen=True, slots=True)
class Identity:
    """A resolved cgroup. Empty strings mean "not known" (Prometheus drops empty labels)."""

    cgroup: str
    kind: CgroupKind
    namespace: str = ""
    pod: str = ""
    container: str = ""
    pod_uid: str = ""
    container_id: str = ""
    runtime: str = ""  # containerd, crio, docker, podman (from the cgroup path)
    qos: str = ""
    cpu_request_cores: float | None = None
    cpu_limit_cores: float | None = None  # from the spec; the cgroup's quota wins when set
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None
    opted_out: bool = False  # the pod asked not to be sampled (it can still be a culprit)
    # What owns the container: ``Deployment/web``, ``CronJob/backup``, ``StatefulSet/db``,
    # ``Pod/name`` for a pod nobody owns, a systemd unit in host mode; "" when unknown.
    # Culprits of one workload are judged together too (docs/findings.md#workload-culprits).
    workload: str = ""

    @property
    def name(self) -> str:
        """One human-readable name: ``ns/pod/container``, ``pod:<uid8>``, or the path."""
        if self.namespace and self.pod:
            return f"{self.namespace}/{self.pod}/{self.container}"
        if self.pod_uid:
            return f"pod:{self.pod_uid[:8]}"
        return self.cgroup

    @property
    def names(self) -> Names | None:
        """(namespace, pod, container) once a metadata source named the pod."""
        return (self.namespace, self.pod, self.container) if self.pod else None

    def series_labels(self, ambiguous: frozenset[Names] = frozenset()) -> dict[str, str]:
        """The labels of this cgroup's series: its names, or its cgroup path when it
        has none or when another cgroup of the same pass has the same names
        (``ambiguous``: both keep their path then, so no two series collide)."""
        names = self.names
        if names is None:
            return {"cgroup": self.cgroup}
        out = {"cgroup": self.cgroup} if names in ambiguous else {}
        for k, v in zip(IDENTITY_LABELS[1:], names, strict=True):
            if v:
                out[k] = v
        return out

    @property
    def container_uri(self) -> str:
        """``<runtime>://<id>`` as the pod status writes it (kube-state-metrics'
        ``container_id``); the bare ID when the runtime is not a CRI one."""
        scheme = _CRI_SCHEME.get(self.runtime)
        if not self.container_id or scheme is None:
            return self.container_id
        return f"{scheme}://{self.container_id}"


def ambiguous_names(identities: Iterable[Identity]) -> frozenset[Names]:
    """Names that more than one of ``identities`` carries (a container restarting while
    the old cgroup lingers, two containers the API has not named yet)."""
    counts = Counter(i.names for i in identities if i.names is not None)
    return frozenset(n for n, c in counts.items() if c > 1 and n is not None)


class IdentityResolver(Protocol):
    """Maps discovered cgroups to identities. Must be cheap: called every pass."""

    def refresh(self) -> None:
        """Called once at the start of every pass (e.g. re-read a file that changed)."""
        ...

    def resolve(self, ref: CgroupRef) -> Identity: ...

    def staleness_seconds(self) -> float | None:
        """Seconds since the metadata source was last known good (None: no source)."""
        ...


# An instance of a systemd template unit: "<template>@<instance>.<type>".
_UNIT_INSTANCE = re.compile(r"^([^/@]+)@[^/]*\.(service|scope)$")


def workload_from_path(ref: CgroupRef) -> str:
    """What owns a cgroup as far as its path says (docs/findings.md#workload-culprits):
    a container of a Kubernetes pod the API has not named, ``Pod/pod:<uid8>`` (its
    restarts get new cgroups, the pod stays); an instance of a systemd template unit,
    the template (``backup@.service`` for ``backup@2026-12-01.service``). Else ""."""
    k = ref.k8s
    if k is not None and k.pod_uid and ref.kind is CgroupKind.CONTAINER:
        return f"Pod/pod:{k.pod_uid[:8]}"
    if ref.kind is CgroupKind.SYSTEM:
        m = _UNIT_INSTANCE.match(ref.path.rsplit("/", 1)[-1])
        if m:
            return f"{m[1]}@.{m[2]}"
    return ""


def identity_from_ref(ref: CgroupRef) -> Identity:
    """The identity a cgroup has with no metadata source: its path and what the path says."""
    k = ref.k8s
    return Identity(
        cgroup=ref.path,
        kind=ref.kind,
        pod_uid=k.pod_uid if k else "",
        container_id=(k.container_id or "") if k else "",
        runtime=(k.runtime or "") if k else "",
        qos=k.qos if k else "",
        workload=workload_from_path(ref),
    )


class HostIdentityResolver:
    """Host mode (the default): a cgroup is named by its path; no requests are known."""

    def __init__(self) -> None:
        # Identities only depend on (id, path): build each once, not on every pass.
        # Two generations, this pass's and the last's, so the cache holds what exists
        # (a removed cgroup is gone after one pass), however many cgroups come and go.
        self._cache: dict[tuple[int, str], Identity] = {}
        self._last: dict[tuple[int, str], Identity] = {}

    def refresh(self) -> None:
        self._last, self._cache = self._cache, {}

    def resolve(self, ref: CgroupRef) -> Identity:
        key = (ref.id, ref.path)
        ident = self._cache.get(key)
        if ident is None:
            ident = self._last.get(key) or identity_from_ref(ref)
            self._cache[key] = ident
        return ident

    def cached(self) -> int:
        """Identities held (for tests: bounded by the cgroups of two passes)."""
        return len(self._cache) + len(self._last)

    def staleness_seconds(self) -> float | None:
        return None
