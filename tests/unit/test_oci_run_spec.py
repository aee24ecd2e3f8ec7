"""scripts/oci-run-spec.py: the DaemonSet's security context, translated for runc and
podman, must grant exactly what the manifests grant (the image is run that way on a
pure cgroup v2 host; docs/kubernetes.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Any

import pytest
import yaml

from .manifests import DEPLOY, ROOT

# What `umoci unpack` writes (trimmed): the runtime's defaults, which must not survive.
UMOCI_CONFIG: dict[str, Any] = {
    "process": {
        "terminal": True,
        "user": {"uid": 0, "gid": 0},
        "args": ["/usr/local/bin/contention-exporter"],
        "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
        "capabilities": {
            k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
            for k in ("bounding", "effective", "inheritable", "permitted", "ambient")
        },
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs"},
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
    ],
    "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}]},
}


@pytest.fixture(scope="module")
def spec_mod() -> ModuleType:
    path = ROOT / "scripts" / "oci-run-spec.py"
    spec = importlib.util.spec_from_file_location("oci_run_spec", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    return doc


def test_runc_config_grants_exactly_the_daemonsets_privileges(
    spec_mod: ModuleType, daemonset: dict[str, Any]
) -> None:
    spec = spec_mod.from_daemonset(
        daemonset, kubernetes=False, listen="127.0.0.1:10366", node_name="n1"
    )
    cfg = spec_mod.runc_config(json.loads(json.dumps(UMOCI_CONFIG)), spec, 8 << 20)
    proc = cfg["process"]
    caps = proc["capabilities"]
    want = ["CAP_BPF", "CAP_PERFMON"]
    assert caps["bounding"] == caps["effective"] == caps["permitted"] == want
    assert caps["ambient"] == caps["inheritable"] == []
    assert proc["user"] == {"uid": 0, "gid": 0}
    assert proc["noNewPrivileges"] is True
    assert cfg["root"]["readonly"] is True
    assert {"type": "RLIMIT_MEMLOCK", "hard": 8 << 20, "soft": 8 << 20} in proc["rlimits"]
    assert proc["args"][0] == "/usr/local/bin/contention-exporter"
    assert "--kubernetes" not in proc["args"]
    assert proc["args"][-1] == "--web.listen-address=127.0.0.1:10366"
    assert "NODE_NAME=n1" in proc["env"]
    binds = {m["destination"]: m for m in cfg["mounts"] if m["type"] == "bind"}
    assert {d: m["source"] for d, m in binds.items()} == {
        "/host/sys/fs/cgroup": "/sys/fs/cgroup",
        "/host/sys/kernel/btf": "/sys/kernel/btf",
        "/sys/kernel/btf": "/sys/kernel/btf",
    }
    assert all("ro" in m["options"] for m in binds.values())
    # The runtime's own cgroup mount is gone: only what the DaemonSet mounts is seen.
    assert "/sys/fs/cgroup" not in {m["destination"] for m in cfg["mounts"]}
    (sysfs,) = [m for m in cfg["mounts"] if m["destination"] == "/sys"]
    assert "ro" in sysfs["options"]
    (tmp,) = [m for m in cfg["mounts"] if m["destination"] == "/tmp"]
    assert tmp["type"] == "tmpfs" and "size=256m" in tmp["options"]
    assert {n["type"] for n in cfg["linux"]["namespaces"]} == {
        "pid",
        "network",
        "ipc",
        "uts",
        "mount",
        "cgroup",
    }


def test_podman_arguments_match(spec_mod: ModuleType, daemonset: dict[str, Any]) -> None:
    spec = spec_mod.from_daemonset(daemonset, kubernetes=True, listen=None, node_name="n1")
    args = spec_mod.podman_args(spec, "oci:img:0.1.0", 8 << 20)
    assert "--cap-drop=ALL" in args
    assert [a for a in args if a.startswith("--cap-add=")] == [
        "--cap-add=BPF",
        "--cap-add=PERFMON",
    ]
    for flag in ("--read-only", "--security-opt=no-new-privileges", "--network=none"):
        assert flag in args
    assert "--volume=/sys/fs/cgroup:/host/sys/fs/cgroup:ro,rbind" in args
    i = args.index("oci:img:0.1.0")
    assert args[i + 1 :] == spec.args and "--kubernetes" in spec.args


def test_a_privileged_or_undropped_container_is_refused(
    spec_mod: ModuleType, daemonset: dict[str, Any]
) -> None:
    ds = json.loads(json.dumps(daemonset))
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] = []
    with pytest.raises(SystemExit, match="drop ALL"):
        spec_mod.from_daemonset(ds, kubernetes=True, listen=None, node_name="n1")


def test_the_bcc_variants_header_mounts_come_along(spec_mod: ModuleType) -> None:
    ds = yaml.safe_load((DEPLOY / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]["spec"]
    pod["volumes"].append({"name": "modules", "hostPath": {"path": "/lib/modules"}})
    pod["containers"][0]["volumeMounts"].append(
        {"name": "modules", "mountPath": "/lib/modules", "readOnly": True}
    )
    spec = spec_mod.from_daemonset(ds, kubernetes=False, listen=None, node_name="n")
    assert any(m.source == "/lib/modules" and m.read_only for m in spec.mounts)
