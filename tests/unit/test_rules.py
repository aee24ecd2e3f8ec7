"""The generated rule pack: up to date, valid, conventional, and promtool-tested."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from exporter.findings import load_thresholds
from exporter.findings.model import NODE_KINDS, Kind
from exporter.findings.thresholds import Thresholds, from_mapping
from exporter.rules import health
from exporter.rules import promtool as promtool_wrapper
from exporter.rules.alert import DEFAULT_RUNBOOK
from exporter.rules.finding_alerts import ALERT_NAMES
from exporter.rules.pack import ALERTS, INHIBIT_FILE, MANIFEST, RULE_FILE, render_files, rule_groups
from exporter.rules.records import R_USAGE, R_USAGE_OVER_REQ
from tests.support import gotemplate as gt
from tests.support import promtool_tests as pt
from tests.support.corpus import load_corpus
from tests.support.promtool_tests import SCENARIOS, TEST_FILE

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _have_promtool() -> bool:
    try:
        promtool_wrapper.find_promtool()
    except promtool_wrapper.PromtoolMissing:
        return False
    return True


needs_promtool = pytest.mark.skipif(not _have_promtool(), reason="promtool not installed")


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds()


@pytest.fixture(scope="module")
def rules(th: Thresholds) -> list[dict[str, Any]]:
    """The findings group (alerts must see this evaluation's recorded decisions: one
    group), then the self-monitoring group."""
    groups = rule_groups(th)["groups"]
    assert [g["name"] for g in groups] == ["contention", "contention-exporter"]
    return [*groups[0]["rules"], *groups[1]["rules"]]


def test_committed_files_are_up_to_date(th: Thresholds) -> None:
    files = render_files(th)
    assert set(files) == {RULE_FILE, MANIFEST, INHIBIT_FILE}
    for rel, text in files.items():
        assert (
            ROOT / rel
        ).read_text() == text, f"{rel} is stale: run `contention-exporter rules generate`"
    for rel, text in pt.render_test_files(th).items():
        assert (ROOT / rel).read_text() == text, f"{rel} is stale: run `{pt.COMMAND}`"


def test_manifest_is_a_prometheusrule_with_the_same_groups(th: Thresholds) -> None:
    doc = yaml.safe_load((ROOT / MANIFEST).read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"] == yaml.safe_load((ROOT / RULE_FILE).read_text())


def test_naming_conventions(rules: list[dict[str, Any]]) -> None:
    recorded = [r for r in rules if "record" in r]
    alerts = [r for r in rules if "alert" in r]
    assert recorded and alerts
    # level: what the output is per (a cgroup, the node, a workload of the node)
    for r in recorded:
        name = r["record"]
        assert re.fullmatch(r"(cgroup|node|workload):contention_[a-z0-9_]+:[a-z0-9_]+", name), r
    # recording rules first: alerts read this evaluation's values
    assert rules.index(alerts[0]) > rules.index(recorded[-1])
    assert {a["alert"] for a in alerts} == set(ALERTS)
    assert set(ALERT_NAMES.values()) | set(health.ALERTS) == set(ALERTS)
    for a in alerts:
        assert re.fullmatch(r"Contention[A-Z][A-Za-z]+", a["alert"])
        assert a["labels"]["severity"] in {"critical", "warning", "info"}
        ann = a["annotations"]
        own = a["alert"] in health.ALERTS  # self-monitoring: no finding, no remediation
        fix = set() if own else {"level", "remediation"}
        assert set(ann) == {"summary", "description", "runbook_url", *fix}
        assert "{{" not in ann["summary"], "summary must be static"
        if a["alert"] in health.ALERTS:
            assert "$labels.instance" in ann["description"] or "absent(" in a["expr"]
            assert a["for"], "self-monitoring alerts wait their configured duration"
        elif a["labels"]["finding"] in NODE_KINDS:  # about the node: no victim labels
            assert "$labels.cgroup" not in ann["description"]
            assert "for" not in a, "the sustain is in the expression (offset), see docs"
        else:
            assert "$labels.cgroup" in ann["description"]
            assert "for" not in a, "the sustain is in the expression (offset), see docs"


def test_one_alert_per_kind_with_a_fixed_severity(rules: list[dict[str, Any]]) -> None:
    """A finding's level changes within an incident; a label change would resolve one
    alert and fire another, so the level is an annotation and ``severity`` is fixed per
    kind (docs/findings.md#level-and-severity): every kind ``warning`` by default."""
    alerts = [r for r in rules if r.get("alert") in ALERT_NAMES.values()]
    assert sorted(a["alert"] for a in alerts) == sorted(ALERT_NAMES.values())
    assert {a["labels"]["severity"] for a in alerts} == {"warning"}
    levels = {
        Kind.CPU_THROTTLED: ["critical", "warning", "info"],
        Kind.NOISY_NEIGHBOR: ["critical", "warning", "info"],
        Kind.CPU_CONTENDED: ["critical", "warning", "info"],
        Kind.MEMORY_PRESSURE: ["critical", "warning"],
        Kind.MEMORY_LIMIT_THRASH: ["critical", "warning"],
        Kind.CPU_STEAL: ["warning"],
    }
    for a in alerts:
        level = a["annotations"]["level"]
        words = re.findall(r"\b(critical|warning|info)\b", level.replace("$labels", ""))
        assert words == levels[Kind(a["labels"]["finding"])], (a["alert"], level)
    custom = from_mapping(
        {**load_thresholds().to_yaml_dict(), "alertSeverity": {"cpu-steal": "critical"}}
    )
    got = {
        r["labels"]["finding"]: r["labels"]["severity"]
        for r in rule_groups(custom)["groups"][0]["rules"]
        if "alert" in r
    }
    assert got == {k.value: "critical" if k is Kind.CPU_STEAL else "warning" for k in Kind}


def test_cpu_steal_names_the_hypervisor_and_needs_stalled_containers(
    rules: list[dict[str, Any]],
) -> None:
    (a,) = [r for r in rules if r.get("alert") == ALERT_NAMES[Kind.CPU_STEAL]]
    assert a["labels"]["culprit_kind"] == a["labels"]["culprit"] == "hypervisor"
    assert "node:contention_node_cpu_steal:sustained" in a["expr"]
    assert "count by(instance) (cgroup:contention_cpu_unthrottled_stall:sustained)" in a["expr"]


def test_runbook_anchors_exist(rules: list[dict[str, Any]]) -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = set()
    for line in runbook.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    for a in (r for r in rules if "alert" in r):
        url, anchor = a["annotations"]["runbook_url"].rsplit("#", 1)
        assert url == DEFAULT_RUNBOOK  # runbookUrl unset: this version's in the repository
        assert anchor == a["alert"].lower()
        assert anchor in anchors, f"docs/runbook.md has no section for {anchor}"


def test_default_runbook_is_this_versions_in_the_charts_home() -> None:
    """runbook_url by default: docs/runbook.md at this version's tag, in the repository
    the chart names as its home (one place to fix if the project moves)."""
    chart = yaml.safe_load((ROOT / "deploy/helm/contention-exporter/Chart.yaml").read_text())
    project = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{__version__}"\n' in project
    want = f"{chart['home']}/blob/v{__version__}/docs/runbook.md"
    assert want == DEFAULT_RUNBOOK


def test_thresholds_flow_into_the_promql() -> None:
    base = load_thresholds().to_yaml_dict()
    custom = from_mapping({**base, "stallSome": 0.3, "runqP99Ms": 50, "nodeLabels": ["node"]})
    text = "\n".join(r["expr"] for r in rule_groups(custom)["groups"][0]["rules"])
    assert ">= 0.3" in text
    assert 'le="0.05"' in text
    assert "on(node, cgroup, namespace, pod, container)" in text
    assert "on(instance" not in text


def test_promtool_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMTOOL", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(promtool_wrapper.PromtoolMissing, match="apt-get install prometheus"):
        promtool_wrapper.find_promtool()


def test_go_humanize_helpers() -> None:
    assert gt.humanize_percentage(0.25) == "25%"
    assert gt.humanize_percentage(0.123456) == "12.35%"
    assert gt.humanize_duration(0.047) == "47ms"
    assert gt.humanize_duration(0.0000125) == "12.5us"
    assert gt.humanize_duration(5.0) == "5s"
    assert gt.humanize_duration(75.0) == "1m 15s"
    assert gt.humanize_duration(float("nan")) == "NaN"
    from tests.support.gotemplate import humanize

    assert humanize(0.1) == "100m" and humanize(1234.5) == "1.234k" and humanize(0) == "0"


@needs_promtool
def test_promtool_checks_the_rule_file() -> None:
    res = promtool_wrapper.check_rules(ROOT / RULE_FILE)
    assert res.ok, res.output


@needs_promtool
@pytest.mark.parametrize(("window", "sustain"), [(1, 1), (2, 1), (3, 2)])
def test_promtool_checks_the_rules_for_short_windows(
    window: int, sustain: int, tmp_path: Path
) -> None:
    """The shortest windows the thresholds allow give valid rules (a one-minute window
    once wrote ``offset 0m``, which Prometheus refuses, losing the whole group)."""
    cfg = tmp_path / "thresholds.yaml"
    cfg.write_text(f"windowMinutes: {window}\nsustainMinutes: {sustain}\n")
    short = load_thresholds(str(cfg))
    path = tmp_path / "rules.yaml"
    path.write_text(render_files(short)[RULE_FILE])
    res = promtool_wrapper.check_rules(path)
    assert res.ok, res.output


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    """Every alert: fires, silent after a single stalled minute (the sustain), and the
    must-not-fire cases of docs/findings.md, with full labels and annotations."""
    unit = {s.name for s in load_corpus(ROOT / SCENARIOS) if s.unit}
    for must in (
        "throttled-victim-with-neighbour",
        "culprit-inside-request",
        "near-idle-sidecar",
        "unknown-dominated-blame",
        "single-minute-spike",
        "memory-stall-without-node-pressure",
    ):
        assert must in unit
    res = pt.unit_test_rules(ROOT / TEST_FILE, ROOT / pt.HEALTH_TEST_FILE)
    assert res.ok, res.output[-20000:]
    health_tests = yaml.safe_load((ROOT / pt.HEALTH_TEST_FILE).read_text())["tests"]
    assert {t["name"] for t in health_tests} == set(health.ALERTS)
    for t in health_tests:  # silent before `for` has passed, then fires, every label
        exps = [c["exp_alerts"] for c in t["alert_rule_test"]]
        assert not any(exps[:-1]) and exps[-1], t["name"]
        assert all(e["exp_annotations"]["description"] for e in exps[-1])


@needs_promtool
def test_agreement_holds_for_a_custom_config(tmp_path: Path) -> None:
    """The rules follow the config: stricter sustain, other bounds, other alert
    severities (a kind not listed keeps its default), still identical."""
    base = load_thresholds().to_yaml_dict()
    custom = from_mapping(
        {
            **base,
            "sustainMinutes": 3,
            "stallSome": 0.15,
            "runqP99Ms": 50,
            "minRunqEvents": 100,
            "blameShare": 0.5,
            "throttledRatio": 0.2,
            "throttledRatioMax": 0.05,
            "nodeMemStallSome": 0.08,
            "alertSeverity": {"noisy-neighbor": "critical", "memory-pressure": "info"},
        }
    )
    # the levels and the suggested values agree too
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(pt.decided_rules(rule_groups(custom))))
    doc = pt.render_tests(
        load_corpus(ROOT / SCENARIOS), custom, "rules.yaml", False, "all", remediation_only=True
    )
    (tmp_path / "t.yaml").write_text(yaml.dump(doc, Dumper=_DUMPER, width=1000))
    res = pt.unit_test_rules(tmp_path / "t.yaml")
    assert res.ok, res.output[-20000:]


