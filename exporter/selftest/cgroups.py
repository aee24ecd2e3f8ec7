"""The self-test's own cgroups: made, filled, emptied and removed by the self-test only.

One parent, ``<prefix><pid>``, with one child per role (``victim``, ``bully``,
``limited``). On a hybrid node (cgroup2 at ``unified/``, v1 controllers beside it) each
child is a directory in both the cgroup2 hierarchy (identity, PSI) and the v1 ``cpu``
one (weights, quota); on pure cgroup v2, one directory with ``cpu.weight`` and
``cpu.max``. The v1 ``memory`` hierarchy and every other controller are never touched,
and cgroup2 is never mounted.

Where the parent goes (:func:`place`):

* At the root of the hierarchy the exporter reads, when this process's cgroup
  namespace reaches it (a run on the node, a container sharing the node's namespace,
  or a container whose own cgroupfs mount is its namespace's root).
* Below this process's own cgroup, when the hierarchy is mounted from above the
  namespace's root: the DaemonSet's hostPath mount of the node's ``/sys/fs/cgroup``
  seen from a container with a cgroup namespace of its own (containerd's and CRI-O's
  default on cgroup v2). There the whole node's tree is visible, and even writable
  with ``selftest.enabled``, but the kernel moves a process only between cgroups below
  the namespace's root (cgroup2 mounted with ``nsdelegate``, as systemd mounts it on
  cgroup v2 nodes; ``ENOENT`` otherwise): a sibling under the pod's cgroup, or the
  root, can be made but never filled. Without ``nsdelegate`` the root would do, and
  the self-test nests all the same: one placement for both. The container's own cgroup is the
  one place both allowed and ours to use: runc asks systemd for it with
  ``Delegate=yes``, so systemd leaves what is below it alone, and the runtime removes
  what is left below it with the container.

  Below it, cgroup v2's "no internal processes" rule applies: controllers can be
  enabled for the children of a cgroup (``cgroup.subtree_control``) only while no
  process is in it, and the exporter is in it. The self-test does not move the
  exporter into a leaf to get round it: that would rewrite a cgroup the runtime owns
  (and ``kubectl exec``, which the runtime puts into the container's cgroup, then fails
  with ``EBUSY`` until it is undone, also after a crash). So unless the cpu controller
  is already enabled below the container's cgroup, the self-test's children have no
  cgroup CPU weight or quota of their own: the victim's lower weight is then a nice
  value (``nice 10``: weight 110 to the bully's 1024, the ratio of the kubelet's 102
  shares to 1024), and the cpu-throttled check is skipped with that reason. On a
  hybrid node the v1 ``cpu`` hierarchy has no such rule (and no namespace check on
  moves), and the self-test nests there below the same path when the runtime made it.

Only processes the self-test started are ever in these cgroups, so emptying one
(``cgroup.kill`` where the kernel has it, else SIGKILL to each PID listed in its
``cgroup.procs``) ends only the self-test's own processes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..cgroupfs.mode import CgroupMode, NodeLayout
from .hosting import EXIT_NO_PERMISSION, CannotHost, check_mkdir_error

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
class Placement:
    """Where the self-test's parent cgroup goes: below ``base`` (``/`` or ``/a/b``,
    relative to the cgroup2 root), and why there."""

    base: str = "/"
    nested: bool = False  # below this process's own cgroup (a cgroup namespace)
    why: str = "the root of the cgroup hierarchy (this process's cgroup namespace reaches it)"


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo field (space, tab, newline and backslash are octal)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mount_root(mountinfo: str, mount_point: str) -> str | None:
    """The cgroup2 mount at ``mount_point``: its root as this namespace sees it."""
    for line in mountinfo.splitlines():
        fields = line.split()
        # mount ID, parent ID, major:minor, root, mount point, ..., "-", fs type, ...
        sep = fields.index("-") if "-" in fields else -1
        if sep < 5 or sep + 1 >= len(fields) or fields[sep + 1] != "cgroup2":
            continue
        if _unescape(fields[4]) == mount_point:
            return _unescape(fields[3])
    return None


def _own_v2_path(proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def place(v2_root: str, proc_self: str = "/proc/self", pid: int | None = None) -> Placement:
    """Where the self-test's cgroups can go on this node, from this process's cgroup
    and the cgroup2 mount at ``v2_root`` (``proc_self``: tests give a fixture).

    The mount's root, as ``/proc/self/mountinfo`` gives it, is relative to this
    process's cgroup namespace: ``/`` (or below) when the namespace reaches the mount's
    root, ``/../..`` when the mount was made from a cgroup two levels above the
    namespace's root (a hostPath mount of the node's tree). In the latter case this
    process's cgroup is found in the mount as the directory ``k`` levels down whose
    ``cgroup.procs`` lists this process, then its path in the namespace below that.
    Raises :class:`CannotHost` when it cannot be found."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(os.path.join(proc_self, "mountinfo")) as f:
            root = _mount_root(f.read(), os.path.realpath(v2_root))
        with open(os.path.join(proc_self, "cgroup")) as f:
            own = _own_v2_path(f.read())
    except OSError:
        return Placement()
    if root is None or own is None:
        return Placement()
    parts = [x for x in root.split("/") if x]
    up = len(parts) if all(x == ".." for x in parts) else 0
    if up == 0 and ".." not in parts:
        return Placement()
    if up == 0:  # the mount's root is beside the namespace's, not above it
        raise CannotHost(
            EXIT_NO_PERMISSION,
            f"the cgroup2 mount at {v2_root} (root {root} in this cgroup namespace) does "
            "not hold this process's cgroup: the kernel lets a process in a cgroup "
            "namespace move processes only below its namespace's root",
        )
    below = [x for x in own.split("/") if x]
    for top in _dirs_at(v2_root, up):
        d = os.path.join(top, *below)
        if pid in procs(d):
            rel = "/" + os.path.relpath(d, v2_root)
            return Placement(
                rel,
                True,
                f"below this process's own cgroup {rel}: in a cgroup namespace of its own "
                f"(the mount at {v2_root} has its root {root} above the namespace's), "
                "the kernel moves processes only into cgroups below it",
            )
    raise CannotHost(
        EXIT_NO_PERMISSION,
        f"in a cgroup namespace of its own, and its cgroup ({own} in the namespace) is "
        f"not found {up} levels below {v2_root}: the kernel moves processes only into "
        "cgroups below the namespace's root, and the self-test cannot tell which that is",
    )


