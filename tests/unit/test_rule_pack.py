"""The rule pack's options (docs/configuration.md, "The rule pack"), each proven through
promtool: the alerts still agree with the evaluator on the whole scenario corpus
under the option, and the option does what it says."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from exporter.findings import load_thresholds
from exporter.findings.thresholds import Thresholds, ThresholdsError, from_mapping
from exporter.rules import health
from exporter.rules.finding_alerts import ALERT_NAMES
from exporter.rules.pack import ALERTS, rule_groups
from exporter.rules.promtool import PromtoolMissing, PromtoolResult, find_promtool
from tests.support import promtool_tests as pt
from tests.support.corpus import TARGET, Scenario, load_corpus
from tests.support.health_tests import render_health_tests

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _have_promtool() -> bool:
    try:
        find_promtool()
    except PromtoolMissing:
        return False
    return True


needs_promtool = pytest.mark.skipif(not _have_promtool(), reason="promtool not installed")


@pytest.fixture(scope="module")
def corpus() -> list[Scenario]:
    return load_corpus(ROOT / pt.SCENARIOS)


def _config(**overrides: Any) -> Thresholds:
    return from_mapping({**load_thresholds().to_yaml_dict(), **overrides})


def _run(
    tmp_path: Path, rules_th: Thresholds, tests: list[dict[str, Any]], annotations: bool
) -> PromtoolResult:
    """promtool test rules: ``tests`` against the pack generated from ``rules_th``."""
    groups = copy.deepcopy(rule_groups(rules_th))
    for g in groups["groups"]:
        for r in g["rules"]:
            # The decision at each minute: the hold after it is tested apart (test_rules).
            r.pop("keep_firing_for", None)
            if not annotations:  # the agreement is about gating; annotations apart
                r.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    doc = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "t.yaml").write_text(yaml.dump(doc, Dumper=_DUMPER, width=1000))
    return pt.unit_test_rules(tmp_path / "t.yaml")


# A whole-corpus promtool run over a reconfigured pack takes about a minute of CPU; in
# parts, each test stays short and the parts run on the workers side by side.
CORPUS_PARTS = 3


def _part(corpus: list[Scenario], part: int) -> list[Scenario]:
    """Every CORPUS_PARTS-th scenario from ``part``: the parts together are the corpus."""
    return corpus[part::CORPUS_PARTS]


def _assert_part_agrees(
    tmp_path: Path,
    corpus: list[Scenario],
    part: int,
    rules_th: Thresholds,
    tests_th: Thresholds | None = None,
    target: dict[str, str] = TARGET,
) -> None:
    """promtool over one part of the corpus: the pack from ``rules_th`` against the
    alerts the evaluator expects under ``tests_th`` (the same by default)."""
    th = tests_th or rules_th
    tests = pt.render_tests(_part(corpus, part), th, "rules.yaml", False, "all", target)["tests"]
    res = _run(tmp_path, rules_th, tests, False)
    assert res.ok, res.output[-20000:]


def _assert_annotations_part(
    tmp_path: Path, corpus: list[Scenario], part: int, th: Thresholds
) -> None:
    """promtool with full label sets and annotations over one part of the corpus's
    unit scenarios (part 0 also runs the health alerts' tests)."""
    unit = [s for s in _part(corpus, part) if s.unit]
    tests = pt.render_tests(unit, th, "rules.yaml", True)["tests"]
    if part == 0:
        tests += render_health_tests(th, "rules.yaml")["tests"]
    res = _run(tmp_path, th, tests, True)
    assert res.ok, res.output[-20000:]


_RAW = re.compile(r"(?<![:\w])(contention_[a-z_]+|up)\b(\{[^}]*\})?(?!\s*\()")


def test_every_raw_series_carries_the_selector() -> None:
    """No rule reads an exporter series (or ``up``) without the selector: two
    deployments (or a staging job) in one Prometheus do not mix."""
    th = _config(selector='job="node-agent", env=~"prod|stage"')
    for g in rule_groups(th)["groups"]:
        for r in g["rules"]:
            for m in _RAW.finditer(r["expr"]):
                assert m.group(2) and 'job="node-agent", env=~"prod|stage"' in m.group(2), (
                    r.get("record") or r.get("alert"),
                    m.group(0),
                )


@needs_promtool
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_selector_selects_the_exporters_series(
    corpus: list[Scenario], tmp_path: Path, part: int
) -> None:
    """Scraped under the selector's job: the rules agree with the evaluator throughout."""
    th = _config(selector='job="node-agent"')
    _assert_part_agrees(tmp_path, corpus, part, th, target={**TARGET, "job": "node-agent"})


@needs_promtool
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_the_selector_leaves_other_jobs_alone(
    corpus: list[Scenario], tmp_path: Path, part: int
) -> None:
    """Scraped under another job: not the exporter the pack is for, nothing fires."""
    th = _config(selector='job="node-agent"')
    assert "contention-exporter" in TARGET["job"]
    silent = _config(disabledAlerts=list(ALERT_NAMES.values()))
    _assert_part_agrees(tmp_path, corpus, part, th, silent)


@needs_promtool
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_alert_labels_reach_every_alert(corpus: list[Scenario], tmp_path: Path, part: int) -> None:
    th = _config(alertLabels={"team": "platform", "tier": 1})
    assert th.alert_labels == (("team", "platform"), ("tier", "1"))
    _assert_annotations_part(tmp_path, corpus, part, th)
    for g in rule_groups(th)["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert r["labels"]["team"] == "platform" and r["labels"]["tier"] == "1"


def _by_path(scn: Scenario) -> Scenario:
    """``scn`` with its containers known by cgroup path only (host mode)."""
    out = copy.deepcopy(scn)
    for m in out.members.values():
        m.identity = dataclasses.replace(m.identity, namespace="", pod="", container="", pod_uid="")
    return out


@needs_promtool
def test_cluster_label_in_every_join(corpus: list[Scenario], tmp_path: Path) -> None:
    """Two clusters in one Prometheus (Thanos), with the same instance and cgroup
    names: a noisy neighbour in one, a neighbour inside its request in the other. With
    ``clusterLabel`` each cluster gets its own verdict; without it the joins mix them."""
    by_name = {s.name: s for s in corpus}
    a = _by_path(by_name["noisy-neighbor-basic"])
    b = _by_path(by_name["culprit-inside-request"])
    assert a.members["api"].identity.series_labels() == b.members["api"].identity.series_labels()
    th = _config(clusterLabel="cluster")
    assert th.join_labels == ("cluster", "instance")
    nodes = [(a, {**TARGET, "cluster": "eu-1"}), (b, {**TARGET, "cluster": "us-1"})]
    test = pt.render_test(nodes, th, False, "all")
    res = _run(tmp_path, th, [test], False)
    assert res.ok, res.output[-20000:]
    for g in rule_groups(th)["groups"]:
        for r in g["rules"]:
            for clause in re.findall(r"\b(?:on|by)\(([^)]*)\)", r["expr"]):
                assert clause.split(", ")[0] == "cluster", (r.get("record") or r["alert"], clause)
    single = _config()
    res = _run(tmp_path, single, [pt.render_test(nodes, single, False, "all")], False)
    assert not res.ok, "without clusterLabel the two clusters' series should mix"


@needs_promtool
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_the_corpus_agrees_with_a_cluster_label(
    corpus: list[Scenario], tmp_path: Path, part: int
) -> None:
    """The whole corpus, with ``clusterLabel`` and a cluster label on every series."""
    th = _config(clusterLabel="cluster")
    _assert_part_agrees(tmp_path, corpus, part, th, target={**TARGET, "cluster": "eu-1"})


DISABLED = ["ContentionCPUThrottled", health.PROBE_NOT_LOADED]


@needs_promtool
def test_disabled_alerts_are_left_out(corpus: list[Scenario], tmp_path: Path) -> None:
    off = DISABLED
    th = _config(disabledAlerts=off)
    names = {r.get("alert") for g in rule_groups(th)["groups"] for r in g["rules"]}
    assert not names & set(off)
    assert names >= set(ALERTS) - set(off)
    # The recording rules stay (dashboards read them), and the health alerts agree (the
    # finding alerts: test_the_corpus_agrees_with_alerts_disabled).
    assert any(
        r.get("record", "").startswith("cgroup:contention_cpu_cfs_throttled")
        for r in rule_groups(th)["groups"][0]["rules"]
    )
    res = _run(tmp_path, th, render_health_tests(th, "rules.yaml")["tests"], True)
    assert res.ok, res.output[-20000:]
    # A throttled scenario fires nothing now, where the default pack fires.
    throttled = [s for s in corpus if s.name == "throttled-exactly-at-threshold"]
    assert throttled
    default = pt.render_tests(throttled, _config(), "rules.yaml", False)["tests"]
    assert any(t["exp_alerts"] for t in default[0]["alert_rule_test"])
    res = _run(tmp_path, th, pt.render_tests(throttled, th, "rules.yaml", False)["tests"], False)
    assert res.ok, res.output[-20000:]


@needs_promtool
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_the_corpus_agrees_with_alerts_disabled(
    corpus: list[Scenario], tmp_path: Path, part: int
) -> None:
    """Every alert left in a pack with some disabled still agrees over the corpus."""
    _assert_part_agrees(tmp_path, corpus, part, _config(disabledAlerts=DISABLED))


def test_an_unknown_disabled_alert_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    th = _config(disabledAlerts=["ContentionCPUThrotled"])
    with pytest.raises(ThresholdsError, match="no alert named ContentionCPUThrotled"):
        rule_groups(th)
    from exporter.commands import main

    cfg = tmp_path / "t.yaml"
    cfg.write_text("disabledAlerts: [ContentionCPUThrotled]\n")
    assert main(["rules", "print", "rules", "--config.file", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "no alert named ContentionCPUThrotled" in err
    assert (
        main(["rules", "generate", "--config.file", str(cfg), "--output.dir", str(tmp_path)]) == 2
    )


def test_runbook_url_default_and_configured() -> None:
    default = _config()
    assert default.runbook_url == ""
    # unset: the runbook of this version, at its tag in the repository (the chart's home)
    base = f"https://github.com/contention-exporter/contention-exporter/blob/v{__version__}"
    for g in rule_groups(default)["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert "runbook" not in r["annotations"]
                assert r["annotations"]["runbook_url"] == (
                    f"{base}/docs/runbook.md#{r['alert'].lower()}"
                )
    th = _config(runbookUrl="https://wiki.example.com/ops/contention#")
    assert th.runbook_url == "https://wiki.example.com/ops/contention"
    text = yaml.safe_dump(rule_groups(th))
    assert "runbook_url: https://wiki.example.com/ops/contention#contentioncputhrottled" in text
    assert "runbook_url: https://wiki.example.com/ops/contention#contentionexporterdown" in text


@needs_promtool
@pytest.mark.parametrize("runbook_url", ["", "https://wiki.example.com/ops/contention#"])
@pytest.mark.parametrize("part", range(CORPUS_PARTS))
def test_runbook_urls_reach_every_alert(
    corpus: list[Scenario], tmp_path: Path, runbook_url: str, part: int
) -> None:
    """With the default and a configured runbook URL, every alert's annotations (the
    runbook's among them) are what promtool expects."""
    _assert_annotations_part(tmp_path, corpus, part, _config(runbookUrl=runbook_url))


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("selector", "job=contention", "expected matchers"),
        ("selector", "", "at least one matcher"),
        ("selector", 'job="a" env="b"', "expected ','"),
        ("clusterLabel", "the cluster", "label name"),
        ("alertLabels", {"severity": "page"}, "set by the rule pack itself"),
        ("alertLabels", {"bad-name": "x"}, "not a valid Prometheus label name"),
        ("alertLabels", {"team": ""}, "non-empty string"),
        ("alertLabels", ["team"], "mapping of label: value"),
        ("disabledAlerts", ["not an alert"], "not an alert name"),
        ("runbookUrl", "wiki/runbook", "http(s) URL"),
        ("exporterDownFor", "5 minutes", "not a Prometheus duration"),
        ("unknownBlameRatio", 50, "fraction in (0, 1]"),
        ("samplerStaleSeconds", 0, "must be > 0"),
        ("alertSeverity", {"noisy-neighbor": "page"}, "critical, warning or info"),
        ("alertSeverity", {"ContentionNoisyNeighbor": "critical"}, "unknown key(s)"),
    ],
)
def test_bad_rule_pack_options_are_clear_errors(key: str, value: Any, needle: str) -> None:
    with pytest.raises(ThresholdsError, match=re.escape(needle)) as e:
        _config(**{key: value})
    assert key in str(e.value)


def test_selector_forms_are_normalised() -> None:
    assert _config(selector='{job="a",env=~"b|c"}').selector == 'job="a", env=~"b|c"'
    assert _config(selector='job!="x"').matchers == ('job!="x"',)
