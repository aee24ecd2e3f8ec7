"""The generated Grafana dashboards: structure, metric names, thresholds, freshness."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("grafana_foundation_sdk")

from exporter.dashboards.base import DRILLDOWN_UID, OVERVIEW_UID  # noqa: E402
from exporter.dashboards.render import (  # noqa: E402
    DEPLOY_DIR,
    JSON_DIR,
    dashboard_json,
    dashboard_models,
    render_all,
)
from exporter.dashboards.selectors import named, named_culprit  # noqa: E402
from exporter.findings.thresholds import Thresholds, from_mapping, load_thresholds  # noqa: E402
from exporter.rules.recording import recording_rules  # noqa: E402
from tests.e2e.dashboard_queries import (  # noqa: E402
    all_panel_queries,
    all_variable_queries,
    substitute,
)
from tests.support.promql_names import metric_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds()


@pytest.fixture(scope="module")
def models(th: Thresholds) -> dict[str, dict[str, Any]]:
    return dashboard_models(th)


def all_panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in model["panels"]:
        yield p
        yield from p.get("panels") or []


def visual_panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(model) if p["type"] != "row"]


def panel(model: dict[str, Any], title_prefix: str) -> dict[str, Any]:
    found = [p for p in visual_panels(model) if p.get("title", "").startswith(title_prefix)]
    assert len(found) == 1, f"{title_prefix!r}: {[p.get('title') for p in found]}"
    return found[0]


def steps(p: dict[str, Any]) -> list[float]:
    return [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"][1:]]


# -- structure ------------------------------------------------------------------------


def test_two_dashboards_with_stable_uids(models: dict[str, dict[str, Any]]) -> None:
    assert list(models) == [OVERVIEW_UID, DRILLDOWN_UID]
    for uid, m in models.items():
        assert m["uid"] == uid
        assert 8 <= len(uid) <= 40
        assert "contention-exporter" in m["tags"]
        assert "id" not in m  # instance-specific: Grafana assigns it on import


def test_every_panel_has_datasource_query_unit_description(
    models: dict[str, dict[str, Any]],
) -> None:
    for uid, m in models.items():
        for p in visual_panels(m):
            where = f"{uid}: {p.get('title')!r}"
            assert p.get("title"), where
            assert p.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, where
            assert len(p.get("description", "")) > 80, f"{where}: describe meaning and action"
            assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
            assert p.get("targets"), f"{where}: no query"
            for t in p["targets"]:
                assert t.get("expr"), where
                assert t.get("datasource") == p["datasource"], where
                assert t.get("refId"), where
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), f"{where}: duplicate refId"


def test_no_duplicate_panel_ids(models: dict[str, dict[str, Any]]) -> None:
    for uid, m in models.items():
        ids = [p["id"] for p in all_panels(m)]
        assert all(isinstance(i, int) and i > 0 for i in ids), uid
        assert len(ids) == len(set(ids)), f"{uid}: duplicate panel ids"


def test_panels_fit_the_grid(models: dict[str, dict[str, Any]]) -> None:
    for uid, m in models.items():
        for p in all_panels(m):
            g = p["gridPos"]
            assert g["x"] >= 0 and g["x"] + g["w"] <= 24, f"{uid}: {p.get('title')}"


def test_issue_panels_present(models: dict[str, dict[str, Any]]) -> None:
    ov, dd = models[OVERVIEW_UID], models[DRILLDOWN_UID]
    types = {p["type"] for p in visual_panels(dd)}
    assert {"heatmap", "nodeGraph", "timeseries", "table"} <= types
    # The node graph gets an edges frame: id/source/target labels and a mainstat.
    ng = next(p for p in visual_panels(dd) if p["type"] == "nodeGraph")
    (t,) = ng["targets"]
    assert t["refId"] == "edges" and t["format"] == "table" and t["instant"]
    assert all(f'"{lab}"' in t["expr"] for lab in ("id", "source", "target"))
    assert ng["transformations"][0]["options"]["renamePattern"] == "mainstat"
    hm = next(p for p in visual_panels(dd) if p["type"] == "heatmap")
    assert hm["targets"][0]["format"] == "heatmap"
    assert "sum by(le)" in hm["targets"][0]["expr"]
    # Overview: the entitlement basis is shown with every gauge.
    for title in ("CPU used / entitlement", "Memory working set / entitlement"):
        p = panel(ov, title)
        assert p["type"] == "bargauge"
        assert "{{basis}}" in p["targets"][0]["legendFormat"]
        assert "group_left(basis)" in p["targets"][0]["expr"]
    assert panel(ov, "Active findings")["type"] == "table"
    assert panel(dd, "Active findings")["type"] == "table"


def test_template_variables(models: dict[str, dict[str, Any]]) -> None:
    names = {uid: [v["name"] for v in m["templating"]["list"]] for uid, m in models.items()}
    assert names[OVERVIEW_UID] == ["datasource", "cluster", "node", "namespace"]
    assert names[DRILLDOWN_UID] == [
        "datasource",
        "cluster",
        "node",
        "namespace",
        "pod",
        "container",
        "cgroup",
    ]
    for m in models.values():
        for v in m["templating"]["list"]:
            if v["type"] == "datasource":
                assert v["query"] == "prometheus"
                continue
            assert v["datasource"]["uid"] == "${datasource}"
            if v.get("includeAll"):
                # '.*' also matches an absent label: host mode has no namespace/pod/container
                assert v["allValue"] == ".*", v["name"]


def test_queries_work_in_host_and_kubernetes_mode(models: dict[str, dict[str, Any]]) -> None:
    """Kubernetes labels are only ever matched by regex (absent in host mode), and no
    query requires them to be set."""
    for uid, m in models.items():
        for p in visual_panels(m):
            for t in p["targets"]:
                e = t["expr"]
                for lab in ("namespace", "pod", "container"):
                    assert not re.search(rf'\b{lab}\s*(=|!=|!~)\s*"', e), (uid, p["title"], lab)
                    for value in re.findall(rf'\b{lab}=~"([^"]*)"', e):
                        assert value == f"${lab}", (uid, p["title"], lab, value)


# -- metric names ---------------------------------------------------------------------


def test_metric_name_parser() -> None:
    e = (
        'max by(instance, cgroup) (label_replace(rate(a_total{x=~"$y", le="0.02"}[5m] '
        'offset 1m) / on(instance) group_left(basis) b, "v", "$1", "c", "(.*)")) '
        "and (c:d:e * 60 >= 1e-3) unless topk(10, histogram_quantile(0.99, f_bucket))"
        " - time()"
    )
    assert metric_names(e) == {"a_total", "b", "c:d:e", "f_bucket"}


def _exporter_metric_names() -> set[str]:
    """Every sample name the exporter's code can expose: families built with a literal
    name anywhere in the package, plus the golden expositions (names built in f-strings)."""
    names: set[str] = set()
    for path in (ROOT / "exporter").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if not fname.endswith("MetricFamily") or not isinstance(arg, ast.Constant):
                continue
            name = str(arg.value)
            if fname.startswith("Counter"):
                name = name.removesuffix("_total")
                names |= {name, f"{name}_total"}
            elif fname.startswith("Histogram"):
                names |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            else:
                names.add(name)
    for golden in (ROOT / "tests" / "golden").glob("*.prom"):
        for line in golden.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def _documented_names() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    names = set(re.findall(r"\bcontention_[a-z0-9_]+", text))
    return names | {f"{n}_{s}" for n in names for s in ("bucket", "sum", "count")}


def test_queries_use_only_exported_metrics_or_recording_rules(th: Thresholds) -> None:
    known = (
        _exporter_metric_names() | _documented_names() | {r["record"] for r in recording_rules(th)}
    )
    used: set[str] = set()
    for uid, title, expr in all_panel_queries():
        names = metric_names(expr)
        assert names, f"{uid}: {title!r} selects no metric: {expr}"
        unknown = names - known
        assert not unknown, f"{uid}: {title!r} uses unknown metrics {sorted(unknown)}"
        used |= names
    for uid, var, selector, _label in all_variable_queries():
        assert metric_names(selector) <= known, (uid, var)
    # The dashboards cover every layer: usage, stall, blame, findings, node, probe.
    for must in (
        "contention_cpu_usage_seconds_total",
        "contention_cpu_entitlement_cores",
        "contention_memory_entitlement_bytes",
        "contention_cpu_cfs_throttled_periods_total",
        "contention_pressure_cpu_stalled_seconds_total",
        "contention_memory_workingset_refaults_total",
        "contention_memory_events_total",
        "contention_runqueue_latency_seconds_bucket",
        "contention_blame_ratio",
        "contention_finding",
        "contention_probe_loaded",
        "contention_probe_unknown_blame_ratio",
        "contention_probe_map_entries",
        "contention_probe_program_run_seconds_total",
        "contention_node_context_switches_total",
    ):
        assert must in used, must


# -- thresholds come from the one config -----------------------------------------------


def test_threshold_lines_follow_the_config(th: Thresholds) -> None:
    custom = from_mapping(
        {
            **th.to_yaml_dict(),
            "windowMinutes": 10,
            "throttledRatio": 0.3,
            "throttledRatioMax": 0.15,
            "stallSome": 0.35,
            "runqP99Ms": 50,
            "criticalRunqP99Ms": 1000,
            "minRunqEvents": 70,
            "blameShare": 0.55,
            "criticalCpuFull": 0.2,
            "memStallSome": 0.12,
            "criticalMemFull": 0.3,
            "refaultPerMin": 2000,
            "nodeMemStallSome": 0.07,
            "samplerStaleSeconds": 90,
            "samplerStaleFor": "2m",
        }
    )
    m = dashboard_models(custom)
    ov, dd = m[OVERVIEW_UID], m[DRILLDOWN_UID]
    assert steps(panel(dd, "Throttled periods (10m window)")) == [0.15, 0.3]
    assert "[10m]" in panel(dd, "Throttled periods")["targets"][0]["expr"]
    assert steps(panel(dd, "Run-queue p99")) == [0.05, 1.0]
    assert steps(panel(dd, "CPU pressure some")) == [0.35]
    assert steps(panel(dd, "CPU pressure full")) == [0.2]
    assert steps(panel(dd, "Wakeups per minute")) == [70]
    assert steps(panel(dd, "Top culprits' share")) == [0.55]
    assert steps(panel(dd, "Memory pressure some")) == [0.12]
    assert steps(panel(dd, "Memory pressure full")) == [0.3]
    assert steps(panel(dd, "Workingset refaults")) == [2000]
    assert steps(panel(dd, "Node memory pressure")) == [0.07]
    assert steps(panel(ov, "Node memory pressure")) == [0.07]
    assert steps(panel(ov, "Worst CPU pressure")) == [0.35]
    assert steps(panel(ov, "Worst run-queue p99")) == [0.05, 1.0]
    assert ">= 70" in panel(ov, "Worst run-queue p99")["targets"][0]["expr"]
    assert steps(panel(ov, "Worst CPU throttling (10m window)")) == [0.15, 0.3]
    # ContentionSamplerStale's condition, then the age at which it fires
    assert steps(panel(ov, "Last sampler pass")) == [90, 210]
    # Lines are drawn on the time series that carry a threshold.
    p = panel(dd, "Run-queue p99")
    assert p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    # The findings table colours its number columns with the same thresholds.
    table = panel(ov, "Active findings")
    by_name = {
        o["matcher"]["options"]: {prop["id"]: prop.get("value") for prop in o["properties"]}
        for o in table["fieldConfig"]["overrides"]
    }
    got = [s["value"] for s in by_name["throttled (window)"]["thresholds"]["steps"][1:]]
    assert got == [0.15, 0.3]
    got = [s["value"] for s in by_name["run-queue p99 (1m)"]["thresholds"]["steps"][1:]]
    assert got == [0.05, 1.0]


def test_default_thresholds_are_the_documented_ones(models: dict[str, dict[str, Any]]) -> None:
    dd = models[DRILLDOWN_UID]
    assert steps(panel(dd, "Run-queue p99")) == [0.02, 0.2]  # 20 ms / 200 ms
    assert steps(panel(dd, "Throttled periods")) == [0.1, 0.25]
    # samplerStaleSeconds (60), then samplerStaleFor (5m) later: as the alert
    assert steps(panel(models[OVERVIEW_UID], "Last sampler pass")) == [60, 360]


# -- generated files ---------------------------------------------------------------------


def test_generated_files_are_fresh(th: Thresholds) -> None:
    stale = []
    for rel, text in render_all(th).items():
        path = ROOT / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(rel))
    assert (
        not stale
    ), f"out of date: {stale}; run `contention-exporter dashboards generate` and commit"


def test_generation_is_deterministic(th: Thresholds) -> None:
    assert render_all(th) == render_all(th)


def test_configmaps_wrap_the_json(th: Thresholds) -> None:
    files = render_all(th)
    uids = list(dashboard_models(th))
    for uid in uids:
        doc = yaml.safe_load(files[DEPLOY_DIR / f"{uid}.yaml"])
        assert doc["kind"] == "ConfigMap" and doc["apiVersion"] == "v1"
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert doc["data"] == {f"{uid}.json": files[JSON_DIR / f"{uid}.json"]}
        assert json.loads(doc["data"][f"{uid}.json"])["uid"] == uid
    kust = yaml.safe_load(files[DEPLOY_DIR / "kustomization.yaml"])
    assert kust["kind"] == "Kustomization"
    assert kust["resources"] == [f"{uid}.yaml" for uid in uids]


def test_json_is_sorted_and_newline_terminated(models: dict[str, dict[str, Any]]) -> None:
    text = dashboard_json(models[OVERVIEW_UID])
    assert text.endswith("}\n")
    assert json.loads(text) == models[OVERVIEW_UID]


def _run(argv: list[str]) -> int:
    from exporter.commands import main

    return main(argv)


def test_cli_generate_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["dashboards", "generate", "--check", "--output.dir", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert _run(["dashboards", "generate", "--output.dir", str(tmp_path)]) == 0
    assert (tmp_path / "dashboards" / f"{OVERVIEW_UID}.json").is_file()
    assert (tmp_path / "deploy" / "dashboards" / "kustomization.yaml").is_file()
    assert _run(["dashboards", "generate", "--check", "--output.dir", str(tmp_path)]) == 0
    # A changed threshold makes the committed files stale.
    cfg = tmp_path / "th.yaml"
    cfg.write_text("throttledRatio: 0.5\n", encoding="utf-8")
    argv = [
        "dashboards",
        "generate",
        "--check",
        "--output.dir",
        str(tmp_path),
        "--config.file",
        str(cfg),
    ]
    assert _run(argv) == 1
    # A bad config is a usage error, not a traceback.
    cfg.write_text("nope: 1\n", encoding="utf-8")
    assert _run(argv) == 2
    assert _run(["dashboards"]) == 2


# -- the e2e helper ----------------------------------------------------------------------


def test_e2e_helper_substitutes_every_variable() -> None:
    queries = all_panel_queries()
    assert len(queries) > 40
    uids = {uid for uid, _, _ in queries}
    assert uids == {OVERVIEW_UID, DRILLDOWN_UID}
    for uid, title, expr in queries:
        leftover = re.findall(r"\$\{?(\w+)", expr)
        assert all(v.isdigit() for v in leftover), (uid, title, leftover)
        assert "[1m]" in expr or "$__rate_interval" not in expr
    pinned = all_panel_queries(variables={"node": "10.0.0.1:10366"})
    assert any('instance=~"10.0.0.1:10366"' in e for _, _, e in pinned)
    assert (
        substitute(
            'rate(x{a=~"$cgroup"}[$__rate_interval])', {"cgroup": ".*", "__rate_interval": "2m"}
        )
        == 'rate(x{a=~".*"}[2m])'
    )
    with pytest.raises(KeyError):
        substitute('x{a=~"$nope"}', {})
    variables = all_variable_queries()
    assert {(uid, var) for uid, var, _, _ in variables} >= {(DRILLDOWN_UID, "cgroup")}


# -- the naming helpers, evaluated by Prometheus itself -----------------------------------


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_victim_and_culprit_names_in_promql(tmp_path: Path) -> None:
    """Host mode names a victim by its cgroup, Kubernetes mode by ns/pod/container;
    culprits are named the same way so one cgroup is one node of the graph."""
    k8s = 'cgroup="/kp/x", namespace="ns", pod="p", container="c"'
    culprit_pod = (
        'culprit_kind="pod", culprit="ns/p/c", culprit_cgroup="/kp/y", '
        'culprit_namespace="ns", culprit_pod="p", culprit_container="c"'
    )
    unit = (
        'culprit_kind="system", culprit="system.slice/k.service", '
        'culprit_cgroup="/system.slice/k.service"'
    )
    doc = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": 'm{cgroup="/system.slice/cron.service"}', "values": "1"},
                    {"series": f"m{{{k8s}}}", "values": "2"},
                    {"series": f'b{{cgroup="/x", {culprit_pod}}}', "values": "3"},
                    {"series": f'b{{cgroup="/x", {unit}}}', "values": "4"},
                    {
                        "series": 'b{cgroup="/x", culprit_kind="kernel", culprit="kernel", '
                        'culprit_cgroup="/"}',
                        "values": "5",
                    },
                    {
                        "series": 'b{cgroup="/x", culprit_kind="idle", culprit="idle"}',
                        "values": "6",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": named("m"),
                        "eval_time": "0m",
                        "exp_samples": [
                            {
                                "labels": 'm{cgroup="/system.slice/cron.service", '
                                'victim="/system.slice/cron.service"}',
                                "value": 1,
                            },
                            {"labels": f'm{{{k8s}, victim="ns/p/c"}}', "value": 2},
                        ],
                    },
                    {
                        "expr": named_culprit("b"),
                        "eval_time": "0m",
                        "exp_samples": [
                            {
                                "labels": f'b{{cgroup="/x", {culprit_pod}, target="ns/p/c"}}',
                                "value": 3,
                            },
                            {
                                "labels": f'b{{cgroup="/x", {unit}, '
                                'target="/system.slice/k.service"}',
                                "value": 4,
                            },
                            {
                                "labels": 'b{cgroup="/x", culprit_kind="kernel", culprit="kernel", '
                                'culprit_cgroup="/", target="kernel"}',
                                "value": 5,
                            },
                            {
                                "labels": 'b{cgroup="/x", culprit_kind="idle", culprit="idle", '
                                'target="idle"}',
                                "value": 6,
                            },
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "names.test.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    res = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
