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


# A small profile in the Docker/containers format: every way a rule is kept or dropped.
PROFILE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    ],
    "syscalls": [
        {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "comment": "", "args": []},
        {
            "names": ["bpf", "perf_event_open"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN"]},
            "excludes": {},
        },
        {
            "names": ["bpf", "perf_event_open"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": 1,
            "errno": "EPERM",
            "includes": {},
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        },
        {
            "names": ["perf_event_open"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN", "CAP_PERFMON"]},
        },
        {"name": "arch_prctl", "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
        {
            "names": ["sync_file_range2"],
            "action": "SCMP_ACT_ALLOW",
            "excludes": {"arches": ["amd64"]},
        },
        {
            "names": ["landlock_create_ruleset"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"minKernel": "5.13"},
        },
        {"names": ["old_thing"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "5.4"}},
        {
            "names": ["personality"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
        },
    ],
}


def _names(sc: dict[str, Any]) -> list[tuple[str, ...]]:
    return [tuple(r["names"]) for r in sc["syscalls"]]


def test_seccomp_profile_resolved_for_bpf_and_perfmon(spec_mod: ModuleType) -> None:
    sc = spec_mod.seccomp_from_profile(
        PROFILE, ["CAP_BPF", "CAP_PERFMON"], "x86_64", "6.12.9-amd64"
    )
    assert sc["defaultAction"] == "SCMP_ACT_ERRNO" and sc["defaultErrnoRet"] == 38
    assert sc["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]
    # Without CAP_SYS_ADMIN: the EPERM rule (excluded only by SYS_ADMIN), not the allow
    # rules (SYS_ADMIN, or SYS_ADMIN and PERFMON: includes need every cap).
    assert _names(sc) == [
        ("read", "write"),
        ("bpf", "perf_event_open"),
        ("arch_prctl",),
        ("landlock_create_ruleset",),
        ("personality",),
    ]
    deny = sc["syscalls"][1]
    assert deny == {
        "names": ["bpf", "perf_event_open"],
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": 1,
    }
    assert "args" not in sc["syscalls"][0]  # an empty list goes: no condition
    assert sc["syscalls"][-1]["args"] == [
        {"index": 0, "value": 8, "valueTwo": 0, "op": "SCMP_CMP_EQ"}
    ]


def test_seccomp_profile_resolved_for_sys_admin_arm64_old_kernel(spec_mod: ModuleType) -> None:
    sc = spec_mod.seccomp_from_profile(
        PROFILE, ["CAP_SYS_ADMIN", "CAP_PERFMON"], "aarch64", "5.4.0-150-generic"
    )
    assert sc["architectures"] == ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    assert _names(sc) == [
        ("read", "write"),
        ("bpf", "perf_event_open"),  # the allow rule, now
        ("perf_event_open",),
        ("sync_file_range2",),  # excluded on amd64 only
        ("personality",),  # old_thing: excluded from 5.4 on; landlock: needs 5.13
    ]
    assert sc["syscalls"][1]["action"] == "SCMP_ACT_ALLOW"


def test_seccomp_profile_architectures_and_refusals(spec_mod: ModuleType) -> None:
    plain = {"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"]}
    sc = spec_mod.seccomp_from_profile(plain, [], "x86_64", "6.1.0")
    assert sc == {
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [],
    }
    both = {**PROFILE, "architectures": ["SCMP_ARCH_X86_64"]}
    with pytest.raises(SystemExit, match="both 'architectures' and 'archMap'"):
        spec_mod.seccomp_from_profile(both, [], "x86_64", "6.1.0")
    with pytest.raises(SystemExit, match="no seccomp architecture"):
        spec_mod.seccomp_from_profile(PROFILE, [], "sparc64", "6.1.0")
    dup = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [{"name": "read", "names": ["write"], "action": "SCMP_ACT_ALLOW"}],
    }
    with pytest.raises(SystemExit, match="both 'name' and 'names'"):
        spec_mod.seccomp_from_profile(dup, [], "x86_64", "6.1.0")


def test_runc_config_carries_the_profile_or_none(
    spec_mod: ModuleType, daemonset: dict[str, Any]
) -> None:
    spec = spec_mod.from_daemonset(daemonset, kubernetes=False, listen=None, node_name="n")
    base = json.loads(json.dumps(UMOCI_CONFIG))
    base["linux"]["seccomp"] = {"defaultAction": "SCMP_ACT_ALLOW"}  # a runtime's own
    assert "seccomp" not in spec_mod.runc_config(base, spec, 8 << 20)["linux"]
    sc = spec_mod.seccomp_from_profile(PROFILE, spec.caps, "x86_64", "6.12.0")
    assert spec_mod.runc_config(base, spec, 8 << 20, sc)["linux"]["seccomp"] == sc
    args = spec_mod.podman_args(spec, "img", 8 << 20, ROOT / "p.json")
    assert f"--security-opt=seccomp={ROOT / 'p.json'}" in args
