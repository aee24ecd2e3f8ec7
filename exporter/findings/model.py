"""What a finding is: the verdict, who it is about, who caused it, and the numbers.

``findings_document()`` (built from ``Finding.to_dict()``) is the JSON served on
``/findings`` and printed by the commands; its schema is
``exporter/data/finding.schema.json`` (documented in docs/findings.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..identity import Identity
from ..window.model import Window
from .remediation import Suggestion

SCHEMA_VERSION = 1


class Kind(StrEnum):
    CPU_THROTTLED = "cpu-throttled"
    NOISY_NEIGHBOR = "noisy-neighbor"
    CPU_CONTENDED = "cpu-contended"
    MEMORY_PRESSURE = "memory-pressure"
    MEMORY_LIMIT_THRASH = "memory-limit-thrash"
    CPU_STEAL = "cpu-steal"  # node level: the victim is the node, the culprit the hypervisor


# Findings about the node, not one container: no victim cgroup (docs/findings.md#cpu-steal).
NODE_KINDS = (Kind.CPU_STEAL,)


class Severity(StrEnum):
    """A finding's level: critical, warning, info (docs/findings.md#level-and-severity).
    Its alert carries it as the ``level`` annotation; the alert's ``severity`` label is
    fixed per kind (``alertSeverity``)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}

# culprit_kind values, as exporter.probe.culprit classifies blame keys (the same
# classification labels contention_blame_ratio). Only the first three can be named.
CULPRIT_POD = "pod"  # a container: Kubernetes (ns/pod/container or pod:<uid8>) or docker
CULPRIT_SYSTEM = "system"  # a systemd unit, user slice or other named cgroup
CULPRIT_KERNEL = "kernel"  # the root cgroup: kernel threads, unassigned tasks
NAMEABLE_CULPRIT_KINDS = (CULPRIT_POD, CULPRIT_SYSTEM, CULPRIT_KERNEL)
CULPRIT_SELF = "self"  # the victim's own cgroup (evidence only; never a neighbour)
CULPRIT_IDLE = "idle"  # the CPU ran idle: the victim waited on its own quota
CULPRIT_UNKNOWN = "unknown"  # unresolved cgroup ids and unattributed wait
CULPRIT_HYPERVISOR = "hypervisor"  # cpu-steal: CPU time given to other guests (no cgroup)
# noisy-neighbor: the containers of one workload together (docs/findings.md#workload-culprits)
CULPRIT_WORKLOAD = "workload"

REMEDIATION = {
    Kind.CPU_THROTTLED: "raise or remove resources.limits.cpu on the victim",
    Kind.NOISY_NEIGHBOR: (
        "lower the culprit's usage or give it a request that reflects it; "
        "move one of the two to another node"
    ),
    Kind.CPU_CONTENDED: (
        "the node is oversubscribed: the blame list shows who shares the CPU; "
        "add capacity or spread the workload"
    ),
    Kind.MEMORY_PRESSURE: "set or raise memory requests on the culprit; add memory to the node",
    Kind.MEMORY_LIMIT_THRASH: "raise resources.limits.memory on the victim",
    Kind.CPU_STEAL: (
        "the VM's host is oversubscribed, not this node: move the node to another host or "
        "a larger or dedicated instance type; more pods or limits on this node will not help"
    ),
}
# cpu-contended while at least blameShare of the victim's wait is unknown: the probe's
# attribution is broken or partial, so no culprit test could be made; not evidence
# that the node is oversubscribed (docs/findings.md#cpu-contended).
REMEDIATION_CONTENDED_UNATTRIBUTED = (
    "the scheduler probe could not attribute most of the victim's wait: check its "
    "attribution on this node (docs/runbook.md) before adding capacity or spreading "
    "the workload"
)
# cpu-contended while the node loses CPU to steal: not an oversubscribed node.
REMEDIATION_CONTENDED_STEAL = (
    "the hypervisor is taking the node's CPU (see the cpu-steal finding): move the node to "
    "another host or a larger instance type before spreading the workload"
)


