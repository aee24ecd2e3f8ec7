"""Walk the cgroup2 tree and say what each cgroup is, from its path alone.

A cgroup's id is the inode number of its cgroup2 directory: the same number
``bpf_get_current_cgroup_id()`` returns in the scheduler probe, so blame and samples
join on it. ``os.scandir`` hands us that inode without an extra ``stat``.

Kubernetes layouts recognised (anywhere in the path, so a nested kubelet root works):

* systemd driver: ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
  <runtime>-<id>.scope`` (Guaranteed pods sit directly under ``kubepods.slice``; the
  pod UID's dashes are underscores in slice names). Under a kubelet ``--cgroup-root``
  the slice names carry the root's prefix, as systemd nests slices by name:
  ``kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable-pod<uid>.slice``;
* cgroupfs driver: ``kubepods/<qos>/pod<uid>/<id>`` (Guaranteed: ``kubepods/pod<uid>/<id>``);
* a static pod's ``<uid>`` is the 32-hex config hash the kubelet gives it;
* runtimes: containerd ``cri-containerd-<id>.scope``, CRI-O ``crio-<id>.scope``, docker
  ``docker-<id>.scope``; with cgroupfs the leaf is the bare container ID (containerd,
  dockershim) or ``crio-<id>`` (CRI-O). CRI-O's monitor ``crio-conmon-<id>`` is not a
  container: it is classified ``OTHER`` with its pod, and not tracked.

Without Kubernetes: docker ``docker-<id>.scope`` (systemd) or ``docker/<id>``
(cgroupfs), and podman ``libpod-<id>.scope`` (systemd: ``machine.slice``, a pod's
``machine-libpod_pod_<id>.slice``, or a rootless user's tree) or
``libpod_parent/libpod-<id>`` (cgroupfs). Podman's ``libpod-conmon-<id>`` monitor is
not a container.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum


class CgroupKind(StrEnum):
    CONTAINER = "container"  # a Kubernetes or docker container
    POD = "pod"  # a pod-level cgroup (aggregate of its containers)
    SYSTEM = "system"  # a systemd unit under system.slice (or init.scope)
    USER = "user"  # a user slice (user.slice/user-<uid>.slice)
    ROOT = "root"  # the root cgroup: kernel threads and unassigned tasks
    SLICE = "slice"  # an intermediate grouping (kubepods.slice, system.slice, ...)
    OTHER = "other"  # anything else, e.g. a cgroup a person made by hand


# Kinds sampled as "containers" (workload units). Pods and slices are aggregates of
# tracked children: sampling them too would count the same CPU twice.
TRACKED_KINDS = frozenset({CgroupKind.CONTAINER, CgroupKind.SYSTEM, CgroupKind.USER})


@dataclass(frozen=True, slots=True)
class K8sCgroup:
    pod_uid: str  # with dashes, as the API has it (a static pod: its 32-hex config hash)
    container_id: str | None  # None for the pod-level cgroup
    runtime: str | None  # containerd, crio, docker, podman; None when the path does not say
    qos: str  # guaranteed, burstable, besteffort
    driver: str  # systemd or cgroupfs


@dataclass(frozen=True, slots=True)
class CgroupRef:
    id: int  # inode of the cgroup2 directory
    path: str  # "/" + path relative to the cgroup2 root ("/" is the root)
    kind: CgroupKind
    tracked: bool
    k8s: K8sCgroup | None = None
    # For a descendant of a tracked cgroup (walk(descendants=True)): the tracked
    # ancestor it belongs to. The probe sees tasks in the leaf cgroup they run in.
    owner: int | None = None


# A pod UID: an RFC 4122 UUID (dashes, or underscores in systemd slice names), or for a
# static pod the 32-hex config hash the kubelet uses as its UID (the mirror pod in the
# API has another UID and carries the hash in its kubernetes.io/config.hash annotation).
_UID = (
    r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
    r"|[0-9a-f]{32}"
)
# The optional "<prefix>-" is a kubelet --cgroup-root slice (e.g. "kubelet-kubepods-...").
_SYSTEMD_POD = re.compile(
    r"^(?:.+-)?kubepods(?:-(besteffort|burstable))?-pod(" + _UID + r")\.slice$"
)
_KUBEPODS_SLICE = re.compile(r"^(?:.+-)?kubepods(?:-(?:besteffort|burstable))?\.slice$")
_CGROUPFS_POD = re.compile(r"^pod(" + _UID + r")$")
_SCOPE = re.compile(r"^(cri-containerd|crio|docker|libpod)-([0-9a-f]{12,64})\.scope$")
_LIBPOD_CGROUPFS = re.compile(r"^libpod-([0-9a-f]{12,64})$")
# A container leaf under a pod: a runtime scope (systemd) or "crio-<id>" (CRI-O, cgroupfs).
_POD_LEAF = re.compile(r"^(cri-containerd|crio|docker)-([0-9a-f]{12,64})(?:\.scope)?$")
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")
_SHORT_ID = re.compile(r"^[0-9a-f]{12,64}$")
_RUNTIME = {"cri-containerd": "containerd", "crio": "crio", "docker": "docker"}
_USER_SLICE = re.compile(r"^user-\d+\.slice$")
_UNIT = re.compile(r"\.(service|scope|socket|mount|swap)$")


def _classify_k8s(parts: list[str]) -> tuple[CgroupKind, K8sCgroup] | None:
    """Recognise a pod or container cgroup; ``parts`` are the path's components."""
    for i, part in enumerate(parts):
        m = _SYSTEMD_POD.match(part)
        if m:
            qos = m.group(1) or "guaranteed"
            uid = m.group(2).replace("_", "-")
            driver = "systemd"
        else:
            m = _CGROUPFS_POD.match(part)
            if not m or "kubepods" not in parts[:i]:
                continue
            prev = parts[i - 1]
            qos = prev if prev in ("besteffort", "burstable") else "guaranteed"
            uid = m.group(1).replace("_", "-")
            driver = "cgroupfs"
        rest = parts[i + 1 :]
        if not rest:
            return CgroupKind.POD, K8sCgroup(uid, None, None, qos, driver)
        # A path below the container (a cgroup the container made) is part of it.
        leaf = rest[0]
        sm = _POD_LEAF.match(leaf)
        if sm:
            cid, runtime = sm.group(2), _RUNTIME[sm.group(1)]
        elif _BARE_ID.match(leaf) or (driver == "cgroupfs" and _SHORT_ID.match(leaf)):
            cid, runtime = leaf, None
        else:
            # e.g. crio-conmon-<id>.scope: the runtime's monitor, not a container.
            return CgroupKind.OTHER, K8sCgroup(uid, None, None, qos, driver)
        return CgroupKind.CONTAINER, K8sCgroup(uid, cid, runtime, qos, driver)
    return None


