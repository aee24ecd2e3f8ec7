"""Thresholds as chart values, with no Python step: for several threshold sets,
`helm template --set-json thresholds=...` renders exactly the rule groups and
dashboards the exporter's generators make from the same thresholds (the path
`rules print rules --config.file` and `dashboards generate --config.file` take), the exporter
accepts the ConfigMap it renders, and what the exporter would refuse fails the
install with the reason (exporter/chart, templates/_thresholds.tpl)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.chart import files as chart_files_mod
from exporter.chart.kinds import KINDS, SHAPE, ChartTemplateError
from exporter.chart.schema import RE2_PATTERNS, thresholds_schema
from exporter.chart.sentinels import first_difference, template
from exporter.findings.thresholds import (
    DEFAULT_KEYS,
    Thresholds,
    load_thresholds,
    parse_thresholds,
)
from exporter.rules.pack import render_inhibit_file, rule_groups

from .manifests import (
    CHART,
    RELEASE,
    ROOT,
    Doc,
    crd_errors,
    exporter_container,
    helm,
    need,
    one,
    render,
    template_args,
)

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

EVERY_VALUE_KEY: dict[str, Any] = {
    "throttledRatio": 0.3,
    "throttledRatioMax": 0.05,
    "stallSome": 0.15,
    "runqP99Ms": 50,
    "minRunqEvents": 20,
    "blameShare": 0.55,
    "criticalCpuFull": 0.2,
    "criticalRunqP99Ms": 1000,
    "cpuStealRatio": 0.07,
    "memStallSome": 0.12,
    "refaultPerMin": 2500,
    "nodeMemStallSome": 0.08,
    "memCulpritShare": 0.6,
    "criticalMemFull": 0.3,
    "selector": '{job="ce" , env=~"prod|stage"}',
    "alertLabels": {"team": "platform", "page": 3},
    "disabledAlerts": ["ContentionCPUThrottled", "ContentionProbeUnknownBlameHigh"],
    "alertSeverity": {"noisy-neighbor": "critical", "cpu-contended": "info"},
    "runbookUrl": "https://git.example.com/ops/ce/blob/v0.1.0/docs/runbook.md#",
    "exporterDownFor": "10m",
    "probeNotLoadedFor": "1h",
    "samplerStaleSeconds": 90,
    "samplerStaleFor": "2m30s",
    "collectorFailingFor": "20m",
    "probeMapFailuresFor": "5m",
    "unknownBlameRatio": 0.65,
    "unknownBlameFor": "45m",
}
# Bounds of the schema, numbers Go and Python print differently unless the chart takes
# care (1e-05, 1e+09, 1234567.5), and percentages on a rounding edge (0.575 is
# 57.49999999999999 % in float arithmetic: "57%").
EDGES: dict[str, Any] = {
    "throttledRatio": 1,
    "throttledRatioMax": 0.00001,
    "stallSome": 0.575,
    "blameShare": 1.0,
    "criticalCpuFull": 0.123456789,
    "memStallSome": 0.145,
    "nodeMemStallSome": 0.3333333333333333,
    "refaultPerMin": 1000000000,
    "minRunqEvents": 0,
    "samplerStaleSeconds": 86400,
    "unknownBlameRatio": 0.00015,
    "runqP99Ms": 5,
    "criticalRunqP99Ms": 5,
    "disabledAlerts": "ContentionExporterDown",
    "alertLabels": {"x": "1.5"},
    "runbookUrl": None,
}
MORE_EDGES: dict[str, Any] = {
    "refaultPerMin": 1234567.5,
    "minRunqEvents": 1000000,
    "samplerStaleSeconds": 0.5,
    "samplerStaleFor": "1d2h",
    "cpuStealRatio": 0.575,
    "criticalMemFull": 0.015,
    "throttledRatio": 0.925,
    "throttledRatioMax": 0.005,
    "disabledAlerts": [
        "ContentionExporterDown",
        "ContentionExporterAbsent",
        "ContentionProbeNotLoaded",
        "ContentionSamplerStale",
        "ContentionCollectorFailing",
        "ContentionProbeMapUpdateFailures",
        "ContentionProbeUnknownBlameHigh",
    ],
}
SETS = {
    "defaults": {},
    "one-key": {"stallSome": 0.3},
    "every-value-key": EVERY_VALUE_KEY,
    "edges": EDGES,
    "more-edges": MORE_EDGES,
}
# Only keys the thresholds file has (a key is added with its kind in exporter/chart).
for _set in SETS.values():
    for _key in set(_set) - set(DEFAULT_KEYS):
        del _set[_key]


def _exporter_thresholds(overrides: dict[str, Any]) -> Thresholds:
    """What the exporter and its generators take from the same file (--config.file)."""
    return parse_thresholds(yaml.safe_dump(overrides).encode(), "thresholds.yaml")


def _known_health_alerts(names: list[str]) -> list[str]:
    """The self-monitoring alerts of the list the pack has (another engineer's new ones
    may not be in a test's fixed list)."""
    from exporter.rules.pack import ALERTS

    return [n for n in names if n in ALERTS]


def _render(overrides: dict[str, Any], *sets: str) -> list[Doc]:
    extra = ("--set-json", f"thresholds={json.dumps(overrides)}") if overrides else ()
    return render(sets, extra)


def _dashboards(docs: list[Doc]) -> dict[str, Any]:
    out = {}
    for cm in docs:
        if "grafana_dashboard" in cm["metadata"].get("labels", {}):
            ((name, text),) = cm["data"].items()
            out[name.removesuffix(".json")] = json.loads(text)
    return out


@pytest.mark.parametrize("name", sorted(SETS))
def test_the_chart_renders_what_the_generators_make(name: str) -> None:
    overrides = dict(SETS[name])
    if isinstance(overrides.get("disabledAlerts"), list):
        overrides["disabledAlerts"] = _known_health_alerts(overrides["disabledAlerts"])
    pytest.importorskip("grafana_foundation_sdk")
    from exporter.dashboards.render import dashboard_models

    docs = _render(overrides)
    th = _exporter_thresholds(overrides)
    want = json.loads(json.dumps(rule_groups(th)["groups"]))
    got = one(docs, "PrometheusRule")["spec"]["groups"]
    assert first_difference(want, got) is None
    assert got == want
    want_dashboards = json.loads(json.dumps(dashboard_models(th)))
    got_dashboards = _dashboards(docs)
    assert first_difference(want_dashboards, got_dashboards) is None
    assert got_dashboards == want_dashboards
    if overrides:
        assert got != json.loads(json.dumps(rule_groups(load_thresholds())["groups"]))


def test_helm3_and_helm4_render_the_same_thresholds() -> None:
    extra = ("--set-json", f"thresholds={json.dumps(SETS['every-value-key'])}")
    assert render((), extra, binary="helm3") == render((), extra)


def test_the_rules_are_those_of_rules_print_rules_for_the_same_file(tmp_path: Path) -> None:
    """The command users would run, once, for the set that changes every value key."""
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(EVERY_VALUE_KEY))
    ce = str(Path(sys.executable).parent / "contention-exporter")
    proc = subprocess.run(
        [ce, "rules", "print", "rules", "--config.file", str(tmp_path / "t.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rule = one(_render(EVERY_VALUE_KEY), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(proc.stdout)["groups"]
    assert crd_errors([rule]) == []


def test_the_default_render_is_the_committed_rules_and_dashboards() -> None:
    docs = render()
    committed = yaml.safe_load((ROOT / "rules/contention.rules.yaml").read_text())
    assert one(docs, "PrometheusRule")["spec"]["groups"] == committed["groups"]
    for uid, model in _dashboards(docs).items():
        assert model == json.loads((ROOT / "dashboards" / f"{uid}.json").read_text())


@pytest.mark.parametrize("name", ["one-key", "every-value-key"])
def test_the_exporter_reads_the_same_thresholds_from_its_configmap(
    name: str, tmp_path: Path
) -> None:
    """--config.file names the ConfigMap's file, which holds the overrides as given and is a
    file the exporter accepts; a change of thresholds rolls the pods."""
    overrides = SETS[name]
    docs = _render(overrides)
    args = exporter_container(docs)["args"]
    assert "--config.file=/etc/contention-exporter/thresholds.yaml" in args
    cm = one(docs, "ConfigMap", f"{RELEASE}-thresholds")
    text = cm["data"]["thresholds.yaml"]
    assert yaml.safe_load(text) == overrides
    (tmp_path / "t.yaml").write_text(text)
    assert load_thresholds(tmp_path / "t.yaml") == _exporter_thresholds(overrides)
    pod = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    other = one(_render({"stallSome": 0.35}), "DaemonSet")["spec"]["template"]["metadata"]
    assert pod["checksum/thresholds"] != other["annotations"]["checksum/thresholds"]
    default = exporter_container(render())
    assert not any(a.startswith("--config.file") for a in default["args"])


# --- what the exporter would refuse, refused at install ----------------------------------


def _refused(overrides: dict[str, Any], *sets: str, binary: str = "helm") -> str:
    args = template_args(sets, ("--set-json", f"thresholds={json.dumps(overrides)}"))
    proc = helm(*args, binary=binary, check=False)
    assert proc.returncode != 0, f"accepted {overrides}"
    return proc.stderr


@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_an_unknown_or_misspelt_key_fails_naming_it(binary: str) -> None:
    err = _refused({"stalSome": 0.3}, binary=binary)
    assert "stalSome" in err and "thresholds" in err
    err = _refused({"stallSome": 1.5}, binary=binary)
    assert "stallSome" in err
    if "alertSeverity" in DEFAULT_KEYS:
        err = _refused({"alertSeverity": {"noisy-neighbor": "page"}}, binary=binary)
        assert "noisy-neighbor" in err
    proc = helm(*template_args(["thresholds.stallSome=0.3"]), binary=binary, check=False)
    assert proc.returncode != 0 and "stallSome" in proc.stderr  # --set: a string


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"runqP99Ms": 30}, "runqP99Ms: 30 ms is not a run-queue histogram bound"),
        ({"criticalRunqP99Ms": 20, "runqP99Ms": 50}, "criticalRunqP99Ms must be >= runqP99Ms"),
        ({"throttledRatioMax": 0.5}, "throttledRatioMax (0.5) above throttledRatio (0.25)"),
        ({"sustainMinutes": 9}, "sustainMinutes must not exceed windowMinutes"),
        ({"alertLabels": {"severity": "x"}}, 'alertLabels: "severity" is set by the rule'),
        ({"disabledAlerts": ["ContentionNope"]}, "disabledAlerts: no alert named ContentionNope"),
        ({"selector": "job=x"}, "thresholds.selector: expected matchers"),
        ({"selector": 'job="a",, x="b"'}, "thresholds.selector: expected matchers"),
    ],
)
def test_what_the_exporter_checks_across_keys_fails_the_install(
    overrides: dict[str, Any], message: str
) -> None:
    """The same refusals as exporter/findings/thresholds.py, with the key."""
    assert message in _refused(
        overrides, "prometheusRule.enabled=false", "dashboards.enabled=false"
    )
    with pytest.raises(ValueError):  # and the exporter does refuse it
        rule_groups(_exporter_thresholds(overrides))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("windowMinutes", 10),
        ("sustainMinutes", 3),
        ("nodeLabels", ["cluster", "instance"]),
        ("clusterLabel", "k8s_cluster"),
    ],
)
def test_a_shape_key_is_kept_while_the_chart_deploys_rules_or_dashboards(
    key: str, value: Any
) -> None:
    """They change the rules' terms, ranges and joins: refused with the way out; the
    exporter alone takes them."""
    assert KINDS[key] == SHAPE
    for sets in ((), ("prometheusRule.enabled=false",), ("dashboards.enabled=false",)):
        err = _refused({key: value}, *sets)
        assert f"thresholds.{key}: the chart's alert rules and dashboards are built for" in err
        assert "prometheusRule.enabled=false and dashboards.enabled=false" in err
    docs = _render({key: value}, "prometheusRule.enabled=false", "dashboards.enabled=false")
    assert yaml.safe_load(one(docs, "ConfigMap")["data"]["thresholds.yaml"]) == {key: value}
    # The packaged value itself is fine.
    default = load_thresholds().to_yaml_dict()[key]
    assert one(_render({key: default}), "PrometheusRule")