def _rules_cli(*argv: str) -> int:
    from exporter.commands import main

    return main(list(argv))


def test_rules_generate_writes_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path)
    assert _rules_cli("rules", "generate", "--output.dir", out, "--check") == 1  # nothing yet
    assert not (tmp_path / RULE_FILE).exists()  # --check writes nothing
    assert _rules_cli("rules", "generate", "--output.dir", out) == 0
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.yaml")) == sorted(
        [RULE_FILE, MANIFEST, INHIBIT_FILE]
    )
    assert _rules_cli("rules", "generate", "--output.dir", out, "--check") == 0
    (tmp_path / RULE_FILE).write_text("# edited by hand\n")
    assert _rules_cli("rules", "generate", "--output.dir", out, "--check") == 1
    assert "out of date: rules/contention.rules.yaml" in capsys.readouterr().err
    cfg = tmp_path / "t.yaml"
    cfg.write_text("blameShare: 0.5\n")
    assert _rules_cli("rules", "generate", "--output.dir", out, "--config.file", str(cfg)) == 0
    assert ">= 0.5)" in (tmp_path / RULE_FILE).read_text()
    cfg.write_text("blameshare: 0.5\n")
    assert _rules_cli("rules", "generate", "--output.dir", out, "--config.file", str(cfg)) == 2
    assert "unknown key(s) blameshare" in capsys.readouterr().err


