"""Rendering and validating manifests, shared by test_deploy.py (kustomize) and
test_chart.py (Helm): the tools the setup scripts install, strict schema validation
of the built-in kinds for every supported Kubernetes version, and the Prometheus
Operator CRD validators (tests/schemas/prometheus-operator)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "contention-exporter"
CRD_VALIDATOR = ROOT / "tests" / "schemas" / "prometheus-operator"

# Kubernetes minor versions the manifests are validated against (kubernetes-validate's
# bundled schemas); docs/kubernetes.md states the same range.
SUPPORTED = [f"1.{m}.0" for m in range(29, 38)]
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "AlertmanagerConfig"}
RELEASE = NAMESPACE = "contention-exporter"
# What a cluster with the Prometheus Operator serves (`helm template` knows no cluster:
# without these the chart leaves the operator's objects out).
OPERATOR_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "monitoring.coreos.com/v1alpha1/AlertmanagerConfig",
)
# Labels only Helm sets (scripts/generate-deploy.py drops the first two from the
# kustomize base; the objects the exporter's generators write have none of them).
HELM_ONLY_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}

Doc = dict[str, Any]


def tool(name: str) -> str | None:
    """A binary from the venv (where scripts/setup-kube-tools.sh puts it), else PATH."""
    venv_bin = Path(sys.executable).parent / name
    return str(venv_bin) if venv_bin.exists() else shutil.which(name)


def need(name: str) -> str:
    found = tool(name)
    if found is None:
        pytest.skip(f"{name} not found: run scripts/setup-kube-tools.sh")
    return found


def load_docs(text: str) -> list[Doc]:
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d]


def helm(*args: str, binary: str = "helm", check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([need(binary), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stderr}"
    return proc


def template_args(
    sets: Sequence[str] = (),
    extra: Sequence[str] = (),
    *,
    release: str = RELEASE,
    apis: Sequence[str] = OPERATOR_APIS,
) -> list[str]:
    """``helm template`` of the chart with ``--set`` values, in a cluster serving
    ``apis``."""
    args = ["template", release, str(CHART), "--namespace", NAMESPACE, *extra]
    for api in apis:
        args += ["--api-versions", api]
    for s in sets:
        args += ["--set", s]
    return args


@functools.cache
def _rendered(
    sets: tuple[str, ...], extra: tuple[str, ...], release: str, apis: tuple[str, ...], binary: str
) -> str:
    args = template_args(sets, extra, release=release, apis=apis)
    return json.dumps(load_docs(helm(*args, binary=binary).stdout))


def render(
    sets: Sequence[str] = (),
    extra: Sequence[str] = (),
    *,
    release: str = RELEASE,
    apis: Sequence[str] = OPERATOR_APIS,
    binary: str = "helm",
) -> list[Doc]:
    """The chart's objects for these values, rendered once per test session (each call
    returns its own copy). ``extra`` may name files: they are read at the first call."""
    out: list[Doc] = json.loads(_rendered(tuple(sets), tuple(extra), release, tuple(apis), binary))
    return out


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {len(hits)}"
    return hits[0]


def exporter_container(docs: list[Doc]) -> Doc:
    ds = one(docs, "DaemonSet")
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter"]
    return dict(c)


def host_mounts(docs: list[Doc]) -> dict[str, Doc]:
    """host path -> the exporter's mount of it (a path mounted twice: the last one)."""
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    vols = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    return {
        vols[m["name"]]: m for m in exporter_container(docs)["volumeMounts"] if m["name"] in vols
    }


def added_caps(docs: list[Doc]) -> set[str]:
    caps = exporter_container(docs)["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"]
    return set(caps.get("add", []))


def validate_builtin(variants: dict[str, list[Doc]], version: str) -> None:
    """kubernetes-validate --strict for every object but the CRD kinds (an object that
    several variants render alike is validated once)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    seen: set[str] = set()
    for variant, docs in variants.items():
        for d in docs:
            key = json.dumps(d, sort_keys=True)
            if d["kind"] in CRD_KINDS or key in seen:
                continue
            seen.add(key)
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{variant}: {d['kind']}/{d['metadata']['name']} @ {version}: {e}")


def crd_errors(docs: list[Doc]) -> list[Doc]:
    """Run the Prometheus Operator CRD validators over ``docs`` (CRD kinds only);
    returns one entry per invalid object."""
    node = tool("node")
    if node is None or not (CRD_VALIDATOR / "node_modules").is_dir():
        pytest.skip("CRD validators not installed: run scripts/setup-kube-tools.sh")
    proc = subprocess.run(
        [node, str(CRD_VALIDATOR / "validate.mjs")],
        input=json.dumps(docs),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out: list[Doc] = json.loads(proc.stdout)
    return out


def normalized(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    """(kind, name) -> object without Helm's own labels and without the namespace
    (kustomize sets it; helm template prints the release's). Volumes and mounts are
    sorted: a strategic-merge patch adds them at another place in the list than the
    chart does, and their order means nothing (none is nested in another)."""
    out = {}
    for d in docs:
        d = json.loads(json.dumps(d))
        meta = d["metadata"]
        meta.pop("namespace", None)
        for labels in _label_maps(d):
            for k in HELM_ONLY_LABELS:
                labels.pop(k, None)
        if d["kind"] == "DaemonSet":
            pod = d["spec"]["template"]["spec"]
            pod["volumes"] = sorted(pod.get("volumes", []), key=lambda v: v["name"])
            for c in pod["containers"]:
                c["volumeMounts"] = sorted(c.get("volumeMounts", []), key=lambda m: m["mountPath"])
        out[(d["kind"], meta["name"])] = d
    return out


def _label_maps(d: Doc) -> list[dict[str, str]]:
    maps = [d["metadata"].setdefault("labels", {})]
    if d["kind"] == "DaemonSet":
        tpl = d["spec"]["template"]["metadata"]
        maps += [tpl.setdefault("labels", {}), d["spec"]["selector"]["matchLabels"]]
    if d["kind"] == "Service":
        maps.append(d["spec"]["selector"])
    if d["kind"] == "ServiceMonitor":
        maps.append(d["spec"]["selector"]["matchLabels"])
    return maps
