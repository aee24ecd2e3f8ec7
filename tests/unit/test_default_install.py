"""tests/e2e/default_install.py: the chart rendered, the exporter as its DaemonSet starts
it, the Prometheus Operator's scrape job and rule file, kube-prometheus-stack's
Alertmanager configuration; checked by promtool and amtool where they are installed."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import default_install as di
from tests.e2e.default_install import InstallError

from .conftest import tree

pytestmark = pytest.mark.timeout(120)

FIXTURE = tree("v2-systemd")
NODE = "node-a"
LISTEN = "127.0.0.1:19999"
Doc = dict[str, Any]


@pytest.fixture(scope="module")
def chart() -> list[Doc]:
    return di.render_chart()


@pytest.fixture(scope="module")
def pod_monitor_chart() -> list[Doc]:
    return di.render_chart({"monitoring": {"kind": "PodMonitor"}})


def _invocation(objects: list[Doc], tmp: Path, **kw: Any) -> di.Invocation:
    return di.exporter_from_daemonset(
        objects,
        workdir=tmp / "w",
        node_name=NODE,
        kubeconfig=str(tmp / "kubeconfig"),
        listen=LISTEN,
        host_root=kw.pop("host_root", FIXTURE),
        **kw,
    )


def need(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        pytest.skip(f"{binary} not installed (scripts/test.sh installs it)")
    return found


def promtool_check(what: str, doc: Doc, path: Path) -> None:
    """``promtool check config|rules`` on ``doc`` written to ``path``."""
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = subprocess.run(
        [need("promtool"), "check", what, str(path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr


# --- render_chart ----------------------------------------------------------------------


def test_render_finds_the_operator_objects_only_where_their_api_is_served(
    chart: list[Doc],
) -> None:
    kinds = {o["kind"] for o in chart}
    assert {"DaemonSet", "Service", "ServiceMonitor", "PrometheusRule"} <= kinds
    bare = {o["kind"] for o in di.render_chart(api_versions=())}
    assert "DaemonSet" in bare
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & bare


def test_render_errors_carry_helms_reason() -> None:
    with pytest.raises(InstallError, match="helm template .* failed") as e:
        di.render_chart({"thresholds": {"noSuchThreshold": 1}})
    assert "noSuchThreshold" in str(e.value)
    with pytest.raises(InstallError, match="expected one ServiceMonitor"):
        di.one_of(di.render_chart(api_versions=()), "ServiceMonitor")


# --- exporter_from_daemonset -----------------------------------------------------------


def _container(objects: list[Doc]) -> Doc:
    ds = di.one_of(objects, "DaemonSet")
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "exporter"]
    return dict(c)


def test_exporter_runs_the_daemonsets_args_with_two_deviations(
    chart: list[Doc], tmp_path: Path
) -> None:
    inv = _invocation(chart, tmp_path)
    args = _container(chart)["args"]
    root = tmp_path / "w" / "rootfs"
    want = [
        f"--web.listen-address={LISTEN}"
        if a.startswith("--web.listen-address=")
        else a.replace("=/", f"={root}/", 1)
        for a in args
    ]
    assert inv.argv[-len(args) :] == want
    assert Path(inv.argv[0]).name in ("contention-exporter", Path(sys.executable).name)
    assert inv.env == {"NODE_NAME": NODE, "KUBECONFIG": str(tmp_path / "kubeconfig")}
    assert [d.split(" ")[0] for d in inv.deviations] == [
        "--web.listen-address:",
        f"KUBECONFIG={tmp_path / 'kubeconfig'}",
    ]
    assert inv.cwd == inv.root == str(root)


def test_every_mount_is_a_symlink_to_its_volume(chart: list[Doc], tmp_path: Path) -> None:
    inv = _invocation(chart, tmp_path)
    root = Path(inv.root)
    c = _container(chart)
    assert sorted(inv.mounts) == sorted(m["mountPath"] for m in c["volumeMounts"])
    cgroup = root / "host/sys/fs/cgroup"
    assert cgroup.is_symlink() and os.readlink(cgroup) == str(FIXTURE / "sys/fs/cgroup")
    assert (root / "host/sys/fs/cgroup/cgroup.controllers").is_file()
    assert os.readlink(root / "sys/kernel/btf") == str(FIXTURE / "sys/kernel/btf")
    tmp = root / "tmp"  # the emptyDir
    assert tmp.is_symlink() and Path(os.readlink(tmp)) == tmp_path / "w" / "volumes" / "tmp"
    # --path.sysfs in the container is /host/sys: here it reaches the fixture's cgroups
    sysfs = next(a.split("=", 1)[1] for a in inv.argv if a.startswith("--path.sysfs="))
    assert (Path(sysfs) / "fs/cgroup/system.slice").is_dir()


def test_a_configmap_volume_holds_the_rendered_thresholds(tmp_path: Path) -> None:
    objects = di.render_chart({"thresholds": {"stallSome": 0.3}})
    inv = _invocation(objects, tmp_path)
    config = next(a.split("=", 1)[1] for a in inv.argv if a.startswith("--config.file="))
    assert config == inv.root + "/etc/contention-exporter/thresholds.yaml"
    (cm,) = [
        o
        for o in di.objects_of(objects, "ConfigMap")
        if o["metadata"]["name"].endswith("-thresholds")
    ]
    assert Path(config).read_text() == cm["data"]["thresholds.yaml"]
    assert yaml.safe_load(Path(config).read_text()) == {"stallSome": 0.3}


def _synthetic(container: Doc, volumes: list[Doc], extra: Sequence[Doc] = ()) -> list[Doc]:
    ds = {
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "mon"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "agent"}, "annotations": {"a/b": "c"}},
                "spec": {"containers": [container], "volumes": volumes},
            }
        },
    }
    return [ds, *extra]


def test_field_refs_items_subpath_and_var_expansion(tmp_path: Path) -> None:
    cm = {
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"one.yaml": "1\n", "two.yaml": "2\n", "level": "debug"},
    }
    container = {
        "name": "exporter",
        "args": ["--log.level=$(LEVEL)", "--config.file", "/etc/x/renamed.yaml", "$$(KEPT)"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
            {"name": "GREETING", "value": "on $(NODE_NAME)"},
        ],
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/x"},
            {"name": "cfg2", "mountPath": "/etc/only-two.yaml", "subPath": "two.yaml"},
        ],
    }
    items = {"name": "cfg", "items": [{"key": "one.yaml", "path": "renamed.yaml"}]}
    volumes = [{"name": "cfg", "configMap": items}, {"name": "cfg2", "configMap": {"name": "cfg"}}]
    inv = _invocation(_synthetic(container, volumes, [cm]), tmp_path, pod_name="agent-abcde")
    assert (
        inv.env["POD"] == "agent-abcde" and inv.env["NS"] == "mon" and inv.env["IP"] == "127.0.0.1"
    )
    assert inv.env["APP"] == "agent" and inv.env["GREETING"] == f"on {NODE}"
    assert inv.argv[-5:-1] == [
        "--log.level=debug",
        "--config.file",
        inv.root + "/etc/x/renamed.yaml",
        "$(KEPT)",
    ]
    assert Path(inv.root, "etc/x/renamed.yaml").read_text() == "1\n"
    assert sorted(os.listdir(Path(inv.root, "etc/x"))) == ["renamed.yaml"]  # items only
    assert Path(inv.root, "etc/only-two.yaml").read_text() == "2\n"
    assert inv.argv[-1] == f"--web.listen-address={LISTEN}"  # none in the args: added
    assert inv.pod.labels["app"] == "agent" and inv.pod.annotations == {"a/b": "c"}
    assert inv.pod.owner_kind == "DaemonSet" and inv.pod.owner_name == "agent"


@pytest.mark.parametrize(
    ("volumes", "mounts", "error"),
    [
        ([{"name": "s", "secret": {"secretName": "absent"}}], [("s", "/s")], "Secret absent"),
        (
            [{"name": "h", "hostPath": {"path": "/no/such", "type": "Directory"}}],
            [("h", "/h")],
            "is not a Directory",
        ),
        (
            [{"name": "h", "hostPath": {"path": "/new", "type": "DirectoryOrCreate"}}],
            [("h", "/h")],
            "created on the host",
        ),
        (
            [{"name": "e", "emptyDir": {}}, {"name": "f", "emptyDir": {}}],
            [("e", "/a"), ("f", "/a/b")],
            "inside another mount",
        ),
        ([{"name": "p", "projected": {"sources": []}}], [("p", "/p")], "not reproduced"),
        ([], [("gone", "/g")], "no volume 'gone'"),
    ],
)
def test_what_cannot_be_emulated_is_refused(
    tmp_path: Path, volumes: list[Doc], mounts: list[tuple[str, str]], error: str
) -> None:
    container = {
        "name": "exporter",
        "volumeMounts": [{"name": n, "mountPath": p} for n, p in mounts],
    }
    with pytest.raises(InstallError, match=error):
        _invocation(_synthetic(container, volumes), tmp_path)


def test_an_existing_rootfs_is_never_written_into(chart: list[Doc], tmp_path: Path) -> None:
    (tmp_path / "w" / "rootfs").mkdir(parents=True)
    with pytest.raises(InstallError, match="made anew"):
        _invocation(chart, tmp_path)


def test_the_pod_identity(chart: list[Doc], tmp_path: Path) -> None:
    pod = _invocation(chart, tmp_path).pod
    ds = di.one_of(chart, "DaemonSet")
    template_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert {k: pod.labels[k] for k in template_labels} == template_labels
    assert set(pod.labels) - set(template_labels) == {
        "controller-revision-hash",
        "pod-template-generation",
    }
    assert (pod.container, pod.port_name, pod.port) == ("exporter", "metrics", 10366)
    assert (
        pod.name.startswith("contention-exporter-")
        and len(pod.name) == len("contention-exporter-") + 5
    )
    assert pod.name == _invocation(chart, tmp_path / "again").pod.name  # stable per node


# --- operator_scrape_config ------------------------------------------------------------


def _job(objects: list[Doc], kind: str, tmp: Path, **kw: Any) -> Doc:
    inv = _invocation(objects, tmp)
    service = di.one_of(objects, "Service") if kind == "ServiceMonitor" else None
    return di.operator_scrape_config(
        di.one_of(objects, kind),
        target=LISTEN,
        pod=inv.pod,
        service=service,
        scrape_interval=kw.pop("scrape_interval", None),
        **kw,
    )


def test_service_monitor_rules_in_the_operators_order(chart: list[Doc], tmp_path: Path) -> None:
    """The order and content of research note §7a (read from promcfg.go), then the
    chart's relabelings as rendered, then sharding."""
    job = _job(chart, "ServiceMonitor", tmp_path)
    sm = di.one_of(chart, "ServiceMonitor")
    assert job["job_name"] == "serviceMonitor/contention-exporter/contention-exporter/0"
    assert job["honor_labels"] is True and "honor_timestamps" not in job
    ep = sm["spec"]["endpoints"][0]
    assert (job["scrape_interval"], job["scrape_timeout"]) == (ep["interval"], ep["scrapeTimeout"])
    rules = job["relabel_configs"]
    heads = [
        (r.get("action", "replace"), r.get("target_label"), tuple(r.get("source_labels", ())))
        for r in rules
    ]
    selector = sorted(sm["spec"]["selector"]["matchLabels"])
    assert heads[0] == ("replace", "__tmp_prometheus_job_name", ("job",))
    assert [h[2][0] for h in heads[1 : 1 + len(selector)]] == [
        "__meta_kubernetes_service_label_" + di.sanitize(k) for k in selector
    ]
    rest = heads[1 + len(selector) :]
    assert [(a, t) for a, t, _ in rest[:11]] == [
        ("keep", None),
        ("replace", "node"),
        ("replace", "pod"),
        ("replace", "namespace"),
        ("replace", "service"),
        ("replace", "pod"),
        ("replace", "container"),
        ("drop", None),
        ("replace", "job"),
        ("replace", "endpoint"),
        ("replace", "node"),  # the chart's first relabeling
    ]
    user = [di.relabel_config(r) for r in ep["relabelings"]]
    assert rules[-2 - len(user) : -2] == user
    assert user[-1] == {"regex": "namespace|pod|container", "action": "labeldrop"}
    assert rules[-2:] == [
        {
            "source_labels": ["__address__"],
            "target_label": "__tmp_hash",
            "modulus": 1,
            "action": "hashmod",
        },
        {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},
    ]


