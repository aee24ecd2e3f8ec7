"""One alerting rule as the pack writes it, whichever group it is in.

Every alert gets the same treatment from the config (docs/configuration.md, "The rule
pack"): ``severity`` first (a finding kind's from ``alertSeverity``), then its own
labels, then ``alertLabels``; a static ``summary``, a templated ``description`` (a
finding's alert: and its ``level``), and ``runbook_url``: the alert's section of
docs/runbook.md, under ``runbookUrl`` when it is set, else in the repository at the
tag of this version (``DEFAULT_RUNBOOK``).
``disabledAlerts`` drops an alert from the pack. A finding's alert also carries its
``remediation``: what to change, with the value computed from the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import __version__
from ..findings.thresholds import Thresholds, ThresholdsError

# The runbook of the installed version: docs/runbook.md at its release tag, in the
# repository the chart's home names (deploy/helm/contention-exporter/Chart.yaml).
REPOSITORY = "https://github.com/contention-exporter/contention-exporter"
DEFAULT_RUNBOOK = f"{REPOSITORY}/blob/v{__version__}/docs/runbook.md"


def runbook_anchor(alert: str) -> str:
    """The alert's section in docs/runbook.md (a heading named after the alert)."""
    return alert.lower()


def runbook_base(th: Thresholds) -> str:
    """Where the runbook is: ``runbookUrl``, else this version's in the repository."""
    return th.runbook_url or DEFAULT_RUNBOOK


def runbook_annotations(th: Thresholds, alert: str) -> dict[str, str]:
    return {"runbook_url": f"{runbook_base(th)}#{runbook_anchor(alert)}"}


def alerting_rule(
    th: Thresholds,
    name: str,
    expr: str,
    severity: str,
    *,
    summary: str,
    description: str,
    level: str | None = None,
    remediation: str | None = None,
    labels: Mapping[str, str] | None = None,
    for_: str | None = None,
    keep_firing_for: str | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    if keep_firing_for:
        rule["keep_firing_for"] = keep_firing_for
    rule["labels"] = {"severity": severity, **(labels or {}), **dict(th.alert_labels)}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        **({"level": level} if level else {}),
        **({"remediation": remediation} if remediation else {}),
        **runbook_annotations(th, name),
    }
    return rule


def enabled(th: Thresholds, rules: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rules`` without the alerts the config disables."""
    return [r for r in rules if "alert" not in r or th.alert_enabled(r["alert"])]


def check_disabled(th: Thresholds, known: Iterable[str]) -> None:
    """Every name in ``disabledAlerts`` is an alert of the pack (a typo would silently
    keep the alert on)."""
    names = set(known)
    unknown = sorted(set(th.disabled_alerts) - names)
    if unknown:
        raise ThresholdsError(
            f"disabledAlerts: no alert named {', '.join(unknown)}; the pack's alerts: "
            + ", ".join(sorted(names))
        )
