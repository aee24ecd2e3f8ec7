"""How each threshold key reaches the generated rules and dashboards, as the chart
templates it.

* a *value* prints as text (and, in the dashboards, as a number) wherever it is used;
  the chart puts the value in at install time, formatted as Python formats it there
  (its *forms*: ``FORMS``);
* ``alertLabels`` and ``disabledAlerts`` change which alerts there are and their
  labels: the chart applies them to the rule groups itself, as ``exporter.rules.alert``
  does;
* ``runbookUrl`` set or empty gives each alert other annotations: the chart has both;
* a *shape* key changes how many terms, ranges and joins the rules have, not only their
  numbers: the chart ships the rules and dashboards for its packaged value and refuses
  another while it deploys them.

Every key of the thresholds file has its kind here (``check_complete``): a new key
must say how the chart handles it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from ..findings.thresholds import DEFAULT_KEYS, Thresholds, duration_ms

RATIO = "ratio"  # a fraction: PromQL literal, percentages in text, threshold lines
NUMBER = "number"  # any other number
BOUND = "bound"  # a run-queue histogram bound in ms: an `le` label, seconds, ms in text
DURATION = "duration"  # a Prometheus duration: `for:` and text
SELECTOR = "selector"  # PromQL matchers, normalised
SEVERITIES = "severities"  # finding kind -> severity label: each a value of its own
RUNBOOK = "runbook"  # the runbook base: text, and which annotations the alerts carry
APPLIED = "applied"  # the chart applies it to the rule groups (alertLabels, disabledAlerts)
SHAPE = "shape"  # shapes the rules and dashboards: only the packaged value

KINDS: dict[str, str] = {
    "windowMinutes": SHAPE,  # ranges, record names, the earlier boundaries' terms
    "sustainMinutes": SHAPE,  # one term per sustain minute, offsets
    "nodeLabels": SHAPE,  # every on()/by() and look-up, the findings table's columns
    "clusterLabel": SHAPE,  # the same lists, the dashboards' cluster variable
    "throttledRatio": RATIO,
    "throttledRatioMax": RATIO,
    "stallSome": RATIO,
    "blameShare": RATIO,
    "criticalCpuFull": RATIO,
    "cpuStealRatio": RATIO,
    "memStallSome": RATIO,
    "nodeMemStallSome": RATIO,
    "memCulpritShare": RATIO,
    "criticalMemFull": RATIO,
    "unknownBlameRatio": RATIO,
    "refaultPerMin": NUMBER,
    "samplerStaleSeconds": NUMBER,
    "minRunqEvents": NUMBER,
    "runqP99Ms": BOUND,
    "criticalRunqP99Ms": BOUND,
    "exporterDownFor": DURATION,
    "probeNotLoadedFor": DURATION,
    "samplerStaleFor": DURATION,
    "collectorFailingFor": DURATION,
    "probeMapFailuresFor": DURATION,
    "unknownBlameFor": DURATION,
    "targetLabelsFor": DURATION,
    "selector": SELECTOR,
    "runbookUrl": RUNBOOK,
    "alertSeverity": SEVERITIES,
    "alertLabels": APPLIED,
    "disabledAlerts": APPLIED,
}

# Values the generators compute from several keys and print like a key of their own:
# name -> (kind, how Python computes it). The chart computes each the same way
# (`ce.derived.<name>` in templates/_thresholds.tpl).
DERIVED: dict[str, tuple[str, Callable[[Thresholds], float]]] = {
    # the age at which ContentionSamplerStale fires (the dashboards' red band)
    "samplerStaleFiringSeconds": (
        NUMBER,
        lambda th: th.sampler_stale_seconds + duration_ms(th.sampler_stale_for) / 1000,
    ),
}

# How a value of each kind can print; the chart's templates/_thresholds.tpl has one
# `ce.form.<name>` per form. "json" (a float) and "jsonint" are a number in the
# dashboards' JSON, the others text inside a string.
FORMS: dict[str, tuple[str, ...]] = {
    RATIO: ("num", "g", "pct0", "pct100g", "json"),
    NUMBER: ("num", "g", "json", "jsonint"),
    BOUND: ("le", "msg", "seconds"),
    DURATION: ("raw",),
    SELECTOR: ("raw",),
    SEVERITIES: ("raw",),
    RUNBOOK: ("raw",),
}


class ChartTemplateError(ValueError):
    """The generators' output cannot be templated as the chart needs it."""


def field_names(th: Thresholds) -> dict[str, str]:
    """camelCase key -> :class:`Thresholds` field (``to_yaml_dict`` keeps field order)."""
    return dict(zip(th.to_yaml_dict(), (f.name for f in fields(Thresholds)), strict=True))


def check_complete() -> None:
    """Every key of the thresholds file has a kind (an entry for a key it does not have
    is left out of everything, so this module works across a key's introduction)."""
    missing = sorted(set(DEFAULT_KEYS) - set(KINDS))
    if missing:
        raise ChartTemplateError(
            f"exporter/chart/kinds.py: say how the chart templates {', '.join(missing)}"
        )


def present() -> dict[str, str]:
    """KINDS for the keys the thresholds file has."""
    return {k: v for k, v in KINDS.items() if k in DEFAULT_KEYS}


def keys_of(*kinds: str) -> tuple[str, ...]:
    return tuple(k for k, v in present().items() if v in kinds)
