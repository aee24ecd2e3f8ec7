"""The rules and dashboards read only what a default install exports.

An optional collector (``--collector.<name>``, off by default: docs/metrics.md,
"Optional collectors") adds families, or label values of a family, that cAdvisor or
kube-state-metrics already export. A rule that reads one works only where someone
turned that collector on, and on every default install silently does something else
(the remediation guard printed a limit ``/findings`` withholds: it read
``contention_cpu_limit_cores``). What is optional is measured, not listed: the same
fixture node exported with the flags at their defaults and with every
``--collector.*`` on, and the difference is what a default install lacks.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from exporter.agent import Agent, AgentConfig
from exporter.commands import build_parser
from exporter.commands.common import add_collector_arguments, agent_config
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig
from exporter.rules.pack import rule_groups
from tests.support.promql_names import metric_names, selectors_with_matchers

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _collector_flags() -> list[str]:
    """Every ``--collector.<name>`` the exporter accepts, from its own argument parser."""
    p = argparse.ArgumentParser()
    add_collector_arguments(p)
    names = sorted(set(re.findall(r"--collector\.(\w+)", p.format_help())))
    assert names, "the exporter has optional collectors"
    return [f"--collector.{n}" for n in names]


def _exposition(collectors: frozenset[str]) -> str:
    root = FIXTURES / "v2-systemd"
    cfg = AgentConfig(
        sysfs=str(root / "sys"),
        procfs=str(root / "proc"),
        probe=ProbeConfig(enabled=False),
        process_metrics=False,
        metadata_file=str(FIXTURES / "v2-systemd-metadata.yaml"),
        collectors=collectors,
    )
    pub = Agent(cfg, load_thresholds()).run_pass(now=1_700_000_000.0)
    return str(pub.metrics(openmetrics=False, gzipped=False).body.decode())


def _samples(text: str) -> dict[str, set[tuple[str, str]]]:
    """Each sample name with every (label, value) pair its series carry."""
    out: dict[str, set[tuple[str, str]]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or line.startswith("#"):
            continue
        out.setdefault(m.group(1), set()).update(_LABEL.findall(m.group(2) or ""))
    return out


@pytest.fixture(scope="module")
def optional() -> tuple[set[str], dict[str, set[tuple[str, str]]]]:
    """What only an optional collector exports: whole families, and label values of
    families a default install has (``event="oom_kill"`` of the memory events)."""
    parse = build_parser().parse_args
    default = _samples(_exposition(agent_config(parse(["run"])).collectors))
    every = _samples(_exposition(agent_config(parse(["run", *_collector_flags()])).collectors))
    families = set(every) - set(default)
    values = {
        name: {pair for pair in pairs - default[name] if pair[0] != "cgroup"}
        for name, pairs in every.items()
        if name in default and pairs - default[name]
    }
    # not vacuous: the limits are optional, and so are some memory events
    assert {"contention_cpu_limit_cores", "contention_memory_limit_bytes"} <= families
    assert ("event", "oom_kill") in values["contention_memory_events_total"]
    return families, {k: v for k, v in values.items() if v}


def _reads_optional(
    expr: str,
    optional: tuple[set[str], dict[str, set[tuple[str, str]]]],
    values_too: bool = True,
) -> list[str]:
    families, values = optional
    found = sorted(metric_names(expr) & families)
    if not values_too:
        return found
    for name, matchers in selectors_with_matchers(expr):
        for label, value in values.get(name, ()):
            for m in re.finditer(rf'\b{label}\s*(=~|=)\s*"([^"]*)"', matchers):
                if value in (m.group(2).split("|") if m.group(1) == "=~" else [m.group(2)]):
                    found.append(f'{name}{{{label}="{value}"}}')
    return found


def test_no_rule_reads_an_optional_family(
    optional: tuple[set[str], dict[str, set[tuple[str, str]]]],
) -> None:
    th = load_thresholds()
    bad = {}
    for group in rule_groups(th)["groups"]:
        for rule in group["rules"]:
            hits = _reads_optional(rule["expr"], optional)
            for text in (rule.get("annotations") or {}).values():
                hits += _reads_optional(text, optional)  # the annotations' queries too
            if hits:
                bad[rule.get("record") or rule.get("alert")] = hits
    assert not bad, f"rules read families a default install does not export: {bad}"


def test_no_dashboard_query_reads_an_optional_family(
    optional: tuple[set[str], dict[str, set[tuple[str, str]]]],
) -> None:
    """A panel on a family only an optional collector exports would be empty on a
    default install. (A panel may draw an optional collector's extra label values
    beside the default ones, saying so: the memory events panel's oom and oom_kill.)"""
    pytest.importorskip("grafana_foundation_sdk")
    from tests.e2e.dashboard_queries import all_panel_queries, all_variable_queries

    def reads(expr: str) -> list[str]:
        return _reads_optional(expr, optional, values_too=False)

    bad = [(uid, title) for uid, title, expr in all_panel_queries() if reads(expr)]
    bad += [(uid, var) for uid, var, sel, _ in all_variable_queries() if reads(sel)]
    assert not bad, f"dashboard queries read families a default install does not export: {bad}"


def test_the_check_catches_an_optional_family(
    optional: tuple[set[str], dict[str, set[tuple[str, str]]]],
) -> None:
    """What the guard read before (issue 24), and a memory event only memory_oom exports."""
    assert _reads_optional(
        'x > on(instance, cgroup) group_left() (contention_cpu_limit_cores{job="j"} * 1000)',
        optional,
    ) == ["contention_cpu_limit_cores"]
    oom = 'rate(contention_memory_events_total{job="j", event=~"max|oom_kill"}[1m])'
    assert _reads_optional(oom, optional) == ['contention_memory_events_total{event="oom_kill"}']
    assert not _reads_optional(oom.replace("|oom_kill", "|high"), optional)
