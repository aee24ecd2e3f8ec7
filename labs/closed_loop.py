"""Closed-loop labs: apply what a finding suggests to the lab's own cgroups, and check
that the finding clears (docs/labs.md#closed-loop-labs).

The value applied is the one the exporter serves in ``/findings``
(``suggestion.value``), never recomputed here. It reaches the kernel the way the
kubelet would write it after a resize:

* ``cpu_limit`` (cpu-throttled, on the victim) → CFS quota per 100 ms period:
  ``cpu.cfs_quota_us`` (v1) or ``cpu.max`` (v2);
* ``cpu_request`` (noisy-neighbor, on the culprit) → the weight:
  ``cpu.shares = millicores * 1024 / 1000`` (v1), and on v2 ``cpu.weight`` from those
  shares by the kubelet's ``1 + ((shares - 2) * 9999) / 262142``
  (:func:`~labs.cgroups.kubelet_shares`, :func:`~labs.cgroups.shares_to_weight`);
* ``memory_limit`` (memory-limit-thrash, on the victim) → ``memory.max``, and where the
  lab models MemoryQoS, ``memory.high`` by the kubelet's formula
  (:func:`memory_qos_high`).

The pod spec changes with it: the container's entry in the labs' metadata file gets the
new request or limit, as the API server would serve the resized pod.

A request is also a reservation, and the scheduler keeps a node's requests within what
it can allocate. Raising a culprit's request to its use only raises its weight on the
node it shares with the victim; it can push the requests there past the CPU they share.
Then a scheduler would not keep the two together: :func:`apply_finding` does what a
rollout of the resized culprit would end in and moves it off the node (its workload
stops here; it runs elsewhere), and says so in :attr:`Applied.rescheduled`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cgroups import LabCgroup, LabError, kubelet_shares, shares_to_weight
from .scenarios import LabRun, MetadataFile

MIB = 1 << 20
PAGE = 4096
# The kubelet's MemoryQoS default (memoryThrottlingFactor): memory.high sits this far
# from the request towards the limit.
MEMORY_THROTTLING_FACTOR = 0.9


class NoValue(LabError):
    """The finding's remediation carries no number: nothing to apply."""


@dataclass(frozen=True, slots=True)
class Applied:
    """One remediation applied to a lab: what the finding said, and what was written."""

    kind: str
    victim: str  # the victim's role
    target: str  # the role the setting was applied to
    setting: str  # cpu_limit | cpu_request | memory_limit
    value: int  # millicores or MiB, as /findings gave it
    unit: str
    at: float  # time.time() when it was applied
    written: dict[str, str]  # cgroup file -> value written
    rescheduled: str | None = None  # the role moved off the node (see the module doc)
    finding: dict[str, Any] = field(default_factory=dict)  # the /findings row it came from

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "victim": self.victim,
            "target": self.target,
            "setting": self.setting,
            "value": self.value,
            "unit": self.unit,
            "written": dict(self.written),
            "rescheduled": self.rescheduled,
        }