def _classify_engine(parts: list[str]) -> K8sCgroup | None:
    """A docker or podman container outside Kubernetes (systemd or cgroupfs driver)."""
    leaf = parts[-1]
    sm = _SCOPE.match(leaf)
    if sm is not None and sm.group(1) in ("docker", "libpod"):
        runtime = "docker" if sm.group(1) == "docker" else "podman"
        return K8sCgroup("", sm.group(2), runtime, "", "systemd")
    if len(parts) == 2 and parts[0] == "docker" and _BARE_ID.match(leaf):
        return K8sCgroup("", leaf, "docker", "", "cgroupfs")
    lm = _LIBPOD_CGROUPFS.match(leaf)
    if len(parts) == 2 and parts[0] == "libpod_parent" and lm is not None:
        return K8sCgroup("", lm.group(1), "podman", "", "cgroupfs")
    return None


def classify(path: str) -> tuple[CgroupKind, K8sCgroup | None]:
    """What a cgroup is, from its path relative to the cgroup2 root (``/a/b``)."""
    if path in ("", "/"):
        return CgroupKind.ROOT, None
    parts = [p for p in path.split("/") if p]
    # Every Kubernetes layout has "kubepods" in a component: one substring test
    # spares other paths a regex per component (per level of a deep hand-made tree).
    if "kubepods" in path:
        k8s = _classify_k8s(parts)
        if k8s is not None:
            return k8s
        if any(p == "kubepods" or _KUBEPODS_SLICE.match(p) for p in parts):
            return CgroupKind.SLICE, None  # kubepods and its QoS-level slices
    if parts in (["docker"], ["libpod_parent"]):
        return CgroupKind.SLICE, None  # docker's / podman's parent with cgroupfs
    leaf = parts[-1]
    engine = _classify_engine(parts)
    if engine is not None:
        return CgroupKind.CONTAINER, engine
    if parts[0] == "system.slice" or path == "/init.scope":
        if _UNIT.search(leaf):
            return CgroupKind.SYSTEM, None
        return CgroupKind.SLICE, None
    if parts[0] == "user.slice":
        if len(parts) == 2 and _USER_SLICE.match(leaf):
            return CgroupKind.USER, None
        return CgroupKind.SLICE, None
    if leaf.endswith(".slice"):
        return CgroupKind.SLICE, None
    return CgroupKind.OTHER, None


