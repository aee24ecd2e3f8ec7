"""deploy/: render every variant with `kubectl kustomize`, validate the built-in kinds
against the Kubernetes schemas (strict) of each supported version and the CRD objects
against the Prometheus Operator's CRD schemas (and the PrometheusRule's groups with
promtool), and pin the DaemonSet's privileges so they cannot widen silently. The base
is the Helm chart rendered (test_chart.py compares the two)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .manifests import DEPLOY, SUPPORTED, crd_errors, validate_builtin

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

VARIANTS = [
    "base",
    "no-probe",
    "bcc",
    "sys-resource",
    "legacy-kernel",
    "secure-metrics",
    "kube-prometheus-stack",
]
# The CO-RE probe needs the cgroup tree and BTF; the BCC image also the kernel headers.
HOST_PATHS = {"/sys/fs/cgroup", "/sys/kernel/btf"}
BCC_HOST_PATHS = HOST_PATHS | {"/sys/kernel/tracing", "/lib/modules", "/usr/src"}
PROBE_CAPS = {"BPF", "PERFMON"}

PLACEHOLDER_RULE = """\
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: contention-exporter
spec:
  groups: []
"""


def _kubectl() -> str | None:
    venv_bin = Path(sys.executable).parent / "kubectl"
    if venv_bin.exists():
        return str(venv_bin)
    return shutil.which("kubectl")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("kubectl not found: run scripts/setup-kube-tools.sh")
    work = tmp_path_factory.mktemp("kustomize")
    shutil.copytree(DEPLOY, work / "deploy")
    if not (work / "deploy" / "prometheusrule.yaml").exists():
        # Rendering is tested on its own; test_prometheusrule_is_generated fails instead.
        (work / "deploy" / "prometheusrule.yaml").write_text(PLACEHOLDER_RULE)
    out: dict[str, list[dict[str, Any]]] = {}
    for variant in VARIANTS:
        if variant == "base":
            target = work / "deploy"
        else:
            # A user's overlay: the base plus one component (kustomize forbids an
            # overlay inside the base's own directory, hence components).
            target = work / variant
            target.mkdir()
            (target / "kustomization.yaml").write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                        "kind": "Kustomization",
                        "resources": ["../deploy"],
                        "components": [f"../deploy/components/{variant}"],
                    }
                )
            )
        proc = subprocess.run(
            [kubectl, "kustomize", str(target)], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, f"kubectl kustomize {variant}: {proc.stderr}"
        out[variant] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return out


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, got {len(hits)}"
    return hits[0]


def _exporter(docs: list[dict[str, Any]]) -> dict[str, Any]:
    ds = _one(docs, "DaemonSet")
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter"]
    return dict(c)


def _host_mounts(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """host path -> the exporter's mount of it."""
    spec = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    vols = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    return {vols[m["name"]]: m for m in _exporter(docs)["volumeMounts"] if m["name"] in vols}


# --- render + schemas --------------------------------------------------------------------


def test_every_variant_renders(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = sorted(d["kind"] for d in rendered["base"])
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "PriorityClass",
            "DaemonSet",
            "Service",
            "ServiceMonitor",
            "PrometheusRule",
            "ConfigMap",  # Grafana dashboards: overview
            "ConfigMap",  # and drill-down
        ]
    )
    for docs in rendered.values():
        for d in docs:
            if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"):
                assert d["metadata"]["namespace"] == "contention-exporter", d["metadata"]


@pytest.mark.parametrize("version", SUPPORTED)
def test_builtin_kinds_validate_strictly(
    rendered: dict[str, list[dict[str, Any]]], version: str
) -> None:
    validate_builtin(rendered, version)