def memory_qos_high(request_bytes: int, limit_bytes: int) -> int:
    """``memory.high`` as the kubelet's MemoryQoS sets it: request + factor * (limit -
    request), rounded down to a whole page."""
    high = request_bytes + MEMORY_THROTTLING_FACTOR * (limit_bytes - request_bytes)
    return int(high // PAGE) * PAGE


def judged_clear_at(applied_at: float, window_minutes: int) -> float:
    """When the exporter's window first holds only minutes that began after a fix
    applied at ``applied_at`` (epoch seconds): the end of the window that starts at
    the next minute boundary. Not sooner: the seconds before the fix, even two of
    them, carry a stalled victim's long waits into that minute's run-queue p99 (seen:
    26 ms with the fix applied 2 s into the minute, a stalled minute by ``runqP99Ms``)."""
    return math.ceil(applied_at / 60) * 60 + window_minutes * 60


class RunLike(Protocol):
    """What :func:`apply_finding` needs of a lab run: ``labs.scenarios.LabRun`` or
    ``labs.memory.MemoryLabRun`` (their ``lab``, ``cgroups`` and ``metadata``)."""

    lab: Any
    cgroups: dict[str, LabCgroup]
    metadata: MetadataFile | None


def role_of(run: RunLike, cgroup_path: str | None) -> str:
    for role, cg in run.cgroups.items():
        if cg.path == cgroup_path:
            return role
    raise LabError(f"{cgroup_path!r} is not a container of lab {run.lab.name}")


def apply_finding(run: RunLike, row: Mapping[str, Any]) -> Applied:
    """Apply one ``/findings`` row's suggested value to the lab (see the module doc);
    :class:`NoValue` when it has none, :class:`LabError` when its setting has no
    closed loop here or it names something outside the lab."""
    kind = str(row.get("kind"))
    if getattr(run, "pods", None) is not None:
        raise LabError("a lab in Kubernetes mode would be resized through its pod: not done")
    victim = role_of(run, (row.get("victim") or {}).get("cgroup"))
    sug = row.get("suggestion") or {}
    value = sug.get("value")
    if value is None:
        why = sug.get("reason") or "the finding has no suggestion"
        raise NoValue(f"{kind} for {victim}: no value to apply: {why}")
    setting = str(sug.get("setting"))
    appliers: dict[str, Callable[[RunLike, str, int], dict[str, str]]] = {
        "cpu_limit": _cpu_limit,
        "cpu_request": _cpu_request,
        "memory_limit": _memory_limit,
    }
    if setting not in appliers:
        raise LabError(f"{kind}: no closed loop applies {setting} (docs/labs.md)")
    target = victim
    if sug.get("target") == "culprit":
        target = role_of(run, (row.get("culprit") or {}).get("cgroup"))
    at = time.time()
    written = appliers[setting](run, target, int(value))
    moved = None
    if setting == "cpu_request" and isinstance(run, LabRun) and not fits(run, target, int(value)):
        run.cgroups[target].stop_workers()
        moved = target
    return Applied(
        kind,
        victim,
        target,
        setting,
        int(value),
        str(sug.get("unit")),
        at,
        written,
        moved,
        dict(row),
    )


def allocatable_millicores(run: LabRun) -> int:
    """The CPU the lab's containers share, as a node's allocatable: the one CPU a
    pinned lab runs on, else the machine's."""
    return 1000 if run.pinned_to is not None else 1000 * (os.cpu_count() or 1)


def fits(run: LabRun, role: str, request_millicores: int) -> bool:
    """Whether the lab's requests, with ``role``'s at ``request_millicores``, stay
    within :func:`allocatable_millicores`: what the scheduler checks before it places
    a pod (a container without a request reserves nothing)."""
    total = request_millicores
    for b in run.lab.boxes:
        if b.role != role and b.cpu_request is not None:
            total += round(b.cpu_request * 1000)
    return total <= allocatable_millicores(run)


def _cpu_limit(run: RunLike, role: str, millicores: int) -> dict[str, str]:
    cg = run.cgroups[role]
    cg.set_cpu(quota_cores=millicores / 1000)
    _resize(run, role, cpu_limit=f"{millicores}m")
    if cg.v1_cpu_dir is not None:
        return {"cpu.cfs_quota_us": cg.read("cpu.cfs_quota_us", "cpu").strip()}
    return {"cpu.max": cg.read("cpu.max").strip()}


def _cpu_request(run: RunLike, role: str, millicores: int) -> dict[str, str]:
    cg = run.cgroups[role]
    shares = kubelet_shares(millicores / 1000)
    cg.set_cpu(shares=shares)
    _resize(run, role, cpu_request=f"{millicores}m")
    if cg.v1_cpu_dir is not None:
        return {"cpu.shares": cg.read("cpu.shares", "cpu").strip()}
    got = cg.read("cpu.weight").strip()
    if got != str(shares_to_weight(shares)):
        raise LabError(f"{cg.path}: cpu.weight reads {got}, not the kubelet's weight")
    return {"cpu.weight": got}


def _memory_limit(run: RunLike, role: str, mib: int) -> dict[str, str]:
    cg = run.cgroups[role]
    box = run.lab.box(role)
    limit = mib * MIB
    high = None
    if getattr(box, "memory_high_mib", None) is not None:
        high = memory_qos_high((box.memory_request_mib or 0) * MIB, limit)
    cg.set_memory(limit, high)
    _resize(run, role, memory_limit=f"{mib}Mi")
    out = {"memory.max": cg.read("memory.max").strip()}
    if high is not None:
        out["memory.high"] = cg.read("memory.high").strip()
    return out


def _resize(run: RunLike, role: str, **keys: str) -> None:
    """The resized pod spec: the container's metadata entry with the new values."""
    if run.metadata is None:
        return
    path = run.lab.cgroup_path(role)
    entry = run.metadata.read().get(path) or run.lab.metadata_entries()[path]
    run.metadata.add({path: {**entry, **keys}})