def test_the_old_generated_values_are_ignored_with_a_notice() -> None:
    docs = render(["generated.version=0.0.1"])
    assert (
        one(docs, "PrometheusRule")["spec"]["groups"]
        == one(render(), "PrometheusRule")["spec"]["groups"]
    )
    out = helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "--set", "generated.version=0.0.1"
    ).stdout
    assert "DEPRECATED: `generated`" in out.split("NOTES:", 1)[1]


# --- the inhibit rule ----------------------------------------------------------------------


def _crd_matchers(matchers: list[str]) -> list[dict[str, str]]:
    """Alertmanager's `name="value"` matchers as an AlertmanagerConfig's."""
    out = []
    for m in matchers:
        name, _, value = m.partition("=")
        out.append({"name": name, "value": value.strip('"'), "matchType": "="})
    return out


def test_alertmanagerconfig_holds_the_shipped_inhibit_rule() -> None:
    """The chart's AlertmanagerConfig is rules/alertmanager.inhibit.yaml; off by
    default; left out with the throttled alert (the inhibit file is then empty)."""
    on = ["alertmanagerConfig.enabled=true", "monitoring.labels.release=kube-prometheus-stack"]
    assert not [d for d in render() if d["kind"] == "AlertmanagerConfig"]
    amc = one(render(on), "AlertmanagerConfig")
    assert amc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (want,) = yaml.safe_load(render_inhibit_file(load_thresholds()))["inhibit_rules"]
    assert amc["spec"]["inhibitRules"] == [
        {
            "sourceMatch": _crd_matchers(want["source_matchers"]),
            "targetMatch": _crd_matchers(want["target_matchers"]),
            "equal": want["equal"],
        }
    ]
    assert crd_errors([amc]) == []
    off = {"disabledAlerts": ["ContentionCPUThrottled"]}
    assert yaml.safe_load(render_inhibit_file(_exporter_thresholds(off)))["inhibit_rules"] == []
    assert not [d for d in _render(off, *on) if d["kind"] == "AlertmanagerConfig"]


