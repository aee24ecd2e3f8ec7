"""What a default install runs, for the deploy-path lane (issue 24): the chart as Helm
renders it, the exporter exactly as its DaemonSet starts it, the scrape job the
Prometheus Operator writes for its ServiceMonitor (or PodMonitor), the rule file it
writes for its PrometheusRule, and kube-prometheus-stack's default Alertmanager.

Pure functions (``helm template`` is the only process, in :func:`render_chart`; the
exporter's container filesystem is made of directories and symlinks under a work
directory): the lane starts the processes. Pinned sources, read rule by rule:

* Prometheus Operator: ``pkg/prometheus/promcfg.go`` at commit
  ``002266347d12f6ee0ef0b4a774dfcc613d2d9547`` (the v0.78 era: it has v0.78.0's
  ``rule_query_offset``, not v0.79.0's ``fallbackScrapeProtocol``), and
  ``pkg/operator/rules.go`` (stored at ``037f9bb33f2224be943fa63a787df58adec960fa``)
  for the rule files.
* Prometheus v2.42.0 (Debian's, installed here): its Kubernetes SD meta labels, from
  ``discovery/kubernetes/{endpoints,pod,service}.go`` as they stood at v2.42 (the
  v2.37-era endpoints.go at ``05da373dcb139b9e877c5d3dbb5f1d81cc9082ca`` plus v2.38's
  ``pod_container_image`` and v2.42's pod-role ``pod_container_id``, both named in the
  v2.42.0 changelog shipped with the binary). Debian builds Prometheus without
  Kubernetes SD, so the lane uses a static target carrying those labels.
* kube-prometheus-stack 66.1.0 (``charts/kube-prometheus-stack/values.yaml`` at
  ``78ac5409ed585051b96b4f51ec4189f6900752bf``): ``alertmanager.config``;
  Watchdog and InfoInhibitor from ``templates/prometheus/rules-1.14/general.rules.yaml``
  (the newer ``group by (namespace)`` InfoInhibitor, read at chart 92.1.1).

Everything here is what a cluster would do, except what each function's docstring
names as a deviation.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labs.exporter_proc import exporter_command

Doc = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "contention-exporter"
RELEASE = NAMESPACE = "contention-exporter"
# What a cluster with the Prometheus Operator's CRDs serves, as Helm's
# .Capabilities.APIVersions lists it: each group/version and each group/version/kind.
OPERATOR_API_VERSIONS = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "monitoring.coreos.com/v1alpha1",
    "monitoring.coreos.com/v1alpha1/AlertmanagerConfig",
)
# The image's ENTRYPOINT (scripts/build-image.sh); here, this venv's console script.
IMAGE_ENTRYPOINT = "/usr/local/bin/contention-exporter"
LISTEN_FLAG = "--web.listen-address"


class InstallError(ValueError):
    """The chart, a rendered object or an argument cannot be run as asked; says why."""


# --- 1. the chart ----------------------------------------------------------------------


def helm_binary() -> str:
    """helm from this venv (scripts/setup-kube-tools.sh puts it there), else PATH."""
    venv = Path(sys.executable).with_name("helm")
    found = str(venv) if venv.exists() else shutil.which("helm")
    if found is None:
        raise InstallError("helm not found: scripts/setup-kube-tools.sh installs it")
    return found


def render_chart(
    values: Mapping[str, Any] | None = None,
    *,
    api_versions: Sequence[str] = OPERATOR_API_VERSIONS,
    chart: Path = CHART,
) -> list[Doc]:
    """``helm template contention-exporter <chart> --namespace contention-exporter`` with
    ``values`` (passed as a values file, so numbers stay numbers) in a cluster that
    serves ``api_versions`` (default: the operator's CRDs installed). Find objects with
    :func:`objects_of` / :func:`one_of`, by kind."""
    with tempfile.TemporaryDirectory(prefix="contention-chart-") as tmp:
        values_file = Path(tmp, "values.json")
        values_file.write_text(json.dumps(dict(values or {})))
        argv = [helm_binary(), "template", RELEASE, str(chart), "--namespace", NAMESPACE]
        argv += ["--values", str(values_file)]
        for api in api_versions:
            argv += ["--api-versions", api]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise InstallError(f"helm template {chart} failed ({res.returncode}):\n{res.stderr}")
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def objects_of(objects: Iterable[Doc], kind: str) -> list[Doc]:
    return [o for o in objects if o.get("kind") == kind]


def one_of(objects: Iterable[Doc], kind: str, name: str | None = None) -> Doc:
    """The one rendered object of ``kind`` (and ``name``); an error names what was found."""
    hits = [o for o in objects_of(objects, kind) if name in (None, o["metadata"]["name"])]
    if len(hits) != 1:
        raise InstallError(f"expected one {kind} {name or ''} in the chart, found {len(hits)}")
    return hits[0]


# --- 2. the exporter as its DaemonSet starts it ----------------------------------------


@dataclass(frozen=True, slots=True)
class PodMeta:
    """The emulated exporter pod, as the API server would serve it (what service
    discovery reads)."""

    name: str
    namespace: str
    uid: str
    node: str
    ip: str
    host_ip: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    container: str
    image: str
    container_id: str  # <runtime>://<id>, as the kubelet reports it
    port_name: str
    port: int
    protocol: str = "TCP"
    owner_kind: str = "DaemonSet"
    owner_name: str = ""
    phase: str = "Running"
    ready: bool = True


@dataclass(frozen=True, slots=True)
class Invocation:
    """How to start the exporter: exactly ``argv`` with exactly ``env`` (add nothing from
    this process's environment: a KUBERNETES_SERVICE_HOST there would switch the
    exporter to in-cluster credentials) in ``cwd``."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    root: str  # the directory standing in for the container's filesystem
    pod: PodMeta
    mounts: dict[str, str]  # mountPath -> what its symlink points at
    deviations: list[str] = field(default_factory=list)


_K8S_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what generateName suffixes use


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _pod_suffix(node: str) -> str:
    h = _digest("pod", node)
    return "".join(_K8S_SUFFIX_ALPHABET[int(h[i : i + 2], 16) % 27] for i in range(0, 10, 2))


def _container(spec: Doc, name: str) -> Doc:
    for c in spec.get("containers") or []:
        if c.get("name") == name:
            return dict(c)
    raise InstallError(f"the DaemonSet has no container named {name!r}")


def _pod_meta(ds: Doc, c: Doc, *, node: str, listen: str, pod_name: str | None) -> PodMeta:
    """The pod the DaemonSet controller would create on ``node``: the template's labels
    and annotations, plus the two labels that controller adds (their values are made
    up here), owned by the DaemonSet; running and ready at the address tests reach."""
    meta = ds["spec"]["template"].get("metadata") or {}
    ds_name, ns = ds["metadata"]["name"], ds["metadata"].get("namespace", NAMESPACE)
    name = pod_name or f"{ds_name}-{_pod_suffix(node)}"
    labels = dict(meta.get("labels") or {})
    labels["controller-revision-hash"] = _digest("revision", json.dumps(ds["spec"]))[:10]
    labels["pod-template-generation"] = "1"
    host = listen.rsplit(":", 1)[0].strip("[]")
    ports = c.get("ports") or [{}]
    return PodMeta(
        name=name,
        namespace=ns,
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{ns}/{name}")),
        node=node,
        ip=host,
        host_ip=host,
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        container=c["name"],
        image=c.get("image", ""),
        container_id="containerd://" + _digest("container", ns, name, c["name"]),
        port_name=ports[0].get("name", ""),
        port=int(ports[0].get("containerPort", 0)),
        protocol=ports[0].get("protocol", "TCP"),
        owner_name=ds_name,
    )


def daemonset_pod(
    objects: Sequence[Doc], *, node: str, listen: str, container: str = "exporter"
) -> PodMeta:
    """The pod the rendered DaemonSet would run on ``node`` (for an exporter started
    some other way that stands for that node's pod, e.g. on a replayed tree)."""
    ds = one_of(objects, "DaemonSet")
    c = _container(ds["spec"]["template"]["spec"], container)
    return _pod_meta(ds, c, node=node, listen=listen, pod_name=None)


def _field_ref(path: str, pod: PodMeta, service_account: str) -> str:
    fields = {
        "spec.nodeName": pod.node,
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "status.podIP": pod.ip,
        "status.podIPs": pod.ip,
        "status.hostIP": pod.host_ip,
        "status.hostIPs": pod.host_ip,
        "spec.serviceAccountName": service_account,
    }
    if path in fields:
        return fields[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return (pod.labels if m[1] == "labels" else pod.annotations).get(m[2], "")
    raise InstallError(f"env fieldRef {path!r} is not one the downward API offers here")


def _key_ref(objects: Sequence[Doc], kind: str, ref: Doc) -> str | None:
    data = _object_data(objects, kind, ref["name"], optional=bool(ref.get("optional")))
    if ref["key"] in data:
        return data[ref["key"]].decode()
    if ref.get("optional"):
        return None
    raise InstallError(f"env {kind} {ref['name']} has no key {ref['key']!r}")


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values, command and args ($$ escapes)."""

    def one(m: re.Match[str]) -> str:
        if m[0] == "$$":
            return "$"
        return env.get(m[1], m[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def _container_env(c: Doc, pod: PodMeta, objects: Sequence[Doc], sa: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for src in c.get("envFrom") or []:
        kind = "ConfigMap" if "configMapRef" in src else "Secret"
        ref = src.get("configMapRef") or src.get("secretRef") or {}
        data = _object_data(objects, kind, ref["name"], optional=bool(ref.get("optional")))
        env |= {src.get("prefix", "") + k: v.decode() for k, v in data.items()}
    for e in c.get("env") or []:
        vf = e.get("valueFrom")
        if vf is None:
            env[e["name"]] = _expand(str(e.get("value", "")), env)
        elif "fieldRef" in vf:
            env[e["name"]] = _field_ref(vf["fieldRef"]["fieldPath"], pod, sa)
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            kind = "ConfigMap" if "configMapKeyRef" in vf else "Secret"
            value = _key_ref(objects, kind, vf.get("configMapKeyRef") or vf["secretKeyRef"])
            if value is not None:
                env[e["name"]] = value
        else:
            raise InstallError(f"env {e['name']}: valueFrom {sorted(vf)} is not reproduced here")
    return env


def _object_data(objects: Sequence[Doc], kind: str, name: str, optional: bool) -> dict[str, bytes]:
    """A rendered ConfigMap's or Secret's keys as bytes ({} if missing and optional)."""
    hits = [o for o in objects_of(objects, kind) if o["metadata"]["name"] == name]
    if not hits:
        if optional:
            return {}
        raise InstallError(f"{kind} {name} is not among the rendered objects")
    obj = hits[0]
    out = {k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()}
    for k, v in (obj.get("data") or {}).items():
        out[k] = base64.b64decode(v) if kind == "Secret" else str(v).encode()
    for k, v in (obj.get("binaryData") or {}).items():
        out[k] = base64.b64decode(v)
    return out


def _write_volume_files(vol: Doc, kind: str, objects: Sequence[Doc], dest: Path) -> None:
    src = vol["configMap" if kind == "ConfigMap" else "secret"]
    name = src.get("name") or src.get("secretName")
    data = _object_data(objects, kind, name, optional=bool(src.get("optional")))
    items = src.get("items") or [{"key": k, "path": k} for k in sorted(data)]
    default_mode = int(src.get("defaultMode", 0o644))
    for item in items:
        if item["key"] not in data:
            raise InstallError(f"volume {vol['name']}: {kind} {name} has no key {item['key']!r}")
        path = dest / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[item["key"]])
        path.chmod(int(item.get("mode", default_mode)))


def _volume_path(vol: Doc, objects: Sequence[Doc], volumes: Path, host_root: Path) -> Path:
    """The directory (or file) standing for one pod volume."""
    if "hostPath" in vol:
        hp = vol["hostPath"]
        path = host_root / str(hp["path"]).lstrip("/")
        want = hp.get("type") or ""
        if want in ("DirectoryOrCreate", "FileOrCreate") and not path.exists():
            raise InstallError(f"volume {vol['name']}: {hp['path']} would be created on the host")
        if (want == "Directory" and not path.is_dir()) or (want == "File" and not path.is_file()):
            raise InstallError(f"volume {vol['name']}: hostPath {path} is not a {want}")
        return path
    dest = volumes / str(vol["name"])
    dest.mkdir(parents=True)
    if "configMap" in vol or "secret" in vol:
        _write_volume_files(vol, "ConfigMap" if "configMap" in vol else "Secret", objects, dest)
    elif "emptyDir" not in vol:
        kinds = sorted(set(vol) - {"name"})
        raise InstallError(f"volume {vol['name']}: {kinds} is not reproduced here")
    return dest


def _mount(root: Path, mount_path: str, target: Path) -> None:
    """``mount_path`` in the container's filesystem becomes a symlink to ``target``; a
    mount inside another mount would write through the outer one's symlink, so it is
    refused."""
    point = root / mount_path.lstrip("/")
    for parent in reversed(point.relative_to(root).parents):
        if (root / parent).is_symlink():
            raise InstallError(f"volumeMount {mount_path} is inside another mount")
    if point.exists() or point.is_symlink():
        raise InstallError(f"volumeMount {mount_path}: something is mounted there already")
    point.parent.mkdir(parents=True, exist_ok=True)
    point.symlink_to(target)


def _mount_volumes(
    spec: Doc, c: Doc, objects: Sequence[Doc], workdir: Path, host_root: Path
) -> tuple[Path, dict[str, str]]:
    root, volumes = workdir / "rootfs", workdir / "volumes"
    for d in (root, volumes):
        if d.exists():
            raise InstallError(f"{d} exists: the container's filesystem is made anew")
    root.mkdir(parents=True)
    volumes.mkdir()
    by_name = {v["name"]: v for v in spec.get("volumes") or []}
    paths: dict[str, Path] = {}
    mounts: dict[str, str] = {}
    for vm in c.get("volumeMounts") or []:
        vol = by_name.get(vm["name"])
        if vol is None:
            raise InstallError(f"volumeMount {vm['mountPath']}: no volume {vm['name']!r}")
        if vm["name"] not in paths:
            paths[vm["name"]] = _volume_path(vol, objects, volumes, host_root)
        target = paths[vm["name"]] / vm.get("subPath", "")
        if not target.exists():
            raise InstallError(f"volumeMount {vm['mountPath']}: {target} does not exist")
        _mount(root, vm["mountPath"], target)
        mounts[vm["mountPath"]] = str(target)
    return root, mounts


def _command_args(c: Doc) -> list[str]:
    """The words after the image's entrypoint: the rest of ``command``, then ``args``."""
    command = [str(a) for a in c.get("command") or [IMAGE_ENTRYPOINT]]
    if command[0] != IMAGE_ENTRYPOINT:
        raise InstallError(f"container command {command[0]!r} is not the image's entrypoint")
    return [*command[1:], *(str(a) for a in c.get("args") or [])]


def _rewrite_args(args: Sequence[str], root: Path, listen: str) -> tuple[list[str], list[str]]:
    """Every absolute-path value into ``root``; ``--web.listen-address`` to ``listen``.
    Returns the arguments and the deviations."""
    out: list[str] = []
    devs: list[str] = []

    def listen_to(old: str) -> str:
        devs.append(
            f"{LISTEN_FLAG}: {old} -> {listen} (tests send traffic to 127.0.0.1 only; the "
            "chart's value serves every address of the pod)"
        )
        return listen

    def path(value: str) -> str:
        return str(root / value.lstrip("/")) if value.startswith("/") else value

    pending_listen = False
    for a in args:
        if pending_listen:
            out.append(listen_to(a))
            pending_listen = False
        elif a == LISTEN_FLAG:
            out.append(a)
            pending_listen = True
        elif a.startswith("--") and "=" in a:
            flag, value = a.split("=", 1)
            out.append(f"{flag}={listen_to(value) if flag == LISTEN_FLAG else path(value)}")
        else:
            out.append(path(a))
    if not devs:
        out.append(f"{LISTEN_FLAG}={listen}")
        devs.append(f"{LISTEN_FLAG}={listen} added (the chart sets none: the default is :10366)")
    return out, devs


def exporter_from_daemonset(
    objects: Sequence[Doc],
    *,
    workdir: str | os.PathLike[str],
    node_name: str,
    kubeconfig: str,
    listen: str,
    pod_name: str | None = None,
    container: str = "exporter",
    host_root: str | os.PathLike[str] = "/",
) -> Invocation:
    """The rendered DaemonSet's ``container`` as the kubelet would start it on
    ``node_name``, without touching the host.

    * argv: the image's entrypoint (this venv's ``contention-exporter``) with the
      container's command/args, ``$(VAR)`` expanded as Kubernetes does.
    * env: the container's env and envFrom; fieldRefs from the emulated pod
      (:class:`PodMeta`: spec.nodeName -> ``node_name``, metadata.name/namespace/uid,
      status.podIP/hostIP -> the host of ``listen``); ConfigMap/Secret refs from the
      rendered objects. The image's own env (PATH, PYTHON*) is not added.
    * filesystem: ``workdir/rootfs`` stands for the container's; each volumeMount's
      mountPath there is a symlink to its volume: a hostPath under ``host_root`` ("/":
      this host, read through the symlink; a fixture tree instead for a test), an
      emptyDir or a ConfigMap/Secret volume (written out with items, modes and
      subPath) under ``workdir/volumes``. Every argument value that is an absolute
      path is rewritten into ``rootfs``. Not reproduced: readOnly (nothing writes
      there), paths the exporter opens by default rather than by argument (they are
      this host's), mount propagation.

    Two deliberate deviations, also in ``Invocation.deviations`` for the test report:
    ``--web.listen-address`` becomes ``listen`` (127.0.0.1:<port>: tests send traffic to
    127.0.0.1 only), and ``KUBECONFIG=<kubeconfig>`` is added (no in-cluster service
    account exists here; with KUBERNETES_SERVICE_HOST unset the exporter loads a
    kubeconfig: exporter/kube/__init__.py).
    """
    ds = one_of(objects, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    c = _container(spec, container)
    pod = _pod_meta(ds, c, node=node_name, listen=listen, pod_name=pod_name)
    sa = spec.get("serviceAccountName", "default")
    env = _container_env(c, pod, objects, sa)
    root, mounts = _mount_volumes(spec, c, objects, Path(workdir), Path(host_root))
    args, deviations = _rewrite_args([_expand(a, env) for a in _command_args(c)], root, listen)
    if "KUBECONFIG" in env:
        deviations.append(f"KUBECONFIG: {env['KUBECONFIG']} -> {kubeconfig}")
    else:
        deviations.append(
            f"KUBECONFIG={kubeconfig} added (no in-cluster credentials here; with "
            "KUBERNETES_SERVICE_HOST unset the exporter loads a kubeconfig)"
        )
    env["KUBECONFIG"] = kubeconfig
    return Invocation(
        argv=[*exporter_command(), *args],
        env=env,
        cwd=str(root / str(c.get("workingDir", "/")).lstrip("/")),
        root=str(root),
        pod=pod,
        mounts=mounts,
        deviations=deviations,
    )


# --- 3. the Prometheus Operator's scrape job -------------------------------------------


def sanitize(name: str) -> str:
    """A Kubernetes label key as a Prometheus label name (strutil.SanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


_META = "__meta_kubernetes_"


def _object_meta_labels(
    role: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> Doc:
    out = {}
    for kind, values in (("label", labels), ("annotation", annotations)):
        for k, v in values.items():
            out[f"{_META}{role}_{kind}_{sanitize(k)}"] = v
            out[f"{_META}{role}_{kind}present_{sanitize(k)}"] = "true"
    return out


def _pod_labels(pod: PodMeta) -> dict[str, str]:
    """podLabels() of discovery/kubernetes/pod.go (v2.42)."""
    return {
        f"{_META}pod_name": pod.name,
        f"{_META}pod_ip": pod.ip,
        f"{_META}pod_ready": "true" if pod.ready else "false",
        f"{_META}pod_phase": pod.phase,
        f"{_META}pod_node_name": pod.node,
        f"{_META}pod_host_ip": pod.host_ip,
        f"{_META}pod_uid": pod.uid,
        f"{_META}pod_controller_kind": pod.owner_kind,
        f"{_META}pod_controller_name": pod.owner_name,
        **_object_meta_labels("pod", pod.labels, pod.annotations),
    }


def pod_sd_labels(pod: PodMeta) -> dict[str, str]:
    """The ``pod`` role's labels for the pod's (one) container port (pod.go v2.42:
    buildPod; no attach_metadata, so no node labels), ``__address__`` left out."""
    return {
        **_pod_labels(pod),
        f"{_META}namespace": pod.namespace,
        f"{_META}pod_container_name": pod.container,
        f"{_META}pod_container_id": pod.container_id,
        f"{_META}pod_container_image": pod.image,
        f"{_META}pod_container_port_number": str(pod.port),
        f"{_META}pod_container_port_name": pod.port_name,
        f"{_META}pod_container_port_protocol": pod.protocol,
        f"{_META}pod_container_init": "false",
    }


def _endpoint_port(service: Doc, pod: PodMeta, port_name: str) -> Doc | None:
    """The Endpoints port the endpoints controller writes for ``port_name`` of the
    Service on this pod: its targetPort resolved against the pod's container port."""
    for p in service["spec"].get("ports") or []:
        if p.get("name", "") != port_name:
            continue
        tp = p.get("targetPort", p["port"])
        if tp in (pod.port_name, pod.port):
            return {"name": port_name, "port": pod.port, "protocol": p.get("protocol", "TCP")}
    return None


def endpoints_sd_labels(pod: PodMeta, service: Doc, port: Doc) -> dict[str, str]:
    """The ``endpoints`` role's labels for the pod behind ``service`` on ``port`` (an
    Endpoints port), ``__address__`` left out (endpoints.go v2.37 + v2.38's
    container image; service.go's serviceLabels). The Endpoints object is what the
    endpoints controller writes: the Service's name and labels (plus
    service.kubernetes.io/headless for clusterIP None), the pod's address with its
    node name and a Pod targetRef; a pod that is not ready is a notReadyAddress."""
    meta = service["metadata"]
    ep_labels = dict(meta.get("labels") or {})
    if service["spec"].get("clusterIP") == "None":
        ep_labels["service.kubernetes.io/headless"] = ""
    return {
        f"{_META}namespace": pod.namespace,
        f"{_META}endpoints_name": meta["name"],
        **_object_meta_labels("endpoints", ep_labels, {}),
        f"{_META}service_name": meta["name"],
        **_object_meta_labels("service", meta.get("labels") or {}, meta.get("annotations") or {}),
        f"{_META}endpoint_port_name": port["name"],
        f"{_META}endpoint_port_protocol": port["protocol"],
        f"{_META}endpoint_ready": "true" if pod.ready else "false",
        f"{_META}endpoint_address_target_kind": "Pod",
        f"{_META}endpoint_address_target_name": pod.name,
        f"{_META}endpoint_node_name": pod.node,
        **_pod_labels(pod),
        f"{_META}pod_container_name": pod.container,
        f"{_META}pod_container_image": pod.image,
        f"{_META}pod_container_port_name": pod.port_name,
        f"{_META}pod_container_port_number": str(pod.port),
        f"{_META}pod_container_port_protocol": port["protocol"],
    }


# CRD RelabelConfig field -> Prometheus key, in the order generateRelabelConfig writes.
_RELABEL_KEYS = (
    ("sourceLabels", "source_labels"),
    ("separator", "separator"),
    ("targetLabel", "target_label"),
    ("regex", "regex"),
    ("modulus", "modulus"),
    ("replacement", "replacement"),
    ("action", "action"),
)


def relabel_config(rule: Mapping[str, Any]) -> Doc:
    """One CRD RelabelConfig as the operator writes it: snake_case keys in its order,
    the CRD's default ``action: replace``, the action lower-cased."""
    unknown = set(rule) - {k for k, _ in _RELABEL_KEYS}
    if unknown:
        raise InstallError(f"relabeling {dict(rule)}: unknown fields {sorted(unknown)}")
    rule = {"action": "replace", **rule}
    out = {prom: rule[crd] for crd, prom in _RELABEL_KEYS if crd in rule}
    out["action"] = str(out["action"]).lower()
    return out


def _selector_rules(selector: Doc, role: str) -> list[Doc]:
    """matchLabels (sorted) then matchExpressions as keep/drop rules on ``role``'s
    ``label_`` and ``labelpresent_`` meta labels."""
    rules: list[Doc] = []

    def labels(k: str) -> list[str]:
        return [f"{_META}{role}_label_{sanitize(k)}", f"{_META}{role}_labelpresent_{sanitize(k)}"]

    for k in sorted(selector.get("matchLabels") or {}):
        v = selector["matchLabels"][k]
        rules.append({"action": "keep", "source_labels": labels(k), "regex": f"({v});true"})
    for e in selector.get("matchExpressions") or []:
        op, k = e["operator"], e["key"]
        values = "|".join(e.get("values") or [])
        if op in ("In", "NotIn"):
            action = "keep" if op == "In" else "drop"
            rules.append(
                {"action": action, "source_labels": labels(k), "regex": f"({values});true"}
            )
        elif op in ("Exists", "DoesNotExist"):
            action = "keep" if op == "Exists" else "drop"
            rules.append({"action": action, "source_labels": labels(k)[1:], "regex": "true"})
        else:
            raise InstallError(f"selector operator {op!r}")
    return rules


_RUNNING_FILTER = {
    "action": "drop",
    "source_labels": [f"{_META}pod_phase"],
    "regex": "(Failed|Succeeded)",
}
_TARGET_REF = [f"{_META}endpoint_address_target_kind", f"{_META}endpoint_address_target_name"]


def _label_copies(names: Sequence[str], role: str) -> list[Doc]:
    """targetLabels / podTargetLabels: the object's label, when non-empty."""
    return [
        {
            "source_labels": [f"{_META}{role}_label_{sanitize(n)}"],
            "target_label": sanitize(n),
            "regex": "(.+)",
            "replacement": "${1}",
        }
        for n in names
    ]


def _service_monitor_rules(spec: Doc, ep: Doc) -> list[Doc]:
    """generateServiceMonitorConfig's rules up to ``endpoint`` (role endpoints)."""
    rules = [
        *_selector_rules(spec["selector"], "service"),
        {"action": "keep", "source_labels": [f"{_META}endpoint_port_name"], "regex": ep["port"]},
    ]
    for kind in ("Node", "Pod"):
        rules.append(
            {
                "source_labels": list(_TARGET_REF),
                "separator": ";",
                "regex": f"{kind};(.*)",
                "replacement": "${1}",
                "target_label": kind.lower(),
            }
        )
    rules += [
        {"source_labels": [f"{_META}namespace"], "target_label": "namespace"},
        {"source_labels": [f"{_META}service_name"], "target_label": "service"},
        {"source_labels": [f"{_META}pod_name"], "target_label": "pod"},
        {"source_labels": [f"{_META}pod_container_name"], "target_label": "container"},
    ]
    if ep.get("filterRunning", True):
        rules.append(_RUNNING_FILTER)
    rules += _label_copies(spec.get("targetLabels") or [], "service")
    rules += _label_copies(spec.get("podTargetLabels") or [], "pod")
    rules.append(
        {"source_labels": [f"{_META}service_name"], "target_label": "job", "replacement": "${1}"}
    )
    if spec.get("jobLabel"):
        rules += _label_copies([spec["jobLabel"]], "service")
        rules[-1]["target_label"] = "job"
    return [*rules, {"target_label": "endpoint", "replacement": ep["port"]}]


def _pod_monitor_rules(monitor: Doc, ep: Doc) -> list[Doc]:
    """generatePodMonitorConfig's rules up to ``endpoint`` (role pod)."""
    spec, meta = monitor["spec"], monitor["metadata"]
    rules = [_RUNNING_FILTER] if ep.get("filterRunning", True) else []
    rules += [
        *_selector_rules(spec["selector"], "pod"),
        {
            "action": "keep",
            "source_labels": [f"{_META}pod_container_port_name"],
            "regex": ep["port"],
        },
        {"source_labels": [f"{_META}namespace"], "target_label": "namespace"},
        {"source_labels": [f"{_META}pod_container_name"], "target_label": "container"},
        {"source_labels": [f"{_META}pod_name"], "target_label": "pod"},
        *_label_copies(spec.get("podTargetLabels") or [], "pod"),
        {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
    ]
    if spec.get("jobLabel"):
        rules += _label_copies([spec["jobLabel"]], "pod")
        rules[-1]["target_label"] = "job"
    return [*rules, {"target_label": "endpoint", "replacement": ep["port"]}]


# One shard: the config reloader writes the pod's shard, 0, for "$(SHARD)".
_SHARDING = [
    {
        "source_labels": ["__address__"],
        "target_label": "__tmp_hash",
        "modulus": 1,
        "action": "hashmod",
    },
    {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},
]
_MONITOR_FIELDS = {
    "ServiceMonitor": {
        "selector",
        "namespaceSelector",
        "endpoints",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
    },
    "PodMonitor": {
        "selector",
        "namespaceSelector",
        "podMetricsEndpoints",
        "jobLabel",
        "podTargetLabels",
    },
}
# Endpoint field -> scrape config key, copied as they are (in the generator's order).
_ENDPOINT_COPIES = (
    ("path", "metrics_path"),
    ("proxyUrl", "proxy_url"),
    ("params", "params"),
    ("scheme", "scheme"),
    ("followRedirects", "follow_redirects"),
    ("enableHttp2", "enable_http2"),
)
_ENDPOINT_FIELDS = {
    "port",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
    "filterRunning",
} | {k for k, _ in _ENDPOINT_COPIES}


def _check_fields(obj: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = set(obj) - known
    if unknown:
        raise InstallError(f"{what}: {sorted(unknown)} not reproduced by operator_scrape_config")


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "y": 31_536_000_000,
}


def duration_ms(text: str) -> int:
    """A Prometheus duration ("1m30s", "500ms") in milliseconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise InstallError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


def format_ms(ms: int) -> str:
    """Milliseconds as a Prometheus/Alertmanager duration ("10s", "1m30s", "1s500ms")."""
    if ms <= 0:
        raise InstallError(f"duration must be positive, got {ms} ms")
    out = ""
    for unit in ("h", "m", "s", "ms"):
        n, ms = divmod(ms, _UNIT_MS[unit])
        out += f"{n}{unit}" if n else ""
    return out


def _timing(ep: Doc, override: str | None) -> Doc:
    """scrape_interval/scrape_timeout: the endpoint's, or ``override`` with the timeout
    capped at it (Prometheus refuses a timeout longer than the interval)."""
    out: Doc = {}
    interval = override or ep.get("interval")
    if interval:
        out["scrape_interval"] = interval
    timeout = ep.get("scrapeTimeout")
    if timeout and override and duration_ms(timeout) > duration_ms(override):
        timeout = override
    if timeout:
        out["scrape_timeout"] = timeout
    return out


def _discovered(
    monitor: Doc, pod: PodMeta, service: Doc | None, port: str
) -> dict[str, str] | None:
    """The meta labels service discovery gives the pod's target, None when it would not
    discover it (another namespace, no Service port for it)."""
    selector = monitor["spec"].get("namespaceSelector") or {}
    names = selector.get("matchNames") or [monitor["metadata"]["namespace"]]
    if not selector.get("any") and pod.namespace not in names:
        return None
    if monitor["kind"] == "PodMonitor":
        return pod_sd_labels(pod)
    if service is None:
        raise InstallError("a ServiceMonitor's target needs the Service (endpoints role)")
    ep_port = _endpoint_port(service, pod, port)
    return None if ep_port is None else endpoints_sd_labels(pod, service, ep_port)


def operator_scrape_config(
    monitor: Doc,
    *,
    target: str,
    pod: PodMeta,
    service: Doc | None,
    scrape_interval: str | None,
    endpoint: int = 0,
    override_honor_labels: bool = False,
) -> Doc:
    """The ``scrape_configs`` entry the Prometheus Operator (promcfg.go at commit
    002266347d12f6ee0ef0b4a774dfcc613d2d9547, v0.78 era) writes for endpoint
    ``endpoint`` of a rendered ServiceMonitor or PodMonitor, with the Prometheus
    CR's defaults (one shard, role endpoints, no scrape class, no
    enforcedNamespaceLabel, no attachMetadata).

    Kept as the operator writes them: job_name, honor_labels (``override_honor_labels``:
    the CR's overrideHonorLabels, which forces false), honor_timestamps when the
    endpoint sets it, the operator's relabel_configs in order (selector, port filter,
    node/pod/namespace/service/container, running filter, targetLabels,
    podTargetLabels, job, jobLabel, endpoint), then the monitor's relabelings
    (CRD camelCase -> snake_case, default action replace), then sharding with
    ``$(SHARD)`` replaced by 0 as the config reloader does; metric_relabel_configs
    from metricRelabelings.

    Deviations: ``kubernetes_sd_configs`` becomes one ``static_configs`` entry at
    ``target`` (where the test's exporter listens) carrying exactly the meta labels
    Prometheus v2.42's Kubernetes SD gives ``pod`` (behind ``service`` for a
    ServiceMonitor: :func:`endpoints_sd_labels`; :func:`pod_sd_labels` for a
    PodMonitor); only ``__address__`` differs from a cluster's podIP:port, and the
    chart's relabelings overwrite ``instance``. ``scrape_interval`` (if given)
    replaces the monitor's interval to compress time, the timeout capped at it.
    Endpoint fields not reproduced (TLS, auth, limits) are refused, never dropped.
    """
    kind, spec, meta = monitor["kind"], monitor["spec"], monitor["metadata"]
    if kind not in _MONITOR_FIELDS:
        raise InstallError(f"not a ServiceMonitor or PodMonitor: {kind}")
    _check_fields(spec, _MONITOR_FIELDS[kind], f"{kind} spec")
    ep = spec["endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"][endpoint]
    _check_fields(ep, _ENDPOINT_FIELDS, f"{kind} endpoint {endpoint}")
    labels = _discovered(monitor, pod, service, ep["port"])
    prefix = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    job: Doc = {
        "job_name": f"{prefix}/{meta['namespace']}/{meta['name']}/{endpoint}",
        "honor_labels": bool(ep.get("honorLabels", False)) and not override_honor_labels,
    }
    if "honorTimestamps" in ep:
        job["honor_timestamps"] = bool(ep["honorTimestamps"])
    job["static_configs"] = [] if labels is None else [{"targets": [target], "labels": labels}]
    job |= _timing(ep, scrape_interval)
    job |= {prom: ep[crd] for crd, prom in _ENDPOINT_COPIES if crd in ep}
    own = (
        _service_monitor_rules(spec, ep)
        if kind == "ServiceMonitor"
        else _pod_monitor_rules(monitor, ep)
    )
    job["relabel_configs"] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        *own,
        *(relabel_config(r) for r in ep.get("relabelings") or []),
        *copy.deepcopy(_SHARDING),
    ]
    metric = [relabel_config(r) for r in ep.get("metricRelabelings") or []]
    if metric:
        job["metric_relabel_configs"] = metric
    return job


# --- 4. kube-prometheus-stack's Alertmanager -------------------------------------------

# alertmanager.config of kube-prometheus-stack 66.1.0's values.yaml, verbatim. The
# templates glob matches nothing here, as in an install with templateFiles: {}.
KPS_ALERTMANAGER_CONFIG: Doc = {
    "global": {"resolve_timeout": "5m"},
    "inhibit_rules": [
        {
            "source_matchers": ["severity = critical"],
            "target_matchers": ["severity =~ warning|info"],
            "equal": ["namespace", "alertname"],
        },
        {
            "source_matchers": ["severity = warning"],
            "target_matchers": ["severity = info"],
            "equal": ["namespace", "alertname"],
        },
        {
            "source_matchers": ["alertname = InfoInhibitor"],
            "target_matchers": ["severity = info"],
            "equal": ["namespace"],
        },
        {"target_matchers": ["alertname = InfoInhibitor"]},
    ],
    "route": {
        "group_by": ["namespace"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "12h",
        "receiver": "null",
        "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}],
    },
    "receivers": [{"name": "null"}],
    "templates": ["/etc/alertmanager/config/*.tmpl"],
}
WEBHOOK_RECEIVER = "webhook"


def _scaled(duration: str, factor: float) -> str:
    return format_ms(max(1, round(duration_ms(duration) * factor)))


def kps_alertmanager_config(
    *,
    webhook_url: str,
    extra_inhibit_rules: Sequence[Mapping[str, Any]] = (),
    time_scale: float = 1.0,
) -> Doc:
    """:data:`KPS_ALERTMANAGER_CONFIG` with the one change a user makes to receive
    anything: the root receiver is a webhook receiver (``send_resolved: true``) instead
    of 'null' (Watchdog's route still goes to 'null', which stays defined), plus
    ``extra_inhibit_rules`` (the pack's rules/alertmanager.inhibit.yaml) after the
    stack's four.

    Compressed time: the root's group_wait (30s) and group_interval (5m) are
    multiplied by ``time_scale``, the factor by which the lane shortens rule
    evaluation (e.g. 2s/60s), so grouping keeps its proportion to the rules;
    repeat_interval (12h) and resolve_timeout stay as they are."""
    if not 0 < time_scale <= 1:
        raise InstallError(f"time_scale must be in (0, 1], got {time_scale}")
    cfg = copy.deepcopy(KPS_ALERTMANAGER_CONFIG)
    route = cfg["route"]
    route["receiver"] = WEBHOOK_RECEIVER
    for key in ("group_wait", "group_interval"):
        route[key] = _scaled(route[key], time_scale)
    cfg["receivers"].append(
        {"name": WEBHOOK_RECEIVER, "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}
    )
    cfg["inhibit_rules"] += [copy.deepcopy(dict(r)) for r in extra_inhibit_rules]
    return cfg


KPS_RUNBOOK_URL = "https://runbooks.prometheus-operator.dev/runbooks"  # defaultRules.runbookUrl
# general.rules of kube-prometheus-stack (defaultRules.create and .rules.general are
# on by default), with the chart's defaults: severity "none", no additional labels.
KPS_GENERAL_RULES: Doc = {
    "groups": [
        {
            "name": "general.rules",
            "rules": [
                {
                    "alert": "Watchdog",
                    "annotations": {
                        "description": "This is an alert meant to ensure that the entire "
                        "alerting pipeline is functional. This alert is always firing, "
                        "therefore it should always be firing in Alertmanager and always "
                        "fire against a receiver. There are integrations with various "
                        "notification mechanisms that send a notification when this alert "
                        'is not firing. For example the "DeadMansSnitch" integration in '
                        "PagerDuty.",
                        "runbook_url": f"{KPS_RUNBOOK_URL}/general/watchdog",
                        "summary": "An alert that should always be firing to certify that "
                        "Alertmanager is working properly.",
                    },
                    "expr": "vector(1)",
                    "labels": {"severity": "none"},
                },
                {
                    "alert": "InfoInhibitor",
                    "annotations": {
                        "description": "This is an alert that is used to inhibit info "
                        "alerts. By themselves, the info-level alerts are sometimes very "
                        "noisy, but they are relevant when combined with other alerts. "
                        'This alert fires whenever there\'s a severity="info" alert, and '
                        "stops firing when another alert with a severity of 'warning' or "
                        "'critical' starts firing on the same namespace. This alert should "
                        "be routed to a null receiver and configured to inhibit alerts "
                        'with severity="info".',
                        "runbook_url": f"{KPS_RUNBOOK_URL}/general/infoinhibitor",
                        "summary": "Info-level alert inhibition.",
                    },
                    "expr": 'group by (namespace) (ALERTS{severity = "info"} == 1) unless on '
                    '(namespace) group by (namespace) (ALERTS{alertname != "InfoInhibitor", '
                    'alertstate = "firing", severity =~ "warning|critical"} == 1)',
                    "labels": {"severity": "none"},
                },
            ],
        }
    ]
}


# --- 5. the PrometheusRule as the operator writes it -----------------------------------

# Fields the operator drops for a Prometheus older than the version given
# (sanitizePrometheusRulesSpec in pkg/operator/rules.go): group-level and rule-level.
_GROUP_FIELDS_SINCE = {"limit": (2, 31), "query_offset": (2, 53), "labels": (3, 0)}
_RULE_FIELDS_SINCE = {"keep_firing_for": (2, 42)}


def _version(text: str) -> tuple[int, int]:
    m = re.match(r"v?(\d+)\.(\d+)", text)
    if m is None:
        raise InstallError(f"not a Prometheus version: {text!r}")
    return int(m[1]), int(m[2])


def prometheus_rule_file(
    prometheus_rule: Doc, *, interval: str | None, prometheus_version: str = "2.42.0"
) -> Doc:
    """The rule file the operator writes for a rendered PrometheusRule: its
    ``spec.groups`` as they are (serialised whole, no rule changed without an
    enforcedNamespaceLabel), except what its rules.go drops: ``partial_response_strategy``,
    an empty ``interval`` or ``for``, and fields the Prometheus it runs
    (``prometheus_version``, here Debian's 2.42) does not know (limit < 2.31,
    keep_firing_for < 2.42, query_offset < 2.53, group labels < 3.0).

    ``interval`` (if given) replaces every group's interval to compress time (the
    lane evaluates every 2 s instead of 1m); the rules' own windows are untouched."""
    if prometheus_rule.get("kind") != "PrometheusRule":
        raise InstallError(f"not a PrometheusRule: {prometheus_rule.get('kind')}")
    version = _version(prometheus_version)
    groups = copy.deepcopy(prometheus_rule["spec"]["groups"])
    for g in groups:
        g.pop("partial_response_strategy", None)
        for key, since in _GROUP_FIELDS_SINCE.items():
            if version < since:
                g.pop(key, None)
        if interval is not None:
            g["interval"] = interval
        elif g.get("interval") == "":
            del g["interval"]
        for r in g["rules"]:
            if r.get("for") == "":
                del r["for"]
            for key, since in _RULE_FIELDS_SINCE.items():
                if version < since:
                    r.pop(key, None)
    return {"groups": groups}
