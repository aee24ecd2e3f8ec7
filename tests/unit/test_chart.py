"""deploy/helm/contention-exporter: `helm lint`, `helm template` for the defaults and
each option, strict validation of what it renders (built-in kinds for Kubernetes
1.29-1.37, the Prometheus Operator's CRD schemas), the chart and the kustomize base
rendering the same objects, and the operator's objects only where their API is
served. The thresholds: test_chart_thresholds.py; the scrape through a real
Prometheus: test_chart_scrape.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from .manifests import (
    CHART,
    CRD_KINDS,
    DEPLOY,
    NAMESPACE,
    OPERATOR_APIS,
    RELEASE,
    ROOT,
    SUPPORTED,
    Doc,
    added_caps,
    crd_errors,
    exporter_container,
    helm,
    host_mounts,
    load_docs,
    need,
    normalized,
    one,
    render,
    template_args,
    validate_builtin,
)

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

# Option -> --set values. Each is also the Helm side of a kustomize component below.
OPTIONS: dict[str, list[str]] = {
    "default": [],
    "probe-off": ["probe.loader=off"],
    "loader-core": ["probe.loader=core"],
    "bcc": ["image.flavor=bcc"],
    "sys-resource": ["probe.sysResource=true"],
    "legacy-kernel": ["probe.legacyKernel=true"],
    "secure-metrics": ["secureMetrics.enabled=true"],
    "web-config": [
        "webConfig.secretName=contention-exporter-web",
        "webConfig.serviceMonitor.tlsConfig.ca.secret.name=contention-exporter-web",
        "webConfig.serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
        "webConfig.serviceMonitor.tlsConfig.serverName=contention-exporter",
        "webConfig.serviceMonitor.basicAuth.username.name=scrape-auth",
        "webConfig.serviceMonitor.basicAuth.username.key=user",
        "webConfig.serviceMonitor.basicAuth.password.name=scrape-auth",
        "webConfig.serviceMonitor.basicAuth.password.key=password",
    ],
    "web-config-client-certs": [
        "webConfig.secretName=contention-exporter-web",
        "webConfig.clientCertificates=true",
    ],
    "json-logs": ["args.logFormat=json", "args.logLevel=warn"],
    "kube-prometheus-stack": ["monitoring.labels.release=kube-prometheus-stack"],
    "pod-monitor": ["monitoring.kind=PodMonitor", "monitoring.labels.release=kps"],
    "alertmanager-config": [
        "alertmanagerConfig.enabled=true",
        "monitoring.labels.release=kube-prometheus-stack",
    ],
    "operator-objects-off": [
        "serviceMonitor.enabled=false",
        "prometheusRule.enabled=false",
        "dashboards.enabled=false",
    ],
    "no-kubernetes": ["args.kubernetes=false", "serviceAccount.create=false"],
    "existing-priority-class": [
        "priorityClass.create=false",
        "priorityClass.name=system-node-critical",
    ],
    "seccomp-localhost": [
        "seccompProfile.type=Localhost",
        "seccompProfile.localhostProfile=contention-exporter/bpf.json",
    ],
    "seccomp-unconfined": ["seccompProfile.type=Unconfined"],
}
# kustomize components -> the chart options that must render the same objects.
EQUIVALENT: dict[tuple[str, ...], list[str]] = {
    (): [],
    ("no-probe",): OPTIONS["probe-off"],
    ("bcc",): OPTIONS["bcc"],
    ("sys-resource",): OPTIONS["sys-resource"],
    ("legacy-kernel",): OPTIONS["legacy-kernel"],
    ("secure-metrics",): OPTIONS["secure-metrics"],
    ("kube-prometheus-stack",): OPTIONS["kube-prometheus-stack"],
    ("bcc", "secure-metrics", "kube-prometheus-stack"): OPTIONS["bcc"]
    + OPTIONS["secure-metrics"]
    + OPTIONS["kube-prometheus-stack"],
    ("no-probe", "secure-metrics"): OPTIONS["probe-off"] + OPTIONS["secure-metrics"],
}
# Objects only the kustomize base has (Helm installs into an existing namespace).
KUSTOMIZE_ONLY = {("Namespace", NAMESPACE)}


def template(sets: list[str], *extra: str, binary: str = "helm") -> list[Doc]:
    return render(sets, extra, binary=binary)


def _args(sets: list[str], *extra: str) -> list[str]:
    return template_args(sets, extra)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    return {name: template(sets) for name, sets in OPTIONS.items()}


# --- lint and render ---------------------------------------------------------------------


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_helm_lint_strict(option: str) -> None:
    args = ["lint", "--strict", str(CHART)]
    for s in OPTIONS[option]:
        args += ["--set", s]
    proc = helm(*args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_helm3_and_helm4_render_the_same_objects() -> None:
    for sets in (OPTIONS["default"], OPTIONS["secure-metrics"] + OPTIONS["bcc"]):
        assert template(sets, binary="helm3") == template(sets)


@pytest.mark.parametrize("version", SUPPORTED)
def test_builtin_kinds_validate_strictly(rendered: dict[str, list[Doc]], version: str) -> None:
    validate_builtin(rendered, version)


def test_operator_objects_match_the_crd_schemas(rendered: dict[str, list[Doc]]) -> None:
    docs = [d for v in rendered.values() for d in v if d["kind"] in CRD_KINDS]
    assert len(docs) >= 2 * (len(OPTIONS) - 1)
    assert [d for d in docs if d["kind"] == "AlertmanagerConfig"]
    assert crd_errors(docs) == []


def test_the_crd_validator_rejects_unknown_fields_and_bad_values(
    rendered: dict[str, list[Doc]],
) -> None:
    sm = json.loads(json.dumps(one(rendered["default"], "ServiceMonitor")))
    sm["spec"]["endpoints"][0]["honourLabels"] = True  # misspelt: unknown field
    rule = json.loads(json.dumps(one(rendered["default"], "PrometheusRule")))
    rule["spec"]["groups"][0]["interval"] = "1 minute"  # not a duration
    errors = crd_errors([sm, rule])
    assert [e["kind"] for e in errors] == ["ServiceMonitor", "PrometheusRule"]
    assert "honourLabels" in " ".join(errors[0]["errors"])
    assert "interval" in " ".join(errors[1]["errors"])


def test_bad_values_fail_with_a_clear_error() -> None:
    proc = helm("template", RELEASE, str(CHART), "--set", "probe.loader=ebpf", check=False)
    assert proc.returncode != 0 and "probe/loader" in proc.stderr
    proc = helm(
        "template", RELEASE, str(CHART), "--set", "serviceMonitors.enabled=true", check=False
    )
    assert proc.returncode != 0 and "serviceMonitors" in proc.stderr


# --- one source of truth: chart vs kustomize base ----------------------------------------


@pytest.fixture(scope="module")
def kustomized(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], list[Doc]]:
    kubectl = need("kubectl")
    work = tmp_path_factory.mktemp("kustomize")
    out = {}
    for i, components in enumerate(EQUIVALENT):
        target = work / f"overlay{i}"
        target.mkdir()
        (target / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(DEPLOY, target)],
                    "components": [
                        os.path.relpath(DEPLOY / "components" / c, target) for c in components
                    ],
                }
            )
        )
        proc = subprocess.run(
            [kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(target)],
            capture_output=True,
            text=True,
            timeout=300,  # a hang bound (at idle priority in test.sh)
        )
        assert proc.returncode == 0, f"kustomize {components}: {proc.stderr}"
        out[components] = load_docs(proc.stdout)
    return out


@pytest.mark.parametrize("components", list(EQUIVALENT), ids=lambda c: "+".join(c) or "base")
def test_kustomize_and_helm_render_the_same_objects(
    kustomized: dict[tuple[str, ...], list[Doc]], components: tuple[str, ...]
) -> None:
    k = normalized(kustomized[components])
    h = normalized(template(EQUIVALENT[components]))
    for key in KUSTOMIZE_ONLY:
        k.pop(key)
    assert sorted(k) == sorted(h)
    for key in k:
        assert k[key] == h[key], f"{key} differs between kustomize {components} and helm"


# --- options -------------------------------------------------------------------------------


def test_default_is_the_core_image_with_only_the_probes_capabilities(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["default"]
    c = exporter_container(docs)
    assert c["image"] == "contention-exporter:0.1.0"
    assert added_caps(docs) == {"BPF", "PERFMON"}
    assert set(host_mounts(docs)) == {"/sys/fs/cgroup", "/sys/kernel/btf"}
    assert all(m["readOnly"] is True for m in host_mounts(docs).values())
    assert not any(
        a.startswith(("--probe.loader", "--no-probe", "--config.file")) for a in c["args"]
    )


def test_bcc_flavor_adds_the_kernel_header_mounts_and_tag(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["bcc"]
    assert exporter_container(docs)["image"] == "contention-exporter:0.1.0-bcc"
    assert set(host_mounts(docs)) == {
        "/sys/fs/cgroup",
        "/sys/kernel/btf",
        "/sys/kernel/tracing",
        "/lib/modules",
        "/usr/src",
    }
    assert all(m["readOnly"] is True for m in host_mounts(docs).values())


def test_probe_modes(rendered: dict[str, list[Doc]]) -> None:
    off = rendered["probe-off"]
    assert "--no-probe" in exporter_container(off)["args"]
    assert added_caps(off) == set()
    assert set(host_mounts(off)) == {"/sys/fs/cgroup"}
    assert "--probe.loader=core" in exporter_container(rendered["loader-core"])["args"]
    assert added_caps(rendered["sys-resource"]) == {"BPF", "PERFMON", "SYS_RESOURCE"}
    legacy = rendered["legacy-kernel"]
    assert added_caps(legacy) == {"SYS_ADMIN", "SYS_RESOURCE"}
    assert exporter_container(legacy)["securityContext"]["allowPrivilegeEscalation"] is True
    for name, docs in rendered.items():
        if name != "legacy-kernel":
            assert "SYS_ADMIN" not in added_caps(docs), name


def test_seccomp_profile_values(rendered: dict[str, list[Doc]]) -> None:
    def profile(docs: list[Doc]) -> Doc:
        ds = one(docs, "DaemonSet")
        sc = ds["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]
        assert isinstance(sc, dict)
        return sc

    assert profile(rendered["default"]) == {"type": "RuntimeDefault"}
    assert profile(rendered["seccomp-localhost"]) == {
        "type": "Localhost",
        "localhostProfile": "contention-exporter/bpf.json",
    }
    assert profile(rendered["seccomp-unconfined"]) == {"type": "Unconfined"}
    # Localhost needs its path; the path is for Localhost only (the API refuses it else).
    for sets in (
        ["seccompProfile.type=Localhost"],
        ["seccompProfile.localhostProfile=x.json"],
        ["seccompProfile.type=Default"],
    ):
        args = ["template", RELEASE, str(CHART)]
        for v in sets:
            args += ["--set", v]
        proc = helm(*args, check=False)
        assert proc.returncode != 0 and "seccompProfile" in proc.stderr, (sets, proc.stderr)


def _endpoint(docs: list[Doc]) -> Doc:
    """The one scrape endpoint of the ServiceMonitor or PodMonitor."""
    (monitor,) = [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    key = "endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    (ep,) = monitor["spec"][key]
    assert isinstance(ep, dict)
    return ep


LABELDROP = {"action": "labeldrop", "regex": "namespace|pod|container"}


@pytest.mark.parametrize("option", ["default", "pod-monitor"])
def test_scrape_names_the_node_and_drops_the_exporters_own_pod(
    rendered: dict[str, list[Doc]], option: str
) -> None:
    """instance and node <- the pod's node name; the operator's namespace/pod/container
    target labels (the exporter's own pod) dropped last (tests/unit/test_chart_scrape.py
    runs the operator's job through a real Prometheus)."""
    ep = _endpoint(rendered[option])
    targets = {
        r["targetLabel"]: r.get("sourceLabels")
        for r in ep["relabelings"]
        if r.get("action") == "replace"
    }
    assert targets["instance"] == ["__meta_kubernetes_pod_node_name"]
    assert targets["node"] == ["__meta_kubernetes_pod_node_name"]
    assert ep["honorLabels"] is True
    assert ep["relabelings"][-1] == LABELDROP
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"


def test_user_relabelings_come_before_the_labeldrop() -> None:
    """Yours run after the chart's node/instance/job and before the drop: they may read
    the exporter pod's labels (here into `exporter_pod`) but cannot put them back."""
    sets = [
        "serviceMonitor.relabelings[0].sourceLabels[0]=pod",
        "serviceMonitor.relabelings[0].targetLabel=exporter_pod",
        "serviceMonitor.relabelings[1].targetLabel=namespace",
        "serviceMonitor.relabelings[1].replacement=re-added",
    ]
    for kind in ("ServiceMonitor", "PodMonitor"):
        rules = _endpoint(render([f"monitoring.kind={kind}", *sets]))["relabelings"]
        assert [r.get("targetLabel") for r in rules] == [
            "node",
            "instance",
            "job",
            "exporter_pod",
            "namespace",
            None,
        ]
        assert rules[-1] == LABELDROP


def test_one_scrape_object_of_the_kind_asked_for(rendered: dict[str, list[Doc]]) -> None:
    """monitoring.kind: a ServiceMonitor (default) or a PodMonitor, never both, with the
    same endpoint, labels and selector (the pods' labels: the Service selects them by
    the same ones)."""
    kinds = {
        name: [d["kind"] for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]
        for name, docs in rendered.items()
    }
    assert kinds["default"] == ["ServiceMonitor"] and kinds["pod-monitor"] == ["PodMonitor"]
    assert kinds["operator-objects-off"] == []
    sm = one(render(["monitoring.labels.release=kps"]), "ServiceMonitor")
    pm = one(rendered["pod-monitor"], "PodMonitor")
    assert pm["spec"]["podMetricsEndpoints"] == sm["spec"]["endpoints"]
    assert pm["metadata"]["labels"] == sm["metadata"]["labels"]
    assert pm["metadata"]["labels"]["release"] == "kps"
    assert pm["spec"]["selector"] == sm["spec"]["selector"]
    pod = one(rendered["pod-monitor"], "DaemonSet")["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert all(labels[k] == v for k, v in pm["spec"]["selector"]["matchLabels"].items())
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert "metrics" in ports
    proc = helm(*_args(["monitoring.kind=PodMonitor", "secureMetrics.enabled=true"]), check=False)
    assert proc.returncode != 0 and "needs monitoring.kind=ServiceMonitor" in proc.stderr
    proc = helm(*_args(["monitoring.kind=Probe"]), check=False)
    assert proc.returncode != 0 and "monitoring" in proc.stderr and "kind" in proc.stderr


def test_web_config_mounts_the_secret_and_scrapes_over_https(
    rendered: dict[str, list[Doc]],
) -> None:
    """webConfig: --web.config.file from a mounted Secret; probes over HTTPS on
    /healthz (no basic auth there), or tcpSocket when client certificates are required
    (the kubelet has none); the ServiceMonitor scrapes https with the given tlsConfig
    and basicAuth. The default has none of it."""
    docs = rendered["web-config"]
    c = exporter_container(docs)
    assert "--web.config.file=/etc/contention-exporter-web/web-config.yml" in c["args"]
    mount = {m["name"]: m for m in c["volumeMounts"]}["web-config"]
    assert mount["mountPath"] == "/etc/contention-exporter-web" and mount["readOnly"] is True
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    vol = {v["name"]: v for v in spec["volumes"]}["web-config"]
    assert vol["secret"] == {"secretName": "contention-exporter-web", "defaultMode": 0o400}
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    (ep,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"]["serverName"] == "contention-exporter"
    assert ep["basicAuth"]["password"] == {"name": "scrape-auth", "key": "password"}
    mtls = exporter_container(rendered["web-config-client-certs"])
    for probe in ("readinessProbe", "livenessProbe"):
        assert mtls[probe]["tcpSocket"] == {"port": "metrics"} and "httpGet" not in mtls[probe]
    plain = exporter_container(rendered["default"])
    assert not any(a.startswith("--web.config.file") for a in plain["args"])
    assert "scheme" not in plain["readinessProbe"]["httpGet"]
    (ep,) = one(rendered["default"], "ServiceMonitor")["spec"]["endpoints"]
    assert "scheme" not in ep and "basicAuth" not in ep


def test_listens_on_both_families_and_logs_as_asked(rendered: dict[str, list[Doc]]) -> None:
    """`:PORT` (IPv4 and IPv6) for the exporter and for kube-rbac-proxy in front of it;
    --log.level and --log.format from the values; every rendered argument list is one
    the exporter's own parser accepts."""
    from exporter.commands import build_parser

    args = exporter_container(rendered["default"])["args"]
    assert "--web.listen-address=:10366" in args
    assert {"--log.level=info", "--log.format=logfmt"} <= set(args)
    parsed = build_parser().parse_args(args)
    assert (parsed.listen, parsed.log_level, parsed.log_format) == ([":10366"], "info", "logfmt")
    json_args = build_parser().parse_args(exporter_container(rendered["json-logs"])["args"])
    assert (json_args.log_level, json_args.log_format) == ("warn", "json")
    for docs in rendered.values():
        build_parser().parse_args(exporter_container(docs)["args"])  # exits 2 if refused
    spec = one(rendered["secure-metrics"], "DaemonSet")["spec"]["template"]["spec"]
    (proxy,) = [c for c in spec["containers"] if c["name"] == "kube-rbac-proxy"]
    assert "--secure-listen-address=:10366" in proxy["args"]
    proc = helm("template", RELEASE, str(CHART), "--set", "args.logFormat=text", check=False)
    assert proc.returncode != 0 and "logFormat" in proc.stderr, proc.stderr


def test_web_config_refuses_contradictions() -> None:
    both = ["webConfig.secretName=w", "secureMetrics.enabled=true"]
    certs_without_tls = [
        "webConfig.secretName=w",
        "webConfig.tls=false",
        "webConfig.clientCertificates=true",
    ]
    for sets, msg in ((both, "choose one"), (certs_without_tls, "needs webConfig.tls")):
        args = ["template", RELEASE, str(CHART)]
        for s_ in sets:
            args += ["--set", s_]
        proc = helm(*args, check=False)
        assert proc.returncode != 0 and msg in proc.stderr, proc.stderr
    proc = helm("template", RELEASE, str(CHART), "--set", "webConfig.file=x", check=False)
    assert proc.returncode != 0 and "webConfig" in proc.stderr


def test_servicemonitor_sets_the_job_the_rules_select() -> None:
    """Whatever the release is called, the series carry the job of the rules' default
    selector (else every rule and dashboard would select nothing)."""
    from exporter.findings import load_thresholds

    assert load_thresholds().matchers == ('job="contention-exporter"',)
    for release in (RELEASE, "monitoring-ce"):
        for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
            docs = render([f"monitoring.kind={kind}"], release=release)
            (ep,) = one(docs, kind)["spec"][key]
            job = [r for r in ep["relabelings"] if r.get("targetLabel") == "job"]
            assert job == [
                {"targetLabel": "job", "replacement": "contention-exporter", "action": "replace"}
            ]


def test_kube_prometheus_stack_release_label(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["kube-prometheus-stack"]
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert "release" not in one(rendered["default"], kind)["metadata"]["labels"]


def test_operator_objects_can_be_left_out(rendered: dict[str, list[Doc]]) -> None:
    kinds = {d["kind"] for d in rendered["operator-objects-off"]}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}


def test_dashboards_carry_the_sidecar_label(rendered: dict[str, list[Doc]]) -> None:
    cms = [d for d in rendered["default"] if d["kind"] == "ConfigMap"]
    assert len(cms) == len(list((ROOT / "dashboards").glob("*.json"))) == 2
    for cm in cms:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        (name,) = cm["data"]
        assert json.loads(cm["data"][name]) == json.loads((ROOT / "dashboards" / name).read_text())
    other = template(
        ["dashboards.label=my_dash", "dashboards.labelValue=yes", "dashboards.namespace=grafana"]
    )
    for cm in [d for d in other if d["kind"] == "ConfigMap"]:
        assert cm["metadata"]["labels"]["my_dash"] == "yes"
        assert cm["metadata"]["namespace"] == "grafana"


def test_scheduling_values(rendered: dict[str, list[Doc]]) -> None:
    spec = one(rendered["default"], "DaemonSet")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert (
        spec["priorityClassName"] == one(rendered["default"], "PriorityClass")["metadata"]["name"]
    )
    assert "cpu" not in exporter_container(rendered["default"])["resources"]["limits"]
    docs = rendered["existing-priority-class"]
    assert not [d for d in docs if d["kind"] == "PriorityClass"]
    ds = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert ds["priorityClassName"] == "system-node-critical"
    custom = template(
        [
            "nodeSelector.pool=infra",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Equal",
            "tolerations[0].value=infra",
            "resources.requests.cpu=100m",
        ]
    )
    ds = one(custom, "DaemonSet")["spec"]["template"]["spec"]
    assert ds["nodeSelector"]["pool"] == "infra"
    assert ds["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "infra"}]
    assert exporter_container(custom)["resources"]["requests"]["cpu"] == "100m"


def test_no_kubernetes_mode_has_no_pod_rbac(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["no-kubernetes"]
    assert not [
        d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount")
    ]
    assert "--kubernetes" not in exporter_container(docs)["args"]


# --- without the Prometheus Operator ----------------------------------------------------


def test_without_the_operators_apis_the_chart_installs_without_its_objects() -> None:
    """Each operator object is rendered only where the cluster serves its API: without
    them the exporter, its Service and the dashboards (plain ConfigMaps) install alone,
    unchanged."""
    docs = render(["alertmanagerConfig.enabled=true"], apis=())
    kinds = [d["kind"] for d in docs]
    assert not set(kinds) & CRD_KINDS
    assert {"DaemonSet", "Service", "ConfigMap"} <= set(kinds)
    assert one(docs, "DaemonSet") == one(render([]), "DaemonSet")
    # Each object needs only its own API.
    for api in OPERATOR_APIS:
        kind = api.rsplit("/", 1)[1]
        sets = ["alertmanagerConfig.enabled=true", f"monitoring.kind={kind}"]
        if kind not in ("ServiceMonitor", "PodMonitor"):
            sets = ["alertmanagerConfig.enabled=true"]
        got = [d["kind"] for d in render(sets, apis=(api,)) if d["kind"] in CRD_KINDS]
        assert got == [kind], api


def _notes(sets: list[str]) -> str:
    """The install notes (`helm install --dry-run=client`: Helm 4 renders them offline,
    for a cluster that serves no operator API)."""
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for s_ in sets:
        args += ["--set", s_]
    out = helm(*args).stdout
    assert "NOTES:" in out
    return out.split("NOTES:", 1)[1]


def test_the_install_notes_say_what_was_left_out_and_why() -> None:
    notes = _notes(["alertmanagerConfig.enabled=true"])
    assert "NOT CREATED" in notes and "CRDs are not installed" in notes
    for kind in ("ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"):
        assert f"the {kind} (" in notes
    assert "nothing scrapes the exporter" in notes and "monitoring.requireCRDs=true" in notes
    assert "no `release` label" not in notes  # nothing was created to carry it
    pm = _notes(["monitoring.kind=PodMonitor", "prometheusRule.enabled=false"])
    assert "the PodMonitor (nothing scrapes" in pm and "PrometheusRule" not in pm
    off = _notes(["serviceMonitor.enabled=false", "prometheusRule.enabled=false"])
    assert "NOT CREATED" not in off


def test_require_crds_fails_the_install_where_an_api_is_missing() -> None:
    proc = helm(
        *template_args(["monitoring.requireCRDs=true"], apis=OPERATOR_APIS[:1]), check=False
    )
    assert proc.returncode != 0
    assert "monitoring.requireCRDs: this cluster does not serve" in proc.stderr
    assert "monitoring.coreos.com/v1/PrometheusRule" in proc.stderr
    assert "monitoring.coreos.com/v1/ServiceMonitor," not in proc.stderr  # it is served
    kinds = {d["kind"] for d in render(["monitoring.requireCRDs=true"])}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    # Disabled objects need no API.
    off = ["serviceMonitor.enabled=false", "prometheusRule.enabled=false"]
    assert not {d["kind"] for d in render(["monitoring.requireCRDs=true", *off], apis=())} & (
        CRD_KINDS
    )
