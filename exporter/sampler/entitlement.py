"""The entitlement policy: what a container's use is measured against.

CPU: its limit (the quota in force, else the spec's limit), else its request, else the
node's CPUs. Memory: its limit, else its request, else the node's memory. The
``basis`` says which one applied (``contention_*_entitlement{basis}``). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cgroupfs.model import CgroupReading
from ..identity import Identity


@dataclass(frozen=True, slots=True)
class Entitlement:
    value: float
    basis: str  # limit | request | node


def cpu_limit_cores(reading: CgroupReading, ident: Identity) -> float | None:
    """The quota in force (cgroup), else the limit from the spec; None: unlimited."""
    if reading.cpu_max is not None and reading.cpu_max.limit_cores is not None:
        return reading.cpu_max.limit_cores
    return ident.cpu_limit_cores


def memory_limit_bytes(reading: CgroupReading, ident: Identity) -> int | None:
    return reading.memory_max if reading.memory_max is not None else ident.memory_limit_bytes


def cpu_entitlement(limit: float | None, ident: Identity, node_cores: float) -> Entitlement:
    if limit is not None:
        return Entitlement(limit, "limit")
    if ident.cpu_request_cores:
        return Entitlement(ident.cpu_request_cores, "request")
    return Entitlement(node_cores, "node")


def memory_entitlement(limit: int | None, ident: Identity, node_bytes: int) -> Entitlement:
    if limit is not None:
        return Entitlement(float(limit), "limit")
    if ident.memory_request_bytes:
        return Entitlement(float(ident.memory_request_bytes), "request")
    return Entitlement(float(node_bytes), "node")