def _dirs_at(top: str, depth: int) -> Iterator[str]:
    if depth == 0:
        yield top
        return
    for d in _subdirs(top):
        yield from _dirs_at(d, depth - 1)


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
    placement: Placement = field(default_factory=Placement)

    @property
    def rel(self) -> str:
        """The parent's path relative to the cgroup2 root (``/base/name``)."""
        return os.path.join(self.placement.base, self.name)

    @property
    def bases(self) -> list[str]:
        """Where the parent's directories go, cgroup2 first; on a hybrid node the v1
        cpu one only where that hierarchy has the same path (the exporter reads v1
        controllers at the cgroup2 path)."""
        assert self.layout.v2_root is not None
        rel = self.placement.base.lstrip("/")
        out = [os.path.join(self.layout.v2_root, rel).rstrip("/")]
        v1 = self.layout.v1_cpu_root
        if self.layout.mode is CgroupMode.HYBRID and v1 and os.path.isdir(os.path.join(v1, rel)):
            out.append(os.path.join(v1, rel).rstrip("/"))
        return out

    @property
    def roots(self) -> list[str]:
        """The parent's directories, cgroup2 first."""
        return [os.path.join(b, self.name) for b in self.bases]

    @property
    def v1_cpu(self) -> bool:
        return len(self.roots) > 1

    def path(self, role: str) -> str:
        """The ``cgroup`` label the exporter gives the role's cgroup."""
        return f"{self.rel}/{role}"

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
        v1 on a hybrid node, enabled for the base's children on pure v2)."""
        if self.layout.mode is CgroupMode.HYBRID:
            return self.v1_cpu
        try:
            with open(os.path.join(self.bases[0], "cgroup.subtree_control")) as f:
                return "cpu" in f.read().split()
        except OSError:
            return False

    def quota_supported(self) -> bool:
        """Whether this node lets the self-test set a CPU quota on its own cgroups (v1:
        the kernel has CFS bandwidth control; v2: the cpu controller has cpu.max)."""
        if self.layout.mode is CgroupMode.HYBRID:
            return self.v1_cpu and os.path.exists(os.path.join(self.bases[1], "cpu.cfs_quota_us"))
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


def remove_stale(
    layout: NodeLayout,
    prefix: str = PREFIX,
    now: float | None = None,
    bases: list[str] | None = None,
) -> list[str]:
    """Remove self-test trees in ``bases`` (default: the hierarchies' roots) that hold
    no process and are older than :data:`STALE_AFTER_S` (a live self-test's tree always
    holds its workers)."""
    now = time.time() if now is None else now
    if bases is None:
        v1 = layout.v1_cpu_root if layout.mode is CgroupMode.HYBRID else None
        bases = [r for r in (layout.v2_root, v1) if r is not None]
    removed: list[str] = []
    for root in bases:
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