def test_rules_interval_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _rules_cli("rules", "print", "rules", "--interval", "30s") == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert [g["interval"] for g in doc["groups"]] == ["30s", "30s"]
    out = str(tmp_path)
    assert _rules_cli("rules", "generate", "--output.dir", out, "--interval", "2s") == 0
    assert "interval: 2s" in (tmp_path / MANIFEST).read_text()
    for bad in ("0s", "1x", "30"):
        with pytest.raises(SystemExit):
            _rules_cli("rules", "print", "rules", "--interval", bad)
        assert "not a Prometheus duration" in capsys.readouterr().err
    for bad in ("45s", "2m", "7s"):  # flags are read back a minute later: must divide 1m
        with pytest.raises(SystemExit):
            _rules_cli("rules", "print", "rules", "--interval", bad)
        assert "must divide 1m" in capsys.readouterr().err


def test_each_minute_is_recorded_once_and_read_back(rules: list[dict[str, Any]]) -> None:
    """The sustained decisions read the recorded per-minute flags (now, and offset for
    the earlier minutes) instead of repeating the per-minute PromQL for every minute."""
    by_name = {r["record"]: r["expr"] for r in rules if "record" in r}
    for sustained in (
        "cgroup:contention_cpu_stalled:sustained",
        "cgroup:contention_memory_pressure:sustained",
        "cgroup:contention_memory_limit_thrash:sustained",
    ):
        expr = by_name[sustained]
        assert "rate(" not in expr and "offset 1m" in expr, expr
        assert len(expr) < 500, expr
    assert (
        "cgroup:contention_cpu_stalled:rate1m offset 1m"
        in by_name["cgroup:contention_cpu_stalled:sustained"]
    )