def test_the_endpoints_roles_meta_labels(chart: list[Doc], tmp_path: Path) -> None:
    job = _job(chart, "ServiceMonitor", tmp_path)
    (sc,) = job["static_configs"]
    assert sc["targets"] == [LISTEN]
    meta = sc["labels"]
    pod = _invocation(chart, tmp_path / "p").pod
    assert meta["__meta_kubernetes_endpoint_address_target_kind"] == "Pod"
    assert meta["__meta_kubernetes_endpoint_address_target_name"] == pod.name
    assert meta["__meta_kubernetes_endpoint_port_name"] == "metrics"
    assert meta["__meta_kubernetes_pod_container_name"] == "exporter"
    assert meta["__meta_kubernetes_pod_node_name"] == NODE
    assert meta["__meta_kubernetes_pod_controller_kind"] == "DaemonSet"
    # label keys sanitised; the endpoints controller marks a headless Service's Endpoints
    assert meta["__meta_kubernetes_service_label_app_kubernetes_io_name"] == "contention-exporter"
    assert meta["__meta_kubernetes_endpoints_labelpresent_service_kubernetes_io_headless"] == "true"
    assert meta["__meta_kubernetes_pod_annotation_contention_exporter_io_compute"] == "on"
    assert all(k.startswith("__meta_kubernetes_") for k in meta)
    assert "__meta_kubernetes_pod_container_id" not in meta  # the pod role's (v2.42)