Classifier = Callable[[str], tuple[CgroupKind, "K8sCgroup | None"]]
# Told about a directory that exists but could not be listed (its path relative to the
# root, "/" for the root itself, and why): its whole subtree is missing from the walk.
OnUnlisted = Callable[[str, OSError], None]

# A directory removed while the walk was at it: churn, not an error.
_VANISHED = (errno.ENOENT, errno.ENODEV, errno.ESRCH)


def walk(
    v2_root: str,
    descendants: bool = False,
    classifier: Classifier | None = None,
    on_unlisted: OnUnlisted | None = None,
    subtrees: Collection[str] = (),
) -> Iterator[CgroupRef]:
    """Every cgroup under ``v2_root``, the root included, parents before children.

    Descendants of a tracked cgroup are not yielded: a container's sub-cgroups are part
    of it. An ``OTHER`` cgroup is tracked when it is a leaf (no child cgroups), so a
    hand-made hierarchy is sampled at the level where its tasks live. Directories that
    vanish mid-walk are skipped: containers come and go. A directory that exists but
    cannot be listed (permissions, I/O errors) is reported to ``on_unlisted``: the
    cgroups below it are missing from the walk, and the caller must say so.

    With ``descendants=True`` the sub-cgroups of tracked cgroups are yielded too, untracked
    and with ``owner`` set to the tracked ancestor's id: the scheduler probe keys tasks by
    the cgroup they run in, and blame on a sub-cgroup belongs to its owner.

    ``subtrees`` (paths like ``/a/b/c``) are walked last as trees of their own, wherever
    they are, even below a tracked cgroup: the top untracked, each cgroup below it
    ``OTHER`` and tracked when it is a leaf. The self-test nests its cgroups so in the
    exporter's own container (a cgroup namespace lets it use no other place), and its
    victim and bully must be sampled and blamed apart, not as that container's.
    """
    try:
        root = os.stat(v2_root)
    except OSError as e:
        if on_unlisted is not None:
            on_unlisted("/", e)
        return
    yield CgroupRef(id=root.st_ino, path="/", kind=CgroupKind.ROOT, tracked=False)
    classifier = classifier or classify
    # Depth first with an explicit stack, not recursion: a tree may be deeper than
    # Python's recursion limit (the kernel's only bound is the path length).
    skip = frozenset(subtrees)
    top = _child_dirs(v2_root, "", on_unlisted)
    counts = _counts_subdirs(root.st_nlink, top)
    stack = [iter([d for d in top if d.rel not in skip])]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        path = entry.rel
        kind, k8s = classifier(path)
        tracked = kind in TRACKED_KINDS
        if kind is CgroupKind.OTHER and not (k8s is not None and k8s.container_id is None):
            tracked = not _has_child_dir(entry.abs)
        yield CgroupRef(id=entry.ino, path=path, kind=kind, tracked=tracked, k8s=k8s)
        if not tracked:
            stack.append(iter(_child_dirs(entry.abs, path, on_unlisted, skip)))
        elif descendants:
            yield from _walk_owned(entry, kind, k8s, skip, counts)
    for sub in sorted(skip):
        yield from _walk_subtree(v2_root, sub, counts)


