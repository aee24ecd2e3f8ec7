"""A finding's level in its alert: the ``level`` annotation and the description's last
sentence (docs/findings.md#level-and-severity).

The level (critical, warning, info) is the evaluator's ``severity`` of the finding,
decided from the latest minute, so it can change while one incident lasts. It is not
a label: a label change would resolve the alert and fire another. The alert's
``severity`` label is fixed per kind (``alertSeverity``). The annotations read the
level from this evaluation's recording rules, the same records the evaluator's
decision mirrors; Alertmanager does not notify again when only an annotation
changes.
"""

from __future__ import annotations

from ..findings.model import Kind, Severity
from ..findings.thresholds import Thresholds
from .records import R_CPU_BOTH, R_CPU_CRIT, R_MEM_CRIT
from .templates import victim_with_t

CPU_KINDS = (Kind.CPU_THROTTLED, Kind.NOISY_NEIGHBOR, Kind.CPU_CONTENDED)
MEMORY_KINDS = (Kind.MEMORY_PRESSURE, Kind.MEMORY_LIMIT_THRASH)


def level_sentences(th: Thresholds, kind: Kind) -> dict[Severity, str]:
    """The description's last sentence at each level the kind can have."""
    if kind in CPU_KINDS:
        return {
            Severity.CRITICAL: (
                f"Level critical: cpu pressure full at least {th.critical_cpu_full * 100:g}% "
                f"or run-queue p99 at least {th.critical_runq_p99_ms:g} ms in the latest minute."
            ),
            Severity.WARNING: (
                "Level warning: both stall signals (cpu pressure some and run-queue p99) in "
                "the latest minute."
            ),
            Severity.INFO: "Level info: at most one stall signal in the latest minute.",
        }
    if kind in MEMORY_KINDS:
        full = f"memory pressure full {{}} {th.critical_mem_full * 100:g}% in the latest minute."
        return {
            Severity.CRITICAL: "Level critical: " + full.format("at least"),
            Severity.WARNING: "Level warning: " + full.format("below"),
        }
    return {Severity.WARNING: "Level warning."}  # cpu-steal: always a warning


def _by_level(th: Thresholds, kind: Kind, text: dict[Severity, str]) -> str:
    """A template giving ``text`` of the alert's current level (the records it is read
    from: critical, then warning when the kind has three levels)."""
    if kind in CPU_KINDS:
        warning_or_info = victim_with_t(th, R_CPU_BOTH, text[Severity.WARNING], text[Severity.INFO])
        return victim_with_t(th, R_CPU_CRIT, text[Severity.CRITICAL], warning_or_info)
    if kind in MEMORY_KINDS:
        return victim_with_t(th, R_MEM_CRIT, text[Severity.CRITICAL], text[Severity.WARNING])
    return text[Severity.WARNING]


def level_t(th: Thresholds, kind: Kind) -> str:
    """The ``level`` annotation: critical, warning or info."""
    return _by_level(th, kind, {s: s.value for s in Severity})


def level_sentence_t(th: Thresholds, kind: Kind) -> str:
    """The description's last sentence, for the alert's current level."""
    return _by_level(th, kind, level_sentences(th, kind))