# --- the generated files -------------------------------------------------------------------


def test_the_chart_files_are_fresh() -> None:
    """What scripts/generate-deploy.py writes into the chart (check-generated.sh runs
    it with --check, which also renders the kustomize base)."""
    pytest.importorskip("grafana_foundation_sdk")
    for path, text in chart_files_mod.chart_files(load_thresholds(), ROOT).items():
        assert (ROOT / path).read_text("utf-8") == text, f"stale {path}: scripts/generate-deploy.py"


def test_the_values_schema_has_every_threshold_key_and_bound() -> None:
    from exporter.config_file import schema

    chart = json.loads((CHART / "values.schema.json").read_text())["properties"]["thresholds"]
    assert chart == thresholds_schema()
    assert chart["additionalProperties"] is False
    assert set(chart["properties"]) == set(schema("thresholds")["properties"])
    assert chart["properties"]["windowMinutes"]["maximum"] == 60
    assert "$ref" not in json.dumps(chart) and "(?" not in json.dumps(chart).replace("(?:", "")


@pytest.mark.parametrize(("python", "re2"), list(RE2_PATTERNS.items()))
def test_the_re2_patterns_accept_what_the_exporters_accept(python: str, re2: str) -> None:
    """Go's regexp has no look-ahead: the chart's schema spells those two patterns
    without; on 20,000 strings both give the same verdict."""
    rng = random.Random(24)
    alphabet = "0123456789msmhdwy_aZ"
    samples = ["", "0s", "0m0s", "10m", "1h0m", "_", "__", "__x", "_1", "a__", "5ms", "0ms5s"]
    samples += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(20000)
    ]
    for s in samples:
        assert bool(re.match(python, s)) == bool(re.match(re2, s)), s


