"""Who a culprit is: cgroup id -> kind and names, for findings and blame series."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..cgroupfs.discovery import CgroupKind
from ..identity import Identity, Names
from ..window.model import CULPRIT_IDLE, CULPRIT_UNATTRIBUTED, CulpritKey

# The cgroup v2 root always has id 1 (kernfs root inode): kernel threads live there.
ROOT_CGROUP_ID = 1


# The labels naming a culprit on blame, finding and alert series (NamedCulprit.labels()).
CULPRIT_LABELS = (
    "culprit_kind",
    "culprit",
    "culprit_cgroup",
    "culprit_namespace",
    "culprit_pod",
    "culprit_container",
)


class CulpritKind(StrEnum):
    POD = "pod"  # a container (Kubernetes, or docker in host mode)
    SYSTEM = "system"  # a systemd unit, a user slice, any other named cgroup
    KERNEL = "kernel"  # the root cgroup: kernel threads (softirq, kswapd, ...)
    IDLE = "idle"  # the CPU ran idle while the victim waited: its own quota
    UNKNOWN = "unknown"  # an id we cannot resolve, or wait the slice ring missed


@dataclass(frozen=True, slots=True)
class NamedCulprit:
    """A blame key classified: its kind and the names its labels carry."""

    kind: CulpritKind
    culprit: str  # one human name: ns/pod/container, pod:<uid8>, a unit path, ...
    cgroup: str = ""  # cgroup path (its series' label until a metadata source names it)
    namespace: str = ""
    pod: str = ""
    container: str = ""

    def labels(self, ambiguous: frozenset[Names] = frozenset()) -> dict[str, str]:
        """``culprit_kind``, ``culprit`` and the culprit's own identity labels, prefixed
        (its names, or its cgroup path: what its series carry, so PromQL joins them),
        none of them empty."""
        out = {"culprit_kind": str(self.kind), "culprit": self.culprit}
        names = (self.namespace, self.pod, self.container)
        if self.cgroup and (not self.pod or names in ambiguous):
            out["culprit_cgroup"] = self.cgroup
        if self.pod:
            for k, v in zip(CULPRIT_LABELS[3:], names, strict=True):
                if v:
                    out[k] = v
        return out


IDLE = NamedCulprit(CulpritKind.IDLE, "idle")
UNATTRIBUTED = NamedCulprit(CulpritKind.UNKNOWN, "unattributed")
UNKNOWN = NamedCulprit(CulpritKind.UNKNOWN, "unknown")
KERNEL = NamedCulprit(CulpritKind.KERNEL, "kernel", cgroup="/")


def classify_culprit(
    key: CulpritKey,
    identities: Mapping[int, Identity],
    root_ids: Collection[int] = (ROOT_CGROUP_ID,),
) -> NamedCulprit:
    """Classify a culprit key from the blame matrix.

    ``identities``: every cgroup the exporter can name (tracked containers and the
    window's ``others``: system units, the root, opted-out pods). A Kubernetes pod
    that metadata has not named yet is ``pod:<uid prefix>``; an id nobody knows is
    ``unknown`` (the node's unknown-blame ratio counts those).
    """
    if key == CULPRIT_IDLE:
        return IDLE
    if key == CULPRIT_UNATTRIBUTED or isinstance(key, str):
        return UNATTRIBUTED
    if key in root_ids:
        return KERNEL
    ident = identities.get(key)
    if ident is None:
        return UNKNOWN
    if ident.kind is CgroupKind.ROOT:
        return KERNEL
    # A cgroup a metadata source named as a pod (host mode's --metadata.file) is a pod
    # culprit too, with the same labels the victim side carries.
    if ident.kind in (CgroupKind.CONTAINER, CgroupKind.POD) or ident.pod_uid or ident.pod:
        return NamedCulprit(
            CulpritKind.POD,
            ident.name,
            cgroup=ident.cgroup,
            namespace=ident.namespace,
            pod=ident.pod,
            container=ident.container,
        )
    return NamedCulprit(CulpritKind.SYSTEM, ident.cgroup.lstrip("/") or "/", cgroup=ident.cgroup)
