"""promtool unit tests of the self-monitoring alerts (``exporter.rules.health``).

Each alert gets a test: series that must fire it (after its ``for``, with every label
and annotation), the same series one evaluation before that (silent), and the
must-not-fire neighbours (another job, a probe disabled on purpose, a fresh sampler,
a collector that fails now and then, a map that stopped failing, a ratio below the
threshold, a scrape that keeps the measured containers' labels and stamps none of its
own). Rendered into ``rules/tests/contention-exporter.rules.test.yaml`` by
``python -m tests.support.promtool_tests``.

The expected annotations are the rule's own templates, rendered here the way
Prometheus renders them (``$labels``, ``$value`` and the humanize functions): a label
or value that Prometheus fills differently fails the test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.findings.thresholds import Thresholds, duration_ms
from exporter.rules import health
from exporter.rules.health import health_rules

from .corpus import TARGET
from .gotemplate import humanize, humanize_duration, humanize_percentage

OTHER = {"instance": "node-b:10366", "job": TARGET["job"]}


_TEMPLATE = re.compile(r"\{\{ (\$labels\.(\w+)|\$value \| (\w+)|\$value) \}\}")


def render_annotation(text: str, labels: Mapping[str, str], value: float) -> str:
    """The alert annotation templates the health group uses, filled as Prometheus does."""
    funcs = {
        "humanize": humanize,
        "humanizeDuration": humanize_duration,
        "humanizePercentage": humanize_percentage,
    }

    def repl(m: re.Match[str]) -> str:
        if m.group(2):
            return labels.get(m.group(2), "")
        if m.group(3):
            return str(funcs[m.group(3)](value))
        return f"{value:g}"

    out = _TEMPLATE.sub(repl, text)
    if "{{" in out:
        raise ValueError(f"template this renderer does not know: {out}")
    return out


@dataclass
class Case:
    """One alert's test: input series, and when it must (not) fire."""

    alert: str
    series: dict[str, str]  # series selector -> promtool values
    fires: list[tuple[dict[str, str], float]]  # (labels beyond alertname, value)
    minutes: int  # evaluated at the first minute it must fire, and one minute before
    at: int = 0  # when the condition starts (minute)
    notes: list[str] = field(default_factory=list)
    silent: tuple[str, ...] = ()  # other alerts that must not fire when this one does


def _sel(metric: str, labels: Mapping[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{body}}}"


def _minutes(duration: str) -> int:
    return math.ceil(duration_ms(duration) / 60_000)


def cases(th: Thresholds) -> list[Case]:
    """One case per alert, for the config's durations and thresholds."""
    a, b = dict(TARGET), dict(OTHER)
    other_job = {"instance": "node-a:9100", "job": "node-exporter"}
    down = _minutes(th.exporter_down_for)
    n = down + 4
    out = [
        Case(
            health.EXPORTER_DOWN,
            {
                _sel("up", a): f"1 1 0x{n}",  # down from minute 2
                _sel("up", b): f"1x{n + 2}",
                _sel("up", other_job): f"0x{n + 2}",  # not the exporter's job
            },
            [(a, 0.0)],
            minutes=2 + down,
            at=2,
        ),
        Case(
            health.EXPORTER_ABSENT,
            {_sel("up", other_job): f"1x{n + 2}"},  # nothing matches the selector
            [({}, 1.0)],  # absent() of a comparison keeps no label
            minutes=down,
        ),
    ]
    probe = _minutes(th.probe_not_loaded_for)
    n = probe + 4
    out.append(
        Case(
            health.PROBE_NOT_LOADED,
            {
                _sel("contention_probe_loaded", {**a, "reason": "not-root"}): f"1 1 0x{n}",
                _sel("contention_probe_loaded", {**b, "reason": "disabled"}): f"0x{n + 2}",
                _sel("contention_probe_loaded", {**b, "instance": "node-c:10366", "reason": ""}): (
                    f"1x{n + 2}"
                ),
            },
            [({**a, "reason": "not-root"}, 0.0)],
            minutes=2 + probe,
            at=2,
        )
    )
    stale_for = _minutes(th.sampler_stale_for)
    # A pass every minute (the value is its timestamp), then none after minute 2: the
    # age passes samplerStaleSeconds one minute after it is first above it (rounded).
    stale_after = math.floor(th.sampler_stale_seconds / 60) + 1
    n = 2 + stale_after + stale_for + 3
    starts = 2 + stale_after
    out.append(
        Case(
            health.SAMPLER_STALE,
            {
                _sel("contention_sampler_last_pass_timestamp_seconds", a): f"0+60x2 120x{n}",
                _sel("contention_sampler_last_pass_timestamp_seconds", b): f"0+60x{n + 2}",
            },
            [(a, float((starts + stale_for) * 60 - 120))],
            minutes=starts + stale_for,
            at=starts,
        )
    )
    failing = _minutes(th.collector_failing_for)
    n = failing + 4
    out.append(
        Case(
            health.COLLECTOR_FAILING,
            {
                _sel("contention_collector_success", {**a, "collector": "probe"}): f"1 1 0x{n}",
                _sel("contention_collector_success", {**a, "collector": "node"}): f"1x{n + 2}",
                # fails every other pass: never `for` long, so silent
                _sel("contention_collector_success", {**b, "collector": "cgroups"}): " ".join(
                    "0" if i % 2 else "1" for i in range(n + 3)
                ),
            },
            [({**a, "collector": "probe"}, 0.0)],
            minutes=2 + failing,
            at=2,
        )
    )
    maps = _minutes(th.probe_map_failures_for)
    n = maps + 4
    out.append(
        Case(
            health.PROBE_MAP_FAILURES,
            {
                # 6 failed inserts a minute from minute 1 on: rate 0.1/s from minute 2
                _sel("contention_probe_map_update_failures_total", {**a, "map": "pids"}): (
                    f"0 0+6x{n}"
                ),
                # failed once, long ago, then never again
                _sel("contention_probe_map_update_failures_total", {**b, "map": "pids"}): (
                    f"0 3x{n + 1}"
                ),
                _sel("contention_probe_map_update_failures_total", {**a, "map": "enqueued"}): (
                    f"0x{n + 2}"
                ),
            },
            [({**a, "map": "pids"}, 0.1)],
            minutes=2 + maps,
            at=2,
        )
    )
    unknown = _minutes(th.unknown_blame_for)
    n = unknown + 4
    r = th.unknown_blame_ratio
    below = r - 1 / 1024
    out.append(
        Case(
            health.UNKNOWN_BLAME,
            {
                # exactly at the threshold from minute 2: fires (>=)
                _sel("contention_probe_unknown_blame_ratio", a): f"0 0 {r}x{n}",
                _sel("contention_probe_unknown_blame_ratio", b): f"{below}x{n + 2}",
            },
            [(a, r)],
            minutes=2 + unknown,
            at=2,
        )
    )
    out += _scrape_label_cases(th)
    return out


