"""Which cgroup layout this node has, and what the kernel offers (PSI, BTF).

Detected from the filesystem under the given roots, so fixture trees can play any
node: pure cgroup v2 at ``<sysfs>/fs/cgroup``; hybrid (cgroup2 at ``.../unified`` for
identity, PSI and usage, v1 ``cpu``/``memory`` controllers for quota, throttling and
limits); pure v1 (unsupported: per-cgroup PSI does not exist there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum

from .errors import CgroupParseError
from .files import read_text


class CgroupMode(StrEnum):
    V2 = "v2"
    HYBRID = "hybrid"
    V1 = "v1"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """The node's cgroup layout (which hierarchies, mounted where) and the kernel
    features the exporter depends on (PSI, BTF), as detected at start."""

    mode: CgroupMode
    supported: bool
    reason: str  # why not supported ("" when supported)
    v2_root: str | None  # the cgroup2 hierarchy that names cgroups (ids = its inodes)
    v1_cpu_root: str | None  # hybrid only: the v1 cpu controller hierarchy
    v1_memory_root: str | None  # hybrid only: the v1 memory controller hierarchy
    psi: bool
    psi_reason: str
    btf: bool


def _first_dir(*candidates: str) -> str | None:
    for c in candidates:
        if os.path.isdir(c):
            return c
    return None


def _psi_available(procfs: str, v2_root: str | None) -> tuple[bool, str]:
    path = os.path.join(procfs, "pressure", "cpu")
    try:
        text = read_text(path)
    except OSError as e:
        # EOPNOTSUPP when the kernel has PSI but it is disabled (psi=0 on the cmdline).
        return False, f"PSI disabled: {path}: {e.strerror}"
    except CgroupParseError as e:
        return False, f"PSI unusable: {e}"
    if text is None:
        # Recent kernels do not even create /proc/pressure when booted with psi=0.
        return False, "no /proc/pressure: kernel without CONFIG_PSI, or booted with psi=0"
    if v2_root is None or not _has_cgroup_pressure(v2_root):
        return False, "no per-cgroup cpu.pressure in the cgroup2 hierarchy"
    return True, ""


def _has_cgroup_pressure(v2_root: str) -> bool:
    """Whether cgroups have ``cpu.pressure``. Kernels before 5.2 show it only below
    the root, so a root without it is not conclusive: look at its children too."""
    if os.path.exists(os.path.join(v2_root, "cpu.pressure")):
        return True
    try:
        with os.scandir(v2_root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False) and os.path.exists(
                    os.path.join(e.path, "cpu.pressure")
                ):
                    return True
    except OSError:
        pass
    return False


def _with_cgroup2(
    mode: CgroupMode,
    v2_root: str,
    v1_cpu: str | None,
    v1_mem: str | None,
    procfs: str,
    btf: bool,
) -> NodeLayout:
    """A layout with a cgroup2 hierarchy (v2, hybrid): supported when it has PSI."""
    psi, psi_reason = _psi_available(procfs, v2_root)
    return NodeLayout(
        mode=mode,
        supported=psi,
        reason="" if psi else psi_reason,
        v2_root=v2_root,
        v1_cpu_root=v1_cpu,
        v1_memory_root=v1_mem,
        psi=psi,
        psi_reason=psi_reason,
        btf=btf,
    )


def _without_cgroup2(
    mode: CgroupMode, reason: str, v1_cpu: str | None, v1_mem: str | None, btf: bool
) -> NodeLayout:
    """A layout with no cgroup2 hierarchy (v1 only, none): never supported."""
    return NodeLayout(
        mode=mode,
        supported=False,
        reason=reason,
        v2_root=None,
        v1_cpu_root=v1_cpu,
        v1_memory_root=v1_mem,
        psi=False,
        psi_reason="no cgroup2 hierarchy",
        btf=btf,
    )


def detect(sysfs: str = "/sys", procfs: str = "/proc") -> NodeLayout:
    base = os.path.join(sysfs, "fs", "cgroup")
    btf = os.path.exists(os.path.join(sysfs, "kernel", "btf", "vmlinux"))
    v1_cpu = _first_dir(os.path.join(base, "cpu"), os.path.join(base, "cpu,cpuacct"))
    v1_mem = _first_dir(os.path.join(base, "memory"))

    if os.path.exists(os.path.join(base, "cgroup.controllers")):
        return _with_cgroup2(CgroupMode.V2, base, None, None, procfs, btf)
    unified = os.path.join(base, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.controllers")):
        return _with_cgroup2(CgroupMode.HYBRID, unified, v1_cpu, v1_mem, procfs, btf)
    if v1_cpu is not None or v1_mem is not None:
        reason = "cgroup v1 only: per-cgroup PSI does not exist without cgroup2"
        return _without_cgroup2(CgroupMode.V1, reason, v1_cpu, v1_mem, btf)
    reason = f"no cgroup hierarchy found under {base}"
    return _without_cgroup2(CgroupMode.NONE, reason, None, None, btf)
