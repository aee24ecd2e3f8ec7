"""The Python evaluator and the generated Prometheus rules agree on every scenario.

Each scenario in tests/scenarios drives both sides: the evaluator over the windows the
sampler would hold, and ``promtool test rules`` over input series made from the same
minutes. The promtool test file expects, at every minute from 1m on and for every
alert, exactly the (kind, victim, culprit) set the evaluator returned, each with the
finding's level and remediation as annotations, so a passing promtool run proves the
sets are identical. All scenarios run in one promtool invocation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.findings import evaluate, load_thresholds
from exporter.findings.model import Finding
from exporter.findings.thresholds import Thresholds
from exporter.rules.pack import rule_groups
from exporter.rules.promtool import PromtoolMissing, find_promtool
from tests.support.corpus import Scenario, cgroup_of, load_corpus
from tests.support.promtool_tests import decided_rules, render_tests, unit_test_rules

# promtool, helm, kubeconform and the CLI over the whole corpus, bounded only against
# hangs: scripts/test.sh runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "scenarios"


@pytest.fixture(scope="module")
def th() -> Thresholds:
    return load_thresholds()


@pytest.fixture(scope="module")
def corpus() -> list[Scenario]:
    return load_corpus(SCENARIOS)


def _have_promtool() -> bool:
    try:
        find_promtool()
    except PromtoolMissing:
        return False
    return True


def test_corpus_is_big_enough(corpus: list[Scenario]) -> None:
    assert len(corpus) >= 25
    assert len({s.name for s in corpus}) == len(corpus), "scenario names must be unique"


def test_scenario_expectations(corpus: list[Scenario], th: Thresholds) -> None:
    """The hand-written expectations of each scenario hold for the evaluator."""
    failures = []
    for scn in corpus:
        assert scn.expect, f"{scn.path}: every scenario states what it expects"
        for exp in scn.expect:
            t = int(exp["at"]) * 60
            findings = evaluate(scn.window_at(t, th), th, float(t))
            got = sorted(f.key() for f in findings)
            want = sorted(
                (k, cgroup_of(scn, v), cgroup_of(scn, c) if c else "", sev)
                for k, v, c, sev in exp["findings"]
            )
            if got != want:
                failures.append(f"{scn.name} at {exp['at']}m: got {got}, want {want}")
            failures += _value_failures(scn, exp, findings)
    assert not failures, "\n".join(failures)


def _value_failures(scn: Scenario, exp: dict[str, Any], findings: list[Finding]) -> list[str]:
    """An expectation's ``values``: the number each finding's remediation suggests
    (``null``: withheld), by kind and victim."""
    values = {(f.kind.value, f.victim.identity.cgroup): f.suggestion for f in findings}
    out = []
    for kind, victim, want in exp.get("values") or []:
        s = values.get((kind, cgroup_of(scn, victim)))
        got = s.value if s is not None else "no finding"
        if got != want:
            out.append(f"{scn.name} at {exp['at']}m: {kind} {victim} suggests {got}, want {want}")
    return out


@pytest.mark.skipif(not _have_promtool(), reason="promtool not installed")
def test_evaluator_and_rules_agree(corpus: list[Scenario], th: Thresholds, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(decided_rules(rule_groups(th))))
    doc = render_tests(
        corpus, th, "rules.yaml", with_annotations=False, eval_times="all", remediation_only=True
    )
    test_file = tmp_path / "agreement.test.yaml"
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    test_file.write_text(yaml.dump(doc, Dumper=dumper, sort_keys=False, width=1000))
    res = unit_test_rules(test_file)
    assert res.ok, res.output[-20000:]


def test_every_kind_and_severity_is_exercised(corpus: list[Scenario], th: Thresholds) -> None:
    seen = set()
    for scn in corpus:
        for t in scn.eval_times(th):
            for f in evaluate(scn.window_at(t, th), th, float(t)):
                seen.add((f.kind.value, f.severity.value))
    for kind in ("cpu-throttled", "noisy-neighbor", "cpu-contended"):
        for sev in ("critical", "warning", "info"):
            if (kind, sev) == ("cpu-throttled", "warning"):
                continue  # throttling shows in PSI full: a throttled warning is rare
            assert (kind, sev) in seen, (kind, sev)
    for kind in ("memory-pressure", "memory-limit-thrash"):
        assert (kind, "warning") in seen
    assert ("memory-pressure", "critical") in seen
    assert ("cpu-steal", "warning") in seen