def test_derived_literals_say_where_they_come_from() -> None:
    text = (ROOT / RULE_FILE).read_text()
    assert ">= 1000 / 60" in text  # refaultPerMin per second
    assert "16.66" not in text


def test_rules_print_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert _rules_cli("rules", "print", "config") == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["stallSome"] == 0.2
    assert printed["nodeLabels"] == ["instance"]


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"series": {"cpu_some_s": 0.1}}, "multiple of 1/1024"),
        ({"series": {"cpu_some_s": [1, 2]}}, "list has 2 values"),
        ({"series": {"cpu_some_s": {3: 1}}}, "value from minute 0"),
        ({"series": {"psi": 1}}, "unknown series"),
        ({"series": {"runq": {"events": 1, "over_20ms": 2}}}, "need events>=20ms"),
        ({"series": {"blame": {"ghost": 1}}}, "unknown culprit"),
        ({"colour": "red"}, "unknown keys"),
        ({"start": 3}, "is not before minute 3"),
        ({"start": 1, "series": {"blame": {"a": 1}}}, "blamed at minute 0, before it starts"),
    ],
)
def test_scenario_errors(patch: dict[str, Any], needle: str) -> None:
    from tests.support.corpus import ScenarioError, parse_scenario

    member = {"name": "a", **patch}
    with pytest.raises(ScenarioError, match=re.escape(needle)):
        parse_scenario({"name": "x", "minutes": 3, "containers": [member]})


