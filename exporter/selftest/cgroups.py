"""The self-test's own cgroups: made, filled, emptied and removed by the self-test only.

One parent, ``<prefix><pid>`` at the root of the hierarchy the exporter reads, with one
child per role (``victim``, ``bully``, ``limited``). On a hybrid node (cgroup2 at
``unified/``, v1 controllers beside it) each child is a directory in both the cgroup2
hierarchy (identity, PSI) and the v1 ``cpu`` one (quota); on pure cgroup v2, one
directory with ``cpu.max``. The v1 ``memory`` hierarchy and every other controller are
never touched, and cgroup2 is never mounted.

Only processes the self-test started are ever in these cgroups, so emptying one
(``cgroup.kill`` where the kernel has it, else SIGKILL to each PID listed in its
``cgroup.procs``) ends only the self-test's own processes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..cgroupfs.mode import CgroupMode, NodeLayout
from .hosting import check_mkdir_error

PREFIX = "contention-selftest-"
CFS_PERIOD_US = 100_000
# A self-test tree older than this with no process in it was left by a self-test that
# was killed with its watchdog (a pod deleted at once): the next self-test removes it.
STALE_AFTER_S = 600.0


def write_file(path: str, value: str) -> None:
    """One write(2) of ``value`` to a cgroup file (a kernel interface file takes the
    whole value in one call; no buffering, no truncation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def procs(directory: str) -> list[int]:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (FileNotFoundError, ValueError):
        return []


def _subdirs(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as it:
            return [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def kill_tree(directory: str) -> None:
    """End every process in ``directory`` and below (only the self-test's own)."""
    for child in _subdirs(directory):
        kill_tree(child)
    kill_file = os.path.join(directory, "cgroup.kill")
    if os.path.exists(kill_file):
        with contextlib.suppress(OSError):
            write_file(kill_file, "1")
            return
    for pid in procs(directory):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def remove_tree(directory: str, timeout: float = 5.0) -> list[str]:
    """Kill what is inside, then remove the directories deepest first; retries
    ``EBUSY`` (a killed process leaves its cgroup a moment later) until ``timeout``.
    Returns the directories that could not be removed, with the reason."""
    deadline = time.monotonic() + timeout
    kill_tree(directory)
    left: list[str] = []
    for d in sorted(_walk(directory), key=len, reverse=True):
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                    left.append(f"{d}: {e.strerror} (pids {procs(d)})")
                    break
                kill_tree(d)
                time.sleep(0.05)
    return left


def _walk(directory: str) -> Iterator[str]:
    if os.path.isdir(directory):
        yield directory
        for child in _subdirs(directory):
            yield from _walk(child)


@dataclass(frozen=True, slots=True)
class Role:
    """One of the self-test's containers."""

    name: str
    quota_cores: float | None = None
    # cpu.shares (v1; cpu.weight converted on v2): what the kubelet sets for a request
    shares: int | None = None


@dataclass
class SelftestCgroups:
    """The parent and the children, in every hierarchy this node splits them over."""

    layout: NodeLayout
    name: str
    roles: tuple[Role, ...]

    @property
    def roots(self) -> list[str]:
        """The parent's directories, cgroup2 first."""
        assert self.layout.v2_root is not None
        out = [os.path.join(self.layout.v2_root, self.name)]
        if self.layout.mode is CgroupMode.HYBRID and self.layout.v1_cpu_root is not None:
            out.append(os.path.join(self.layout.v1_cpu_root, self.name))
        return out

    def path(self, role: str) -> str:
        """The ``cgroup`` label the exporter gives the role's cgroup."""
        return f"/{self.name}/{role}"

    def v2_dir(self, role: str) -> str:
        return os.path.join(self.roots[0], role)

    def procs_files(self, role: str) -> list[str]:
        return [os.path.join(r, role, "cgroup.procs") for r in self.roots]

    def cgroup_id(self, role: str) -> int:
        return os.stat(self.v2_dir(role)).st_ino

    def create(self) -> None:
        """Make every directory and set the quotas; on any failure remove what was made
        and raise :class:`CannotHost` (or the OSError, for anything unforeseen)."""
        try:
            for root in self.roots:
                os.mkdir(root)
            if self.layout.mode is CgroupMode.V2:
                self._delegate_cpu()
            for role in self.roles:
                for root in self.roots:
                    os.mkdir(os.path.join(root, role.name))
                if role.quota_cores is not None:
                    self._set_quota(role)
                if role.shares is not None:
                    self._set_shares(role.name, role.shares)
        except BaseException as e:
            self.remove()
            if isinstance(e, OSError):
                check_mkdir_error(e, self.roots[0])
            raise

    def _delegate_cpu(self) -> None:
        parent = self.roots[0]
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            have = f.read().split()
        if "cpu" in have:
            write_file(os.path.join(parent, "cgroup.subtree_control"), "+cpu")

    def weights_supported(self) -> bool:
        """Whether the self-test can give its cgroups CPU weights (the cpu controller:
        v1 on a hybrid node, enabled for the root's children on pure v2)."""
        if self.layout.mode is CgroupMode.HYBRID:
            return self.layout.v1_cpu_root is not None
        try:
            with open(os.path.join(self.layout.v2_root or "", "cgroup.subtree_control")) as f:
                return "cpu" in f.read().split()
        except OSError:
            return False

    def quota_supported(self) -> bool:
        """Whether this node lets the self-test set a CPU quota on its own cgroups (v1:
        the kernel has CFS bandwidth control; v2: the cpu controller has cpu.max)."""
        if self.layout.mode is CgroupMode.HYBRID:
            root = self.layout.v1_cpu_root
            return root is not None and os.path.exists(os.path.join(root, "cpu.cfs_quota_us"))
        return self.weights_supported()

    def _set_shares(self, role: str, shares: int) -> None:
        if self.layout.mode is CgroupMode.HYBRID:
            write_file(os.path.join(self.roots[1], role, "cpu.shares"), str(shares))
        else:  # runc's and the kernel's conversion
            weight = 1 + ((max(2, min(shares, 262144)) - 2) * 9999) // 262142
            write_file(os.path.join(self.v2_dir(role), "cpu.weight"), str(weight))

    def _set_quota(self, role: Role) -> None:
        assert role.quota_cores is not None
        quota_us = max(1000, round(role.quota_cores * CFS_PERIOD_US))
        if self.layout.mode is CgroupMode.HYBRID:
            d = os.path.join(self.roots[1], role.name)
            write_file(os.path.join(d, "cpu.cfs_period_us"), str(CFS_PERIOD_US))
            write_file(os.path.join(d, "cpu.cfs_quota_us"), str(quota_us))
        else:
            cpu_max = os.path.join(self.v2_dir(role.name), "cpu.max")
            write_file(cpu_max, f"{quota_us} {CFS_PERIOD_US}")

    def pids(self) -> list[int]:
        return [p for r in self.roots for d in _walk(r) for p in procs(d)]

    def remove(self) -> list[str]:
        """Kill the self-test's processes and remove every directory; what is left."""
        left: list[str] = []
        for root in self.roots:
            left += remove_tree(root)
        return left


def remove_stale(layout: NodeLayout, prefix: str = PREFIX, now: float | None = None) -> list[str]:
    """Remove self-test trees that hold no process and are older than
    :data:`STALE_AFTER_S` (a live self-test's tree always holds its workers)."""
    now = time.time() if now is None else now
    roots = [layout.v2_root, layout.v1_cpu_root if layout.mode is CgroupMode.HYBRID else None]
    removed: list[str] = []
    for root in roots:
        if root is None:
            continue
        for d in _subdirs(root):
            if not os.path.basename(d).startswith(prefix):
                continue
            try:
                age = now - os.stat(d).st_mtime
            except FileNotFoundError:
                continue
            empty = not any(procs(x) for x in _walk(d))
            if age > STALE_AFTER_S and empty and not remove_tree(d):
                removed.append(d)
    return removed