def test_operator_objects_match_the_crd_schemas(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = [
        d for v in rendered.values() for d in v if d["kind"] in ("ServiceMonitor", "PrometheusRule")
    ]
    assert len(docs) == 2 * len(VARIANTS)
    assert crd_errors(docs) == []


def test_service_monitor_matches_the_service(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for variant, docs in rendered.items():
        svc, sm, ds = _one(docs, "Service"), _one(docs, "ServiceMonitor"), _one(docs, "DaemonSet")
        assert sm["apiVersion"] == "monitoring.coreos.com/v1"
        labels = svc["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
        assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
        port_names = {p["name"] for p in svc["spec"]["ports"]}
        (ep,) = sm["spec"]["endpoints"]
        assert ep["port"] in port_names and ep["path"] == "/metrics"
        # The Service's target port is served by some container of the pod.
        served = {
            p["name"]: p["containerPort"]
            for c in ds["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        (sp,) = svc["spec"]["ports"]
        assert sp["targetPort"] in served and served[sp["targetPort"]] == 10366
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
        if variant == "secure-metrics":
            assert ep["scheme"] == "https" and "tlsConfig" in ep
        else:
            assert ep.get("scheme", "http") == "http"


def test_prometheusrule_is_generated() -> None:
    path = DEPLOY / "prometheusrule.yaml"
    assert path.exists(), "deploy/prometheusrule.yaml is generated by `contention-exporter rules`"
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["spec"]["groups"], "the PrometheusRule has no groups"


def test_prometheusrule_groups_pass_promtool(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/setup.sh --test installs it)")
    rule = _one(rendered["base"], "PrometheusRule")
    if not rule["spec"]["groups"]:
        pytest.skip("placeholder PrometheusRule (not generated yet)")
    f = tmp_path / "groups.yaml"
    f.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- least privilege ---------------------------------------------------------------------


def test_daemonset_security_context(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["base"]
    spec = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    for key in ("hostPID", "hostNetwork", "hostIPC"):
        assert not spec.get(key), key
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    c = _exporter(docs)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert not sc.get("privileged")
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == PROBE_CAPS
    # Every host path is mounted, and read-only; nothing else from the host.
    mounts = _host_mounts(docs)
    assert set(mounts) == HOST_PATHS
    assert all(m.get("readOnly") is True for m in mounts.values())
    for v in spec["volumes"]:
        assert "hostPath" in v or "emptyDir" in v, v
    assert c["image"] == "contention-exporter:0.1.0"


def test_bcc_variant_mounts_the_kernel_headers_read_only(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["bcc"]
    mounts = _host_mounts(docs)
    assert set(mounts) == BCC_HOST_PATHS
    assert all(m.get("readOnly") is True for m in mounts.values())
    assert _exporter(docs)["image"] == "contention-exporter:0.1.0-bcc"


def test_sys_resource_variant(rendered: dict[str, list[dict[str, Any]]]) -> None:
    caps = _exporter(rendered["sys-resource"])["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_RESOURCE"]}


def test_kube_prometheus_stack_variant_labels_what_the_stack_selects(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for kind in ("ServiceMonitor", "PrometheusRule"):
        labels = _one(rendered["kube-prometheus-stack"], kind)["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack"


def test_only_the_legacy_kernel_variant_gets_sys_admin(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for variant, docs in rendered.items():
        for c in _one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]:
            sc = c["securityContext"]
            assert sc["capabilities"]["drop"] == ["ALL"], (variant, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (variant, c["name"])
            assert not sc.get("privileged"), (variant, c["name"])
            added = set(sc["capabilities"].get("add", []))
            if variant == "legacy-kernel" and c["name"] == "exporter":
                assert added == {"SYS_ADMIN", "SYS_RESOURCE"}
            else:
                assert "SYS_ADMIN" not in added, (variant, c["name"])


def test_no_probe_variant_needs_no_capability_and_no_kernel_mounts(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["no-probe"]
    c = _exporter(docs)
    assert "--no-probe" in c["args"]
    assert not c["securityContext"]["capabilities"].get("add")
    assert set(_host_mounts(docs)) == {"/sys/fs/cgroup"}


def test_secure_metrics_variant_hides_the_plain_port(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["secure-metrics"]
    c = _exporter(docs)
    assert "--web.listen-address=127.0.0.1:10367" in c["args"]
    assert not c.get("ports")
    containers = _one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    (proxy,) = [x for x in containers if x["name"] == "kube-rbac-proxy"]
    assert "--upstream=http://127.0.0.1:10367/" in proxy["args"]
    assert proxy["securityContext"]["runAsNonRoot"] is True
    assert proxy["image"].startswith("quay.io/brancz/kube-rbac-proxy:")
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    verbs = {
        (g, r, v)
        for rule in roles["contention-exporter-auth-proxy"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert verbs == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }


def test_rbac_is_read_only_on_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    role = _one(rendered["base"], "ClusterRole", "contention-exporter")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = _one(rendered["base"], "ClusterRoleBinding", "contention-exporter")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "contention-exporter",
            "namespace": "contention-exporter",
        }
    ]
    ds = _one(rendered["base"], "DaemonSet")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "contention-exporter"


def test_daemonset_scheduling_resources_and_wiring(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["base"]
    spec = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert {"operator": "Exists"} in spec["tolerations"]  # every node, every taint
    pc = _one(docs, "PriorityClass")
    assert spec["priorityClassName"] == pc["metadata"]["name"]
    c = _exporter(docs)
    res = c["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
    assert "cpu" not in res["limits"], "a CPU limit would throttle the throttling exporter"
    assert "--kubernetes" in c["args"] and "--path.sysfs=/host/sys" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert {"name": "metrics", "containerPort": 10366, "protocol": "TCP"} in c["ports"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ns = _one(docs, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- image --------------------------------------------------------------------------------


def test_dockerfile_installs_what_the_reference_build_installs() -> None:
    """deploy/Dockerfile cannot be built here (no Docker daemon, no base image); it
    must install the same package lists as scripts/build-image.sh (tests/image builds
    and checks that image) and no toolchain at run time."""
    text = (DEPLOY / "Dockerfile").read_text()
    stages = text.split("\nFROM ")
    assert len(stages) == 3, "expected a build stage and a runtime stage"
    assert "ARG DEBIAN=bookworm-slim" in text
    runtime = stages[-1]
    assert runtime.startswith("debian:${DEBIAN}")
    assert "COPY deploy/image/packages-${FLAVOR}.txt" in runtime
    for tool in ("build-essential", "gcc", "clang", "make ", "python3-pip", "-dev"):
        assert tool not in runtime, tool
    assert "kubernetes/aio" in runtime  # as scripts/build-image.sh leaves it out
    assert "EXPOSE 10366" in runtime
    assert 'ENTRYPOINT ["/usr/local/bin/contention-exporter"]' in runtime
    # The source revision reaches the wheel (setup.py stamps it) and the image label.
    assert "COPY pyproject.toml setup.py" in stages[1]
    assert 'CONTENTION_REVISION="$REVISION"' in stages[1]
    assert "org.opencontainers.image.revision" in runtime
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert "!exporter/" in ignore and "!deploy/image/" in ignore and "!setup.py" in ignore
    build = (DEPLOY.parent / "scripts" / "build-image.sh").read_text()
    assert "deploy/image/packages-$FLAVOR.txt" in build
    assert "kubernetes/aio" in build
    core = (DEPLOY / "image" / "packages-core.txt").read_text()
    assert "bpfcc" not in core and "libbpf1" in core


def test_servicemonitor_keeps_the_exporters_own_labels(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """namespace/pod/container name the measured container, never the exporter's pod:
    the series' own win, and the target's (the exporter's pod) are dropped; instance
    (and node) name the node, not the pod's IP, which changes at every rollout."""
    (endpoint,) = _one(rendered["base"], "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"] if "targetLabel" in r}
    for label in ("instance", "node"):
        assert relabel[label]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
        assert relabel[label]["action"] == "replace"
    assert endpoint["relabelings"][-1] == {
        "action": "labeldrop",
        "regex": "namespace|pod|container",
    }
