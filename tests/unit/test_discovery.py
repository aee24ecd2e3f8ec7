"""Cgroup classification from paths, and walk() over the fixture trees."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from exporter.cgroupfs.discovery import (
    TRACKED_KINDS,
    CgroupKind,
    CgroupRef,
    K8sCgroup,
    classify,
    walk,
)

from .conftest import detect, inode

pytestmark = pytest.mark.usefixtures("no_host_fs")

C = CgroupKind
UID = "8e2b7c10-45fa-4d3e-a1c9-6b0f5e2d9c74"
UID_ = UID.replace("-", "_")  # as systemd slice names have it
HASH = "6b1a2e5e4c4d1d2f8a9b0c1d2e3f4a5b"  # a static pod's UID: its config hash
CID = "4eda0309568c2864a44099c86c0254737df8f43d51562d8bf58c3596c9928afe"
BURST = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
BEST = f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
GUAR = f"/kubepods.slice/kubepods-pod{UID_}.slice"
NESTED = (
    "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
    f"kubelet-kubepods-burstable-pod{UID_}.slice"
)

# path -> kind, (pod_uid, container_id, runtime, qos, driver) or None
CASES: list[tuple[str, CgroupKind, tuple[str, str | None, str | None, str, str] | None]] = [
    # host cgroups
    ("/", C.ROOT, None),
    ("", C.ROOT, None),
    ("/init.scope", C.SYSTEM, None),
    ("/system.slice", C.SLICE, None),
    ("/system.slice/kubelet.service", C.SYSTEM, None),
    ("/system.slice/containerd.service", C.SYSTEM, None),
    ("/system.slice/var-lib-docker.mount", C.SYSTEM, None),
    ("/system.slice/system-getty.slice", C.SLICE, None),
    ("/system.slice/system-getty.slice/getty@tty1.service", C.SYSTEM, None),
    ("/user.slice", C.SLICE, None),
    ("/user.slice/user-1000.slice", C.USER, None),
    ("/user.slice/user-0.slice", C.USER, None),
    ("/user.slice/user-1000.slice/session-3.scope", C.SLICE, None),
    ("/machine.slice", C.SLICE, None),
    ("/contention-test", C.OTHER, None),
    ("/batch/job1", C.OTHER, None),
    # docker without Kubernetes
    (f"/system.slice/docker-{CID}.scope", C.CONTAINER, ("", CID, "docker", "", "systemd")),
    (f"/docker/{CID}", C.CONTAINER, ("", CID, "docker", "", "cgroupfs")),
    ("/docker", C.SLICE, None),
    ("/docker/not-an-id", C.OTHER, None),
    # podman without Kubernetes
    (f"/machine.slice/libpod-{CID}.scope", C.CONTAINER, ("", CID, "podman", "", "systemd")),
    (
        f"/machine.slice/machine-libpod_pod_{CID[:12]}.slice/libpod-{CID}.scope",
        C.CONTAINER,
        ("", CID, "podman", "", "systemd"),
    ),
    (f"/machine.slice/libpod-conmon-{CID}.scope", C.OTHER, None),
    (f"/libpod_parent/libpod-{CID}", C.CONTAINER, ("", CID, "podman", "", "cgroupfs")),
    ("/libpod_parent", C.SLICE, None),
    ("/libpod_parent/conmon", C.OTHER, None),
    # Kubernetes, systemd driver
    ("/kubepods.slice", C.SLICE, None),
    ("/kubepods.slice/kubepods-burstable.slice", C.SLICE, None),
    ("/kubepods.slice/kubepods-besteffort.slice", C.SLICE, None),
    (GUAR, C.POD, (UID, None, None, "guaranteed", "systemd")),
    (BURST, C.POD, (UID, None, None, "burstable", "systemd")),
    (BEST, C.POD, (UID, None, None, "besteffort", "systemd")),
    (
        f"{GUAR}/cri-containerd-{CID}.scope",
        C.CONTAINER,
        (UID, CID, "containerd", "guaranteed", "systemd"),
    ),
    (
        f"{BURST}/cri-containerd-{CID}.scope",
        C.CONTAINER,
        (UID, CID, "containerd", "burstable", "systemd"),
    ),
    (f"{BEST}/crio-{CID}.scope", C.CONTAINER, (UID, CID, "crio", "besteffort", "systemd")),
    (f"{BURST}/docker-{CID}.scope", C.CONTAINER, (UID, CID, "docker", "burstable", "systemd")),
    # CRI-O's monitor process: with its pod, but not a container
    (f"{BURST}/crio-conmon-{CID}.scope", C.OTHER, (UID, None, None, "burstable", "systemd")),
    # a pod UID that already has dashes (not escaped) is accepted too
    (
        f"/kubepods.slice/kubepods-pod{UID}.slice/cri-containerd-{CID}.scope",
        C.CONTAINER,
        (UID, CID, "containerd", "guaranteed", "systemd"),
    ),
    # a cgroup a container made below its own: part of the container
    (
        f"{BURST}/cri-containerd-{CID}.scope/init.scope",
        C.CONTAINER,
        (UID, CID, "containerd", "burstable", "systemd"),
    ),
    # nested kubelet root (--cgroup-root=/kubelet.slice, e.g. kind nodes)
    ("/kubelet.slice/kubelet-kubepods.slice", C.SLICE, None),
    ("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice", C.SLICE, None),
    (NESTED, C.POD, (UID, None, None, "burstable", "systemd")),
    (
        f"{NESTED}/cri-containerd-{CID}.scope",
        C.CONTAINER,
        (UID, CID, "containerd", "burstable", "systemd"),
    ),
    (
        f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{UID_}.slice",
        C.POD,
        (UID, None, None, "guaranteed", "systemd"),
    ),
    # Kubernetes, cgroupfs driver
    ("/kubepods", C.SLICE, None),
    ("/kubepods/burstable", C.SLICE, None),
    ("/kubepods/besteffort", C.SLICE, None),
    (f"/kubepods/pod{UID}", C.POD, (UID, None, None, "guaranteed", "cgroupfs")),
    (f"/kubepods/burstable/pod{UID}", C.POD, (UID, None, None, "burstable", "cgroupfs")),
    (f"/kubepods/pod{UID}/{CID}", C.CONTAINER, (UID, CID, None, "guaranteed", "cgroupfs")),
    (
        f"/kubepods/burstable/pod{UID}/{CID}",
        C.CONTAINER,
        (UID, CID, None, "burstable", "cgroupfs"),
    ),
    (
        f"/kubepods/besteffort/pod{UID}/{CID[:12]}",
        C.CONTAINER,
        (UID, CID[:12], None, "besteffort", "cgroupfs"),
    ),
    (
        f"/kubepods/burstable/pod{UID}/crio-{CID}",
        C.CONTAINER,
        (UID, CID, "crio", "burstable", "cgroupfs"),
    ),
    (
        f"/kubepods/burstable/pod{UID}/crio-conmon-{CID}",
        C.OTHER,
        (UID, None, None, "burstable", "cgroupfs"),
    ),
    # nested cgroupfs root
    (
        f"/kubelet/kubepods/burstable/pod{UID}/{CID}",
        C.CONTAINER,
        (UID, CID, None, "burstable", "cgroupfs"),
    ),
    # static pods: the kubelet names the cgroup after the 32-hex config hash
    (
        f"{BURST.rsplit('/', 1)[0]}/kubepods-burstable-pod{HASH}.slice/cri-containerd-{CID}.scope",
        C.CONTAINER,
        (HASH, CID, "containerd", "burstable", "systemd"),
    ),
    (f"/kubepods/burstable/pod{HASH}", C.POD, (HASH, None, None, "burstable", "cgroupfs")),
    (f"/kubepods/burstable/pod{HASH[:31]}", C.SLICE, None),  # not a UID
    # "pod<uid>" outside kubepods is nothing special
    (f"/pod{UID}/{CID}", C.OTHER, None),
    # an upper-case or short id under the systemd driver is not a container id
    (f"{BURST}/{CID[:12]}", C.OTHER, (UID, None, None, "burstable", "systemd")),
]


@pytest.mark.parametrize(("path", "kind", "k8s"), CASES, ids=[c[0] or "empty" for c in CASES])
def test_classify(
    path: str,
    kind: CgroupKind,
    k8s: tuple[str, str | None, str | None, str, str] | None,
) -> None:
    got_kind, got_k8s = classify(path)
    assert got_kind is kind
    assert got_k8s == (K8sCgroup(*k8s) if k8s is not None else None)


def test_tracked_kinds() -> None:
    assert frozenset({C.CONTAINER, C.SYSTEM, C.USER}) == TRACKED_KINDS


# --- walk ------------------------------------------------------------------------------

V2_SYSTEMD_TRACKED = {
    "/init.scope",
    "/system.slice/kubelet.service",
    "/system.slice/containerd.service",
    "/system.slice/docker-6deff3818d2dbb3328ac18ae7b130da97b0662ee9e9c28979ebba4e21252206e.scope",
    "/user.slice/user-1000.slice",
    "/kubepods.slice/kubepods-pod3f9d2a41_6c0e_4b7a_9f15_2d8c7e41b0a3.slice/"
    "cri-containerd-82d09898ea003cbf23a5fd036c36c9d616ac203ed0ca1504788be5ab14e37e3a.scope",
    f"{BURST}/cri-containerd-{CID}.scope",
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-podc41a9e07_2b6d_4f18_8e53_0a7d1c9b6e25.slice/"
    "crio-2871e9e3a9d3841ae18d09b7e653c11a5135fc3c05b973ba29e6a624241cbf6d.scope",
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod5b7e0d93_a8c2_4e61_b4f0_91c3d7a2e858.slice/"
    "cri-containerd-45488d40b8d82357a7eae5cc4b3445f75900c2ff5bd44d888d4168dddaf6803a.scope",
}

V2_CGROUPFS_TRACKED = {
    "/init.scope",
    "/system.slice/containerd.service",
    "/kubepods/burstable/pod8e2b7c10-45fa-4d3e-a1c9-6b0f5e2d9c74/"
    "0ecab2f7dc9e994c46c9fa1a073376217b9b8e3c0d1d32ec6eb808f83aebba7d",
    "/kubepods/pod3f9d2a41-6c0e-4b7a-9f15-2d8c7e41b0a3/"
    "3dd2a2e2150b8c4abbb6c71cb5c9c5d334d628b49ea583a3704e5cb82f057b0a",
    "/kubepods/besteffort/pod5b7e0d93-a8c2-4e61-b4f0-91c3d7a2e858/"
    "c8cba3fdbe2b13e658f9b433d5c5a68f60d6f49ed4e8624c80eaa8e313ed013f",
    "/docker/dd4e76fac0667cb668cd2938e0b6693fa0ca3e4c419e64be8eaa58e04a9fa8df",
    "/batch/job1",
}

HYBRID_TRACKED = {
    "/init.scope",
    "/system.slice/cron.service",
    "/user.slice/user-1000.slice",
    "/contention-test",
    f"{BURST}/cri-containerd-c00ca6d5ba37165225c9f75eae7f0ee4b61590660b9bb625909608d600714e57.scope",
}


def _walk_tree(name: str) -> tuple[str, list[CgroupRef]]:
    facts = detect(name)
    assert facts.v2_root is not None
    return facts.v2_root, list(walk(facts.v2_root))


@pytest.mark.parametrize(
    ("name", "tracked"),
    [
        ("v2-systemd", V2_SYSTEMD_TRACKED),
        ("v2-cgroupfs", V2_CGROUPFS_TRACKED),
        ("hybrid", HYBRID_TRACKED),
        (
            "no-quota",
            {
                "/system.slice/postgresql.service",
                "/batch.slice/report.service",
                "/kubepods.slice/kubepods-besteffort.slice/"
                "kubepods-besteffort-pod5b7e0d93_a8c2_4e61_b4f0_91c3d7a2e858.slice/"
                "cri-containerd-4b06d01615c2183a024ceb280b2cb73a66a1a9741c52a7da25596d28bde01078.scope",
            },
        ),
        ("no-psi", {"/init.scope", "/system.slice/sshd.service"}),
        (
            "malformed",
            {
                "/system.slice/good.service",
                "/system.slice/truncated.service",
                "/system.slice/garbage.service",
            },
        ),
    ],
)
def test_walk_tracked(name: str, tracked: set[str]) -> None:
    root, refs = _walk_tree(name)
    assert {r.path for r in refs if r.tracked} == tracked
    for r in refs:
        assert r.tracked == (r.kind in TRACKED_KINDS or (r.kind is C.OTHER and r.tracked))
        # ids are the inode numbers of the cgroup2 directories
        assert r.id == inode(root + (r.path if r.path != "/" else ""))
        assert (r.kind, r.k8s) == classify(r.path)
    # every directory is yielded exactly once, except those below a tracked cgroup
    assert len({r.path for r in refs}) == len(refs)
    assert len({r.id for r in refs}) == len(refs)


@pytest.mark.parametrize("name", ["v2-systemd", "v2-cgroupfs", "hybrid", "no-quota"])
def test_walk_order_and_coverage(name: str) -> None:
    root, refs = _walk_tree(name)
    assert refs[0] == CgroupRef(id=inode(root), path="/", kind=C.ROOT, tracked=False)
    seen: set[str] = set()
    for r in refs[1:]:
        parent = os.path.dirname(r.path)
        assert parent in seen or parent == "/", f"{r.path} before its parent"
        seen.add(r.path)
    # everything on disk is yielded unless it sits below a tracked cgroup
    tracked = [r.path for r in refs if r.tracked]
    on_disk = set()
    for dirpath, _dirs, _files in os.walk(root):
        rel = dirpath[len(root) :]
        if rel:
            on_disk.add(rel)
    below_tracked = {p for p in on_disk if any(p.startswith(t + "/") for t in tracked)}
    assert seen == on_disk - below_tracked


def test_walk_v2_systemd_details() -> None:
    _root, refs = _walk_tree("v2-systemd")
    by_path = {r.path: r for r in refs}
    # user-1000.slice is tracked: its session scope is part of it, not yielded
    assert "/user.slice/user-1000.slice/session-3.scope" not in by_path
    assert by_path["/user.slice/user-1000.slice"].kind is C.USER
    # slices and pods are aggregates: yielded, not tracked
    for path in ("/kubepods.slice", "/system.slice", "/user.slice", BURST):
        assert not by_path[path].tracked
    assert by_path[BURST].kind is C.POD
    ctr = by_path[f"{BURST}/cri-containerd-{CID}.scope"]
    assert ctr.k8s == K8sCgroup(UID, CID, "containerd", "burstable", "systemd")
    # the CRI-O monitor is yielded (so blame can name it) but not sampled
    conmon = next(r for r in refs if "crio-conmon-" in r.path)
    assert conmon.kind is C.OTHER
    assert not conmon.tracked
    assert conmon.k8s is not None
    assert conmon.k8s.pod_uid == "c41a9e07-2b6d-4f18-8e53-0a7d1c9b6e25"
    docker = next(r for r in refs if "/docker-" in r.path)
    assert docker.kind is C.CONTAINER
    assert docker.k8s is not None
    assert (docker.k8s.runtime, docker.k8s.pod_uid) == ("docker", "")


def test_walk_other_leaf_vs_inner() -> None:
    _root, refs = _walk_tree("v2-cgroupfs")
    by_path = {r.path: r for r in refs}
    assert by_path["/batch"].kind is C.OTHER
    assert not by_path["/batch"].tracked  # it has a child: sampled where the tasks are
    assert by_path["/batch/job1"].tracked
    assert not by_path["/docker"].tracked


def test_walk_missing_root(tmp_path: Path) -> None:
    assert list(walk(str(tmp_path / "nope"))) == []


def test_walk_skips_a_cgroup_that_vanishes(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "a/b/c").mkdir(parents=True)
    (root / "z").mkdir()
    it = walk(str(root))
    assert next(it).path == "/"
    first = next(it)
    assert first.path == "/a"
    assert not first.tracked  # OTHER with a child
    shutil.rmtree(root / "a")  # the container exits between two reads
    assert [r.path for r in it] == ["/z"]


def test_walk_ignores_files_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "real.service").mkdir(parents=True)
    (root / "cpu.stat").write_text("usage_usec 1\n")
    (root / "link").symlink_to(root / "real.service")
    assert [r.path for r in walk(str(root))] == ["/", "/real.service"]


def test_walk_descendants_are_owned_by_their_tracked_ancestor(tmp_path: Path) -> None:
    """The probe keys tasks by their leaf cgroup: sub-cgroups must map to the owner."""
    root = tmp_path / "cg"
    (root / "user.slice/user-1000.slice/session-1.scope/inner").mkdir(parents=True)
    (root / "system.slice/cron.service").mkdir(parents=True)
    plain = {r.path: r for r in walk(str(root))}
    assert "/user.slice/user-1000.slice/session-1.scope" not in plain
    refs = {r.path: r for r in walk(str(root), descendants=True)}
    owner = refs["/user.slice/user-1000.slice"]
    assert owner.tracked and owner.owner is None
    for sub in ("session-1.scope", "session-1.scope/inner"):
        ref = refs[f"/user.slice/user-1000.slice/{sub}"]
        assert not ref.tracked
        assert ref.owner == owner.id
        assert ref.id == os.stat(root / f"user.slice/user-1000.slice/{sub}").st_ino


def test_subtrees_are_walked_as_their_own_below_a_tracked_container(tmp_path: Path) -> None:
    """The self-test nested in the exporter's own container (a cgroup namespace): its
    victim and bully are tracked apart, not sub-cgroups owned by the container."""
    scope = f"{BURST}/cri-containerd-{CID}.scope"
    mine = f"{scope}/contention-selftest-7"
    for leaf in ("victim", "bully"):
        (tmp_path / mine.lstrip("/") / leaf).mkdir(parents=True)
    (tmp_path / scope.lstrip("/") / "other").mkdir()
    plain = {r.path: r for r in walk(str(tmp_path), descendants=True)}
    assert plain[f"{mine}/victim"].owner == plain[scope].id  # without: part of it
    refs = {r.path: r for r in walk(str(tmp_path), descendants=True, subtrees=[mine])}
    assert refs[scope].tracked and refs[f"{scope}/other"].owner == refs[scope].id
    assert not refs[mine].tracked and refs[mine].owner is None
    for leaf in ("victim", "bully"):
        ref = refs[f"{mine}/{leaf}"]
        assert ref.tracked and ref.owner is None and ref.kind is CgroupKind.OTHER
    without_probe = {r.path for r in walk(str(tmp_path), subtrees=[mine]) if r.tracked}
    assert {f"{mine}/victim", f"{mine}/bully", scope} <= without_probe
    assert [r.path for r in walk(str(tmp_path), subtrees=["/gone"]) if r.path == "/gone"] == []


# -- the link-count shortcut (a leaf's link count is 2 where the mount keeps them) --

CONTROL_FILES = ("cgroup.procs", "cpu.stat", "memory.current")


def _nlink_tree(root: Path) -> None:
    """A node with two containers: one a leaf, one with sub-cgroups of its own."""
    for rel in (f"{BURST}/cri-containerd-{CID}.scope", f"{BEST}/cri-containerd-{CID}.scope"):
        (root / rel.lstrip("/")).mkdir(parents=True)
    (root / BEST.lstrip("/") / f"cri-containerd-{CID}.scope" / "sub" / "deeper").mkdir(parents=True)
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        for f in CONTROL_FILES:
            (d / f).write_text("")


class _Os:
    """discovery's ``os``, seen through: the directories it lists are recorded, and
    with ``nlink`` set every stat says that link count (a filesystem that lies)."""

    def __init__(self, nlink: int | None = None) -> None:
        self.listed: list[str] = []
        self.nlink = nlink

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def scandir(self, path: str) -> object:
        self.listed.append(str(path))
        return os.scandir(path)

    def _stat(self, st: os.stat_result) -> object:
        if self.nlink is None:
            return st
        return type("St", (), {"st_ino": st.st_ino, "st_nlink": self.nlink})()

    def stat(self, path: str) -> object:
        return self._stat(os.stat(path))

    def lstat(self, path: str) -> object:
        return self._stat(os.lstat(path))


def _listed(monkeypatch: pytest.MonkeyPatch, nlink: int | None = None) -> list[str]:
    """The directories discovery lists from now on."""
    fake = _Os(nlink)
    monkeypatch.setattr("exporter.cgroupfs.discovery.os", fake)
    return fake.listed


def _refs(root: Path) -> set[CgroupRef]:
    return set(walk(str(root), descendants=True))


def test_leaves_are_not_listed_where_link_counts_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nlink_tree(tmp_path)
    if os.stat(tmp_path / "kubepods.slice").st_nlink != 4:  # 2 + its two QoS slices
        pytest.skip("the test directory's filesystem does not keep directory link counts")
    listed = _listed(monkeypatch)
    refs = _refs(tmp_path)
    leaf = f"/cri-containerd-{CID}.scope"
    owned = {r.path for r in refs if r.owner is not None}
    assert owned == {f"{BEST}{leaf}/sub", f"{BEST}{leaf}/sub/deeper"}
    # The leaf container and the deepest sub-cgroup were not listed; the rest were.
    assert str(tmp_path / BURST.lstrip("/") / leaf.lstrip("/")) not in listed
    assert str(tmp_path / BEST.lstrip("/") / leaf.lstrip("/") / "sub" / "deeper") not in listed
    assert str(tmp_path / BEST.lstrip("/") / leaf.lstrip("/") / "sub") in listed
    # The same cgroups as a walk that lists every directory.
    monkeypatch.setattr("exporter.cgroupfs.discovery._counts_subdirs", lambda n, c: False)
    assert _refs(tmp_path) == refs


def test_every_directory_is_listed_where_link_counts_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on btrfs (a directory's link count always 1), and on a mount whose counts
    happen to be 2 everywhere: the root's count disproves them, so nothing is skipped."""
    _nlink_tree(tmp_path)
    expected = _refs(tmp_path)
    for fake in (1, 2):
        listed = _listed(monkeypatch, nlink=fake)
        assert _refs(tmp_path) == expected
        every = {str(tmp_path)} | {str(p) for p in tmp_path.rglob("*") if p.is_dir()}
        assert set(listed) == every


def test_a_root_without_children_proves_nothing() -> None:
    from exporter.cgroupfs.discovery import _counts_subdirs

    assert not _counts_subdirs(2, [])
    assert not _counts_subdirs(1, [object(), object()])  # type: ignore[list-item]