@needs_promtool
def test_a_cgroup_renamed_mid_window_keeps_the_rules_working(
    th: Thresholds, tmp_path: Path
) -> None:
    """While the API names a new pod, its cgroup has two label sets in one range (its
    path, then its names). Every join is on all identity labels, so the two are two
    containers to the rules, never a many-to-many match that fails the whole rule."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(th)))
    target = 'instance="n:10366",job="contention-exporter"'
    base = f'cgroup="/kubepods.slice/x.scope",{target}'
    named = f'namespace="shop",pod="api-0",container="app",{target}'
    before, after = "0+60x2 _x6", "_x2 120+60x6"  # renamed at minute 2
    usage_b, usage_a = "0+30x2 _x6", "_x2 60+30x6"
    series = [
        {"series": f"contention_sampled_seconds_total{{{base}}}", "values": before},
        {"series": f"contention_sampled_seconds_total{{{named}}}", "values": after},
        {"series": f"contention_cpu_usage_seconds_total{{{base}}}", "values": usage_b},
        {"series": f"contention_cpu_usage_seconds_total{{{named}}}", "values": usage_a},
        {"series": f"contention_cpu_request_cores{{{named}}}", "values": "_x2 1x6"},
    ]
    usage = R_USAGE.format(w=f"{th.window_minutes}m")
    over = R_USAGE_OVER_REQ.format(w=f"{th.window_minutes}m")
    doc = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": f'{usage}{{pod=""}}',
                        "eval_time": "3m",
                        "exp_samples": [{"labels": f"{usage}{{{base}}}", "value": 0.5}],
                    },
                    {
                        "expr": f'{usage}{{pod="api-0"}}',
                        "eval_time": "3m",
                        "exp_samples": [{"labels": f"{usage}{{{named}}}", "value": 0.5}],
                    },
                    {  # the request is the named container's only
                        "expr": over,
                        "eval_time": "4m",
                        "exp_samples": [{"labels": f"{over}{{{named}}}", "value": 0.5}],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "renamed.test.yaml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = pt.unit_test_rules(test_file)
    assert res.ok, res.output[-5000:]


def test_inhibit_rule_is_valid_alertmanager_config(th: Thresholds, tmp_path: Path) -> None:
    """The shipped inhibit rule, in an Alertmanager configuration, passes amtool; it
    mutes only CPUThrottlingHigh, only while the pack's throttled finding fires for
    the same container (and cluster, when the config names one)."""
    import shutil
    import subprocess

    doc = yaml.safe_load((ROOT / INHIBIT_FILE).read_text())
    (rule,) = doc["inhibit_rules"]
    assert rule["target_matchers"] == ['alertname="CPUThrottlingHigh"']
    assert 'alertname="ContentionCPUThrottled"' in rule["source_matchers"]
    assert rule["equal"] == ["namespace", "pod", "container"]
    multi = from_mapping({**th.to_yaml_dict(), "clusterLabel": "k8s_cluster"})
    from exporter.rules.pack import render_inhibit_file

    (rule,) = yaml.safe_load(render_inhibit_file(multi))["inhibit_rules"]
    assert rule["equal"] == ["k8s_cluster", "namespace", "pod", "container"]
    off = from_mapping({**th.to_yaml_dict(), "disabledAlerts": ["ContentionCPUThrottled"]})
    assert yaml.safe_load(render_inhibit_file(off))["inhibit_rules"] == []
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian's prometheus-alertmanager)")
    cfg = {"route": {"receiver": "x"}, "receivers": [{"name": "x"}], **doc}
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [amtool, "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " - 1 inhibit rules" in proc.stdout


@needs_promtool
def test_a_culprit_gone_gets_no_suggested_request(th: Thresholds, tmp_path: Path) -> None:
    """The culprit's suggested request exists only while it still reports (a sample in
    the last minute): once it is gone, its use over the window is not known, and the
    alert's remediation prints the sentence without a number, never a stale one."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(th)))
    lab = '{cgroup="/gone",instance="node-a:10366",job="contention-exporter"}'
    record = f"cgroup:contention_cpu_usage_millicores:ceil_ratio_rate{th.window_minutes}m"
    usage = f"cgroup:contention_cpu_usage_per_sampled_seconds:ratio_rate{th.window_minutes}m"
    doc = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # 1.5 cores for 7 minutes, then the cgroup is removed (stale).
                    {
                        "series": f"contention_cpu_usage_seconds_total{lab}",
                        "values": "0+90x7 stale",
                    },
                    {"series": f"contention_sampled_seconds_total{lab}", "values": "0+60x7 stale"},
                ],
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": "7m",
                        "exp_samples": [{"labels": record + lab, "value": 1500}],
                    },
                    {"expr": record, "eval_time": "9m", "exp_samples": []},
                    # ... though its rate over the window still exists: the guard matters.
                    {
                        "expr": usage,
                        "eval_time": "9m",
                        "exp_samples": [{"labels": usage + lab, "value": 1.5}],
                    },
                ],
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
    res = pt.unit_test_rules(tmp_path / "t.yaml")
    assert res.ok, res.output[-5000:]


