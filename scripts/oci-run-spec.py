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
        --no-kubernetes --listen 127.0.0.1:10366 [--seccomp PROFILE.json]
    runc run --bundle /run/ce-bundle ce-test

    # podman: print the equivalent `podman run` arguments
    scripts/oci-run-spec.py podman rendered.yaml --no-kubernetes --listen 127.0.0.1:10366

Seccomp: Kubernetes' RuntimeDefault is the node runtime's own profile, which differs
between runtimes (docs/kubernetes.md, section 3). Without --seccomp the runc config has
no seccomp filter at all (unconfined), and podman applies its default profile
(containers/common's: CRI-O's RuntimeDefault, not containerd's or Docker's). With
--seccomp FILE (a Docker/containers-format profile, e.g. /usr/share/containers/
seccomp.json or moby's default.json) runc gets that profile resolved for the
container's capabilities and this host's architecture and kernel
(:func:`seccomp_from_profile` lists the rules), and podman gets it as
--security-opt=seccomp=FILE.

Differences from a kubelet-run pod, on purpose: RLIMIT_MEMLOCK is set to --memlock
(default 8 MiB, the kernel's default) instead of whatever the node's containerd
inherits (often unlimited), so a probe that needs CAP_SYS_RESOURCE cannot pass by
luck; the network namespace is private with loopback only (runc; podman: --network
none), so scrape from inside (`runc exec` / `podman exec`). Only for a pure cgroup v2
host (see docs/kubernetes.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MEMLOCK_DEFAULT = 8 * 1024 * 1024

# `uname -m` -> (libseccomp's native name, which a profile's includes/excludes "arches"
# compare against; the SCMP_ARCH_* its archMap is keyed by), as moby's
# profiles/seccomp/seccomp_linux.go maps them.
SECCOMP_ARCHES = {
    "x86_64": ("amd64", "SCMP_ARCH_X86_64"),
    "i686": ("x86", "SCMP_ARCH_X86"),
    "aarch64": ("arm64", "SCMP_ARCH_AARCH64"),
    "armv7l": ("arm", "SCMP_ARCH_ARM"),
    "ppc64le": ("ppc64le", "SCMP_ARCH_PPC64LE"),
    "s390x": ("s390x", "SCMP_ARCH_S390X"),
    "riscv64": ("riscv64", "SCMP_ARCH_RISCV64"),
}


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


def _kernel_at_least(release: str, want: str) -> bool:
    """``release`` (e.g. "6.12.9-amd64") >= ``want`` ("major.minor"), numerically."""

    def nums(v: str) -> tuple[int, ...]:
        m = re.match(r"(\d+)\.(\d+)", v)
        if m is None:
            sys.exit(f"oci-run-spec: not a kernel version: {v!r}")
        return (int(m[1]), int(m[2]))

    return nums(release) >= nums(want)


def _rule_applies(call: dict[str, Any], native: str, bounding: set[str], kernel: str) -> bool:
    """A profile rule's ``excludes`` (any one holding drops it) and ``includes`` (all
    must hold) against the native arch, the bounding set and the kernel."""
    exc, inc = call.get("excludes") or {}, call.get("includes") or {}
    if native in (exc.get("arches") or []) or bounding & set(exc.get("caps") or []):
        return False
    if exc.get("minKernel") and _kernel_at_least(kernel, exc["minKernel"]):
        return False
    if inc.get("arches") and native not in inc["arches"]:
        return False
    if not set(inc.get("caps") or []) <= bounding:
        return False
    return not (inc.get("minKernel") and not _kernel_at_least(kernel, inc["minKernel"]))


def _oci_rule(call: dict[str, Any]) -> dict[str, Any]:
    if call.get("name") and call.get("names"):
        sys.exit("oci-run-spec: a profile rule has both 'name' and 'names'")
    rule: dict[str, Any] = {
        "names": [call["name"]] if call.get("name") else list(call["names"]),
        "action": call["action"],
    }
    if call.get("errnoRet") is not None:
        rule["errnoRet"] = call["errnoRet"]
    if call.get("args"):
        rule["args"] = [
            {k: a[k] for k in ("index", "value", "valueTwo", "op") if k in a} for a in call["args"]
        ]
    return rule


def seccomp_from_profile(
    profile: dict[str, Any], caps: list[str], machine: str, kernel: str
) -> dict[str, Any]:
    """A Docker/containers-format seccomp profile (moby's default.json, containers/common's
    seccomp.json) resolved into OCI ``linux.seccomp`` for a container whose bounding set
    is ``caps``, on a ``machine`` (``uname -m``) running ``kernel`` (``uname -r``), the way
    moby's and containers/common's setupSeccomp do it:

    * ``architectures`` is copied as is; ``archMap``: the entry for the native SCMP_ARCH
      and its ``subArchitectures``; neither: none (the runtime uses the native one).
      Both: refused, as the runtimes refuse it.
    * a rule is dropped when any ``excludes`` condition holds: the native arch is in
      ``excludes.arches``, ANY of ``excludes.caps`` is in the bounding set, or the kernel
      is >= ``excludes.minKernel``;
    * and kept only when every ``includes`` condition holds: the native arch is in
      ``includes.arches``, ALL of ``includes.caps`` are in the bounding set, the kernel is
      >= ``includes.minKernel``;
    * kept rules keep ``names`` (or the old single ``name``), ``action``, ``args``
      (index, value, valueTwo, op) and ``errnoRet``, in the profile's order; comments and
      the informative ``errno`` names go. ``defaultAction``, ``defaultErrnoRet`` and
      ``flags`` are copied.

    Arches in ``includes``/``excludes`` are libseccomp's native names ("amd64", "arm64",
    "x86"), not SCMP_ARCH_*: :data:`SECCOMP_ARCHES`."""
    if machine not in SECCOMP_ARCHES:
        sys.exit(f"oci-run-spec: no seccomp architecture known for {machine!r}")
    native, scmp = SECCOMP_ARCHES[machine]
    if profile.get("architectures") and profile.get("archMap"):
        sys.exit("oci-run-spec: the profile has both 'architectures' and 'archMap'")
    out: dict[str, Any] = {"defaultAction": profile["defaultAction"]}
    if profile.get("defaultErrnoRet") is not None:
        out["defaultErrnoRet"] = profile["defaultErrnoRet"]
    arches = list(profile.get("architectures") or [])
    for entry in profile.get("archMap") or []:
        if entry["architecture"] == scmp:
            arches += [entry["architecture"], *(entry.get("subArchitectures") or [])]
            break
    if arches:
        out["architectures"] = arches
    if profile.get("flags"):
        out["flags"] = list(profile["flags"])
    bounding = set(caps)
    rules = []
    for call in profile.get("syscalls") or []:
        if not _rule_applies(call, native, bounding, kernel):
            continue
        rules.append(_oci_rule(call))
    out["syscalls"] = rules
    return out


def runc_config(
    config: dict[str, Any],
    spec: RunSpec,
    memlock: int,
    seccomp: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
    # The runtime's own profile (umoci writes none) never survives: only ``seccomp``
    # (an OCI linux.seccomp, from :func:`seccomp_from_profile`) or nothing.
    out["linux"].pop("seccomp", None)
    if seccomp is not None:
        out["linux"]["seccomp"] = seccomp
    return out


def podman_args(spec: RunSpec, image: str, memlock: int, seccomp: Path | None = None) -> list[str]:
    a = ["podman", "run", "--rm", "--name", "contention-exporter-test"]
    if seccomp is not None:  # podman resolves the profile against the caps itself
        a.append(f"--security-opt=seccomp={seccomp}")
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
    ap.add_argument(
        "--seccomp",
        type=Path,
        default=None,
        help="apply this Docker/containers-format seccomp profile (default: none)",
    )
    args = ap.parse_args()
    spec = from_daemonset(
        _daemonset(args.rendered),
        kubernetes=not args.no_kubernetes,
        listen=args.listen,
        node_name=args.node_name,
    )
    if args.runtime == "podman":
        print(shlex.join(podman_args(spec, args.image, args.memlock, args.seccomp)))
        return 0
    if args.config is None:
        ap.error("runc needs the bundle's config.json")
    config = json.loads(args.config.read_text("utf-8"))
    seccomp = None
    if args.seccomp is not None:
        uname = os.uname()
        profile = json.loads(args.seccomp.read_text("utf-8"))
        seccomp = seccomp_from_profile(profile, spec.caps, uname.machine, uname.release)
    out = runc_config(config, spec, args.memlock, seccomp)
    args.config.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
