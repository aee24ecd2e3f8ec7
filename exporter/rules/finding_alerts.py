"""The findings alerts: one per finding kind, each combining the decisions the recording
rules made (``recording``), with the annotations of ``descriptions``, ``levels`` and
``remediations`` and the shared treatment of ``alert``."""

from __future__ import annotations

from typing import Any

from ..findings.model import CULPRIT_HYPERVISOR, Kind
from ..findings.thresholds import Thresholds
from ..identity import IDENTITY_LABELS
from ..promql import CULPRIT_IDENTITY, num
from .alert import alerting_rule
from .descriptions import descriptions
from .levels import level_sentence_t, level_t
from .records import (
    R_BLAME_CULPRIT,
    R_CPU_VICTIM,
    R_MEM_CULPRIT,
    R_MEM_PRESSURE,
    R_MEM_THRASH,
    R_STEAL,
    R_STEAL_SUSTAINED,
    R_THROTTLE,
    R_WATCHED,
    R_WORKLOAD_CULPRIT,
)
from .remediations import remediations
from .terms import RuleTerms

ALERT_NAMES = {
    Kind.CPU_THROTTLED: "ContentionCPUThrottled",
    Kind.NOISY_NEIGHBOR: "ContentionNoisyNeighbor",
    Kind.CPU_CONTENDED: "ContentionCPUContended",
    Kind.MEMORY_PRESSURE: "ContentionMemoryPressure",
    Kind.MEMORY_LIMIT_THRASH: "ContentionMemoryLimitThrash",
    Kind.CPU_STEAL: "ContentionCPUSteal",
}


SUMMARIES = {
    Kind.CPU_THROTTLED: "Container is throttled by its own CPU limit.",
    Kind.NOISY_NEIGHBOR: "Container is starved of CPU by a named neighbour.",
    Kind.CPU_CONTENDED: "Container is starved of CPU and no single neighbour is the cause.",
    Kind.MEMORY_PRESSURE: "Container is stalled on memory while the node is under memory pressure.",
    Kind.MEMORY_LIMIT_THRASH: "Container is thrashing under its own memory limit.",
    Kind.CPU_STEAL: "The hypervisor is taking the node's CPU while containers stall.",
}

# Labels an alert always carries: cpu-steal names the hypervisor, which has no series.
STATIC_LABELS = {
    Kind.CPU_STEAL: {"culprit_kind": CULPRIT_HYPERVISOR, "culprit": CULPRIT_HYPERVISOR},
}


def conditions(th: Thresholds) -> dict[Kind, str]:
    """Each finding kind's alert condition: one alert per kind, whatever the finding's
    level (docs/findings.md#level-and-severity)."""
    terms = RuleTerms(th)
    victim_on = terms.on(*IDENTITY_LABELS)
    # a workload only when no container passes alone (docs/findings.md#workload-culprits)
    noisy_neighbor = (
        f"({R_BLAME_CULPRIT} and {victim_on} {R_CPU_VICTIM})\nor\n"
        f"({R_WORKLOAD_CULPRIT} and {victim_on} {R_CPU_VICTIM}\n"
        f"unless {victim_on} {R_BLAME_CULPRIT})"
    )
    contended = (
        f"{R_CPU_VICTIM} unless {victim_on} {R_BLAME_CULPRIT}\n"
        f"unless {victim_on} {R_WORKLOAD_CULPRIT}"
    )
    throttled = f"{R_THROTTLE.format(w=terms.window)} >= {num(th.throttled_ratio)}\nand {R_WATCHED}"
    steal = (
        f"{R_STEAL}\nand {terms.on()} {R_STEAL_SUSTAINED}\n"
        f"and {terms.on()} count {terms.by()} ({R_CPU_VICTIM})"
    )
    culprit_labels = ", ".join(CULPRIT_IDENTITY)
    memory_pressure = (
        f"({R_MEM_PRESSURE} * {terms.on()} group_left({culprit_labels}) {R_MEM_CULPRIT})\n"
        f"or\n({R_MEM_PRESSURE} unless {terms.on()} {R_MEM_CULPRIT})"
    )
    return {
        Kind.CPU_THROTTLED: throttled,
        Kind.NOISY_NEIGHBOR: noisy_neighbor,
        Kind.CPU_CONTENDED: contended,
        Kind.MEMORY_PRESSURE: memory_pressure,
        Kind.MEMORY_LIMIT_THRASH: R_MEM_THRASH,
        Kind.CPU_STEAL: steal,
    }


def hold(th: Thresholds) -> str:
    """How long a findings alert stays firing after its condition last held
    (``keep_firing_for``): one sustain. A finding needs ``sustainMinutes`` stalled
    minutes to fire; its alert needs as long without it to resolve, so a condition that
    drops out for an evaluation or a minute (a stall just under its threshold, a minute
    boundary while a lab or an incident winds down) stays one incident, one firing and
    one resolved notification, instead of a resolve and a new page
    (docs/findings.md#one-incident-one-alert)."""
    return f"{th.sustain_minutes}m"


def alert_rules(th: Thresholds) -> list[dict[str, Any]]:
    """Every findings alert (disabled ones included; the pack filters them): its
    ``severity`` label fixed for the kind (``alertSeverity``), the finding's level in
    the ``level`` annotation and the description's last sentence."""
    description = descriptions(th)
    remediation = remediations(th)
    return [
        alerting_rule(
            th,
            ALERT_NAMES[kind],
            expr,
            th.severity_of(kind),
            summary=SUMMARIES[kind],
            description=f"{description[kind]} {level_sentence_t(th, kind)}",
            level=level_t(th, kind),
            remediation=remediation[kind],
            labels={"finding": kind.value, **STATIC_LABELS.get(kind, {})},
            keep_firing_for=hold(th),
        )
        for kind, expr in conditions(th).items()
    ]