# The exporter's own pod, as the Prometheus Operator gives the scrape target's labels.
EXPORTER_POD = {
    "namespace": "contention-exporter",
    "pod": "contention-exporter-x7k2p",
    "container": "exporter",
}
MEASURED = {"namespace": "shop", "pod": "api-0", "container": "app"}


def _scrape_label_cases(th: Thresholds) -> list[Case]:
    """The scrape target's labels on the exporter's series: stamped on those that lack
    them (honor_labels and no labeldrop), or in place of the measured container's
    (no honor_labels: Prometheus renames them exported_*)."""
    a, b = dict(TARGET), dict(OTHER)
    other_job = {"instance": "node-a:9100", "job": "node-exporter", **EXPORTER_POD}
    wait = _minutes(th.target_labels_for)
    n = wait + 4
    later = f"_ _ 1x{n}"  # from minute 2
    info = {"version": "0.1.0"}
    renamed = {f"exported_{k}": v for k, v in MEASURED.items()}
    clean = {
        # what the chart's ServiceMonitor gives: the measured container's own labels
        # on its series, none on contention_build_info
        _sel("contention_build_info", {**b, **info}): f"1x{n + 2}",
        _sel("contention_sampled_seconds_total", {**b, **MEASURED}): f"0+60x{n + 2}",
        _sel("contention_build_info", {**other_job, **info}): f"1x{n + 2}",  # not ours
    }
    return [
        Case(
            health.TARGET_LABELS,
            {
                _sel("contention_build_info", {**a, **info, **EXPORTER_POD}): later,
                _sel("contention_sampled_seconds_total", {**a, **MEASURED}): later,
                **clean,
            },
            [({**a, **EXPORTER_POD}, 1.0)],
            minutes=2 + wait,
            at=2,
        ),
        Case(
            health.LABELS_RENAMED,
            {
                _sel("contention_build_info", {**a, **info, **EXPORTER_POD}): later,
                _sel("contention_sampled_seconds_total", {**a, **EXPORTER_POD, **renamed}): later,
                # an unnamed cgroup: stamped, nothing to rename
                _sel(
                    "contention_sampled_seconds_total",
                    {**a, **EXPORTER_POD, "cgroup": "/system.slice/kubelet.service"},
                ): later,
                **clean,
            },
            [(a, 1.0)],
            minutes=2 + wait,
            at=2,
            silent=(health.TARGET_LABELS,),  # one diagnosis: the renamed one
        ),
    ]


def render_health_tests(th: Thresholds, rule_file: str) -> dict[str, Any]:
    """A promtool unit-test document for every enabled self-monitoring alert."""
    rules = {r["alert"]: r for r in health_rules(th)}
    tests = []
    for case in cases(th):
        if not th.alert_enabled(case.alert):
            continue
        rule = rules[case.alert]
        expected = []
        for labels, value in case.fires:
            full = {**labels, "severity": rule["labels"]["severity"], **dict(th.alert_labels)}
            anns = {k: render_annotation(v, labels, value) for k, v in rule["annotations"].items()}
            expected.append({"exp_labels": full, "exp_annotations": anns})
        checks = [
            # one evaluation before `for` has passed: pending, not firing
            {"eval_time": f"{case.minutes - 1}m", "alertname": case.alert, "exp_alerts": []},
            {"eval_time": f"{case.minutes}m", "alertname": case.alert, "exp_alerts": expected},
        ]
        if case.at:  # before the condition: silent
            checks.insert(
                0, {"eval_time": f"{case.at - 1}m", "alertname": case.alert, "exp_alerts": []}
            )
        checks[-1:-1] = [  # before the firing check, which stays last
            {"eval_time": f"{case.minutes}m", "alertname": other, "exp_alerts": []}
            for other in case.silent
            if th.alert_enabled(other)
        ]
        tests.append(
            {
                "name": case.alert,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": checks,
            }
        )
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}