def test_findings_alerts_hold_for_one_sustain(rules: list[dict[str, Any]], th: Thresholds) -> None:
    """Every findings alert keeps firing one sustain after its condition last held
    (docs/findings.md#one-incident-one-alert); the self-monitoring alerts do not."""
    alerts = [r for r in rules if "alert" in r]
    findings = [r for r in alerts if "finding" in r["labels"]]
    assert findings and all(r["keep_firing_for"] == f"{th.sustain_minutes}m" for r in findings)
    assert all("keep_firing_for" not in r for r in alerts if "finding" not in r["labels"])


@needs_promtool
def test_a_condition_that_drops_out_stays_one_alert(th: Thresholds, tmp_path: Path) -> None:
    """A findings alert whose condition drops out for one minute is still firing in that
    minute (the same alert: no resolved notification, no new page) and resolves only a
    sustain after the condition last held. The rule is the pack's own, its condition
    replaced by a series that is true, false for a minute, true, then false."""
    rule = next(
        r
        for g in rule_groups(th)["groups"]
        for r in g["rules"]
        if r.get("alert") == "ContentionCPUContended"
    )
    rule = {**rule, "expr": "flicker == 1", "annotations": {}}
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]})
    )
    sustain = th.sustain_minutes
    last_true = 5  # minutes: true at 0-2, false at 3, true at 4-5, false from 6 on
    labels = {**rule["labels"], "alertname": rule["alert"], "instance": "n"}
    firing = [{"exp_labels": labels}]

    def at(minute: int, expected: list[dict[str, Any]]) -> dict[str, Any]:
        return {"eval_time": f"{minute}m", "alertname": rule["alert"], "exp_alerts": expected}

    doc = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": 'flicker{instance="n"}', "values": "1 1 1 0 1 1 0x10"}],
                "alert_rule_test": [
                    at(2, firing),
                    at(3, firing),  # the minute it dropped out: held
                    at(last_true + sustain, firing),
                    at(last_true + sustain + 1, []),
                ],
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
    res = pt.unit_test_rules(tmp_path / "t.yaml")
    assert res.ok, res.output[-5000:]


@needs_promtool
def test_a_cgroup_not_watched_has_no_usage_ratio_not_nan(tmp_path: Path, th: Thresholds) -> None:
    """A series scraped twice between two passes (a scrape interval shorter than the
    sample interval, a container seen by one pass) has flat counters: its usage over
    sampled seconds is 0/0. The rules give no value there, as the evaluator does (no
    sampled seconds: no usage), instead of NaN, which a remediation would print as
    "NaNm"."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(th)))
    job = ",".join(th.matchers)  # the pack's selector (job="contention-exporter")
    labels = f'{{{job},cgroup="/kubepods/pod1/c1",namespace="shop",pod="api-1",container="app"}}'
    usage = R_USAGE.format(w=f"{th.window_minutes}m")
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"contention_cpu_usage_seconds_total{labels}", "values": "5x10"},
                    {"series": f"contention_sampled_seconds_total{labels}", "values": "60x10"},
                ],
                "promql_expr_test": [{"expr": usage, "eval_time": "10m", "exp_samples": []}],
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(test))
    res = pt.unit_test_rules(tmp_path / "t.yaml")
    assert res.ok, res.output[-5000:]