@dataclass(frozen=True, slots=True)
class Victim:
    cgroup_id: int
    identity: Identity

    def to_dict(self) -> dict[str, Any]:
        i = self.identity
        return {
            "ref": i.name or "node",  # a node-level finding's victim has no cgroup
            "cgroup": i.cgroup,
            "cgroup_id": self.cgroup_id,
            "cgroup_kind": i.kind.value,
            "namespace": i.namespace or None,
            "pod": i.pod or None,
            "container": i.container or None,
            "pod_uid": i.pod_uid or None,
        }


@dataclass(frozen=True, slots=True)
class Culprit:
    kind: str  # NAMEABLE_CULPRIT_KINDS, CULPRIT_WORKLOAD, or CULPRIT_HYPERVISOR (cpu-steal)
    ref: str  # the `culprit` label: ns/pod/container, a unit path, "kernel", ns/Kind/name
    cgroup_id: int
    identity: Identity
    # CPU: share of the victim's wait; memory: share of node overage; cpu-steal: share
    # of the node's CPU time stolen in the latest minute
    blame_share: float
    cpu_usage_cores: float | None  # over the window; None when not sampled (opted out)
    cpu_request_cores: float | None
    memory_overage_bytes: int | None = None  # memory-pressure culprits only
    heuristic: bool = False  # True for the memory-pressure culprit
    # A workload culprit: how many of its containers the victim's blame names
    members: int | None = None

    @property
    def key_ref(self) -> str:
        """What names the culprit in ``Finding.key``: its cgroup, or a workload's ref."""
        return self.ref if self.kind == CULPRIT_WORKLOAD else self.identity.cgroup

    def to_dict(self) -> dict[str, Any]:
        i = self.identity
        return {
            "kind": self.kind,
            "ref": self.ref,
            "cgroup": i.cgroup,
            "cgroup_id": self.cgroup_id,
            "namespace": i.namespace or None,
            "pod": i.pod or None,
            "container": i.container or None,
            "pod_uid": i.pod_uid or None,
            "opted_out": i.opted_out,
            "blame_share": self.blame_share,
            "cpu_usage_cores": self.cpu_usage_cores,
            "cpu_request_cores": self.cpu_request_cores,
            "memory_overage_bytes": self.memory_overage_bytes,
            "heuristic": self.heuristic,
            "workload": i.workload or None,
            "members": self.members,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    severity: Severity
    victim: Victim
    culprit: Culprit | None
    evidence: dict[str, Any]
    first_seen: float  # epoch seconds: start of the first minute of the current run
    last_seen: float  # epoch seconds: end of the latest minute that held
    message: str
    remediation: str = field(default="")
    # the computed setting (docs/findings.md#remediation-with-numbers); when present,
    # its sentence is the remediation
    suggestion: Suggestion | None = None

    def key(self) -> tuple[str, str, str, str]:
        """(kind, victim cgroup, culprit cgroup (a workload's ref) or "", severity): what
        the rules agree on."""
        return (
            self.kind.value,
            self.victim.identity.cgroup,
            self.culprit.key_ref if self.culprit else "",
            self.severity.value,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "severity": self.severity.value,
            "victim": self.victim.to_dict(),
            "culprit": self.culprit.to_dict() if self.culprit else None,
            "evidence": dict(self.evidence),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "message": self.message,
            "remediation": self.remediation_text(),
            "suggestion": self.suggestion.to_dict() if self.suggestion else None,
        }

    def remediation_text(self) -> str:
        if self.suggestion is not None:
            return self.suggestion.text
        return self.remediation or REMEDIATION[self.kind]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by kind, victim and culprit (a stable, readable order)."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], *f.key()))


def findings_document(
    findings: list[Finding],
    now: float,
    window: Window | None = None,
    window_minutes: int | None = None,
    probe_loaded: bool | None = None,
) -> dict[str, Any]:
    """The ``/findings`` body (schema: exporter/data/finding.schema.json).

    ``probe_loaded``: whether the scheduler probe was loaded in the pass evaluated
    (default: what ``window`` says); it is why a finding can or cannot name a culprit.
    """
    if probe_loaded is None and window is not None:
        probe_loaded = window.probe_loaded
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluated_at": now,
        "window_minutes": window_minutes,
        "probe_loaded": probe_loaded,
        "containers": len(window.containers) if window is not None else None,
        "findings": [f.to_dict() for f in findings],
    }
