#!/usr/bin/env python3
"""Run the image under exactly the DaemonSet's security context, outside Kubernetes.

Reads the exporter container of a rendered DaemonSet (`helm template ...` or
`kubectl kustomize deploy/`) and writes what a container runtime needs to run the
image with the same privileges: capabilities (everything dropped, then only the
added ones; none ambient or inheritable, as containerd/CRI-O do for uid 0), uid/gid,
no_new_privs (allowPrivilegeEscalation: false), a read-only root filesystem, the
same hostPath mounts read-only at the same paths, emptyDir as tmpfs, private
pid/ipc/uts/mount/cgroup namespaces (no hostPID/hostIPC), and the container's args.

    # runc: rewrite an unpacked bundle's config.json (umoci unpack makes the bundle)
    umoci unpack --image build/image/oci:0.1.0 /run/ce-bundle
    scripts/oci-run-spec.py runc rendered.yaml /run/ce-bundle/config.json \\
        --no-kubernetes --listen 127.0.0.1:10366
    runc run --bundle /run/ce-bundle ce-test

    # podman: print the equivalent `podman run` arguments
    scripts/oci-run-spec.py podman rendered.yaml --no-kubernetes --listen 127.0.0.1:10366

Differences from a kubelet-run pod, on purpose: RLIMIT_MEMLOCK is set to --memlock
(default 8 MiB, the kernel's default) instead of whatever the node's containerd
inherits (often unlimited), so a probe that needs CAP_SYS_RESOURCE cannot pass by
luck; the network namespace is private with loopback only (runc; podman: --network
none), so scrape from inside (`runc exec` / `podman exec`). runc applies no seccomp
profile unless given one; podman applies its default profile, the closest to
Kubernetes' RuntimeDefault. Only for a pure cgroup v2 host (see docs/kubernetes.md).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MEMLOCK_DEFAULT = 8 * 1024 * 1024


@dataclass
class Mount:
    source: str  # host path, or "" for a tmpfs
    target: str
    read_only: bool
    size: str = ""


@dataclass
class RunSpec:
    """The exporter container of the DaemonSet, in runtime terms."""

    image_entrypoint: list[str]
    args: list[str]
    uid: int
    gid: int
    caps: list[str]
    no_new_privs: bool
    read_only_root: bool
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _daemonset(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text("utf-8")) if d]
    found = [d for d in docs if d.get("kind") == "DaemonSet"]
    if len(found) != 1:
        sys.exit(f"oci-run-spec: {path}: expected one DaemonSet, found {len(found)}")
    return found[0]


def from_daemonset(
    ds: dict[str, Any], *, kubernetes: bool, listen: str | None, node_name: str
) -> RunSpec:
    pod = ds["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "exporter"]
    sc = c.get("securityContext", {})
    caps = sc.get("capabilities", {})
    if caps.get("drop") != ["ALL"]:
        sys.exit("oci-run-spec: the exporter container does not drop ALL capabilities")
    if sc.get("privileged"):
        sys.exit("oci-run-spec: a privileged container cannot be reproduced faithfully")
    args = list(c.get("args", []))
    if not kubernetes:
        args = [a for a in args if a != "--kubernetes"]
    if listen is not None:
        args = [a for a in args if not a.startswith("--web.listen-address=")]
        args.append(f"--web.listen-address={listen}")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = []
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "hostPath" in v:
            mounts.append(Mount(v["hostPath"]["path"], m["mountPath"], bool(m.get("readOnly"))))
        elif "emptyDir" in v:
            mounts.append(Mount("", m["mountPath"], False, str(v["emptyDir"].get("sizeLimit", ""))))
        else:
            sys.exit(f"oci-run-spec: volume {m['name']} is neither hostPath nor emptyDir")
    return RunSpec(
        image_entrypoint=[],
        args=args,
        uid=int(sc.get("runAsUser", 0)),
        gid=int(sc.get("runAsGroup", 0)),
        caps=[f"CAP_{x}" for x in caps.get("add", [])],
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        read_only_root=bool(sc.get("readOnlyRootFilesystem")),
        mounts=mounts,
        env={"NODE_NAME": node_name},
    )


def _tmpfs_size(limit: str) -> list[str]:
    # Kubernetes quantities -> tmpfs size= (binary suffixes only; else no limit).
    for suffix, unit in (("Ki", "k"), ("Mi", "m"), ("Gi", "g")):
        if limit.endswith(suffix) and limit[: -len(suffix)].isdigit():
            return [f"size={limit[: -len(suffix)]}{unit}"]
    return []


def runc_config(config: dict[str, Any], spec: RunSpec, memlock: int) -> dict[str, Any]:
    """Rewrite an OCI runtime config (from `umoci unpack`) for ``spec``."""
    out = json.loads(json.dumps(config))
    proc = out["process"]
    entry = proc["args"][:1]  # the image's entrypoint (umoci puts it first)
    proc["args"] = entry + spec.args
    proc["terminal"] = False
    proc["user"] = {"uid": spec.uid, "gid": spec.gid}
    proc["capabilities"] = {
        "bounding": spec.caps,
        "effective": spec.caps,
        "permitted": spec.caps,
        "inheritable": [],
        "ambient": [],
    }
    proc["noNewPrivileges"] = spec.no_new_privs
    proc["rlimits"] = [
        {"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
        {"type": "RLIMIT_MEMLOCK", "hard": memlock, "soft": memlock},
    ]
    env = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in proc.get("env", [])}
    env.update(spec.env)
    proc["env"] = [f"{k}={v}" for k, v in env.items()]
    out["root"]["readonly"] = spec.read_only_root
    # The runtime's own /proc, /dev, /sys (read-only), without the host's cgroup tree:
    # only what the DaemonSet mounts is visible.
    base = [m for m in out["mounts"] if m["destination"] != "/sys/fs/cgroup"]
    for m in base:
        if m["destination"] == "/sys":
            m["options"] = sorted(set(m.get("options", [])) | {"ro"})
    for m in spec.mounts:
        if m.source:
            opts = ["rbind", "rprivate", "nosuid", "nodev"] + (["ro"] if m.read_only else [])
            base.append(
                {"destination": m.target, "type": "bind", "source": m.source, "options": opts}
            )
        else:
            base.append(
                {
                    "destination": m.target,
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "options": ["nosuid", "nodev", "mode=1777", *_tmpfs_size(m.size)],
                }
            )
    out["mounts"] = base
    out.setdefault("linux", {})["namespaces"] = [
        {"type": t} for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")
    ]
    out["linux"].pop("seccomp", None)
    return out


def podman_args(spec: RunSpec, image: str, memlock: int) -> list[str]:
    a = ["podman", "run", "--rm", "--name", "contention-exporter-test"]
    a += ["--user", f"{spec.uid}:{spec.gid}", "--cap-drop=ALL"]
    a += [f"--cap-add={c.removeprefix('CAP_')}" for c in spec.caps]
    if spec.no_new_privs:
        a.append("--security-opt=no-new-privileges")
    if spec.read_only_root:
        a += ["--read-only", "--read-only-tmpfs=false"]
    a += ["--pid=private", "--ipc=private", "--uts=private", "--cgroupns=private"]
    a += ["--network=none", f"--ulimit=memlock={memlock}:{memlock}"]
    for m in spec.mounts:
        if m.source:
            a.append(f"--volume={m.source}:{m.target}:{'ro' if m.read_only else 'rw'},rbind")
        else:
            size = _tmpfs_size(m.size)
            a.append(f"--tmpfs={m.target}:rw,nosuid,nodev{',' + size[0] if size else ''}")
    a += [f"--env={k}={v}" for k, v in spec.env.items()]
    return [*a, image, *spec.args]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("runtime", choices=["runc", "podman"])
    ap.add_argument("rendered", type=Path, help="manifests holding the DaemonSet")
    ap.add_argument("config", nargs="?", type=Path, help="runc: the bundle's config.json")
    ap.add_argument("--image", default="oci:build/image/oci:0.1.0", help="podman: image ref")
    ap.add_argument("--no-kubernetes", action="store_true", help="drop --kubernetes (no API)")
    ap.add_argument("--listen", default=None, help="replace --web.listen-address")
    ap.add_argument("--node-name", default="test-node", help="NODE_NAME (default: %(default)s)")
    ap.add_argument("--memlock", type=int, default=MEMLOCK_DEFAULT, help="RLIMIT_MEMLOCK bytes")
    args = ap.parse_args()
    spec = from_daemonset(
        _daemonset(args.rendered),
        kubernetes=not args.no_kubernetes,
        listen=args.listen,
        node_name=args.node_name,
    )
    if args.runtime == "podman":
        print(shlex.join(podman_args(spec, args.image, args.memlock)))
        return 0
    if args.config is None:
        ap.error("runc needs the bundle's config.json")
    config = json.loads(args.config.read_text("utf-8"))
    args.config.write_text(json.dumps(runc_config(config, spec, args.memlock), indent=2) + "\n")
    print(f"wrote {args.config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