def test_pod_monitor_job(pod_monitor_chart: list[Doc], tmp_path: Path) -> None:
    job = _job(pod_monitor_chart, "PodMonitor", tmp_path)
    assert job["job_name"] == "podMonitor/contention-exporter/contention-exporter/0"
    meta = job["static_configs"][0]["labels"]
    assert "__meta_kubernetes_service_name" not in meta
    assert meta["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert meta["__meta_kubernetes_pod_container_id"].startswith("containerd://")
    rules = job["relabel_configs"]
    assert rules[1] == {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "(Failed|Succeeded)",
    }
    assert {
        "target_label": "job",
        "replacement": "contention-exporter/contention-exporter",
    } in rules
    assert {"regex": "namespace|pod|container", "action": "labeldrop"} in rules


def test_overrides_and_what_is_refused(chart: list[Doc], tmp_path: Path) -> None:
    job = _job(chart, "ServiceMonitor", tmp_path, scrape_interval="1s", override_honor_labels=True)
    assert (job["scrape_interval"], job["scrape_timeout"]) == ("1s", "1s")  # timeout capped
    assert job["honor_labels"] is False
    inv = _invocation(chart, tmp_path / "x")
    sm = copy.deepcopy(di.one_of(chart, "ServiceMonitor"))
    sm["metadata"]["namespace"] = sm["spec"]["namespaceSelector"]["matchNames"][0] = "elsewhere"
    svc = di.one_of(chart, "Service")
    far = di.operator_scrape_config(
        sm, target=LISTEN, pod=inv.pod, service=svc, scrape_interval=None
    )
    assert far["static_configs"] == []  # not discovered in another namespace
    sm["spec"]["endpoints"][0]["tlsConfig"] = {"insecureSkipVerify": True}
    with pytest.raises(InstallError, match="tlsConfig"):
        di.operator_scrape_config(sm, target=LISTEN, pod=inv.pod, service=svc, scrape_interval=None)
    with pytest.raises(InstallError, match="needs the Service"):
        di.operator_scrape_config(
            di.one_of(chart, "ServiceMonitor"),
            target=LISTEN,
            pod=inv.pod,
            service=None,
            scrape_interval=None,
        )


def test_relabel_config_and_selectors() -> None:
    assert di.relabel_config({"targetLabel": "x", "replacement": "y"}) == {
        "target_label": "x",
        "replacement": "y",
        "action": "replace",
    }
    assert di.relabel_config({"action": "LabelDrop", "regex": "a"}) == {
        "regex": "a",
        "action": "labeldrop",
    }
    with pytest.raises(InstallError, match="unknown fields"):
        di.relabel_config({"target_label": "x"})
    sel = {
        "matchExpressions": [
            {"key": "a.b/c", "operator": "In", "values": ["x", "y"]},
            {"key": "d", "operator": "DoesNotExist"},
        ]
    }
    assert di._selector_rules(sel, "pod") == [
        {
            "action": "keep",
            "source_labels": [
                "__meta_kubernetes_pod_label_a_b_c",
                "__meta_kubernetes_pod_labelpresent_a_b_c",
            ],
            "regex": "(x|y);true",
        },
        {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_labelpresent_d"],
            "regex": "true",
        },
    ]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_promtool_accepts_the_generated_config(
    chart: list[Doc], pod_monitor_chart: list[Doc], tmp_path: Path, kind: str
) -> None:
    objects = chart if kind == "ServiceMonitor" else pod_monitor_chart
    for interval in (None, "1s"):
        cfg = {
            "scrape_configs": [
                _job(objects, kind, tmp_path / str(interval), scrape_interval=interval)
            ]
        }
        promtool_check("config", cfg, tmp_path / f"prometheus-{interval}.yml")


def test_durations() -> None:
    assert di.duration_ms("1m30s") == 90_000 and di.duration_ms("500ms") == 500
    assert [di.format_ms(ms) for ms in (1000, 10_000, 300_000, 1500, 3_600_000)] == [
        "1s",
        "10s",
        "5m",
        "1s500ms",
        "1h",
    ]
    with pytest.raises(InstallError):
        di.duration_ms("5 minutes")


# --- kube-prometheus-stack's Alertmanager ----------------------------------------------


def _am_config(tmp_path: Path, **kw: Any) -> Path:
    cfg = di.kps_alertmanager_config(webhook_url="http://127.0.0.1:9/alerts", **kw)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_kps_config_is_the_stacks_with_a_webhook_root(tmp_path: Path) -> None:
    inhibit = yaml.safe_load((di.ROOT / "rules" / "alertmanager.inhibit.yaml").read_text())
    cfg = di.kps_alertmanager_config(
        webhook_url="http://127.0.0.1:9/alerts",
        extra_inhibit_rules=inhibit["inhibit_rules"],
        time_scale=2 / 60,
    )
    kps = di.KPS_ALERTMANAGER_CONFIG
    assert cfg["global"] == kps["global"] and cfg["templates"] == kps["templates"]
    assert cfg["inhibit_rules"] == kps["inhibit_rules"] + inhibit["inhibit_rules"]
    assert cfg["route"] == {
        **kps["route"],
        "receiver": "webhook",
        "group_wait": "1s",
        "group_interval": "10s",
    }
    assert cfg["receivers"] == [
        {"name": "null"},
        {
            "name": "webhook",
            "webhook_configs": [{"url": "http://127.0.0.1:9/alerts", "send_resolved": True}],
        },
    ]
    assert kps["route"]["receiver"] == "null"  # the constant is not changed
    with pytest.raises(InstallError, match="time_scale"):
        di.kps_alertmanager_config(webhook_url="x", time_scale=0)


def test_amtool_checks_and_routes(tmp_path: Path) -> None:
    amtool = need("amtool")
    path = _am_config(tmp_path, time_scale=2 / 60)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([amtool, *args], capture_output=True, text=True, timeout=30)

    res = run("check-config", str(path))
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    for receiver, labels in (
        ("webhook", ["alertname=ContentionCPUThrottled", "severity=warning", "namespace=shop"]),
        ("null", ["alertname=Watchdog", "severity=none"]),
        ("webhook", ["alertname=InfoInhibitor", "severity=none", "namespace=shop"]),
    ):
        res = run(
            "config",
            "routes",
            "test",
            f"--config.file={path}",
            f"--verify.receivers={receiver}",
            *labels,
        )
        assert res.returncode == 0, (labels, res.stdout, res.stderr)
    wrong = run(
        "config",
        "routes",
        "test",
        f"--config.file={path}",
        "--verify.receivers=null",
        "alertname=ContentionCPUThrottled",
        "severity=warning",
    )
    assert wrong.returncode != 0  # the check above can fail


# --- rule files ------------------------------------------------------------------------


def test_rule_files_as_the_operator_writes_them(chart: list[Doc], tmp_path: Path) -> None:
    pr = di.one_of(chart, "PrometheusRule")
    assert di.prometheus_rule_file(pr, interval=None) == {"groups": pr["spec"]["groups"]}
    fast = di.prometheus_rule_file(pr, interval="2s")
    assert {g["interval"] for g in fast["groups"]} == {"2s"}
    assert [g["rules"] for g in fast["groups"]] == [g["rules"] for g in pr["spec"]["groups"]]
    for name, doc in (("chart", fast), ("kps", di.KPS_GENERAL_RULES)):
        promtool_check("rules", doc, tmp_path / f"{name}.rules.yaml")


def test_rule_fields_the_prometheus_does_not_know_are_dropped() -> None:
    pr = {
        "kind": "PrometheusRule",
        "spec": {
            "groups": [
                {
                    "name": "g",
                    "interval": "",
                    "limit": 5,
                    "query_offset": "1m",
                    "labels": {"a": "b"},
                    "partial_response_strategy": "warn",
                    "rules": [{"alert": "A", "expr": "1", "for": "", "keep_firing_for": "5m"}],
                }
            ]
        },
    }
    (g,) = di.prometheus_rule_file(pr, interval=None, prometheus_version="2.41.0")["groups"]
    assert g == {"name": "g", "limit": 5, "rules": [{"alert": "A", "expr": "1"}]}
    (g,) = di.prometheus_rule_file(pr, interval=None, prometheus_version="v3.1.0")["groups"]
    assert g["labels"] == {"a": "b"} and g["rules"][0]["keep_firing_for"] == "5m"
    with pytest.raises(InstallError, match="not a PrometheusRule"):
        di.prometheus_rule_file({"kind": "ConfigMap"}, interval=None)
