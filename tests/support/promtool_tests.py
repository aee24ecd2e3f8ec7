"""promtool unit tests rendered from the scenario corpus (test machinery, not shipped).

The expected alerts at every evaluation time are the Python evaluator's findings (their
kind, victim and culprit as labels, their level and remediation as annotations), so a
passing ``promtool test rules`` *is* the proof that the rules and the evaluator agree.

``python -m tests.support.promtool_tests`` writes ``rules/tests/contention.rules.test.yaml``
(committed, next to the rule file it tests); ``--check`` writes nothing and fails when
the committed file is stale (``scripts/check-generated.sh`` runs it);
``--promtool`` also runs ``promtool test rules`` on it.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from exporter.commands.generated_files import sync
from exporter.findings.evaluate import evaluate
from exporter.findings.model import CULPRIT_WORKLOAD, NODE_KINDS, Finding, Kind
from exporter.findings.thresholds import Thresholds, ThresholdsError, load_thresholds
from exporter.probe.histogram import RUNQ_BOUNDS_S
from exporter.rules.alert import runbook_annotations
from exporter.rules.finding_alerts import ALERT_NAMES, SUMMARIES
from exporter.rules.levels import level_sentences
from exporter.rules.pack import HEADER
from exporter.rules.promtool import PromtoolResult, run_promtool

from .corpus import TARGET, Scenario, ScenarioError, load_corpus
from .gotemplate import humanize_duration, humanize_percentage
from .health_tests import render_health_tests

ROOT = Path(__file__).resolve().parents[2]
TEST_FILE = Path("rules/tests/contention.rules.test.yaml")
HEALTH_TEST_FILE = Path("rules/tests/contention-exporter.rules.test.yaml")
SCENARIOS = Path("tests/scenarios")
COMMAND = "python -m tests.support.promtool_tests"


def unit_test_rules(*paths: str | Path) -> PromtoolResult:
    return run_promtool("test", "rules", *map(str, paths))


def histogram_quantile(q: float, cum_rates: list[tuple[float, float]]) -> float:
    """PromQL's bucketQuantile over (upper bound, cumulative rate) pairs ending at +Inf."""
    if len(cum_rates) < 2:
        return math.nan
    observations = cum_rates[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = len(cum_rates) - 1  # sort.Search over all but the +Inf bucket
    for i in range(len(cum_rates) - 1):
        if cum_rates[i][1] >= rank:
            b = i
            break
    if b == len(cum_rates) - 1:
        return cum_rates[-2][0]
    start, end, count = 0.0, cum_rates[b][0], cum_rates[b][1]
    if b > 0:
        start = cum_rates[b - 1][0]
        count -= cum_rates[b - 1][1]
        rank -= cum_rates[b - 1][1]
    return start + (end - start) * (rank / count)


# -- expected alerts -----------------------------------------------------------------------


def alert_labels(f: Finding, th: Thresholds, target: Mapping[str, str] = TARGET) -> dict[str, str]:
    """The labels of the alert for ``f``: the victim's series labels (names, else its
    cgroup path), and the culprit's own series labels prefixed ``culprit_``. A node-level
    finding has the target's labels and its static culprit (the hypervisor)."""
    if f.kind in NODE_KINDS:
        assert f.culprit is not None
        return {
            "severity": th.severity_of(f.kind),
            "finding": f.kind.value,
            **target,
            **dict(th.alert_labels),
            "culprit_kind": f.culprit.kind,
            "culprit": f.culprit.ref,
        }
    labels = {
        "severity": th.severity_of(f.kind),
        "finding": f.kind.value,
        **target,
        **dict(th.alert_labels),
        **f.victim.identity.series_labels(),
    }
    c = f.culprit
    if c is not None and c.kind == CULPRIT_WORKLOAD:  # contention_workload_blame_ratio's
        ns = c.identity.namespace
        labels.update(culprit_kind=c.kind, culprit=c.ref, culprit_namespace=ns)
        labels["culprit_workload"] = c.identity.workload
    elif c is not None:
        ci = c.identity
        if c.kind == "pod" or not ci.names:  # the probe names pods, else the path
            labels.update((f"culprit_{k}", v) for k, v in ci.series_labels().items())
        else:
            labels["culprit_cgroup"] = ci.cgroup
        if f.kind is Kind.NOISY_NEIGHBOR:
            labels.update(culprit_kind=c.kind, culprit=c.ref)
    return {k: val for k, val in labels.items() if val}


def _victim_t(labels: dict[str, str]) -> str:
    if labels.get("pod"):
        return f"{labels.get('namespace', '')}/{labels['pod']}/{labels.get('container', '')}"
    return labels.get("cgroup", "")


def alert_annotations(  # noqa: C901 - one description per finding kind
    f: Finding, scn: Scenario, t: int, th: Thresholds, labels: dict[str, str]
) -> dict[str, str]:
    k = f.kind
    if k is Kind.CPU_STEAL:
        assert f.culprit is not None
        return _annotations(
            f,
            th,
            f"The hypervisor took {humanize_percentage(f.culprit.blame_share)} of the node's "
            f"CPU time (steal) in the latest minute, at least {th.cpu_steal_ratio * 100:g}% "
            f"in each of the last {th.sustain_minutes} minutes, while containers on the node "
            "were stalled waiting for CPU. The host is running other guests on this node's "
            "CPUs: no workload on the node is the cause.",
        )
    name = next(n for n, m in scn.members.items() if m.cgroup_id == f.victim.cgroup_id)
    m = t // 60 - 1  # the latest minute
    pm = scn.per_minute[name]

    def q_rate(key: str, pct: bool = True) -> str:
        if key not in pm:
            return "n/a"
        return humanize_percentage(pm[key][m] / 60)

    def q_p99() -> str:
        if name not in scn.runq:
            return "n/a"
        slots = scn.runq[name][m]
        cum, out = 0, []
        for bound, c in zip((*RUNQ_BOUNDS_S, math.inf), slots, strict=True):
            cum += c
            out.append((bound, cum / 60))
        return humanize_duration(histogram_quantile(0.99, out))

    def node_mem() -> str:
        if "mem_some_s" not in scn.node:
            return "n/a"
        return humanize_percentage(scn.node["mem_some_s"][m] / 60)

    # The node's steal, when sustained (the rules' node:contention_node_cpu_steal:sustained).
    steal = f.evidence.get("node_cpu_steal_ratio") or []
    steal_on = bool(steal) and all(x is not None and x >= th.cpu_steal_ratio for x in steal)
    steal_pct = humanize_percentage(steal[-1]) if steal_on else ""
    victim = _victim_t(labels)
    w = th.window_minutes
    if k is Kind.CPU_THROTTLED:
        ratio = f.evidence["throttled_ratio"]
        desc = (
            f"{victim} was throttled in {humanize_percentage(ratio)} of its CFS periods over "
            f"the last {w}m (threshold {th.throttled_ratio * 100:g}%). It waits on its own CPU "
            "limit, not on a neighbour."
        )
    elif k is Kind.NOISY_NEIGHBOR:
        assert f.culprit is not None
        desc = (
            f"{victim} is stalled waiting for CPU (cpu pressure some {q_rate('cpu_some_s')}, "
            f"run-queue p99 {q_p99()} in the latest minute). {f.culprit.ref} ({f.culprit.kind}) "
            f"caused {humanize_percentage(f.culprit.blame_share)} of its run-queue wait over the "
            f"last {w}m while using more CPU than it requested (or having no request)."
        )
        if f.culprit.kind == CULPRIT_WORKLOAD:
            desc += (
                " That is all the workload's containers together, running or gone: no "
                "single one of them passes the culprit test."
            )
        if steal_on:
            desc += (
                f" The hypervisor also took {steal_pct} of the node's CPU time (steal) in the "
                "latest minute."
            )
    elif k is Kind.CPU_CONTENDED:
        desc = (
            f"{victim} is stalled waiting for CPU (cpu pressure some {q_rate('cpu_some_s')}, "
            f"run-queue p99 {q_p99()} in the latest minute), but no single neighbour (nor one "
            f"workload's containers together) caused {th.blame_share * 100:g}% of its wait "
            "while running beyond its CPU request: "
        ) + (
            f"the hypervisor took {steal_pct} of the node's CPU time (steal) in the latest "
            "minute, so the CPU it misses went to other guests on the host, not to an "
            "oversubscribed node (see ContentionCPUSteal)."
            if steal_on
            else _contended_why(f, th)
        )
    elif k is Kind.MEMORY_PRESSURE:
        if f.culprit is not None:
            cl = {
                "pod": labels.get("culprit_pod", ""),
                "namespace": labels.get("culprit_namespace", ""),
                "container": labels.get("culprit_container", ""),
                "cgroup": labels.get("culprit_cgroup", ""),
            }
            share = humanize_percentage(f.culprit.blame_share)
            if f.evidence.get("memory_culprit_basis") == "growth":
                why = (
                    f"the container that grew most beyond its memory request over the last "
                    f"{w}m, holding {share} of the node's memory beyond requests."
                )
            else:
                why = (
                    f"{share} of the node's memory beyond requests (no container grew by "
                    f"{th.mem_culprit_share * 100:g}% of it over the last {w}m)."
                )
            who = f"Heuristic culprit: {_victim_t(cl)}, {why}"
        else:
            x = f"{th.mem_culprit_share * 100:g}"
            who = (
                f"No container grew by {x}% of the node's memory beyond requests over the "
                f"last {w}m, nor holds {x}% of it."
            )
        desc = (
            f"{victim} is stalled on memory (memory pressure some {q_rate('mem_some_s')} in "
            f"the latest minute) while the node is under memory pressure ({node_mem()}). {who}"
        )
    else:
        desc = (
            f"{victim} is stalled on memory (memory pressure some {q_rate('mem_some_s')} in "
            "the latest minute) while hitting its own memory limit (memory.events high/max "
            "rising); the node is not under memory pressure beyond its own stall."
        )
    return _annotations(f, th, desc)


def _contended_why(f: Finding, th: Thresholds) -> str:
    """cpu-contended's reason: attribution broken (its unknown share at or above
    blameShare: the rules' cgroup:contention_blame_ratio:unattributed) or not."""
    share = f.evidence.get("unattributed_share")
    if share is None or share < th.blame_share:
        return "the node is oversubscribed."
    return (
        f"{humanize_percentage(share)} of its run-queue wait over the last "
        f"{th.window_minutes}m could not be attributed (culprit_kind unknown): the "
        "scheduler probe's attribution is broken or partial on this node, so a neighbour "
        "may be hidden in it. This is not evidence that the node is oversubscribed (see "
        "the runbook)."
    )


def _annotations(f: Finding, th: Thresholds, desc: str) -> dict[str, str]:
    k = f.kind
    return {
        "summary": SUMMARIES[k],
        "description": f"{desc} {level_sentences(th, k)[f.severity]}",
        "level": f.severity.value,
        "remediation": remediation_annotation(f),
        **runbook_annotations(th, ALERT_NAMES[k]),
    }


def decided_rules(groups: dict[str, Any]) -> dict[str, Any]:
    """The rule groups with two annotations per findings alert, the level and the
    remediation (the self-monitoring alerts' are dropped), and no ``keep_firing_for``:
    what ``decided_annotations`` expects, without the descriptions' numbers."""
    out = copy.deepcopy(groups)
    for g in out["groups"]:
        for r in g["rules"]:
            # The decision at each minute, not its delivery: the hold after a finding
            # clears is tested on its own (test_rules).
            r.pop("keep_firing_for", None)
            ann = r.pop("annotations", None)
            if ann and "remediation" in ann:  # the self-monitoring alerts have none
                r["annotations"] = {k: ann[k] for k in ("level", "remediation")}
    return out


def decided_annotations(f: Finding) -> dict[str, str]:
    """What an alert's annotations say of the evaluator's decision: the finding's level
    and its remediation with the suggested value."""
    return {"level": f.severity.value, "remediation": remediation_annotation(f)}


def remediation_annotation(f: Finding) -> str:
    """The evaluator's suggestion, as the alert's ``remediation`` annotation must read:
    the same sentence with the same number (or the same sentence without one). A
    node-level finding (cpu-steal) suggests no number: its fixed sentence."""
    if f.kind in NODE_KINDS:
        assert f.suggestion is None, f"{f.kind}: a node-level finding suggests no value"
        return f.remediation_text()
    assert f.suggestion is not None, f"{f.kind}: every finding carries a suggestion"
    return f.suggestion.text


def render_tests(
    scenarios: Iterable[Scenario],
    th: Thresholds,
    rule_file: str,
    with_annotations: bool,
    eval_times: str = "full",
    target: Mapping[str, str] = TARGET,
    remediation_only: bool = False,
    hold_minutes: int = 0,
) -> dict[str, Any]:
    """A promtool unit-test document: one test per scenario, every alert at every time.

    ``eval_times="full"`` compares from the first full window on (where PromQL's
    rate() over the window and the evaluator's sums cover the same minutes);
    ``"all"`` from minute 1. ``target``: the target labels of the scenario's exporter.
    An alert the config disables is expected never to fire. ``remediation_only``:
    expect only the ``level`` and ``remediation`` annotations (for a rule file
    stripped of the others, ``decided_annotations``): the levels and the suggested
    values agree. ``hold_minutes``: the rules' ``keep_firing_for`` (0 for a rule file
    stripped of it, ``decided_rules``).
    """
    tests = [
        render_test(
            [(scn, target)],
            th,
            with_annotations,
            eval_times,
            scn.name,
            remediation_only,
            hold_minutes,
        )
        for scn in scenarios
    ]
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


def render_test(
    nodes: Sequence[tuple[Scenario, Mapping[str, str]]],
    th: Thresholds,
    with_annotations: bool,
    eval_times: str = "full",
    name: str = "",
    remediation_only: bool = False,
    hold_minutes: int = 0,
) -> dict[str, Any]:
    """One promtool test of several exporters at once, each a scenario under its own
    target labels (e.g. two clusters in one Prometheus): their series together, and at
    every time the union of each one's findings as the expected alerts, with, under a
    ``hold_minutes`` ``keep_firing_for``, each alert decided in the minutes of the hold
    and not since, as it was last decided (Prometheus keeps a held alert's labels and
    annotations)."""
    minutes = min(scn.minutes for scn, _ in nodes)
    first = th.window_minutes if eval_times == "full" else 1
    decided = {
        m: _decided_at(nodes, th, m * 60, with_annotations, remediation_only)
        for m in range(max(1, first - hold_minutes), minutes + 1)  # and the hold before
    }
    alert_tests = []
    for m in range(first, minutes + 1):
        for alertname in ALERT_NAMES.values():
            now = {_key(i): i for i in decided[m][alertname]}
            held: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
            for back in range(max(1, m - hold_minutes), m):  # oldest first: latest wins
                held.update({_key(i): i for i in decided[back][alertname]})
            items = [*now.values(), *(copy.deepcopy(i) for k, i in held.items() if k not in now)]
            items.sort(key=_key)
            alert_tests.append({"eval_time": f"{m}m", "alertname": alertname, "exp_alerts": items})
    series = [x for scn, target in nodes for x in scn.input_series(th, target)]
    return {
        "name": name or "+".join(scn.name for scn, _ in nodes),
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": alert_tests,
    }


def _key(item: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(item["exp_labels"].items()))


def _decided_at(
    nodes: Sequence[tuple[Scenario, Mapping[str, str]]],
    th: Thresholds,
    t: int,
    with_annotations: bool,
    remediation_only: bool,
) -> dict[str, list[dict[str, Any]]]:
    """The expected alerts the evaluator's findings at ``t`` make, per alert name."""
    exp: dict[str, list[dict[str, Any]]] = {a: [] for a in ALERT_NAMES.values()}
    for scn, target in nodes:
        for f in evaluate(scn.window_at(t, th), th, float(t)):
            alertname = ALERT_NAMES[f.kind]
            if not th.alert_enabled(alertname):
                continue
            labels = alert_labels(f, th, target)
            item: dict[str, Any] = {"exp_labels": labels}
            if remediation_only:
                item["exp_annotations"] = decided_annotations(f)
            elif with_annotations:
                item["exp_annotations"] = alert_annotations(f, scn, t, th, labels)
            exp[alertname].append(item)
    return exp


def _dump(doc: dict[str, Any]) -> str:
    # Long input_series lines stay on one line: easier to read side by side.
    return HEADER.replace("contention-exporter rules generate", COMMAND) + str(
        yaml.safe_dump(doc, sort_keys=False, width=4096, allow_unicode=True)
    )


def render_test_file(th: Thresholds, scenarios_dir: Path = ROOT / SCENARIOS) -> str:
    """The committed promtool unit-test file of the findings' alerts: the ``unit:
    true`` scenarios, with full labels and annotations, against
    ``../contention.rules.yaml``."""
    unit = [s for s in load_corpus(scenarios_dir) if s.unit]
    # The shipped rules hold a findings alert one sustain (finding_alerts.hold).
    return _dump(
        render_tests(
            unit,
            th,
            "../contention.rules.yaml",
            with_annotations=True,
            hold_minutes=th.sustain_minutes,
        )
    )


def render_health_test_file(th: Thresholds) -> str:
    """The committed promtool unit-test file of the self-monitoring alerts."""
    return _dump(render_health_tests(th, "../contention.rules.yaml"))


def render_test_files(th: Thresholds) -> dict[Path, str]:
    return {TEST_FILE: render_test_file(th), HEALTH_TEST_FILE: render_health_test_file(th)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog=COMMAND,
        description="Write the promtool unit tests of the rule pack: "
        f"{TEST_FILE} from tests/scenarios and {HEALTH_TEST_FILE} (self-monitoring).",
    )
    p.add_argument(
        "--config.file", dest="config", default=None, metavar="FILE", help="thresholds override"
    )
    p.add_argument(
        "--output.dir", dest="out_dir", default=str(ROOT), metavar="DIR", help="repository root"
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    p.add_argument("--promtool", action="store_true", help="run promtool test rules on it")
    args = p.parse_args(argv)
    try:
        th = load_thresholds(args.config)
        files = render_test_files(th)
    except (ThresholdsError, ScenarioError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    root = Path(args.out_dir)
    rc = sync(root, files, verify=args.check, command=COMMAND)
    if rc == 0 and args.promtool:
        res = unit_test_rules(*(root / p for p in files))
        sys.stdout.write(res.output)
        rc = 0 if res.ok else 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
