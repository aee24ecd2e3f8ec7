"""KubeIdentityResolver with the real ``kubernetes`` client against an API emulator
(kmock's, extended: tests/support/kube_emulator.py). The client is not patched: it loads
a kubeconfig pointing at the emulator and speaks HTTP.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from exporter.cgroupfs.discovery import CgroupKind, CgroupRef, classify, walk  # noqa: E402
from exporter.exposition.kube import metric_families  # noqa: E402
from exporter.identity import Identity  # noqa: E402
from exporter.kube import make_api_factory  # noqa: E402
from exporter.kube.resolver import KubeIdentityResolver  # noqa: E402
from exporter.kube.watch import WatchState  # noqa: E402
from tests.support.kube_emulator import (  # noqa: E402
    HANG_S,
    Emulator,
    cid,
    kubeconfig,
    pod,
    wait_for,
)

NODE = "node-a"


# --- pods --------------------------------------------------------------------------------

UID_WEB = "0b9a1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
UID_BATCH = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
UID_QUIET = "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a"
UID_OTHER_NODE = "3e4f5a6b-7c8d-4e9f-8a1b-2c3d4e5f6a7b"
UID_STATIC_API = "4f5a6b7c-8d9e-4f0a-9b2c-3d4e5f6a7b8c"
STATIC_HASH = "6b1a2e5e4c4d1d2f8a9b0c1d2e3f4a5b"  # 32 hex: the kubelet's UID for a static pod


WEB = pod(
    "web-7d9f",
    UID_WEB,
    containers=[
        ("app", {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1"}}, cid(1)),
        ("sidecar", {"requests": {"cpu": "50m"}}, cid(2)),
    ],
    init=[("migrate", {"requests": {"cpu": "100m"}}, cid(3))],
    owners=[{"kind": "ReplicaSet", "name": "web-7d9f5c", "controller": True, "uid": "rs"}],
    labels={"pod-template-hash": "7d9f5c"},
)
BATCH = pod(
    "crunch-0",
    UID_BATCH,
    ns="batch",
    qos="BestEffort",
    containers=[("worker", {}, cid(4))],
    annotations={"contention-exporter.io/compute": "off"},
)
OTHER = pod("elsewhere", UID_OTHER_NODE, node="node-b", containers=[("c", {}, cid(9))])


def kube_path(uid: str, container_id: str, driver: str, runtime: str, qos: str) -> str:
    """A container cgroup path as the kubelet lays it out (relative to the cgroup2 root)."""
    if driver == "systemd":
        u = uid.replace("-", "_")
        prefix = {"containerd": "cri-containerd", "crio": "crio", "docker": "docker"}[runtime]
        if qos == "guaranteed":
            return f"/kubepods.slice/kubepods-pod{u}.slice/{prefix}-{container_id}.scope"
        return (
            f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/"
            f"{prefix}-{container_id}.scope"
        )
    if qos == "guaranteed":
        return f"/kubepods/pod{uid}/{container_id}"
    return f"/kubepods/{qos}/pod{uid}/{container_id}"


def ref(path: str) -> CgroupRef:
    kind, k8s = classify(path)
    return CgroupRef(id=hash(path) & 0xFFFF, path=path, kind=kind, tracked=True, k8s=k8s)


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture
def emu() -> Iterator[Emulator]:
    e = Emulator()
    e.start()
    try:
        yield e
    finally:
        e.close()


def make_resolver(kubeconfig: str, **kw: Any) -> KubeIdentityResolver:
    opts: dict[str, Any] = {
        "watch_timeout_seconds": 30,
        "read_timeout_margin": 5.0,
        "connect_timeout": 2.0,
        "list_timeout": 5.0,
        "backoff_initial": 0.05,
        "backoff_max": 0.3,
    }
    opts.update(kw)
    return KubeIdentityResolver(NODE, make_api_factory(kubeconfig), **opts)


@pytest.fixture
def resolver(emu: Emulator, tmp_path: Path) -> Iterator[KubeIdentityResolver]:
    emu.create(json.loads(json.dumps(WEB)))
    emu.create(json.loads(json.dumps(BATCH)))
    emu.create(json.loads(json.dumps(OTHER)))
    r = make_resolver(kubeconfig(tmp_path / "kubeconfig", emu.port))
    r.start()
    try:
        assert r.wait_synced(HANG_S), r.status()
        wait_for(lambda: r.watch_state() is WatchState.WATCHING, what="watching")
        yield r
    finally:
        r.stop()


def resolve(r: KubeIdentityResolver, uid: str, container_id: str, **kw: str) -> Identity:
    opts = {"driver": "systemd", "runtime": "containerd", "qos": "burstable"}
    opts.update(kw)
    return r.resolve(ref(kube_path(uid, container_id, **opts)))


# --- list ------------------------------------------------------------------------------


def test_list_names_containers_with_requests_limits_and_qos(
    resolver: KubeIdentityResolver, emu: Emulator
) -> None:
    app = resolve(resolver, UID_WEB, cid(1))
    assert (app.namespace, app.pod, app.container) == ("shop", "web-7d9f", "app")
    assert app.name == "shop/web-7d9f/app"
    assert app.pod_uid == UID_WEB and app.container_id == cid(1)
    assert app.qos == "burstable"
    assert app.cpu_request_cores == pytest.approx(0.25)
    assert app.cpu_limit_cores == pytest.approx(1.0)
    assert app.memory_request_bytes == 256 * 2**20
    assert app.memory_limit_bytes is None
    assert app.opted_out is False
    assert app.workload == "Deployment/web"  # from ownerReferences, no other object read
    assert resolve(resolver, UID_WEB, cid(2)).container == "sidecar"
    init = resolve(resolver, UID_WEB, cid(3))
    assert init.container == "migrate" and init.cpu_request_cores == pytest.approx(0.1)
    assert resolver.staleness_seconds() == 0.0

    # Only this node's pods were asked for, and only they are kept.
    lists = emu.requests(watch=False)
    assert lists and all(r.params["fieldSelector"] == f"spec.nodeName={NODE}" for r in lists)
    watches = emu.requests(watch=True)
    assert watches[0].params["resourceVersion"] == str(emu.api.rv)
    assert {p.uid for p in resolver.pods()} == {UID_WEB, UID_BATCH}


def test_opted_out_pod_is_named_but_flagged(resolver: KubeIdentityResolver) -> None:
    w = resolve(resolver, UID_BATCH, cid(4), qos="besteffort")
    assert w.opted_out is True
    assert w.name == "batch/crunch-0/worker"  # still nameable as a culprit
    assert w.workload == "Pod/crunch-0"  # no owner: the pod stands for itself
    assert w.qos == "besteffort" and w.cpu_request_cores is None


def test_unknown_pod_is_named_by_uid_prefix(resolver: KubeIdentityResolver) -> None:
    stranger = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
    i = resolve(resolver, stranger, cid(77))
    assert i.namespace == "" and i.pod == "" and i.name == "pod:9f8e7d6c"
    assert i.pod_uid == stranger and i.qos == "burstable"


def test_sandbox_and_not_yet_reported_containers(
    resolver: KubeIdentityResolver, emu: Emulator
) -> None:
    # Every container of web has an ID: another container cgroup is the sandbox.
    sb = resolve(resolver, UID_WEB, cid(50))
    assert (sb.namespace, sb.pod, sb.container) == ("shop", "web-7d9f", "POD")
    assert sb.cpu_request_cores is None
    # A pod whose container has no ID yet: the cgroup is the pod's, container unknown.
    fresh = pod("fresh", UID_QUIET, containers=[("main", {"requests": {"cpu": "1"}}, None)])
    emu.create(fresh)
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(60)).pod == "fresh", what="fresh")
    i = resolve(resolver, UID_QUIET, cid(60))
    assert i.container == "" and i.namespace == "shop"
    # ... until the status reports it.
    emu.patch(
        "shop",
        "fresh",
        {
            "status": {
                "containerStatuses": [{"name": "main", "containerID": f"containerd://{cid(60)}"}]
            }
        },
    )
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(60)).container == "main", what="main")
    assert resolve(resolver, UID_QUIET, cid(60)).cpu_request_cores == 1.0


# --- watch events -------------------------------------------------------------------------


def test_watch_added_modified_deleted(resolver: KubeIdentityResolver, emu: Emulator) -> None:
    late = pod("late", UID_QUIET, containers=[("c", {"requests": {"memory": "1Gi"}}, cid(10))])
    emu.create(late)
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(10)).pod == "late", what="ADDED")
    assert resolve(resolver, UID_QUIET, cid(10)).memory_request_bytes == 2**30

    # MODIFIED: opt out by annotation, and a restart (new container ID, same name).
    emu.patch(
        "shop",
        "late",
        {
            "metadata": {"annotations": {"contention-exporter.io/compute": "off"}},
            "status": {
                "containerStatuses": [
                    {
                        "name": "c",
                        "restartCount": 1,
                        "containerID": f"containerd://{cid(11)}",
                        "lastState": {"terminated": {"containerID": f"containerd://{cid(10)}"}},
                    }
                ]
            },
        },
    )
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(11)).container == "c", what="restart")
    assert resolve(resolver, UID_QUIET, cid(11)).opted_out is True
    assert resolve(resolver, UID_QUIET, cid(10)).container == "c"  # the old cgroup lingers

    # DELETED: a lingering cgroup keeps its name for the grace period ...
    emu.delete("shop", "late")
    wait_for(lambda: UID_QUIET not in {p.uid for p in resolver.pods()}, what="DELETED")
    assert resolve(resolver, UID_QUIET, cid(11)).name == "shop/late/c"
    st = resolver.status()
    assert st.events_total.get("ADDED", 0) >= 1
    assert st.events_total.get("MODIFIED", 0) >= 1
    assert st.events_total.get("DELETED", 0) >= 1
    assert not emu.requests(watch=False)[1:], "events must not cause relists"


def test_deleted_pod_name_expires_after_grace(emu: Emulator, tmp_path: Path) -> None:
    now = [1000.0]
    emu.create(json.loads(json.dumps(WEB)))
    r = make_resolver(
        kubeconfig(tmp_path / "kc", emu.port), deleted_grace_seconds=60, clock=lambda: now[0]
    )
    r.start()
    try:
        assert r.wait_synced(HANG_S)
        emu.delete("shop", "web-7d9f")
        wait_for(lambda: not r.pods(), what="DELETED")
        assert resolve(r, UID_WEB, cid(1)).name == "shop/web-7d9f/app"
        now[0] += 61
        assert resolve(r, UID_WEB, cid(1)).name == "pod:0b9a1c2d"
    finally:
        r.stop()


def test_pod_on_another_node_is_ignored_even_if_the_server_sends_it(
    resolver: KubeIdentityResolver, emu: Emulator
) -> None:
    emu.create(pod("far", UID_QUIET, node="node-b", containers=[("c", {}, cid(12))]))
    emu.create(pod("near", UID_STATIC_API, containers=[("c", {}, cid(13))]))
    wait_for(lambda: resolve(resolver, UID_STATIC_API, cid(13)).pod == "near", what="near")
    assert resolve(resolver, UID_QUIET, cid(12)).name == "pod:2d3e4f5a"


# --- 410 and outages ---------------------------------------------------------------------


def test_expired_resource_version_relists(resolver: KubeIdentityResolver, emu: Emulator) -> None:
    lists_before = len(emu.requests(watch=False))
    # While the client is cut off, the world changes without events reaching it ...
    emu.stop()
    late = pod("late", UID_QUIET, containers=[("c", {}, cid(20))])
    emu.replace_silently(add=[late], remove=[("batch", "crunch-0")])
    # ... and its resourceVersion expires (the API server's watch cache moved on).
    emu.api.expired_below = emu.api.rv
    emu.start()
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(20)).pod == "late", what="relist")
    assert UID_BATCH not in {p.uid for p in resolver.pods()}
    assert resolver.status().expired_total >= 1
    lists = emu.requests(watch=False)
    assert len(lists) == lists_before + 1
    # After an expiry the list is a consistent read, not from the watch cache (rv=0).
    assert "resourceVersion" not in lists[-1].params
    wait_for(lambda: resolver.watch_state() is WatchState.WATCHING, what="watching again")
    assert emu.requests(watch=True)[-1].params["resourceVersion"] == str(emu.api.rv)


def test_api_down_mid_run_keeps_serving_and_recovers(
    resolver: KubeIdentityResolver, emu: Emulator
) -> None:
    assert resolver.staleness_seconds() == 0.0
    emu.stop()
    wait_for(lambda: (resolver.staleness_seconds() or 0) > 0.3, what="staleness grows")
    assert resolver.watch_state() in (WatchState.BACKOFF, WatchState.WATCHING)
    # Names known before the outage are still served.
    assert resolve(resolver, UID_WEB, cid(1)).name == "shop/web-7d9f/app"
    s1 = resolver.staleness_seconds() or 0
    time.sleep(0.2)
    assert (resolver.staleness_seconds() or 0) > s1
    assert resolver.status().errors_total >= 1
    assert resolver.status().last_error

    # Back up, with a change made during the outage that the watch replays.
    emu.start()
    emu.create(pod("late", UID_QUIET, containers=[("c", {}, cid(30))]))
    wait_for(lambda: resolve(resolver, UID_QUIET, cid(30)).pod == "late", what="recovery")
    wait_for(lambda: resolver.staleness_seconds() == 0.0, what="fresh again")
    assert resolver.status().last_error == ""


def test_api_down_at_start(emu: Emulator, tmp_path: Path) -> None:
    emu.stop()
    r = make_resolver(kubeconfig(tmp_path / "kc", emu.port))
    r.start()
    try:
        time.sleep(0.4)
        assert not r.synced
        assert (r.staleness_seconds() or 0) >= 0.3
        # cgroup-derived identity meanwhile
        assert resolve(r, UID_WEB, cid(1)).name == "pod:0b9a1c2d"
        emu.start()
        emu.create(json.loads(json.dumps(WEB)))
        assert r.wait_synced(HANG_S)
        wait_for(lambda: resolve(r, UID_WEB, cid(1)).name == "shop/web-7d9f/app", what="named")
        assert r.staleness_seconds() == 0.0
    finally:
        r.stop()
    assert r.watch_state() is WatchState.STOPPED


def test_metric_families_report_the_watch(resolver: KubeIdentityResolver) -> None:
    fams = {f.name: f for f in metric_families(resolver)}
    states = {s.labels["state"]: s.value for s in fams["contention_kube_watch_state"].samples}
    assert states["watching"] == 1.0 and sum(states.values()) == 1.0
    assert fams["contention_kube_pods"].samples[0].value == 2.0
    assert fams["contention_kube_synced"].samples[0].value == 1.0
    assert fams["contention_kube_lists"].samples[0].name == "contention_kube_lists_total"


# --- cgroup path -> pod, for both drivers and the three runtimes ----------------------------


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
@pytest.mark.parametrize("runtime", ["containerd", "crio", "docker"])
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_cgroup_paths_map_to_pods(
    emu: Emulator, tmp_path: Path, driver: str, runtime: str, qos: str
) -> None:
    scheme = {"containerd": "containerd", "crio": "cri-o", "docker": "docker"}[runtime]
    p = pod(
        "p",
        UID_WEB,
        qos=qos.capitalize().replace("effort", "Effort"),
        containers=[("app", {"requests": {"cpu": "2"}}, cid(40))],
        runtime=scheme,
    )
    emu.create(p)
    # A cgroup tree as the kubelet lays it out, walked by the real discovery code.
    root = tmp_path / "cgroup"
    path = kube_path(UID_WEB, cid(40), driver, runtime, qos)
    os.makedirs(root / path.lstrip("/"))
    os.makedirs(
        root
        / path.lstrip("/").rsplit("/", 1)[0]
        / (cid(41) if driver == "cgroupfs" else "crio-conmon-" + cid(41) + ".scope")
    )
    refs = {r.path: r for r in walk(str(root))}
    cref = refs[path]
    assert cref.kind is CgroupKind.CONTAINER and cref.tracked
    r = make_resolver(kubeconfig(tmp_path / "kc", emu.port))
    r.start()
    try:
        assert r.wait_synced(HANG_S)
        i = r.resolve(cref)
        assert (i.namespace, i.pod, i.container) == ("shop", "p", "app")
        assert i.qos == qos and i.cpu_request_cores == 2.0 and i.container_id == cid(40)
        # The pod-level cgroup resolves to the pod, with no container.
        pod_ref = refs[path.rsplit("/", 1)[0]]
        assert pod_ref.kind is CgroupKind.POD
        assert (r.resolve(pod_ref).pod, r.resolve(pod_ref).container) == ("p", "")
    finally:
        r.stop()


def test_static_pod_is_found_by_config_hash_and_by_container_id(
    emu: Emulator, tmp_path: Path
) -> None:
    mirror = pod(
        "kube-apiserver-node-a",
        UID_STATIC_API,
        ns="kube-system",
        containers=[("kube-apiserver", {"requests": {"cpu": "250m"}}, cid(70))],
        annotations={
            "kubernetes.io/config.mirror": STATIC_HASH,
            "kubernetes.io/config.hash": STATIC_HASH,
            "kubernetes.io/config.source": "file",
        },
    )
    emu.create(mirror)
    r = make_resolver(kubeconfig(tmp_path / "kc", emu.port))
    r.start()
    try:
        assert r.wait_synced(HANG_S)
        # The cgroup is named after the config hash, not the mirror pod's API UID.
        from exporter.cgroupfs.discovery import K8sCgroup

        path = (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_HASH}.slice/"
            f"cri-containerd-{cid(70)}.scope"
        )
        k8s = K8sCgroup(STATIC_HASH, cid(70), "containerd", "burstable", "systemd")
        i = r.resolve(CgroupRef(1, path, CgroupKind.CONTAINER, True, k8s))
        assert i.name == "kube-system/kube-apiserver-node-a/kube-apiserver"
        assert i.cpu_request_cores == 0.25
        # The sandbox of the static pod: found through the hash alone.
        sb = K8sCgroup(STATIC_HASH, cid(71), "containerd", "burstable", "systemd")
        assert r.resolve(CgroupRef(2, path, CgroupKind.CONTAINER, True, sb)).container == "POD"
        # And through discovery's own parse of the path.
        assert r.resolve(ref(path)).name == i.name
    finally:
        r.stop()


def test_host_cgroups_pass_through(resolver: KubeIdentityResolver) -> None:
    i = resolver.resolve(ref("/system.slice/kubelet.service"))
    assert i.name == "/system.slice/kubelet.service" and i.kind is CgroupKind.SYSTEM


def test_persistent_410_backs_off_instead_of_spinning(
    resolver: KubeIdentityResolver, emu: Emulator
) -> None:
    emu.api.expired_below = 10**9  # every watch is expired, even right after a list
    emu.stop()
    emu.start()
    time.sleep(1.5)
    lists = len(emu.requests(watch=False))
    assert 2 <= lists <= 20, lists  # relisted, but with backoff (max 0.3 s here)
    assert resolve(resolver, UID_WEB, cid(1)).name == "shop/web-7d9f/app"


def test_build_resolver_wires_flags_to_a_started_resolver(emu: Emulator, tmp_path: Path) -> None:
    from exporter.commands import build_parser
    from exporter.commands.common import agent_config
    from exporter.kube import build_resolver

    emu.create(json.loads(json.dumps(WEB)))
    kc = kubeconfig(tmp_path / "kc", emu.port)
    args = build_parser().parse_args(
        ["--kubernetes", "--kubernetes.kubeconfig", kc, "--kubernetes.node-name", NODE]
    )
    r = build_resolver(agent_config(args).kube)
    assert r is not None
    try:
        assert r.wait_synced(HANG_S)
        assert resolve(r, UID_WEB, cid(1)).name == "shop/web-7d9f/app"
    finally:
        r.stop()


# --- malformed pods ----------------------------------------------------------------------

MALFORMED: list[Any] = [
    {"metadata": "not an object", "spec": {"nodeName": NODE}},
    {"metadata": {"name": "m1", "namespace": "shop", "uid": 7}, "spec": {"nodeName": NODE}},
    {
        "metadata": {"name": "m2", "namespace": "shop", "uid": "u-m2", "annotations": ["x"]},
        "spec": {"nodeName": NODE},
    },
    {
        "metadata": {"name": "m3", "namespace": "shop", "uid": "u-m3"},
        "spec": {"nodeName": NODE, "containers": "app"},
    },
    {
        "metadata": {"name": "m4", "namespace": "shop", "uid": "u-m4"},
        "spec": {"nodeName": NODE},
        "status": {"containerStatuses": [{"name": "c", "lastState": "gone"}]},
    },
]


def test_malformed_pods_cost_only_themselves(emu: Emulator, tmp_path: Path) -> None:
    """A list with malformed pods still syncs and names every good pod (one bad pod
    used to fail the whole list, so the resolver never synced); each bad one is
    counted. The same holds for watch events."""
    emu.create(json.loads(json.dumps(WEB)))
    bad = [json.loads(json.dumps(m)) for m in MALFORMED]
    for i, m in enumerate(bad):
        if not isinstance(m["metadata"], dict):
            m["metadata"] = {"name": f"m{i}", "namespace": "shop", "uid": {"x": 1}}
    emu.replace_silently(bad, [])
    r = make_resolver(kubeconfig(tmp_path / "kc", emu.port))
    r.start()
    try:
        assert r.wait_synced(HANG_S), r.status()
        assert resolve(r, UID_WEB, cid(1)).name == "shop/web-7d9f/app"
        assert r.status().malformed_total == len(bad)
        assert {p.uid for p in r.pods()} == {UID_WEB}
        wait_for(lambda: r.watch_state() is WatchState.WATCHING, what="watching")
        # a malformed pod as a watch event, then a good one
        late_bad = pod("late-bad", UID_QUIET)
        late_bad["spec"]["containers"] = {"app": {}}  # an object where a list belongs
        emu.create(late_bad)
        emu.create(pod("late", UID_BATCH, containers=[("c", {}, cid(20))]))
        wait_for(lambda: resolve(r, UID_BATCH, cid(20)).pod == "late", what="good event")
        assert r.status().malformed_total == len(bad) + 1
        fams = {f.name: f for f in metric_families(r)}
        assert fams["contention_kube_malformed_pods"].samples[0].value == len(bad) + 1
        assert r.status().lists_total == 1, "events must not cause relists"
    finally:
        r.stop()