def _counts_subdirs(nlink: int, children: Collection[_Dir]) -> bool:
    """Whether this mount's directory link counts are 2 + the number of
    subdirectories, shown on the root just listed. kernfs (cgroup2) and tmpfs keep
    them so; some filesystems a fixture tree may sit on do not (btrfs: always 1). Only
    when shown may a directory with a link count of 2 be taken as a leaf unlisted
    (_descendants). A root with no child proves nothing (2 could be a constant), and
    a child made or removed between the stat and the listing fails the check: that
    walk lists every directory, as before."""
    return bool(children) and nlink == 2 + len(children)


def _walk_subtree(v2_root: str, top: str, counts: bool) -> Iterator[CgroupRef]:
    """One of walk()'s ``subtrees``: nothing when it does not exist (yet, or any more)."""
    try:
        ino = os.stat(os.path.join(v2_root, top.lstrip("/"))).st_ino
    except OSError:
        return
    yield CgroupRef(id=ino, path=top, kind=CgroupKind.OTHER, tracked=False)
    for d, leaf in _descendants(os.path.join(v2_root, top.lstrip("/")), top, frozenset(), counts):
        yield CgroupRef(id=d.ino, path=d.rel, kind=CgroupKind.OTHER, tracked=leaf)


@dataclass(frozen=True, slots=True)
class _Dir:
    abs: str
    rel: str
    ino: int


def _child_dirs(
    abs_dir: str, rel: str, on_unlisted: OnUnlisted | None, skip: frozenset[str] = frozenset()
) -> list[_Dir]:
    """The subdirectories of ``abs_dir``, sorted by name (a stable walk order), but
    those in ``skip``."""
    try:
        with os.scandir(abs_dir) as it:
            found = [
                _Dir(e.path, f"{rel}/{e.name}", e.inode())
                for e in it
                if e.is_dir(follow_symlinks=False)
            ]
    except OSError as e:
        if on_unlisted is not None and e.errno not in _VANISHED:
            on_unlisted(rel or "/", e)
        return []
    if skip:
        found = [d for d in found if d.rel not in skip]
    found.sort(key=lambda d: d.rel)
    return found


def _walk_owned(
    top: _Dir, kind: CgroupKind, k8s: K8sCgroup | None, skip: frozenset[str], counts: bool
) -> Iterator[CgroupRef]:
    """The sub-cgroups of the tracked cgroup ``top`` (any order), owned by it."""
    for d, _leaf in _descendants(top.abs, top.rel, skip, counts):
        yield CgroupRef(id=d.ino, path=d.rel, kind=kind, tracked=False, k8s=k8s, owner=top.ino)


def _descendants(
    abs_dir: str, rel: str, skip: frozenset[str], counts: bool
) -> Iterator[tuple[_Dir, bool]]:
    """Every directory below ``abs_dir`` (any order, without recursion), each with
    whether it is a leaf. ``counts`` (_counts_subdirs): a directory whose link count
    is 2 has no subdirectory and is not listed; one lstat instead of listing its ~30
    control files (with the probe on, every container is visited so)."""
    stack = _subdirs(abs_dir, rel, skip, counts)
    while stack:
        d = stack.pop()
        below = _subdirs(d.abs, d.rel, skip, counts)
        yield d, not below
        stack.extend(below)


def _subdirs(abs_dir: str, rel: str, skip: frozenset[str], counts: bool) -> list[_Dir]:
    """_child_dirs, but where ``counts``, a directory whose link count is 2 is not
    listed: it has no subdirectory. Any other count, or an lstat that fails (the
    directory vanished), lists it as before."""
    if counts:
        try:
            if os.lstat(abs_dir).st_nlink == 2:
                return []
        except OSError:
            pass
    return _child_dirs(abs_dir, rel, None, skip)


def _has_child_dir(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(e.is_dir(follow_symlinks=False) for e in it)
    except OSError:
        return False