# --- the templating itself -----------------------------------------------------------------


def test_a_form_the_templater_does_not_know_fails_loudly() -> None:
    """A threshold printed in a way exporter/chart has no form for (here: per mille)
    leaves the two sentinel runs different: generation fails, naming where."""

    def per_mille(th: Thresholds) -> dict[str, str]:
        return {"text": f"{th.stall_some * 1000:.1f} per mille"}

    with pytest.raises(ChartTemplateError, match="/text"):
        template(per_mille, load_thresholds(), "a toy")


def test_a_key_that_shapes_the_output_fails_loudly() -> None:
    def one_term_per_percent(th: Thresholds) -> list[int]:
        return list(range(int(th.stall_some * 100)))

    with pytest.raises(ChartTemplateError, match="items"):
        template(one_term_per_percent, load_thresholds(), "a toy")


def test_the_templater_replaces_every_form_it_knows() -> None:
    def forms(th: Thresholds) -> dict[str, Any]:
        return {
            "promql": f"x >= {th.stall_some!r} and y > {th.refault_per_min!r} / 60",
            "text": f"{th.stall_some:.0%} {th.stall_some * 100:g} {th.runq_p99_ms:g} ms",
            "line": th.stall_some,
            "le": f'le="{th.runq_bound_s!r}"',
            "for": th.exporter_down_for,
        }

    got = template(forms, load_thresholds(), "a toy")
    assert got == {
        "promql": "x >= @@ce:stallSome:num@@ and y > @@ce:refaultPerMin:num@@ / 60",
        "text": "@@ce:stallSome:pct0@@ @@ce:stallSome:pct100g@@ @@ce:runqP99Ms:msg@@",
        "line": "@@ce:stallSome:json@@",
        "le": 'le="@@ce:runqP99Ms:le@@"',
        "for": "@@ce:exporterDownFor:raw@@",
    }


def test_the_chart_needs_no_python(tmp_path: Path) -> None:
    """helm template alone, on a copy of the chart outside the repository: all it reads
    is in the chart."""
    import shutil

    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    proc = subprocess.run(
        [
            need("helm"),
            *("template", "x", str(copy), "--set-json", 'thresholds={"stallSome":0.3}'),
            *("--api-versions", "monitoring.coreos.com/v1/PrometheusRule"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert ">= 0.3" in proc.stdout
