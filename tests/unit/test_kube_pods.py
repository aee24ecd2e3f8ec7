"""Pod JSON -> PodMeta, and the kube flags (no API server needed)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from exporter.commands import build_parser
from exporter.commands.common import agent_config
from exporter.kube import KubeConfig, build_resolver
from exporter.kube.pods import (
    PodMeta,
    derive_qos,
    merge_container_ids,
    parse_pod,
    strip_container_id,
    workload_of,
)


def _c(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> Any:
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": name, "image": "x", "resources": res}


def test_parse_pod_full() -> None:
    obj = {
        "metadata": {
            "name": "api-0",
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "42",
            "annotations": {"contention-exporter.io/compute": " OFF "},
        },
        "spec": {
            "nodeName": "n1",
            "initContainers": [_c("init", {"cpu": "100m"}), _c("proxy", {"cpu": "50m"})],
            "containers": [_c("app", {"cpu": "1500m", "memory": "1Gi"}, {"memory": "2G"})],
            "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
        },
        "status": {
            "qosClass": "Burstable",
            "initContainerStatuses": [
                {"name": "init", "containerID": "containerd://" + "a" * 64},
                {"name": "proxy", "containerID": "containerd://" + "b" * 64},
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "containerID": "cri-o://" + "c" * 64,
                    "lastState": {"terminated": {"containerID": "cri-o://" + "d" * 64}},
                }
            ],
            "ephemeralContainerStatuses": [
                {"name": "debug", "containerID": "containerd://" + "e" * 64}
            ],
        },
    }
    p = parse_pod(obj)
    assert (p.uid, p.namespace, p.name, p.node, p.qos) == (
        "u-1",
        "shop",
        "api-0",
        "n1",
        "burstable",
    )
    assert p.opted_out and p.resource_version == "42" and not p.static
    app = p.containers["app"]
    assert app.kind == "container" and app.cpu_request_cores == 1.5
    assert app.memory_request_bytes == 2**30 and app.memory_limit_bytes == 2 * 10**9
    assert app.cpu_limit_cores is None
    assert p.containers["init"].kind == "init" and p.containers["init"].cpu_request_cores == 0.1
    assert p.containers["debug"].kind == "ephemeral"
    assert p.containers["debug"].cpu_request_cores is None
    assert p.container_ids == {
        "a" * 64: "init",
        "b" * 64: "proxy",
        "d" * 64: "app",
        "c" * 64: "app",
        "e" * 64: "debug",
    }
    assert p.all_ids_known


def test_parse_pod_tolerates_a_bare_object() -> None:
    p = parse_pod({"metadata": {"uid": "u"}})
    assert p.uid == "u" and p.containers == {} and p.qos == "besteffort"
    assert not p.opted_out and not p.all_ids_known


def test_applied_resources_from_status_win_over_spec() -> None:
    # In-place resize: the status says what the running container really has.
    obj = {
        "metadata": {"uid": "u"},
        "spec": {"containers": [_c("app", {"cpu": "1"}, {"cpu": "1"})]},
        "status": {
            "containerStatuses": [
                {
                    "name": "app",
                    "containerID": "containerd://" + "1" * 64,
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}},
                }
            ]
        },
    }
    app = parse_pod(obj).containers["app"]
    assert (app.cpu_request_cores, app.cpu_limit_cores) == (2.0, 3.0)


def test_bad_quantities_are_unknown_not_fatal() -> None:
    obj = {"metadata": {"uid": "u"}, "spec": {"containers": [_c("a", {"cpu": "lots"})]}}
    assert parse_pod(obj).containers["a"].cpu_request_cores is None


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        ([_c("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], "guaranteed"),
        ([_c("a", None, {"cpu": "1", "memory": "1Gi"})], "guaranteed"),  # requests default
        ([_c("a", {"cpu": "1000m"}, {"cpu": "1", "memory": "1Gi"})], "guaranteed"),
        ([_c("a", {"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"})], "burstable"),
        ([_c("a", None, {"cpu": "1"})], "burstable"),
        ([_c("a"), _c("b", {"memory": "1Mi"})], "burstable"),
        ([_c("a"), _c("b")], "besteffort"),
    ],
)
def test_derive_qos(containers: list[Any], qos: str) -> None:
    assert derive_qos({"containers": containers}) == qos
    pod = {"metadata": {"uid": "u"}, "spec": {"containers": containers}, "status": {}}
    assert parse_pod(pod).qos == qos


def test_static_pod_hash() -> None:
    h = "6b1a2e5e4c4d1d2f8a9b0c1d2e3f4a5b"
    mirror = {"metadata": {"uid": "api-uid", "annotations": {"kubernetes.io/config.mirror": h}}}
    assert parse_pod(mirror).config_hash == h and parse_pod(mirror).static
    only_hash = {"metadata": {"uid": "api-uid", "annotations": {"kubernetes.io/config.hash": h}}}
    assert parse_pod(only_hash).config_hash == h
    same = {"metadata": {"uid": h, "annotations": {"kubernetes.io/config.hash": h}}}
    assert not parse_pod(same).static


@pytest.mark.parametrize("value", ["off", "Off", "false", "disabled"])
def test_opt_out_values(value: str) -> None:
    pod = {"metadata": {"uid": "u", "annotations": {"contention-exporter.io/compute": value}}}
    assert parse_pod(pod).opted_out


@pytest.mark.parametrize("value", ["on", "", "true"])
def test_opt_in_values(value: str) -> None:
    pod = {"metadata": {"uid": "u", "annotations": {"contention-exporter.io/compute": value}}}
    assert not parse_pod(pod).opted_out


def test_strip_container_id() -> None:
    assert strip_container_id("containerd://abc") == "abc"
    assert strip_container_id("cri-o://abc") == "abc"
    assert strip_container_id("abc") == "abc"


def test_merge_container_ids_is_bounded_and_keeps_newest() -> None:
    old = PodMeta("u", "ns", "p", "n", "burstable", False, "1", container_ids={"x": "c", "y": "c"})
    new = PodMeta("u", "ns", "p", "n", "burstable", False, "2", container_ids={"z": "c"})
    merged = merge_container_ids(old, new, keep=2)
    assert list(merged.container_ids) == ["y", "z"]
    other = PodMeta("v", "ns", "p", "n", "burstable", False, "2")
    assert merge_container_ids(old, other) is other


def _kube(*argv: str) -> KubeConfig:
    """The Kubernetes settings ``run`` builds from these flags."""
    return agent_config(build_parser().parse_args(["run", *argv])).kube


def test_host_mode_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    cfg = _kube()
    assert cfg.enabled is False and cfg.kubeconfig is None
    assert build_resolver(cfg) is None


def test_kubernetes_mode_needs_a_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(ValueError, match="node"):
        build_resolver(_kube("--kubernetes"))


def test_node_name_defaults_from_the_downward_api_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-3")
    assert _kube().node_name == "worker-3"
    assert _kube("--kubernetes.node-name", "x").node_name == "x"


def test_host_mode_never_imports_the_kubernetes_client() -> None:
    code = (
        "import sys, exporter.kube as k, exporter.kube.pods, exporter.commands as c;"
        "from exporter.commands.common import agent_config;"
        "cfg = agent_config(c.build_parser().parse_args(['run'])).kube;"
        "assert k.build_resolver(cfg) is None;"
        "assert 'kubernetes' not in sys.modules, 'kubernetes was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _owner(kind: Any, name: Any, controller: Any = True) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": controller}


@pytest.mark.parametrize(
    ("owners", "labels", "want"),
    [
        # A Deployment's pod: ReplicaSet <deployment>-<pod-template-hash>.
        ([_owner("ReplicaSet", "web-5d8c7")], {"pod-template-hash": "5d8c7"}, "Deployment/web"),
        ([_owner("ReplicaSet", "a-b-c-77f")], {"pod-template-hash": "77f"}, "Deployment/a-b-c"),
        # A bare ReplicaSet (or one whose name does not end in the pod's hash).
        ([_owner("ReplicaSet", "web-5d8c7b9f4")], {}, "ReplicaSet/web-5d8c7b9f4"),
        ([_owner("ReplicaSet", "web")], {"pod-template-hash": "zzz"}, "ReplicaSet/web"),
        ([_owner("ReplicaSet", "-h")], {"pod-template-hash": "h"}, "ReplicaSet/-h"),
        # A CronJob's Job: <cronjob>-<minutes since the epoch> (heuristic).
        ([_owner("Job", "backup-29112345")], {}, "CronJob/backup"),
        ([_owner("Job", "migrate")], {}, "Job/migrate"),
        ([_owner("Job", "migrate-v2")], {}, "Job/migrate-v2"),
        ([_owner("StatefulSet", "db")], {}, "StatefulSet/db"),
        ([_owner("DaemonSet", "agent")], {}, "DaemonSet/agent"),
        ([_owner("Workflow", "wf-1")], {}, "Workflow/wf-1"),  # any controller: itself
        # No owner, a static pod's Node, several owners none in charge: the pod itself.
        ([], {}, "Pod/p"),
        ([_owner("Node", "node-a")], {}, "Pod/p"),
        ([_owner("ReplicaSet", "a", False), _owner("Job", "b", False)], {}, "Pod/p"),
        # One owner not marked controller: still the only one there is.
        ([_owner("StatefulSet", "db", False)], {}, "StatefulSet/db"),
        # Several, one controller: that one.
        ([_owner("ConfigMap", "x", False), _owner("DaemonSet", "ds")], {}, "DaemonSet/ds"),
        # Odd shapes: best effort, never an exception.
        ([_owner(None, "x")], {}, "Pod/p"),
        ([_owner("StatefulSet", 7)], {}, "Pod/p"),
        (["not an object", 3], {}, "Pod/p"),
        ("not a list", {}, "Pod/p"),
        ([_owner("ReplicaSet", "web-1")], "not a map", "ReplicaSet/web-1"),
    ],
)
def test_workload_from_owner_references(owners: Any, labels: Any, want: str) -> None:
    meta = {"name": "p", "ownerReferences": owners, "labels": labels}
    assert workload_of(meta) == want
    assert parse_pod({"metadata": {"name": "p", "ownerReferences": owners}}).workload == (
        workload_of({"name": "p", "ownerReferences": owners})
    )


def test_workload_without_a_pod_name_is_unknown() -> None:
    assert workload_of({}) == ""
    assert workload_of({"name": 5, "ownerReferences": []}) == ""


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("/system.slice/backup@2026-12-01.service", "backup@.service"),
        ("/system.slice/sshd@3-10.0.0.1:22-10.0.0.2:5555.service", "sshd@.service"),
        ("/system.slice/cron.service", ""),  # a plain unit stands for itself
        ("/system.slice/docker-" + "a" * 64 + ".scope", ""),  # no owner in the path
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            "3f9d2a41_6c0e_4b7a_9f15_2d8c7e41b0a3.slice/cri-containerd-" + "b" * 64 + ".scope",
            "Pod/pod:3f9d2a41",
        ),
        ("/user.slice/user-1000.slice", ""),
    ],
)
def test_workload_from_the_path_alone(path: str, want: str) -> None:
    """Without metadata (host mode, or a pod the API has not named yet)."""
    from exporter.cgroupfs.discovery import CgroupRef, classify
    from exporter.identity import identity_from_ref

    kind, k8s = classify(path)
    assert identity_from_ref(CgroupRef(7, path, kind, True, k8s)).workload == want
